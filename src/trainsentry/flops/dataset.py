"""The calibration/evaluation set: one feature row per recorded training run with FLOP ground truth.

A run enters when its manifest says ``labels.class == "training"`` and carries a positive
``ground_truth.flops``. Its interval is either the workload's own ``[start, end]`` from the
manifest (``interval="manifest"``: the lab's truth) or the job the detector's segmentation
(:func:`trainsentry.detect.segment.segment_stream`) finds overlapping it most
(``interval="segment"``: what a monitor that knows nothing about the run would integrate over). A run that cannot be
read is listed in ``skipped`` with the reason, never silently dropped.

Ground-truth convention. The recorded FLOPs are FlopCounterMode's, which counts causal attention
in full: every QKᵀ and AV product over the whole s × s score matrix, although a causal flash kernel
skips the masked half. :meth:`RunSet.causal_half` re-expresses the truth with causal attention
counted as half (the convention of most MFU accounting), from the model shape and token count each
manifest records; the recorded data are not changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..lab.summary import config_key
from ..traces.io import iter_runs, read_trace
from .features import interval_features, stack

# FlopCounterMode's attention formulas (torch.utils.flop_counter.sdpa_flop_count and
# sdpa_backward_flop_count) count, per token and layer at context s and width d (heads × head dim):
# forward QKᵀ and AV, 2 × 2·s·d; backward the recomputed QKᵀ, dP, dV, dQ and dK, 5 × 2·s·d.
SDPA_FORWARD_FLOPS_PER_TOKEN = 4     # × seq_len × d_model per layer: QKᵀ and AV
SDPA_BACKWARD_FLOPS_PER_TOKEN = 10   # the recomputed QKᵀ, dP, dV, dQ and dK
SDPA_TRAINING_FLOPS_PER_TOKEN = SDPA_FORWARD_FLOPS_PER_TOKEN + SDPA_BACKWARD_FLOPS_PER_TOKEN  # 14
# The workloads' analytic count (ModelConfig.flops_per_token) has 3 × 2 × 2·s·d per token and layer
# for attention; the recorded count must exceed it by exactly the recompute, 2·s·d, for the reading
# above to hold (checked per run, to this relative tolerance).
ATTENTION_CHECK_RTOL = 0.01

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


def counted_attention_flops(manifest: dict) -> float:
    """The attention FLOPs inside a training run's recorded (FlopCounterMode) count, all of it causal.

    0 for a non-causal model (nothing to discount). Raises ValueError when the manifest lacks the
    model shape, token count or analytic count, or when the recorded count is not the analytic one
    plus the attention recompute (a layout this reading does not cover)."""
    g = manifest.get("ground_truth") or {}
    extra = (g.get("extra") or {}).get("0") or {}
    model, tokens, analytic = extra.get("model"), g.get("tokens"), extra.get("analytic_flops_per_token")
    if not model or not tokens or not analytic:
        raise ValueError("the manifest lacks the model shape, token count or analytic FLOPs per token")
    if not model.get("causal", True):
        return 0.0
    sd = float(model["seq_len"]) * float(model["d_model"])
    layers = float(model["n_layers"])
    # LoRA in the top blocks only (``lora_layers`` k of L): the backward, and its recompute, run in the
    # k adapted blocks; the forward in every block
    back = float(extra.get("lora_layers") or layers)
    recorded, expected = float(g["flops"]), float(tokens) * (float(analytic) + 2.0 * back * sd)
    if abs(recorded - expected) > ATTENTION_CHECK_RTOL * recorded:
        raise ValueError(f"recorded FLOPs {recorded:.4g} ≠ tokens × (analytic + attention recompute) {expected:.4g}")
    return (SDPA_FORWARD_FLOPS_PER_TOKEN * layers + SDPA_BACKWARD_FLOPS_PER_TOKEN * back) * sd * float(tokens)


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
    # causal attention FLOPs inside ``flops`` (NaN where the manifest cannot say; why in attention_notes)
    attention_flops: np.ndarray | None = None
    attention_notes: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.run_ids)

    def subset(self, idx: np.ndarray) -> "RunSet":
        idx = np.asarray(idx, dtype=int)
        pick = lambda xs: [xs[i] for i in idx]  # noqa: E731
        att = None if self.attention_flops is None else self.attention_flops[idx]
        return RunSet({k: v[idx] for k, v in self.X.items()}, self.flops[idx], pick(self.run_ids),
                      pick(self.configs), pick(self.workloads), pick(self.families), pick(self.features),
                      attention_flops=att)

    def causal_half(self) -> "RunSet":
        """The runs whose manifests give their attention FLOPs, with causal attention counted as half.

        Runs whose attention cannot be read from the manifest are listed in ``skipped``."""
        att = np.full(len(self), np.nan) if self.attention_flops is None else self.attention_flops
        known = np.flatnonzero(np.isfinite(att))
        out = self.subset(known)
        out.flops = self.flops[known] - 0.5 * att[known]
        out.shifts_s = [self.shifts_s[i] for i in known] if self.shifts_s else []
        out.skipped = list(self.skipped) + [
            {"run": self.run_ids[i], "reason": "causal attention FLOPs unknown: "
             + self.attention_notes.get(self.run_ids[i], "no attention count")}
            for i in range(len(self)) if not np.isfinite(att[i])]
        return out


# Red-team workloads (registered as ``adv.*``) are training too, but the protocol calibrates and scores
# on benign configurations, as the seed study did; its red team then faced the frozen estimator.
ADVERSARIAL_PREFIXES = ("adv.",)


def load_runs(root: str | Path, classes: tuple[str, ...] = ("training",),
              exclude_families: tuple[str, ...] = (), interval: str = "manifest",
              exclude_prefixes: tuple[str, ...] = ADVERSARIAL_PREFIXES) -> RunSet:
    if interval not in ("manifest", "segment"):
        raise ValueError(f"interval must be 'manifest' or 'segment', not {interval!r}")
    rows, flops, ids, cfgs, wls, fams, skipped, shifts = [], [], [], [], [], [], [], []
    attention, notes = [], {}
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
        try:
            attention.append(counted_attention_flops(m))
        except (ValueError, KeyError, TypeError) as e:
            attention.append(math.nan)
            notes[m["run_id"]] = str(e)
    if not rows:
        raise ValueError(f"{root}: no training runs with FLOP ground truth" +
                         (f" ({len(skipped)} skipped: {skipped[0]['reason']})" if skipped else ""))
    return RunSet(stack(rows), np.asarray(flops), ids, cfgs, wls, fams, rows, skipped, shifts,
                  np.asarray(attention, dtype=np.float64), notes)
