"""`trainsentry flops TRACE_DIR` (estimate a recorded run) and `trainsentry flops-eval` (regenerate results)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer
from rich.console import Console

console = Console()


def flops_cmd(trace_dir: Path = typer.Argument(..., help="run directory (samples.parquet + manifest.json)"),
              model: Path = typer.Option(Path("models/flops.json"), help="saved estimator (from flops-eval)"),
              start: float = typer.Option(None, help="job start, epoch s (default: the manifest's start)"),
              end: float = typer.Option(None, help="job end, epoch s (default: the manifest's end)"),
              segment: bool = typer.Option(False, help="integrate over the job the detector's segmentation finds "
                                                       "(overlapping the manifest's interval), not the manifest's"),
              as_json: bool = typer.Option(False, "--json", help="print the estimate as JSON")) -> None:
    """Estimate the FLOPs a recorded run spent, with an interval."""
    import json

    from ..traces.io import read_trace
    from .live import estimate_interval, load_model
    try:
        table, manifest = read_trace(trace_dir)
        est = load_model(model)
        lo_t = float(manifest["start"] if start is None else start)
        hi_t = float(manifest["end"] if end is None else end)
        if segment:
            from .dataset import segmented_interval
            found = segmented_interval(table)
            if found is None:
                raise ValueError("the segmentation found no job in the trace")
            lo_t, hi_t = found
        r = estimate_interval(table, lo_t, hi_t, est)
    except (FileNotFoundError, ValueError, KeyError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2)
    truth = (manifest.get("ground_truth") or {}).get("flops")
    r.update({"run_id": manifest.get("run_id"), "start": lo_t, "end": hi_t, "true_flops": truth})
    if as_json:
        sys.stdout.write(json.dumps(r, indent=1) + "\n")
        return
    console.print(f"{r['run_id']}: {r['flops']:.3e} FLOPs  ({r['level']:.0%} interval {r['lo']:.3e} – {r['hi']:.3e})"
                  f"  estimator {r['estimator']}, {hi_t - lo_t:.1f} s")
    if r.get("tensor_flop_max") is not None:
        console.print(f"tensor-core ceiling {r['tensor_flop_max']:.3e} FLOPs (tensor-busy GPU-seconds at the FP8 peak: "
                      "what the GPUs can have done in any precision; docs/fp8-training.md)")
    if truth:
        console.print(f"ground truth {truth:.3e} FLOPs: error {100 * (r['flops'] - truth) / truth:+.1f} %")


def flops_eval_cmd(data: Path = typer.Option(Path("data/h200"), help="dataset root (run directories)"),
                   splits: int = typer.Option(200, help="random calibration/evaluation splits"),
                   seed: int = typer.Option(0, help="seed of the splits"),
                   results: Path = typer.Option(Path("results/flops.json")),
                   figures: Path = typer.Option(Path("results/figures")),
                   docs: Path = typer.Option(Path("docs/flops.md")),
                   models: Path = typer.Option(Path("models")),
                   segmentation: bool = typer.Option(True, help="also score every estimator with the detector's "
                                                                "segmentation in place of the true intervals"),
                   causal_half: bool = typer.Option(True, help="also score every estimator against FLOPs with causal "
                                                               "attention counted as half (from each manifest's model "
                                                               "shape; the recorded FLOPs are not changed)")) -> None:
    """Run every FLOP estimator on the same grouped splits; write results, figures, docs and models."""
    from ..threads import one_native_thread
    one_native_thread()
    from .report import regenerate
    command = "trainsentry flops-eval " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 and sys.argv[1] == "flops-eval" \
        else f"trainsentry flops-eval --data {data} --splits {splits} --seed {seed}"
    try:
        res = regenerate(data, splits, seed, results, figures, docs, models, command.strip(),
                         with_segmentation=segmentation, with_causal_half=causal_half, progress=console.print)
    except (ValueError, FileNotFoundError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2)
    for name, e in res["estimators"].items():
        m, p90 = e.get("median_abs_pct_error"), e.get("p90_abs_pct_error")
        console.print(f"{name:14s} median |err| {'unbounded' if m is None else f'{m:6.2f} %'}"
                      f"   p90 {'unbounded' if p90 is None else f'{p90:6.2f} %'}"
                      f"   failed {e['splits_failed']}/{e['splits_attempted']} splits")
    console.print(f"best: {res['best']}; wrote {results}, {figures}/flops_*.png, {docs}, {models}/flops*.json")


COMMANDS = [flops_cmd, flops_eval_cmd]
