"""`trainsentry lab ...`: run campaigns, summarise the dataset, check NVLink counters."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

NAME = "lab"
app = typer.Typer(no_args_is_help=True, help="Workload lab: campaigns, dataset card, GPU checks.")
console = Console()


@app.command("run")
def run(campaign: Path, data: Path = typer.Option(Path("data"), help="root for run directories"),
        budget_s: float = typer.Option(None, help="plan only the runs that fit this many seconds"),
        source: list[str] = typer.Option(["nvml", "net", "host"], help="telemetry sources to record"),
        retry_failed: bool = typer.Option(False, help="plan again the runs an earlier call failed")) -> None:
    """Run the campaign's runs that are not on disk yet, under the recording agent."""
    from .campaign import run_campaign
    written = run_campaign(campaign, data, budget_s=budget_s, sources=source, progress=console.print,
                           retry_failed=retry_failed)
    console.print(f"[green]{len(written)} runs written")


@app.command("summary")
def summary(data: Path = typer.Option(Path("data/h200"), help="dataset root"),
            json_out: Path = typer.Option(None, "--json", help="write the card as JSON here"),
            markdown: Path = typer.Option(None, help="write the dataset card as Markdown here")) -> None:
    """Print the dataset card (runs and configurations per class)."""
    from .summary import dataset_markdown, summarize
    s = summarize(data)
    t = Table(title=f"dataset {data}")
    for c in ("class", "runs", "configurations", "families"):
        t.add_column(c)
    for c, n in sorted(s["by_class"].items()):
        t.add_row(c, str(n), str(s["configs_by_class"].get(c, 0)), ", ".join(s["families_by_class"].get(c, [])))
    console.print(t)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({k: s[k] for k in ("runs", "by_class", "configs_by_class",
                                                          "families_by_class", "campaign_failures")}, indent=1) + "\n")
    if markdown:
        markdown.write_text(dataset_markdown(s, str(data), str(markdown)))


@app.command("gpu-check")
def gpu_check(run_dir: Path, phases: Path, out: Path = typer.Option(Path("results/gpu_check.json")),
              machine: str = typer.Option("", help="what machine the trace was recorded on")) -> None:
    """NVLink bytes measured by the agent vs bytes handed to NCCL (scripts/gpu/nccl_known_bytes.py)."""
    from .gpu_check import check
    res = check(run_dir, phases, machine)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1) + "\n")
    t = Table(title="NVLink counters vs NCCL")
    for c in ("phase", "gpu", "dir", "expected GiB", "measured GiB", "error"):
        t.add_column(c)
    for r in res["rows"]:
        err = "—" if r["rel_error"] is None else f"{100 * r['rel_error']:+.3f} %"
        t.add_row(r["phase"], r["gpu"], r["direction"], f"{r['expected_bytes'] / 2**30:.3f}",
                  f"{r['measured_bytes'] / 2**30:.3f}", err)
    console.print(t)
    console.print(f"within 1 %: {res['within_1pct']}; send direction visible: {res['send_direction_visible']}")


@app.command("workloads")
def workloads() -> None:
    """List the registered workloads."""
    from ..workloads.registry import WORKLOADS
    t = Table(title="workloads")
    for c in ("name", "class", "family", "gpus", "description"):
        t.add_column(c)
    for w in sorted(WORKLOADS.values(), key=lambda w: (w.cls, w.family, w.name)):
        t.add_row(w.name, w.cls, w.family, str(w.gpus or "all"), w.description[:60])
    console.print(t)
