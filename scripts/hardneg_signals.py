"""The activity signals that set the benign hard negatives apart from training (docs/detector.md,
"Hard negatives, seen and unseen"): per run, the median over its in-run windows of the arithmetic
intensity (act.tensor_per_dram.max) and the work balance (act.power_balance), for every
context-parallel prefill (plain and zigzag), expert-parallel MoE and stencil run, beside the highest
intensity of any training window and the lowest work balance and per-run intensity of any multi-GPU
training run.

    python scripts/hardneg_signals.py [--data data/h200] [--out results/hardneg-signals.json]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

from trainsentry.detect.dataset import load_dataset, stack
from trainsentry.detect.pipeline import default_cache_dir
from trainsentry.traces.io import read_manifest


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/h200")
    ap.add_argument("--out", type=Path, default=Path("results/hardneg-signals.json"))
    args = ap.parse_args()
    runs = load_dataset(args.data, cache_dir=default_cache_dir())
    X, y, _, ids = stack(runs, "trainsentry")
    ids = np.asarray(ids)
    intensity, balance = X["act.tensor_per_dram.max"].to_numpy(), X["act.power_balance"].to_numpy()
    top = int(np.nanargmax(np.where(y == 1, intensity, np.nan)))
    runs_of = {"context_parallel_runs": "infer.cp.", "expert_parallel_runs": "infer.ep.",
               "stencil_runs": "other.stencil."}
    # single-GPU training has one busy GPU: its balance says nothing about how work is shared
    multi_gpu_training = {r.run_id for r in runs
                          if r.is_training and len(read_manifest(r.path)["labels"].get("ranks", [])) > 1}
    multi = np.isin(ids, sorted(multi_gpu_training))

    def run_medians(values: np.ndarray) -> dict[str, float]:
        """Per multi-GPU training run, the median over its windows (runs without a value left out)."""
        med = {r: float(np.nanmedian(values[ids == r])) if np.isfinite(values[ids == r]).any() else math.nan
               for r in sorted(set(ids[multi]))}
        return {r: v for r, v in med.items() if math.isfinite(v)}

    balance_by_run, intensity_by_run = run_medians(balance), run_medians(intensity)
    low = min(balance_by_run, key=balance_by_run.get)
    least = min(intensity_by_run, key=intensity_by_run.get)
    out = {"command": "python scripts/hardneg_signals.py --data " + args.data,
           "training_windows_max_tensor_per_dram": round(float(intensity[top]), 3),
           "training_window_of_that_max": str(ids[top]),
           "multi_gpu_training_runs_min_power_balance_median": round(balance_by_run[low], 3),
           "training_run_of_that_min": low,
           "multi_gpu_training_runs_min_tensor_per_dram_median": round(intensity_by_run[least], 3),
           "training_run_of_that_min_intensity": least}
    for key, prefix in runs_of.items():
        out[key] = {r: {"tensor_per_dram_median": round(float(np.nanmedian(intensity[ids == r])), 3),
                        "power_balance_median": round(float(np.nanmedian(balance[ids == r])), 3)}
                    for r in sorted({i for i in ids if i.startswith(prefix)})}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
