"""A lead for training on one device, where the exchange gate has nothing to see.

``fused`` multiplies its trees by the exchange gate (``rules.exchange_gate``): training spread over
several devices must exchange gradients, so a window without that exchange is not training. A
model trained on one GPU exchanges nothing, and the gate calls it not training at P = 0.00: the
committed model missed all 14 single-device training runs of ``data/h200x1``, ten of them
configurations it had never seen (docs/prospective-h200x1.md).

This check reads what is left: the highest value over the node's GPUs of every GPU activity
statistic (the ``act.*.max`` window features: the shape of power, SM, tensor-core, DRAM and memory activity, so
mostly the busiest GPU's; an idle second GPU still shows in the dispersion statistics such as
``idle_frac``; the GPM and NVML memory-activity levels enter per unit of busy time and the power,
energy, temperature and tensor-per-kW levels not at all, ``features.activity.duty_free`` and
``duty_bound``, so that idle gaps between batches do not average a dense service down into training's
range), judged by
gradient-boosted trees fitted on every window of the fitting data,
multi-device training included (a training GPU's activity looks the same whoever it exchanges
with). Training keeps tensor cores and DRAM busy together (forward, backward and optimizer step);
decode is DRAM-bound with little tensor-core work. Batched forward passes at the power cap
(embedding, long-prompt prefill) and input attribution (a backward pass through frozen weights, as
LoRA fine-tuning also runs) can look like training to 10 Hz counters.

Until 2026-12-04 the check was a lead in the evidence only. It is now the live verdict's second path
(``verdict_p``; ``collector.live.LiveConfig.lead_in_verdict``): a verdict that could never say
"training" on one device would leave single-device training, the simplest way to train unseen, to an
inspector reading evidence lines. What it costs is measured, not assumed: the evaluation scores the
pair as ``fused+single-device-live-noconv`` on configuration-grouped splits, and runs recorded after the
artifacts were committed are scored as they are (docs/detector.md, docs/lab.md). Its rates on
unseen configurations are also in docs/one-gpu.md (``fused+single-device``, the same trees behind the
gate's complement, scored by ``trainsentry eval-transfer``).

The check speaks where a GPU is busy and the window has every activity feature that nearly all busy
fitting windows had: a GPU without GPM counters (tensor-core and DRAM activity) is not judged: the
trees would be left with the shape of power and with utilisation, which the fitting data's GPUs never
gave without the rest. It speaks whether or not the GPUs exchange (since 2026-12-04; before, only where
the exchange gate was closed, ``on_exchange=False``): a training GPU's activity does not change with
whom it exchanges, the trees are fitted on multi-GPU training windows too, and a check that an
exchange silences is one a trainer silences by adding one (the ZeRO-Offload trainer that a PCIe
exchange hid, docs/prospective-294da2f-h200x1-verdict.md). On the headline's 200 configuration-grouped
splits, speaking on exchange windows too found multi-GPU trainers that ``fused`` doubted (FSDP of the
6.4 B model in every test appearance, against 44 of 64) and ZeRO-Offload trainers on one GPU (207 more
test appearances), for two more false alerts, on zigzag context-parallel prefill (3 of 80 appearances of
each of its two runs, against 2): docs/detector.md, ``fused+single-device-live-noconv`` against
``fused+single-device-live-noconv-gated``.

Below the busy floor. A window whose busiest GPU ran kernels but for at most ``BUSY_UTIL_PCT`` of its
time is not judged: per unit of busy time the few busy samples are noise (docs/busy-floor.md), and
a trainer throttled that far pays for it (+3604 % and +5604 % GPU-hours for the DiT-B/2 trainers at
2.8 % and 2.2 % busy, docs/redteam-x1.md). What such a window still says is how much work it can
have held: its tensor cores' activity times their peak rate is at most what they computed
(``below_floor_flops``; a tensor-busy second holds at most the dense FP8 peak at the 1980 MHz boost
clock, ``flops.features.PEAK_FP8_AT_FEATURE_CLOCK``, twice the BF16 one). The check gives that bound
as its line instead of a P (``floor_line``) and as a number (``floor_bounds``, which the collector
stores and sums per node and job), so a node kept under the floor is not silent
(docs/below-floor.md measures the bound on every recorded run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ..features.activity import (duty_bound, duty_free, duty_free_columns, is_duty_free_column,
                                 is_tensor_share_column)
from ..flops.features import PEAK_FP8_AT_FEATURE_CLOCK
from .base import numeric_matrix
from .learned import LEARNED_MAX_FEATURES, LearnedDetector

# a window whose busiest GPU is busier than this (NVML utilisation, %) has activity to judge
BUSY_UTIL_PCT = 5.0
THRESHOLD = 0.75   # the alert rule's per-window threshold, so "reads like training" means what it does there
REQUIRED_FRACTION = 0.99   # a feature finite in this share of busy fitting windows must be there to judge
UTIL_COL = "act.util_pct.mean.max"            # the busiest GPU's NVML utilisation (%), window mean
TENSOR_COL = "act.gpm_tensor_util_pct.mean.max"  # the busiest GPU's GPM tensor-core activity (%), window mean
TENSOR_MEAN_COL = "act.gpm_tensor_util_pct.mean.mean"  # ... the same averaged over the node's GPUs
# Below the floor, a window holds work to bound where its busiest GPU ran kernels at least this share of
# it (an idle GPU reads 1 % in a stray NVML sample: one in 80 is 0.0125 %) ...
KERNELS_MIN_PCT = 0.5
# ... or its tensor cores were this active (an idle GPU's GPM reads at most 0.005 % on the recordings)
TENSOR_MIN_PCT = 0.01


class BusiestGpuActivity(LearnedDetector):
    """Trees on the busiest GPU's activity (``act.*.max``), no exchange gate, fitted on every window.

    The GPM and memory-activity levels enter per unit of busy time (``features.activity.duty_free``), not
    as window averages, and the levels with no such form (power, energy, temperature, tensor per kW)
    not at all:
    an average mixes what the workload does while it runs with how much of the window it runs, and the
    second is a scheduling choice open to any service (idle gaps between batches) and any trainer
    (throttling). The trees read the intensity from the duty-free columns and the duty cycle from the
    utilisation statistics. Models fitted before 2026-12-03 hold the plain levels in ``cols_`` and
    still work: the derived columns are only added. The tensor share of SM activity (feature version 4)
    is left out: it was chosen for ``fused`` on multi-GPU runs, and the lead committed at ea3aed1 is
    under a prospective test that a new input would end; trying it here is a new lead (docs/lab.md)."""

    def __init__(self, **kw):
        super().__init__("single-device", ("act.",), gate=False, fit_on="all", max_features=LEARNED_MAX_FEATURES, **kw)

    def uses(self, column: str) -> bool:
        return (column.startswith("act.") and column.endswith(".max") and "n_gpus" not in column
                and not duty_bound(column) and not is_tensor_share_column(column))

    def fit(self, X: pd.DataFrame, y: np.ndarray, groups: Sequence | None = None,
            classes: Sequence[str] | None = None) -> "BusiestGpuActivity":
        return super().fit(duty_free(X), y, groups, classes)

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return super().predict_proba(duty_free(X))

    def out_of_domain(self, X: pd.DataFrame) -> np.ndarray:
        return super().out_of_domain(duty_free(X))

    def explain(self, x, top: int = 5) -> list[str]:
        return super().explain(duty_free(pd.DataFrame([dict(x)])).iloc[0].to_dict(), top)


def _busy(X: pd.DataFrame) -> np.ndarray:
    util = numeric_matrix(X, [UTIL_COL])[:, 0]
    return np.nan_to_num(util, nan=0.0) > BUSY_UTIL_PCT


def below_floor(X: pd.DataFrame) -> np.ndarray:
    """Windows with GPU work the check leaves unjudged for being under its busy floor: no exchange seen
    (the gate closed), the busiest GPU busy at most ``BUSY_UTIL_PCT`` of the window, yet kernels ran
    (NVML utilisation at least ``KERNELS_MIN_PCT``) or the tensor cores worked (GPM, at least
    ``TENSOR_MIN_PCT``)."""
    from .rules import exchange_gate
    util = np.nan_to_num(numeric_matrix(X, [UTIL_COL])[:, 0], nan=0.0)
    tensor = np.nan_to_num(numeric_matrix(X, [TENSOR_COL])[:, 0], nan=0.0)
    return (exchange_gate(X)[0] < 0.5) & (util <= BUSY_UTIL_PCT) & ((util >= KERNELS_MIN_PCT) | (tensor >= TENSOR_MIN_PCT))


def below_floor_flops(X: pd.DataFrame, gpus: int | None = None) -> np.ndarray:
    """Per window, the most tensor-core work its GPUs can have done: each GPU's mean tensor activity
    times the window's span times the tensor cores' dense FP8 peak at the boost clock, summed over the
    node's ``gpus`` GPUs (their mean activity times their number); without a count, the busiest GPU's
    alone (every other GPU did at most as much). NaN where GPM reports no tensor activity.

    FP8, not BF16: GPM counts an FP8 matmul's busy cycles as it counts a BF16 one's, and FP8 does twice
    the FLOPs per cycle (``flops.features.FP8_OVER_BF16``, measured on the H200 in docs/below-floor.md),
    so a bound at the BF16 peak would hold only for work the monitored party chose to run in BF16.
    Half of it bounds BF16 work. It bounds executed FLOPs: the tensor cores' 2:4-sparse mode keeps them
    busy half as long for a product that stands for twice the FLOPs it executes (measured in BF16 and
    FP8; held to a 3 % duty cycle, sparse FP8 executed 1.01 of this bound, the bound being tight at full
    clock), so counted as dense, sparse work reaches twice the bound. FlopCounter-style counts also charge
    the masked half of causal attention, which no tensor core computes (docs/flops.md)."""
    pct = numeric_matrix(X, [TENSOR_COL])[:, 0]
    if gpus is not None and gpus > 1:
        mean = numeric_matrix(X, [TENSOR_MEAN_COL])[:, 0]
        pct = np.where(np.isfinite(mean), mean * gpus, pct)
    span = numeric_matrix(X, ["t_end"])[:, 0] - numeric_matrix(X, ["t_start"])[:, 0]
    return pct / 100.0 * span * PEAK_FP8_AT_FEATURE_CLOCK


def floor_line(util_pct: float, tensor_pct: float, flops: float, gpus: int | None = None) -> str:
    """The evidence line of a window below the busy floor (``below_floor``; ``flops`` from
    ``below_floor_flops`` with the same ``gpus``)."""
    on = f"its {gpus} GPUs" if gpus is not None and gpus > 1 else "it"
    bound = (f"at most {flops / 1e12:.1f} TFLOP of tensor-core work on {on} in this window (activity × the "
             f"{PEAK_FP8_AT_FEATURE_CLOCK / 1e12:.0f} TFLOP/s dense FP8 peak at 1980 MHz; "
             f"{flops / 2e12:.1f} if the work was BF16; twice it if 2:4-sparse products are counted as the dense "
             f"ones they stand for)" if math.isfinite(flops)
             else "no tensor-core activity reported (no GPM), so no bound on its work")
    return (f"single-device check: the busiest GPU ran kernels {util_pct:.1f} % of the window, under the "
            f"{BUSY_UTIL_PCT:.0f} % floor below which it judges nothing; its tensor cores were active "
            f"{tensor_pct:.2f} %: {bound} (docs/below-floor.md)")


def verdict_p(p, lead):
    """The verdict's P(training) from the detector's ``p`` and the single-device check's ``lead`` (None, or
    0 in ``SingleDeviceCheck.predict_proba``, where the check did not speak): the larger of the two, so
    either path can call a window training. Scalars or arrays; the live collector and the evaluation's
    ``fused+single-device-live`` variants combine through this one function."""
    return p if lead is None else np.maximum(p, lead)


class SingleDeviceCheck:
    name = "single-device"
    feature_set = "trainsentry"

    def __init__(self, threshold: float = THRESHOLD, on_exchange: bool = True):
        """``on_exchange``: speak on windows whose exchange gate is open too (the check as judged from
        2026-12-04); False: only where the gate is closed, as before."""
        self.threshold = threshold
        self.on_exchange = on_exchange
        self.trees = BusiestGpuActivity()
        self.required_: list[str] = []

    def fit(self, X: pd.DataFrame, y: np.ndarray, groups: Sequence | None = None,
            classes: Sequence[str] | None = None) -> "SingleDeviceCheck":
        X = duty_free(X)
        self.trees.fit(X, y, groups, classes)
        busy = X[_busy(X)]
        self.required_ = [c for c in self.trees.cols_ if len(busy) and
                          np.isfinite(numeric_matrix(busy, [c])[:, 0]).mean() >= REQUIRED_FRACTION]
        return self

    def speaking_on_exchange(self, on: bool) -> "SingleDeviceCheck":
        """The same fitted trees and required features, speaking where the GPUs exchange or not
        (``on_exchange``): the check as live now (True) or until 2026-12-04 (False)."""
        other = SingleDeviceCheck(self.threshold, on_exchange=on)
        other.trees, other.required_ = self.trees, self.required_
        return other

    def judged(self, X: pd.DataFrame) -> np.ndarray:
        """Windows the check speaks on: a GPU busy, every feature it requires present, inside the trees'
        domain (and the exchange gate closed, where ``on_exchange`` is False)."""
        from .rules import exchange_gate
        X = duty_free(X)
        have = np.isfinite(numeric_matrix(X, self.required_)).all(axis=1) if self.required_ else np.ones(len(X), bool)
        speak = _busy(X) & have & ~self.trees.out_of_domain(X)
        if not self.on_exchange:
            speak &= exchange_gate(X)[0] < 0.5
        return speak

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        """The lead as a number per row of X: the trees' P(training) where the check speaks
        (``judged``), 0 where it has nothing to say, so the alert rule reads it as it reads a detector
        (scripts/prospective.py scores the committed check this way)."""
        return np.array([0.0 if p is None else p for p in self.scores(X)], dtype=np.float64)

    def scores(self, X: pd.DataFrame) -> list[float | None]:
        """One entry per row of X: the trees' P(training) where the check speaks, None elsewhere
        (the live collector stores it beside each verdict as ``lead_p``)."""
        out: list[float | None] = [None] * len(X)
        speak = self.judged(X)
        if speak.any():
            for i, p in zip(np.flatnonzero(speak), self.trees.predict_proba(X[speak])):
                out[i] = float(p)
        return out

    def read(self, X: pd.DataFrame, gpus: int | None = None) -> tuple[list[float | None], list[str | None],
                                                                       list[float | None]]:
        """Everything the check says of each row of X, the exchange gate read once: its P (``scores``),
        its evidence line (``lines``) and its bound below the busy floor (``floor_bounds``)."""
        scores = self.scores(X)
        lines: list[str | None] = [None if p is None else self.line(p) for p in scores]
        bounds: list[float | None] = [None] * len(X)
        rows = np.flatnonzero(below_floor(X) & np.array([p is None for p in scores], dtype=bool))
        if rows.size:
            util = np.nan_to_num(numeric_matrix(X, [UTIL_COL])[:, 0])
            tensor = np.nan_to_num(numeric_matrix(X, [TENSOR_COL])[:, 0])
            flops = below_floor_flops(X, gpus)
            for i in rows:
                lines[i] = floor_line(float(util[i]), float(tensor[i]), float(flops[i]), gpus)
                bounds[i] = float(flops[i]) if math.isfinite(flops[i]) else None
        return scores, lines, bounds

    def floor_bounds(self, X: pd.DataFrame, gpus: int | None = None) -> list[float | None]:
        """One entry per row of X: the bound on the window's tensor-core work (``below_floor_flops`` over
        ``gpus`` GPUs, FLOPs) where it is below the busy floor and the check gave no P, None elsewhere
        (also where GPM gave no tensor activity to bound it by). The live collector stores it beside the
        verdict (``floor_flop``)."""
        return self.read(X, gpus)[2]

    def lines(self, X: pd.DataFrame, gpus: int | None = None) -> list[str | None]:
        """One entry per row of X: an evidence line, or None where the check has nothing to say. Where it
        gives no P because the window is below its busy floor (``below_floor``), the line bounds the work
        of the node's ``gpus`` GPUs instead (``floor_line``; the busiest GPU's without a count)."""
        return self.read(X, gpus)[1]

    def line(self, p: float) -> str:
        head = f"single-device check (the busiest GPU's activity): reads P(training) = {p:.2f}"
        if p >= self.threshold:
            return (head + ": like training. What it cannot tell apart: on one device, backward passes "
                    "through frozen weights (input attribution, which LoRA fine-tuning computes too) and "
                    "batched forward passes at the power cap (embedding, long-prompt prefill) can read the "
                    "same at 10 Hz; these counters do not see whether weights change (docs/one-gpu.md)")
        return head + ": not like training"

    def describe(self) -> dict:
        """What ``base.save_detector`` writes beside the artifact."""
        return {"name": self.name, "feature_set": self.feature_set, "threshold": self.threshold,
                "busy_util_pct": BUSY_UTIL_PCT, "on_exchange": self.on_exchange,
                "features": len(self.trees.cols_),
                "features_required": len(self.required_),
                "sensors_always_seen": self.trees.groups_seen_}


def load(path: Path) -> SingleDeviceCheck:
    import joblib
    return fitted(joblib.load(path), path)


def fitted(check, path: Path) -> SingleDeviceCheck:
    """``check`` (read from ``path``) if it is a fitted single-device check whose derived columns this
    code computes, else a ValueError: a check that needs a column nobody derives would find it missing
    in every window and silently never speak."""
    if not isinstance(check, SingleDeviceCheck) or check.trees.model is None and check.trees.constant_ is None:
        raise ValueError(f"{path} is not a fitted single-device check")
    unknown = sorted(c for c in check.trees.cols_ if is_duty_free_column(c) and c not in duty_free_columns())
    if unknown:
        raise ValueError(f"{path} needs columns this version of trainsentry does not derive ({', '.join(unknown)}); "
                         "update trainsentry or refit the check (scripts/single_device.py)")
    if not hasattr(check, "on_exchange"):   # pickled before the setting existed (every load comes here):
        check.on_exchange = True            # the check as judged now
    return check
