"""Detector variants kept for the record: what was tried against the detectors ``trainsentry eval``
reports, each reachable by name (``trainsentry eval --detector NAME``) so the numbers in
docs/detector.md's "tried and not kept" list come from a command, not from a notebook.

None of these is evaluated by default, and none is used by the live path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from ..features.activity import (DUTY_LEVEL_STATS, GPM_ACTIVITY, duty_free_column, is_duty_free_column,
                                 is_tensor_share_column)
from .base import Detector
from .learned import LearnedDetector, comm_ml, fused
from .rt_baseline import RTBaseline
from .rules import CommRules
from .single_device import BusiestGpuActivity, SingleDeviceCheck, verdict_p


def _fit_without(single, workloads: tuple[str, ...], name: str, X: pd.DataFrame, y: np.ndarray,
                 groups: Sequence | None, classes: Sequence[str] | None) -> None:
    """Fit ``single`` on the windows of the runs whose id holds none of ``workloads`` (all when empty)."""
    if not workloads:
        single.fit(X, y, groups, classes)
        return
    if groups is None:
        raise ValueError(f"{name}: fitting needs each window's run (groups) to leave runs out")
    keep = np.array([not any(w in str(g) for w in workloads) for g in groups], dtype=bool)
    sub = lambda seq: None if seq is None else [v for v, k in zip(seq, keep) if k]  # noqa: E731
    single.fit(X[keep].reset_index(drop=True), np.asarray(y)[keep], sub(groups), sub(classes))


class SingleDevicePath(Detector):
    """``fused`` plus an ungated second path for training on one device: where the exchange gate
    is closed, P(training) = (1 − gate) × trees on the busiest GPU's activity (``act.*.max``),
    fitted on every window (multi-GPU training windows teach it what a training GPU's activity
    looks like). Tried and not kept as a verdict: batched forward passes at the power cap (embedding,
    prefill) look the same to 10 Hz activity counters (docs/detector.md, docs/one-gpu.md); the live
    collector shows its trees as a lead in the evidence instead (detect.single_device)."""

    name = "fused+single-device"

    def __init__(self, levels: str | None = None):
        self.multi = fused()
        # the live single-device check's trees (detect.single_device), or earlier forms of them:
        # ``levels="all"`` as fitted before 2026-12-03 (GPM activity as window levels, not per unit of busy
        # time), ``levels="gpm"`` as fitted at 49bb577 (only the GPM means per unit of busy time)
        trees, suffix = {None: (BusiestGpuActivity, ""), "all": (GpmLevels, "-levels"), "gpm": (GpmDutyFree, "-gpm"),
                         "tensor": (BusiestGpuWithTensorShare, "-tensor")}[levels]
        self.single = trees()
        self.name = "fused+single-device" + suffix

    def uses(self, column: str) -> bool:
        return self.multi.uses(column)

    workloads: tuple[str, ...] = ()   # substrings of run ids left out of the single-device part's fit

    def fit(self, X: pd.DataFrame, y: np.ndarray, groups: Sequence | None = None,
            classes: Sequence[str] | None = None) -> "SingleDevicePath":
        self.multi.fit(X, y, groups, classes)
        _fit_without(self.single, self.workloads, self.name, X, y, groups, classes)
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        from .rules import exchange_gate
        closed = 1.0 - exchange_gate(X)[0]
        return np.maximum(self.multi.predict_proba(X), closed * self.single.predict_proba(X))

    def explain(self, x: Mapping[str, float]) -> list[str]:
        return self.multi.explain(x)


class SingleDeviceWithout(SingleDevicePath):
    """``fused+single-device`` with its single-device trees fitted without the runs of some workloads (by
    the workload in the run's name; ``fused`` still fits on everything): on the same splits, what those
    runs in the lead's fit buy on their own test runs and cost on the others'. Written for the
    convolutional networks (docs/lab.md, the thirty-fifth session), whose trainers look to the trees
    like LLM decoding."""

    def __init__(self, workloads: tuple[str, ...] = ("train.convnet.", "infer.vision."), suffix: str = "-noconv"):
        """``workloads``: substrings of the run ids left out of the trees' fit (a workload's name, or a
        dataset's folder such as ``h200x1-decode/``: with several ``--data`` roots a run's id starts with
        its root)."""
        super().__init__()
        self.workloads = workloads
        self.name = "fused+single-device" + suffix


class LiveGatedPath(SingleDevicePath):
    """``fused`` plus the single-device check exactly as the live collector gates it
    (``SingleDeviceCheck.judged``: busiest GPU busy above 5 %, the features nearly every busy fitting
    window had present, inside the trees' domain; 0 elsewhere), where ``fused+single-device`` reads the
    trees on every window the exchange gate leaves closed, busy or not. Scores what the lead does as
    a verdict with its live gate (docs/duty-cycle.md)."""

    name = "fused+single-device-live"

    def __init__(self, workloads: tuple[str, ...] = (), suffix: str = "", on_exchange: bool = True):
        """``workloads``: substrings of the run ids left out of the check's fit, as ``SingleDeviceWithout``
        (the live check is fitted without the convolutional runs, scripts/single_device.py);
        ``on_exchange``: ``SingleDeviceCheck``'s (False: the check silent where the exchange gate is open,
        as live until 2026-12-04)."""
        self.multi = fused()
        self.single = SingleDeviceCheck(on_exchange=on_exchange)
        self.workloads = workloads
        self.name = "fused+single-device-live" + suffix

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return verdict_p(self.multi.predict_proba(X), self.single.predict_proba(X))


class GpmLevels(BusiestGpuActivity):
    """The single-device trees on the busiest GPU's GPM activity as window levels (mean, percentiles,
    spread), as fitted until 2026-12-03. Not kept: a service that idles between dense batches averages
    down into training's levels (docs/duty-cycle.md)."""

    def uses(self, column: str) -> bool:
        return (column.startswith("act.") and column.endswith(".max") and "n_gpus" not in column
                and not is_duty_free_column(column) and not is_tensor_share_column(column))


class GpmDutyFree(BusiestGpuActivity):
    """The single-device trees as fitted at 49bb577 (2026-12-03): the four GPM means per unit of busy
    time, every other busiest-GPU level as a window level (NVML memory utilisation, power, energy,
    temperature, tensor per kW), which a service's idle gaps still average down (docs/duty-cycle.md)."""

    def uses(self, column: str) -> bool:
        parts = column.split(".")
        gpm_level = (len(parts) == 4 and parts[1] in GPM_ACTIVITY and parts[2] in DUTY_LEVEL_STATS)
        derived = is_duty_free_column(column) and column not in {duty_free_column(m, "mean") for m in GPM_ACTIVITY}
        return (column.startswith("act.") and column.endswith(".max") and "n_gpus" not in column
                and not gpm_level and not derived and not is_tensor_share_column(column))


class BusiestGpuWithTensorShare(BusiestGpuActivity):
    """The single-device trees with the tensor share of SM activity (``act.tensor_per_sm``, feature
    version 4) among their inputs, the lead's planned next form (docs/lab.md). A share of busy time, so
    idle gaps do not scale it. Screened, not committed as the lead: the ea3aed1 lead stays under its
    prospective test."""

    def uses(self, column: str) -> bool:
        return super().uses(column) or (is_tensor_share_column(column) and column.endswith(".max"))


class FusedWithRules(Detector):
    """The geometric mean of ``fused`` and ``comm-rules`` per window: the rules' fixed physics beside
    the trees, each able to pull the other down. Tried and not kept: within a run or two of fused
    alone on the selection splits, for a second fitted part (docs/detector.md)."""

    name = "fused-geo-comm-rules"

    def __init__(self):
        self.trees, self.rules = fused(), CommRules()

    def uses(self, column: str) -> bool:
        return self.trees.uses(column)

    def fit(self, X: pd.DataFrame, y: np.ndarray, groups: Sequence | None = None,
            classes: Sequence[str] | None = None) -> "FusedWithRules":
        self.trees.fit(X, y, groups, classes)
        self.rules.fit(X, y, groups, classes)
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return np.sqrt(self.trees.predict_proba(X) * self.rules.predict_proba(X))

    def explain(self, x: Mapping[str, float]) -> list[str]:
        return self.trees.explain(x) + self.rules.explain(x)


def _variant(make: Callable[..., Detector], name: str, **kw) -> Callable[[], Detector]:
    """A factory of ``make(**kw)`` renamed ``name`` (one detector class, other settings)."""
    def factory() -> Detector:
        det = make(**kw)
        det.name = name
        return det
    return factory


# Activity statistics that are absolute levels (watts, percent busy, GiB, MHz, degrees): the
# fitting data's training runs mostly draw ~690 W at high tensor activity, and trees that learn
# those levels miss training that runs cooler (tensor-parallel, pipeline, small batches).
ABSOLUTE_ACTIVITY = ("power_W.mean", "power_W.p05", "power_W.p95", "power_W.std", "energy_W.", "util_pct.mean",
                     "util_pct.p05", "util_pct.p95", "util_pct.std", "mem_util_pct.mean", "mem_util_pct.p05",
                     "mem_util_pct.p95", "mem_util_pct.std", "mem_GiB.mean", "sm_clock_mhz", "mem_clock_mhz",
                     "temp_c", "_pct.mean", "_pct.p05", "_pct.p95", "_pct.std", "tensor_per_kW")


class FusedSubset(LearnedDetector):
    """``fused`` with every setting of fused's (whatever they become) on fewer columns: a subclass names
    itself (``variant``) and narrows ``uses``. Classes, not a renamed ``fused`` with a replaced ``uses``,
    so that ``--train-final`` can save them."""

    variant = "fused"

    def __init__(self):
        self.__dict__.update(fused().__dict__)
        self.name = self.variant


class FusedShape(FusedSubset):
    """``fused`` without the absolute activity levels (``ABSOLUTE_ACTIVITY``): the shape of the signals only."""

    variant = "fused-shape"

    def uses(self, column: str) -> bool:
        return column.startswith("comm.") or (column.startswith("act.") and not any(a in column for a in ABSOLUTE_ACTIVITY))


class FusedNoTensorShare(FusedSubset):
    """``fused`` as on window features version 3: the tensor share of SM activity
    (``features.activity.tensor_per_sm``, added in version 4) left out."""

    variant = "fused-no-tensor-share"

    def uses(self, column: str) -> bool:
        return super().uses(column) and not is_tensor_share_column(column)


def is_pcie_shape_column(column: str) -> bool:
    """A PCIe feature other than its volume as ``comm.pcie.log_Bps.*``: bursts, periodicity, symmetry,
    balance across GPUs, locks to power and SM activity, and the volume's other forms (linear, per joule,
    per period, per burst). On a node whose GPUs exchange over NVLink the
    host link carries what the program's host side does (data loading, logging, a loss read back), so its
    shape is the implementation's, not training's: the two runs of one 16 k-token DDP configuration
    differ in it (one GPU's PCIe bursting in one, flat on both in the other)."""
    return column.startswith("comm.pcie.") and not column.startswith("comm.pcie.log_Bps.")


class FusedNoPcieShape(FusedSubset):
    """``fused`` whose trees see the PCIe link's volume only, not its shape (``is_pcie_shape_column``);
    the exchange gate is ``fused``'s."""

    variant = "fused-no-pcie-shape"

    def uses(self, column: str) -> bool:
        return super().uses(column) and not is_pcie_shape_column(column)


# rt-baseline's memory-used signal: its levels, statistics and its dynamics inside a window (change over
# the first 30 s, time to plateau, slope). Memory held is a level of the workload's size, not a physical
# mark of training (a large model served holds as much), and on the dataset's 38 s runs every 30 s
# window also holds the run's start-up. Dropping all of it shows what else keeps embedding out.
RT_MEMORY = ("mem_used", "rt.mem_change_30s", "rt.mem_plateau_s", "rt.mem_slope")


VARIANTS: dict[str, Callable[[], Detector]] = {
    # fused with the decode veto (continuous, irregular exchange of memory-bound GPUs)
    "fused-decode-veto": _variant(fused, "fused-decode-veto", decode_veto="memory_bound"),
    # fused and comm-ml with the plain exchange gate (fused: the same as fused; it carried the veto
    # when results/selection-seed1 was written), comm-ml before its decode veto
    "fused-previous": _variant(fused, "fused-previous", decode_veto=None),
    # the gate asking for a regular exchange instead of vetoing decode's
    "fused-regular": _variant(fused, "fused-regular", decode_veto=None, regular_gate=True),
    "comm-ml-regular": _variant(comm_ml, "comm-ml-regular", decode_veto=None, regular_gate=True),
    # comm-ml's veto with fused's memory-bound condition (an activity reading in a comm-only detector)
    "comm-ml-memory-bound": _variant(comm_ml, "comm-ml-memory-bound", decode_veto="memory_bound"),
    # fused with its gate, trees fitted only on windows that pass it
    "fused-fit-gated": _variant(fused, "fused-fit-gated", fit_on="gated"),
    "comm-ml-previous": _variant(comm_ml, "comm-ml-previous", decode_veto=None),
    # fused plus an ungated single-device path on the busiest GPU's activity
    "fused+single-device": SingleDevicePath,
    # the same with the single-device trees fitted without the convolutional runs (train.convnet, infer.vision)
    "fused+single-device-noconv": SingleDeviceWithout,
    # ... and without data/h200x1-decode's runs (decode and small-batch trainers recorded in the thirty-sixth
    # session): what those runs buy the lead on the same splits
    "fused+single-device-noconv-nodecode": lambda: SingleDeviceWithout(
        ("train.convnet.", "infer.vision.", "h200x1-decode/"), "-noconv-nodecode"),
    # the same with the single-device check gated as live (busy windows, required features, domain)
    "fused+single-device-live": LiveGatedPath,
    # ... with the check fitted without the convolutional runs, as the live artifact is: the live verdict
    "fused+single-device-live-noconv": lambda: LiveGatedPath(("train.convnet.", "infer.vision."), "-noconv"),
    # ... with the check silent where the exchange gate is open: the live verdict until 2026-12-04
    "fused+single-device-live-noconv-gated": lambda: LiveGatedPath(("train.convnet.", "infer.vision."),
                                                                   "-noconv-gated", on_exchange=False),
    # the same with the single-device trees on GPM window levels (the lead until 2026-12-03)
    "fused+single-device-levels": lambda: SingleDevicePath(levels="all"),
    # the same with only the GPM means per unit of busy time (the lead from 49bb577 until the next refit)
    "fused+single-device-gpm": lambda: SingleDevicePath(levels="gpm"),
    # the same with the tensor share of SM activity among the single-device trees' inputs
    "fused+single-device-tensor": lambda: SingleDevicePath(levels="tensor"),
    # geometric mean of fused and comm-rules
    "fused-geo-comm-rules": FusedWithRules,
    # fused without the absolute activity levels (shape, ratios and balance of activity kept)
    "fused-shape": FusedShape,
    # comm-rules whose fitted volume threshold may not cost more than 1 point of training-window detection
    "comm-rules-keep-training": _variant(CommRules, "comm-rules-keep-training", keep_training=0.01),
    # fused without the tensor share of SM activity (window features as of version 3)
    "fused-no-tensor-share": FusedNoTensorShare,
    # fused whose trees see the PCIe link's volume, not its shape
    "fused-no-pcie-shape": FusedNoPcieShape,
    # rt-baseline without any memory-used feature (memory held is a level of the workload's size)
    "rt-baseline-no-memory": _variant(RTBaseline, "rt-baseline-no-memory", exclude=RT_MEMORY),
}
