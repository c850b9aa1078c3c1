"""One fit of the fused detector's boosted trees on the committed dataset, class-balanced two ways,
side by side in one run: sklearn ``sample_weight`` (weighted-percentile binning) against repeated
rows of the smaller class (``detect.learned.balanced_rows``, what the detector does).

    OMP_NUM_THREADS=1 PYTHONPATH=src python3 benchmarks/bench_learned_fit.py [--data data/h200] [--repeats 3]

Prints and writes to ``--out`` (results/learned_fit.json) seconds per fit (median of the repeats) and
their ratio; also the window-level agreement of the two models' decisions at 0.5 on the same windows
(they need not be identical: weights and repeats bin the features differently)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/h200")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("results/learned_fit.json"))
    args = ap.parse_args()
    from sklearn.ensemble import HistGradientBoostingClassifier

    from trainsentry.detect.dataset import load_dataset, stack
    from trainsentry.detect.learned import balanced_rows, fused
    from trainsentry.detect.pipeline import default_cache_dir
    runs = load_dataset(args.data, default_cache_dir())
    X, y, _, _ = stack(runs, "trainsentry")
    det = fused()
    det.cols_ = [c for c in det.columns(X) if np.isfinite(X[c].to_numpy(dtype=float)).any()]
    M = det._matrix(X)
    params = det.params
    w = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    rows = balanced_rows(y)
    times: dict[str, list[float]] = {"sample_weight": [], "balanced_rows": []}
    models = {}
    for _ in range(args.repeats):
        t = time.perf_counter()
        models["sample_weight"] = HistGradientBoostingClassifier(**params).fit(M, y, sample_weight=w)
        times["sample_weight"].append(time.perf_counter() - t)
        t = time.perf_counter()
        models["balanced_rows"] = HistGradientBoostingClassifier(**params).fit(M[rows], y[rows])
        times["balanced_rows"].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    agree = float(np.mean((models["sample_weight"].predict_proba(M)[:, 1] >= 0.5)
                          == (models["balanced_rows"].predict_proba(M)[:, 1] >= 0.5)))
    print(f"{len(runs)} runs, {M.shape[0]} windows x {M.shape[1]} features")
    for k, v in med.items():
        print(f"{k:14s} {v:7.2f} s per fit (median of {args.repeats})")
    print(f"ratio sample_weight / balanced_rows: {med['sample_weight'] / med['balanced_rows']:.1f}; "
          f"decisions agree on {agree:.1%} of windows")
    args.out.write_text(json.dumps({
        "runs": len(runs), "windows": int(M.shape[0]), "features": int(M.shape[1]),
        "seconds_per_fit": {k: round(v, 3) for k, v in med.items()},
        "all_seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "ratio_sample_weight_over_balanced_rows": round(med["sample_weight"] / med["balanced_rows"], 2),
        "decisions_agree": round(agree, 4), "repeats": args.repeats,
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_average_1min": round(os.getloadavg()[0], 2),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "OMP_NUM_THREADS=1 PYTHONPATH=src python3 benchmarks/bench_learned_fit.py " + " ".join(sys.argv[1:]),
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
