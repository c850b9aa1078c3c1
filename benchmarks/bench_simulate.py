"""Forward-model throughput of the evasion simulator on one core: configurations per second.

Run: .venv/bin/python benchmarks/bench_simulate.py   (writes results/simulator_bench.json)
A benchmark, not a test: the number depends on the machine; the issue asks >= 10,000 per second.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

# One core: keep any threaded numpy backend to a single thread before numpy loads.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402

from trainsentry.simulate.catalogue import as_arrays, node_types  # noqa: E402
from trainsentry.simulate.forward import evaluate  # noqa: E402
from trainsentry.simulate.search import min_cost  # noqa: E402

CONFIGS = 200_000
REPEATS = 3


def random_configs(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    types = node_types()
    return (as_arrays(types), rng.integers(0, len(types), n), rng.integers(1, 5000, n),
            rng.integers(0, 3, n), 10 ** rng.uniform(9.5, 12, n),
            rng.choice([4, 8, 10, 16, 32], n))


def main() -> int:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    arrays, idx, n, mode, params, group = random_configs(CONFIGS)
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        evaluate(arrays, idx, n, mode, params, group)
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    res = min_cost(1e25)
    search_s = time.perf_counter() - t0
    out = {"configs": CONFIGS, "repeats": REPEATS, "best_seconds": best,
           "configs_per_s": CONFIGS / best,
           "search_1e25_seconds": search_s, "search_1e25_evaluations": res.evaluations,
           "search_1e25_evaluations_per_s": res.evaluations / search_s,
           "command": ".venv/bin/python benchmarks/bench_simulate.py",
           "machine": platform.processor() or platform.machine(), "python": sys.version.split()[0],
           "numpy": np.__version__}
    path = Path("results/simulator_bench.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
