"""The calibration/evaluation set: one feature row per recorded training run with FLOP ground truth.

A run enters when its manifest says ``labels.class == "training"`` and carries a positive
``ground_truth.flops``; the interval is the workload's own ``[start, end]`` from the manifest (the
lab's true interval; the live path uses the detector's segmentation instead). A run that cannot be
read is listed in ``skipped`` with the reason, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..lab.summary import config_key
from ..traces.io import iter_runs, read_trace
from .features import interval_features, stack

# Runs whose energy samples cover less than this fraction of [start, end] are left out (a recorder
# gap would make the energy integral an undercount, not a measurement).
MIN_COVERAGE = 0.9


@dataclass
class RunSet:
    X: dict[str, np.ndarray]
    flops: np.ndarray
    run_ids: list[str]
    configs: list[str]
    workloads: list[str]
    families: list[str]
    features: list[dict] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.run_ids)

    def subset(self, idx: np.ndarray) -> "RunSet":
        idx = np.asarray(idx, dtype=int)
        pick = lambda xs: [xs[i] for i in idx]  # noqa: E731
        return RunSet({k: v[idx] for k, v in self.X.items()}, self.flops[idx], pick(self.run_ids),
                      pick(self.configs), pick(self.workloads), pick(self.families), pick(self.features))


def load_runs(root: str | Path, classes: tuple[str, ...] = ("training",),
              exclude_families: tuple[str, ...] = ()) -> RunSet:
    rows, flops, ids, cfgs, wls, fams, skipped = [], [], [], [], [], [], []
    for d in iter_runs(root):
        try:
            table, m = read_trace(d)
        except (ValueError, OSError) as e:
            skipped.append({"run": str(d), "reason": f"unreadable: {e}"})
            continue
        labels = m["labels"]
        if labels["class"] not in classes or labels["family"] in exclude_families:
            continue
        truth = float((m.get("ground_truth") or {}).get("flops") or 0.0)
        if not truth > 0:
            skipped.append({"run": m["run_id"], "reason": "no positive ground_truth.flops"})
            continue
        try:
            f = interval_features(table, float(m["start"]), float(m["end"]))
        except ValueError as e:
            skipped.append({"run": m["run_id"], "reason": str(e)})
            continue
        if f.coverage < MIN_COVERAGE:
            skipped.append({"run": m["run_id"], "reason": f"energy samples cover {f.coverage:.0%} of the run"})
            continue
        rows.append(f.as_dict())
        flops.append(truth)
        ids.append(m["run_id"])
        cfgs.append(config_key(m))
        wls.append(labels["workload"])
        fams.append(labels["family"])
    if not rows:
        raise ValueError(f"{root}: no training runs with FLOP ground truth" +
                         (f" ({len(skipped)} skipped: {skipped[0]['reason']})" if skipped else ""))
    return RunSet(stack(rows), np.asarray(flops), ids, cfgs, wls, fams, rows, skipped)
