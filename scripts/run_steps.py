"""Per-run step statistics from the recorded ground truth (manifests' ``ground_truth``), for the runs whose
id contains a pattern: steps, the median step time, the counted FLOPs of a step over that time, the mean
loss of the first and the last 5 steps and the held-out loss (training), as the device log quotes them;
and from the trace, the busiest GPU's mean NVML utilisation between the workload's start and end (the
single-device lead's busy floor is 5 %, docs/busy-floor.md).

    python scripts/run_steps.py --data data/h200x1-host --match diffusion
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.traces.io import iter_runs, read_manifest, read_samples  # noqa: E402


def busy_pct(samples, start: float, end: float) -> float | None:
    """The busiest GPU's mean ``gpu_util_pct`` over samples with start <= t <= end (a pandas frame)."""
    gpu = samples[(samples["kind"] == "gpu") & (samples["t"] >= start) & (samples["t"] <= end)]
    if gpu.empty:
        return None
    return float(gpu.groupby(["node", "device"])["gpu_util_pct"].mean().max())


def step_stats(manifest: dict) -> dict:
    g = manifest["ground_truth"]
    times = np.asarray(g.get("step_times_s") or [], dtype=float)
    med = float(np.median(times)) if times.size else None
    per_step = g["flops"] / g["steps"] if g.get("steps") else None
    losses = [l for _, l in g.get("loss_curve") or []]
    val = [e["val_loss"] for e in (g.get("extra") or {}).values() if "val_loss" in e]
    return {"run_id": manifest["run_id"], "steps": g.get("steps"), "median_step_s": med,
            "tflops_at_median_step": per_step / med / 1e12 if per_step and med else None,
            "loss_first5": float(np.mean(losses[:5])) if losses else None,
            "loss_last5": float(np.mean(losses[-5:])) if losses else None,
            "val_loss": val[0] if val else None}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--match", default="")
    args = ap.parse_args(argv)
    fmt = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
    for d in iter_runs(args.data):
        if args.match not in d.name:
            continue
        m = read_manifest(d)
        s = step_stats(m)
        busy = busy_pct(read_samples(d).to_pandas(), m["start"], m["end"]) if (d / "samples.parquet").exists() else None
        print(f"{s['run_id']}  steps {s['steps']}  median step {fmt(s['median_step_s'], '.3f')} s  "
              f"{fmt(s['tflops_at_median_step'], '.0f')} TFLOP/s  loss {fmt(s['loss_first5'], '.3f')} -> "
              f"{fmt(s['loss_last5'], '.3f')}  val {fmt(s['val_loss'], '.3f')}  busiest GPU {fmt(busy, '.1f')} % busy")


if __name__ == "__main__":
    main()
