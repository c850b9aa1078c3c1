"""The calibration/evaluation set: one feature row per recorded training run with FLOP ground truth.

A run enters when its manifest says ``labels.class == "training"`` and carries a positive
``ground_truth.flops``. Its interval is either the workload's own ``[start, end]`` from the
manifest (``interval="manifest"``: the lab's truth) or the job the detector's segmentation
(:func:`trainsentry.detect.segment.segment_stream`) finds overlapping it most
(``interval="segment"``: what a monitor that knows nothing about the run would integrate over). A run that cannot be
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


def segmented_interval(table) -> tuple[float, float] | None:
    """The longest job the detector's segmentation finds in the trace, or None when it finds none.

    Chosen without the true interval (an estimator in the field never has it): a lab trace holds one
    run with a little idle around it, so the longest job is the run unless segmentation failed —
    which then shows up as a wrong interval (a large error), not as a run left out."""
    from ..detect.segment import segment_stream
    best, best_len = None, 0.0
    for res in segment_stream(table).values():
        for job in res["jobs"]:
            length = float(job["end"]) - float(job["start"])
            if length > best_len:
                best, best_len = (float(job["start"]), float(job["end"])), length
    return best


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
    # seconds the integrated interval's start/end lie after the true ones (0 for interval="manifest")
    shifts_s: list[tuple[float, float]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.run_ids)

    def subset(self, idx: np.ndarray) -> "RunSet":
        idx = np.asarray(idx, dtype=int)
        pick = lambda xs: [xs[i] for i in idx]  # noqa: E731
        return RunSet({k: v[idx] for k, v in self.X.items()}, self.flops[idx], pick(self.run_ids),
                      pick(self.configs), pick(self.workloads), pick(self.families), pick(self.features))


# Red-team workloads (registered as ``adv.*``) are training too, but the protocol calibrates and scores
# on benign configurations, as the seed study did; its red team then faced the frozen estimator.
ADVERSARIAL_PREFIXES = ("adv.",)


def load_runs(root: str | Path, classes: tuple[str, ...] = ("training",),
              exclude_families: tuple[str, ...] = (), interval: str = "manifest",
              exclude_prefixes: tuple[str, ...] = ADVERSARIAL_PREFIXES) -> RunSet:
    if interval not in ("manifest", "segment"):
        raise ValueError(f"interval must be 'manifest' or 'segment', not {interval!r}")
    rows, flops, ids, cfgs, wls, fams, skipped, shifts = [], [], [], [], [], [], [], []
    for d in iter_runs(root):
        try:
            table, m = read_trace(d)
        except (ValueError, OSError) as e:
            skipped.append({"run": str(d), "reason": f"unreadable: {e}"})
            continue
        labels = m["labels"]
        if (labels["class"] not in classes or labels["family"] in exclude_families
                or labels["workload"].startswith(exclude_prefixes)):
            continue
        truth = float((m.get("ground_truth") or {}).get("flops") or 0.0)
        if not truth > 0:
            skipped.append({"run": m["run_id"], "reason": "no positive ground_truth.flops"})
            continue
        start, end = float(m["start"]), float(m["end"])
        if interval == "segment":
            found = segmented_interval(table)
            if found is None:
                skipped.append({"run": m["run_id"], "reason": "the segmentation found no job in the run"})
                continue
            start, end = found
        try:
            f = interval_features(table, start, end)
        except ValueError as e:
            skipped.append({"run": m["run_id"], "reason": str(e)})
            continue
        if f.coverage < MIN_COVERAGE:
            skipped.append({"run": m["run_id"], "reason": f"energy samples cover {f.coverage:.0%} of the run"})
            continue
        rows.append(f.as_dict())
        shifts.append((start - float(m["start"]), end - float(m["end"])))
        flops.append(truth)
        ids.append(m["run_id"])
        cfgs.append(config_key(m))
        wls.append(labels["workload"])
        fams.append(labels["family"])
    if not rows:
        raise ValueError(f"{root}: no training runs with FLOP ground truth" +
                         (f" ({len(skipped)} skipped: {skipped[0]['reason']})" if skipped else ""))
    return RunSet(stack(rows), np.asarray(flops), ids, cfgs, wls, fams, rows, skipped, shifts)
