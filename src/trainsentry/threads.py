"""One native (OpenMP / BLAS) thread for the analysis commands, set before numpy and scikit-learn load.

The scores do not depend on it. On a small machine shared with other work, the boosted trees'
OpenMP team oversubscribes the cores: a fit measured at 0.2 s took 40-130 s when another process
kept a core busy (red-team rounds, 2026-11-30), and limiting threads at run time (threadpoolctl) did
not prevent it; the environment variable did. A value the user set is kept. ``trainsentry eval``,
``flops-eval`` and the ``redteam`` commands call it first thing (the CLI loads neither library
before a command runs).
"""

from __future__ import annotations

import os


def one_native_thread() -> None:
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
