"""`trainsentry report`: build report/report.html and report/report.pdf from results and data."""

from pathlib import Path

import typer


def report_cmd(results: Path = typer.Option(Path("results"), "--results", help="results root (JSON + figures/)"),
               data: Path = typer.Option(Path("data"), "--data", help="data root (recorded traces)"),
               out: Path = typer.Option(Path("report"), "--out", help="where report.html and report.pdf go"),
               configs: Path = typer.Option(Path("configs"), "--configs",
                                            help="campaign files (how much of each campaign is recorded)"),
               allow_missing: bool = typer.Option(False, "--allow-missing",
                                                  help="build a draft: sections without inputs say what to run"),
               no_pdf: bool = typer.Option(False, "--no-pdf", help="write the HTML only")) -> None:
    """Build the report (HTML and PDF) from committed results only; a missing input fails the build."""
    from rich.console import Console

    from .build import build
    from .inputs import MissingInputs
    console = Console(stderr=True)
    try:
        b = build(results, data, out, allow_missing, pdf=not no_pdf, configs=configs)
    except MissingInputs as e:
        console.print(f"[red]report: {e}[/red]")
        raise typer.Exit(2)
    except RuntimeError as e:
        console.print(f"[red]report: {e}[/red]")
        raise typer.Exit(3)
    console.print(f"wrote {b.html_path}" + (f" and {b.pdf_path}" if b.pdf_path else "")
                  + (f" (draft: {len(b.missing)} inputs missing)" if b.missing else ""))


COMMANDS = [report_cmd]
