"""``trainsentry redteam``: monitor–evader rounds from recorded runs (issue 6).

Only typer, rich and the standard library at the top: numpy, pandas and scikit-learn load inside.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from ..threads import one_native_thread
from rich.console import Console

NAME = "redteam"
FLOPS_RESULTS = Path("results/flops.json")
app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Red team: detection of recorded evasion strategies, round by round, and their cost.")


@app.callback()
def _group() -> None:
    """Red team: detection of recorded evasion strategies, round by round, and their cost."""


def _command(benign: list[Path], adversarial: list[Path], rounds: int, out: Path, docs: str, figures: str,
             detector: list[str], primary: str, splits: int, seed: int, rt_trees: int,
             campaign: list[Path] = (), harden: list[str] = (), flops_model: Path | None = None,
             flops_results: Path = FLOPS_RESULTS) -> str:
    """The command line that regenerates these outputs (written into the JSON and the page)."""
    parts = ["trainsentry", "redteam", "rounds"]
    parts += [a for d in benign for a in ("--benign", str(d))]
    parts += [a for d in adversarial for a in ("--adversarial", str(d))]
    parts += [a for c in campaign for a in ("--campaign", str(c))]
    parts += ["--rounds", str(rounds), "--out", str(out), "--docs", docs, "--figures", figures]
    parts += [a for d in detector for a in ("--detector", d)]
    parts += [a for d in harden for a in ("--harden", d)]
    if flops_model is not None:
        parts += ["--flops-model", str(flops_model)]
    if flops_results != FLOPS_RESULTS:
        parts += ["--flops-results", str(flops_results)]
    for flag, value, default in (("--primary", primary, "fused"), ("--splits", splits, 20), ("--seed", seed, 0),
                                 ("--rt-trees", rt_trees, 400)):
        if value != default:
            parts += [flag, str(value)]
    return shlex.join(parts)


@app.command()
def rounds(
    benign: list[Path] = typer.Option([Path("data/h200")], "--benign", help="Benign run directories (repeatable)"),
    adversarial: list[Path] = typer.Option(..., "--adversarial", help="Red-team run directories (repeatable)"),
    n_rounds: int = typer.Option(3, "--rounds", min=1, help="1: detectors as delivered; 2: + adversarial runs "
                                 "(leave one strategy out); 3+: adversarial runs weighted up"),
    out: Path = typer.Option(Path("results/redteam.json"), "--out", help="Results JSON"),
    docs: str = typer.Option("docs/redteam.md", "--docs", help="Generated page ('' to skip)"),
    figures: str = typer.Option("results/figures/redteam", "--figures", help="Figure directory ('' to skip)"),
    detector: list[str] = typer.Option([], "--detector", help="Evaluate only these detectors (repeatable)"),
    primary: str = typer.Option("fused", "--primary", help="The detector whose numbers fill the strategy tables"),
    splits: int = typer.Option(20, "--splits", min=1, help="Configuration-grouped splits for the benign metrics"),
    seed: int = typer.Option(0, "--seed"),
    rt_trees: int = typer.Option(400, "--rt-trees", help="Trees per stage of rt-baseline (400 as published)"),
    cache: Path | None = typer.Option(None, "--cache", help="Feature cache (default ~/.cache/trainsentry/features)"),
    campaign: list[Path] = typer.Option([], "--campaign", help="Campaign file: report which of its runs are "
                                        "recorded, failed or not recorded yet (repeatable: files that extend one "
                                        "plan are pooled)"),
    harden: list[str] = typer.Option([], "--harden", help="Detectors hardened and re-scored in rounds 2+ "
                                     "(repeatable; default: every evaluated detector; must include --primary)"),
    flops_model: Path | None = typer.Option(None, "--flops-model", help="A saved FLOP model (models/flops.json) "
                                            "to score beside the estimators calibrated on the benign runs"),
    flops_results: Path = typer.Option(FLOPS_RESULTS, "--flops-results", help="`trainsentry flops-eval` results: "
                                       "their best estimator is the FLOP headline (none when the file is missing)"),
) -> None:
    """Score every adversarial strategy, round by round, and write the JSON, figures and page."""
    one_native_thread()
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from ..detect.pipeline import default_cache_dir
    from .page import write_outputs
    from .rounds import InputError, run_rounds
    console = Console(stderr=True)
    command = _command(benign, adversarial, n_rounds, out, docs, figures, detector, primary, splits, seed, rt_trees,
                       campaign, harden, flops_model, flops_results)
    for d in [*benign, *adversarial]:
        if not d.is_dir():
            console.print(f"[red]redteam rounds: {d}: no such directory[/red]")
            raise typer.Exit(2)
    for f in (*campaign, flops_model):
        if f is not None and not f.is_file():
            console.print(f"[red]redteam rounds: {f}: no such file[/red]")
            raise typer.Exit(2)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as prog:
        def step(description: str, total: int):
            task = prog.add_task(description, total=total)
            return lambda: prog.advance(task)
        try:
            doc = run_rounds(benign, adversarial, n_rounds, detector or None, primary, splits, seed, rt_trees,
                             cache or default_cache_dir(), command, progress=step, campaign=campaign or None,
                             harden=harden or None, flops_model=flops_model, flops_results=flops_results)
        except (InputError, FileNotFoundError) as e:
            prog.stop()
            console.print(f"[red]redteam rounds: {e}[/red]")
            raise typer.Exit(2)
    write_outputs(doc, out, Path(docs) if docs not in ("", ".") else None,
                  Path(figures) if figures not in ("", ".") else None)
    for r in doc["ranking"][:10]:
        console.print(f"{r['rank']:3d}. {r['name']:12s} {r['setting']:22s} detected {r['run_detection']:.0%}  "
                      f"overhead {r['gpu_hour_overhead']:+.0%}  effectiveness {r['score']:.2f}")
    console.print(f"wrote {out}" + (f", {docs}" if docs not in ("", ".") else ""))


@app.command()
def page(
    results: Path = typer.Option(Path("results/redteam.json"), "--results", help="Results JSON of `redteam rounds`"),
    docs: str = typer.Option("docs/redteam.md", "--docs", help="Generated page ('' to skip)"),
    figures: str = typer.Option("results/figures/redteam", "--figures", help="Figure directory ('' to skip)"),
) -> None:
    """Write docs/redteam.md and its figures again from the results JSON, scoring nothing again (the JSON's
    figure list is rewritten to match)."""
    import json

    from .page import write_outputs
    console = Console(stderr=True)
    if not results.is_file():
        console.print(f"[red]redteam page: {results}: no such file[/red]")
        raise typer.Exit(2)
    write_outputs(json.loads(results.read_text()), results, Path(docs) if docs not in ("", ".") else None,
                  Path(figures) if figures not in ("", ".") else None)
    console.print(f"wrote {results}" + (f", {docs}" if docs not in ("", ".") else ""))


@app.command()
def surrogate(
    benign: list[Path] = typer.Option([Path("data/h200")], "--benign", help="Benign run directories: the detector "
                                      "copy is fitted on them (repeatable)"),
    adversarial: list[Path] = typer.Option([], "--adversarial", help="More recorded runs whose windows the copy "
                                           "judges for the surrogate to learn from (repeatable)"),
    detector: str = typer.Option("fused", "--detector", help="The detector the adversary copies"),
    out: Path = typer.Option(Path("models/redteam-surrogate.json"), "--out", help="Surrogate file: JSON trees "
                             "with their report (the workload evaluates them without scikit-learn), or a .joblib "
                             "model with its report beside it as .json"),
    window_s: float | None = typer.Option(None, "--window-s", help="The gate's window, s (default: the detector "
                                          "copy's window, 8 s for fused; the JSON file carries it to the workload)"),
    seed: int = typer.Option(0, "--seed"),
    cache: Path | None = typer.Option(None, "--cache", help="Feature cache (default ~/.cache/trainsentry/features)"),
) -> None:
    """Fit the white-box surrogate adv.whitebox.surrogate-lora gates its training with (surrogate_path)."""
    one_native_thread()
    from ..detect.pipeline import default_cache_dir
    from .rounds import InputError
    from .surrogate import build
    console = Console(stderr=True)
    for d in [*benign, *adversarial]:
        if not d.is_dir():
            console.print(f"[red]redteam surrogate: {d}: no such directory[/red]")
            raise typer.Exit(2)
    parts = ["trainsentry", "redteam", "surrogate", *[a for d in benign for a in ("--benign", str(d))],
             *[a for d in adversarial for a in ("--adversarial", str(d))], "--detector", detector, "--out", str(out),
             *(["--window-s", str(window_s)] if window_s is not None else []), "--seed", str(seed)]
    try:
        rep = build(benign, adversarial, detector, out, cache or default_cache_dir(), window_s, seed,
                    command=shlex.join(parts))
    except (InputError, ValueError) as e:
        console.print(f"[red]redteam surrogate: {e}[/red]")
        raise typer.Exit(2)
    agree = rep["held_out_agreement"]
    console.print(f"wrote {out}: {rep['windows']} windows of {rep['runs']} runs, {rep['detector_positive_windows']} "
                  f"judged training by the {detector} copy; held-out agreement "
                  f"{'–' if agree is None else f'{agree:.1%}'}; window {rep['window_s']:g} s")
