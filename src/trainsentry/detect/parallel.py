"""The splits of ``trainsentry eval`` fitted in worker processes (``--jobs N``).

Each split is one fit and one scoring, independent of the others, so N processes do N at a time.
A worker loads the dataset itself once (from the feature cache the parent filled, so in seconds)
rather than receiving it: the runs' windows are hundreds of MB, and shipping them with every task
would cost more than the fit. Workers are started with ``spawn``: a process forked after the
gradient-boosted trees' OpenMP threads ran can hang in its first parallel region.

The leave-one-family-out folds (``evaluate.lofo_folds``) are splits of configurations too, so the
workers fit them after the random splits (``folds``) and the parent fits nothing.

What comes back is what ``evaluate.fit_split`` returns, in split order; the parent aggregates
exactly as it does for splits fitted in its own process, so the results do not depend on N
(tests/detect/test_parallel.py).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from .alert import AlertRule
from .dataset import Roots

_STATE: dict = {}


def _init(data: Roots, cache_dir: Path | None, subset: int | None, seed: int,
          counter_periods: dict[str, float] | None, rt_trees: int, splits: list[tuple[set, set]],
          rule: AlertRule, run_ids: list[str]) -> None:
    from .dataset import load_dataset
    runs = load_dataset(data, cache_dir, subset, seed, counter_periods=counter_periods)
    if [r.run_id for r in runs] != run_ids:
        raise RuntimeError("a worker loaded other runs than the evaluation did (the data changed under it?)")
    _STATE.update(runs=runs, splits=splits, rule=rule, rt_trees=rt_trees, factories={})


def _score(name: str, i: int):
    from .evaluate import fit_split
    from .pipeline import resolve_detectors
    st = _STATE
    if name not in st["factories"]:
        st["factories"][name] = resolve_detectors([name], st["rt_trees"])[name]
    return fit_split(st["factories"][name], st["runs"], st["splits"][i], st["rule"])


class SplitPool:
    """``jobs`` worker processes holding the evaluation's runs and splits; ``submit`` queues every split
    of the named detectors at once (so workers move on to the next detector while the parent
    aggregates the last), ``outcomes(name)`` yields one detector's results in split order."""

    def __init__(self, jobs: int, data: Roots, cache_dir: Path | None, subset: int | None, seed: int,
                 counter_periods: dict[str, float] | None, rt_trees: int, splits: list[tuple[set, set]],
                 rule: AlertRule, run_ids: Sequence[str], folds: Sequence[tuple[set, set]] = ()):
        """``folds``: the leave-one-family-out folds to fit after the splits (``lofo_outcomes``)."""
        if jobs < 2:
            raise ValueError("a pool needs at least 2 jobs (1: fit in the evaluating process)")
        self.n = len(splits)
        self.m = len(folds)
        self.futures: dict[str, list[Future]] = {}
        self.ex = ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_init,
                                      initargs=(data, cache_dir, subset, seed, counter_periods, rt_trees,
                                                list(splits) + list(folds), rule, list(run_ids)))

    def submit(self, names: Sequence[str]) -> None:
        """Queue every split, then every fold, of each named detector in turn."""
        for name in names:
            self.futures[name] = [self.ex.submit(_score, name, i) for i in range(self.n + self.m)]

    def outcomes(self, name: str) -> Iterator:
        for f in self.futures[name][:self.n]:
            yield f.result()

    def lofo_outcomes(self, name: str) -> Iterator:
        for f in self.futures[name][self.n:]:
            yield f.result()

    def close(self) -> None:
        self.ex.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "SplitPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
