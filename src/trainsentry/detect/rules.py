"""``comm-rules``: an interpretable rule set on communication features only.

Training needs a large, regular, symmetric gradient exchange; each rule is one of those words.

* volume — data-parallel training all-reduces every gradient every step: each GPU sends
  ≈ 2(n−1)/n · Ψ · bytes-per-value per step (anchors.md §4). Even a 10 M-parameter bf16 model at
  10 steps/s moves ≈ 200 MB/s per GPU on 2 GPUs; inference traffic is tiny (tensor-parallel decode:
  a few hidden vectors per token) or absent (replicas). Default threshold 100 MB/s per GPU; the
  only fitted quantity is this threshold (one-dimensional search on the training split, logged).
* symmetry — a collective makes every GPU send what it receives (min over GPUs of min(TX,RX)/max);
  prefill → decode hand-offs and pipeline inference are one-way. Threshold 0.7.
* simultaneity — a collective completes only when every GPU takes part, so bursts coincide on all
  GPUs (co-activity of bursts, or correlation of the byte series). Threshold 0.5.
* regularity — the exchange recurs at the step rate: either its autocorrelation has a clear repeat
  (threshold 0.3), or the link is busy most of the window (duty 0.8: steps shorter than the 0.1 s
  grid) *and* steady: identical steps move identical bytes, so the busy bins' bytes vary little
  around their trend (``steady`` = 1 − that coefficient of variation ≥ 0.7). Busy alone is not
  enough: tensor-parallel decode and serving all-reduce activations continuously too (every layer
  of every token), but their bytes per bin follow the request mix (prefills, batch size), as the
  dataset's TP decode (steady 0.0) and serving runs (0.05–0.70 per window) show; its training runs
  that rely on this path read 0.77–0.99. A steady TP decode with a fixed batch and no prefills
  would pass this rule: at 10 Hz the communication alone cannot tell it from data-parallel steps
  shorter than 0.1 s (docs/detector.md). Steadiness is asked of the per-GPU channels (NVLink, PCIe)
  only: tensor parallelism needs an all-reduce per layer per token and stays inside a node, while
  serving traffic between nodes is pipeline or prefill → decode hand-offs (one-way, failing
  symmetry). On the network a busy symmetric exchange stays regular, as before: host-timed steps
  jitter (the demo's gloo DDP on a loaded 2-core CPU reads 0.65–0.82, as unsteady as TP serving),
  and a symmetric, busy serving exchange between nodes (expert-parallel all-to-all, tensor
  parallelism across nodes) would be a false alarm of this rule. Pipeline training counts as
  regular too (per-GPU channels): its stages send activations forward and gradients back point to
  point, so its bins go mostly one way (``oneway_bins`` ≥ 0.15 on the worst GPU; 0.18–0.86 on the
  dataset's GPipe and 1F1B runs, where every collective reads ≤ 0.16) while the symmetry rule sees
  as many bytes back as forward; at 10 Hz its bins are neither steady nor clearly periodic.
* compute-bound — training spends most of its energy computing: per step it does ≈ 6·Ψ·tokens
  FLOPs for ≈ 4·Ψ bytes of bf16 gradient traffic per GPU, so bytes per joule ≈ (2/3)·(FLOP per
  joule) / tokens per GPU per step; at H200 efficiency (≲ 1e12 FLOP/J) and ≥ ~700 tokens per step
  that stays below ~1 GB/J. Collective benchmarks and peer copies, whose energy goes into moving
  bytes, exceed it. Threshold 1e9 B/J (absent energy reading: neutral).

The channel is NVLink inside a node, PCIe per GPU (gradients staged through host memory: each GPU
copies its gradients out and the reduced ones back, as symmetric as NVLink's; data loading and
inference hand-offs over PCIe are one-way) or the busiest network interface between nodes,
whichever scores higher. Each rule is a soft step (a logistic in the feature), and P(training) is their
product: a fuzzy AND whose factors are the evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from .base import Detector, check_fit_input

CHANNELS = ("nvlink", "pcie", "net")
CHANNEL_LABEL = {"nvlink": "NVLink", "pcie": "PCIe", "net": "network"}
PER_GPU = ("nvlink", "pcie")       # channels measured per GPU (worst GPU: .min; cross-GPU simultaneity)
VOLUME_GRID_BPS = np.logspace(6, 10, 33)   # the volume thresholds fit() tries (1 MB/s .. 10 GB/s)
VOLUME_FIT_TOLERANCE = 0.01   # fit() keeps the lowest threshold within this much of the best balanced accuracy


def _soft(x: np.ndarray, thr: float, width: float) -> np.ndarray:
    """Logistic step; NaN (no evidence) scores 0."""
    with np.errstate(over="ignore", invalid="ignore"):
        out = 1.0 / (1.0 + np.exp(-(np.asarray(x, dtype=np.float64) - thr) / width))
    return np.where(np.isfinite(x), out, 0.0)


def _col(X: pd.DataFrame, key: str) -> np.ndarray:
    if key not in X.columns:
        return np.full(len(X), np.nan)
    return pd.to_numeric(X[key], errors="coerce").to_numpy(dtype=np.float64)


def _get(x: Mapping, key: str) -> float:
    """One value of one row; NaN when absent or not a number."""
    try:
        return float(x.get(key, math.nan))
    except (TypeError, ValueError):
        return math.nan


def exchange_factors(X: pd.DataFrame, ch: str, volume_Bps: float, sym_min: float, simult_min: float,
                     bytes_per_J_max: float) -> dict[str, np.ndarray]:
    """The evidence of a collective exchange on one channel, one soft score (0..1) per window each:
    ``volume`` (bytes per second per GPU at least ``volume_Bps``), ``symmetry`` (each device sends
    about what it receives, worst GPU), ``simultaneity`` (per-GPU channels: bursts on all GPUs at
    once) and ``compute_bound`` (at most ``bytes_per_J_max``: collective benchmarks and peer copies
    spend their energy moving bytes). Shared by ``CommRules`` and ``exchange_gate``, which ask the
    same questions at different thresholds."""
    per_gpu = ch in PER_GPU
    sfx = ".min" if per_gpu else ""
    vol = _col(X, f"comm.{ch}.Bps{sfx}")
    f = {"volume": _soft(np.log10(np.maximum(vol, 0) + 1.0), math.log10(volume_Bps), 0.15),
         "symmetry": _soft(_col(X, f"comm.{ch}.sym{sfx}"), sym_min, 0.05)}
    if per_gpu:
        best = np.fmax(_col(X, f"comm.{ch}.coactive"), _col(X, f"comm.{ch}.simult_corr"))
        # One GPU with traffic cannot be unsimultaneous with itself: neutral.
        f["simultaneity"] = np.where(np.isfinite(best), _soft(best, simult_min, 0.05), 1.0)
    bpj = _col(X, f"comm.{ch}.log_bytes_per_J" + (".mean" if per_gpu else ""))
    f["compute_bound"] = np.where(np.isfinite(bpj), 1.0 - _soft(bpj, math.log10(bytes_per_J_max), 0.1), 1.0)
    return f


# The regularity rule's thresholds (CommRules' defaults; the exchange gate asks the same when it
# asks for regularity): autocorrelation peak, busy share of the window, steadiness of the busy
# bins, one-way share per bin (pipeline sends).
REG_ACF_MIN = 0.3
REG_DUTY_MIN = 0.8
REG_STEADY_MIN = 0.7
REG_ALTERNATING_MIN = 0.15


def regularity_factor(X: pd.DataFrame, ch: str, duty_min: float = REG_DUTY_MIN, acf_min: float = REG_ACF_MIN,
                      steady_min: float = REG_STEADY_MIN, alternating_min: float = REG_ALTERNATING_MIN) -> np.ndarray:
    """Evidence (0..1 per window) that the exchange on one channel recurs as identical steps do:
    a clear autocorrelation peak (steps longer than a bin), or busy most of the window *and*
    steady (per-GPU channels: steps shorter than a bin move the same bytes in every bin), or, on
    per-GPU channels, mostly one way per bin (pipeline training: activations forward, gradients
    back). Shared by ``CommRules`` and ``exchange_gate(regular=True)``."""
    per_gpu = ch in PER_GPU
    sfx = ".min" if per_gpu else ""
    busy = _soft(_col(X, f"comm.{ch}.duty{sfx}"), duty_min, 0.05)
    regular = _soft(_col(X, f"comm.{ch}.acf_peak{sfx}"), acf_min, 0.05)
    if per_gpu:
        # inside a node, where tensor parallelism lives, busy must also be steady
        busy = busy * _soft(_col(X, f"comm.{ch}.steady.min"), steady_min, 0.03)
        # pipeline training: point-to-point sends, one way per bin, as many bytes back
        # (gradients) as forward (activations); the symmetry factor asks the latter
        regular = np.maximum(regular, _soft(_col(X, f"comm.{ch}.oneway_bins.min"), alternating_min, 0.02))
    return np.maximum(busy, regular)


# Tensor-parallel decode, as the exchange gate's veto sees it (``decode_exchange``): an exchange busy
# through the window (the regularity rule's duty) that is neither steady nor periodic, on GPUs whose
# work is memory-bound (GPM tensor activity per DRAM activity below this on every GPU).
DECODE_TENSOR_PER_DRAM_MAX = 0.65


def decode_exchange(X: pd.DataFrame, ch: str, memory_bound: bool = True) -> np.ndarray:
    """Evidence (0..1 per window) that the exchange on a per-GPU channel is the activation
    all-reduce of tensor-parallel decode or serving, not a training step's: *continuous* (busy
    ≥ 80 % of the window: every layer of every token all-reduces), *irregular* (1 − the regularity
    rule: the bytes follow the request mix, neither steady nor periodic, no pipeline sends) and,
    with ``memory_bound``, on GPUs whose work is memory-bound (``act.tensor_per_dram.max`` below
    ``DECODE_TENSOR_PER_DRAM_MAX``: decode reads every weight and the KV cache for a few tokens per
    step, while training's forward and backward passes are dense matmuls over a whole batch). An
    absent reading is no evidence (0). Each condition alone is met by some training: sub-bin DDP
    steps are continuous (but steady), DiLoCo's rare syncs and cover traffic are irregular (but not
    continuous), narrow models are memory-bound (but their exchange is regular); the network
    channel gets 0 (tensor parallelism stays inside a node)."""
    if ch not in PER_GPU:
        return np.zeros(len(X))
    continuous = _soft(_col(X, f"comm.{ch}.duty.min"), REG_DUTY_MIN, 0.05)
    out = continuous * (1.0 - regularity_factor(X, ch))
    if memory_bound:
        tpd = _col(X, "act.tensor_per_dram.max")
        out = out * np.where(np.isfinite(tpd), 1.0 - _soft(tpd, DECODE_TENSOR_PER_DRAM_MAX, 0.05), 0.0)
    return out


# The exchange gate of the learned detectors (``exchange_gate``): looser than CommRules, since it
# only asks whether a collective exchange is there at all and leaves the rest to the trees.
GATE_SYM_MIN = 0.5
GATE_SIMULT_MIN = 0.5
GATE_FLOOR_FACTOR = 10.0     # volume at least 10x the link's idle floor (features.comm.ACTIVE_FLOOR_BPS)
GATE_BYTES_PER_J_MAX = 1e9   # the compute-bound rule's bound (CommRules.bytes_per_J_max)


def gate_pass_share(X: pd.DataFrame, **kw) -> float:
    """The share of windows whose exchange-gate evidence is at least one half (0 when there are none);
    ``kw`` as :func:`exchange_gate`'s."""
    return float(np.mean(exchange_gate(X, **kw)[0] >= 0.5)) if len(X) else 0.0


def exchange_gate(X: pd.DataFrame, regular: bool = False, decode_veto: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Evidence (0..1) that a window holds a collective exchange on some channel, and that channel's
    index in ``CHANNELS``: traffic above the link's idle floor that is symmetric over the window
    (each device sends about what it receives), simultaneous across devices and compute-bound: the
    ``exchange_factors`` of ``CommRules`` at looser thresholds, without its regularity rule.

    Every way of training on more than one device exchanges gradients or activations both ways
    within a step: data parallelism all-reduces (ring: each GPU sends what it receives), FSDP
    reduce-scatters and all-gathers, pipeline training sends activations forward and gradients
    back, host-staged synchronisation copies gradients out over PCIe and the reduced ones back.
    Workloads that do not exchange both ways — no traffic (replicas, single-GPU compute, copies
    inside one GPU) or one-way traffic (prefill → decode hand-off, pipeline inference) — are not
    multi-device training, whatever their power or activity looks like. The exchange must also be
    that of a compute-bound workload (at most ``GATE_BYTES_PER_J_MAX`` bytes per joule):
    collective benchmarks and peer copies spend their energy moving bytes. What the gate cannot
    see: training on one device alone (no exchange to measure).

    ``decode_veto``: the gate closes where the exchange is that of tensor-parallel decode or serving
    (``decode_exchange`` on the same channel: continuous, irregular and — ``"memory_bound"`` — on
    memory-bound GPUs; ``"comm"``: the communication conditions only). Those all-reduce activations
    symmetrically on every GPU at once and pass the plain gate; when every tensor-parallel server
    of the dataset was held out together, trees fitted on the rest called them training.

    ``regular`` (tried, not kept: detect.variants): the exchange must also recur as identical
    steps do (``regularity_factor``) — it also closed on DiLoCo's rare syncs and on training under
    cover traffic (docs/detector.md)."""
    if decode_veto not in (None, "memory_bound", "comm"):
        raise ValueError("decode_veto is None, 'memory_bound' or 'comm'")
    from ..features.comm import ACTIVE_FLOOR_BPS
    scores = []
    for ch in CHANNELS:
        f = exchange_factors(X, ch, GATE_FLOOR_FACTOR * ACTIVE_FLOOR_BPS[ch], GATE_SYM_MIN, GATE_SIMULT_MIN,
                             GATE_BYTES_PER_J_MAX)
        if regular:
            f["regularity"] = regularity_factor(X, ch)
        if decode_veto:
            f["not_decode"] = 1.0 - decode_exchange(X, ch, memory_bound=decode_veto == "memory_bound")
        scores.append(np.prod(np.vstack(list(f.values())), axis=0))
    s = np.vstack(scores)
    return s.max(axis=0), s.argmax(axis=0)


class CommRules(Detector):
    name = "comm-rules"

    def __init__(self, volume_Bps: float = 1e8, sym_min: float = 0.7, simult_min: float = 0.5,
                 duty_min: float = REG_DUTY_MIN, acf_min: float = REG_ACF_MIN, bytes_per_J_max: float = 1e9,
                 steady_min: float = REG_STEADY_MIN, alternating_min: float = REG_ALTERNATING_MIN,
                 keep_training: float | None = None):
        self.volume_Bps, self.sym_min, self.simult_min = volume_Bps, sym_min, simult_min
        # fit(): with a value, the threshold may rise only while the share of fitting training windows
        # it detects stays within this many points (a fraction) of the lowest threshold's (volume is
        # necessary for training, not a discriminator against benign exchanges that move as much)
        if keep_training is not None and not 0.0 <= keep_training <= 1.0:
            raise ValueError(f"keep_training is a share of training windows in [0, 1], not {keep_training}")
        self.keep_training = keep_training
        self.alternating_min = alternating_min
        self.duty_min, self.acf_min, self.steady_min = duty_min, acf_min, steady_min
        self.bytes_per_J_max = bytes_per_J_max
        self.calibration: dict = {}

    def uses(self, column: str) -> bool:
        return column.startswith("comm.")

    def _factors(self, X: pd.DataFrame, ch: str, volume_Bps: float | None = None) -> dict[str, np.ndarray]:
        thr = self.volume_Bps if volume_Bps is None else volume_Bps
        f = exchange_factors(X, ch, thr, self.sym_min, self.simult_min, self.bytes_per_J_max)
        f["regularity"] = regularity_factor(X, ch, self.duty_min, self.acf_min, self.steady_min, self.alternating_min)
        return f

    def _score(self, X: pd.DataFrame, volume_Bps: float | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
        """P(training), the winning channel index and every channel's factors."""
        factors = {ch: self._factors(X, ch, volume_Bps) for ch in CHANNELS}
        ps = np.vstack([np.prod(np.vstack(list(factors[ch].values())), axis=0) for ch in CHANNELS])
        return ps.max(axis=0), ps.argmax(axis=0), factors

    def fit(self, X: pd.DataFrame, y: np.ndarray, groups: Sequence | None = None,
            classes: Sequence[str] | None = None) -> "CommRules":
        """Calibrate the volume threshold only: the lowest value that separates the training split
        within ``VOLUME_FIT_TOLERANCE`` of the best balanced accuracy (volume is what an evader cuts
        most cheaply, compressing gradients or syncing less, so the threshold rises only for a
        material gain, not to drop a few ramp windows of one server)."""
        y = check_fit_input(X, y)
        if len(set(y)) < 2:
            return self
        scores, detected = [], []
        for thr in VOLUME_GRID_BPS:
            pred = self._score(X, float(thr))[0] >= 0.5
            detected.append(pred[y == 1].mean())
            scores.append(0.5 * (detected[-1] + (~pred[y == 0]).mean()))
        if self.keep_training is not None:
            scores = [s if d >= detected[0] - self.keep_training else -1.0 for s, d in zip(scores, detected)]
        best = max(scores)
        i = next(k for k, b in enumerate(scores) if b >= best - VOLUME_FIT_TOLERANCE)
        self.volume_Bps = float(VOLUME_GRID_BPS[i])
        self.calibration = {"volume_Bps": self.volume_Bps, "balanced_accuracy_on_fit": float(scores[i]),
                            "best_balanced_accuracy_on_fit": float(best)}
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return self._score(X)[0]

    def explain(self, x: Mapping[str, float]) -> list[str]:
        row = pd.DataFrame([dict(x)])
        p_all, which, factors = self._score(row)
        p, ch = float(p_all[0]), CHANNELS[int(which[0])]
        f = {k: float(v[0]) for k, v in factors[ch].items()}
        label = CHANNEL_LABEL[ch]
        sfx = ".min" if ch in PER_GPU else ""
        vol = _get(x, f"comm.{ch}.Bps{sfx}")
        out = [f"P(training) = {p:.2f} from the {label} channel (product of the rule scores below)",
               f"volume {vol / 1e6:.1f} MB/s per GPU vs threshold {self.volume_Bps / 1e6:.0f} MB/s: "
               f"score {f['volume']:.2f}",
               f"TX/RX symmetry (worst GPU) {_get(x, f'comm.{ch}.sym{sfx}'):.2f} vs {self.sym_min}: "
               f"score {f['symmetry']:.2f}",
               f"regularity: busy {_get(x, f'comm.{ch}.duty{sfx}'):.2f} of the window "
               + (f"at steadiness {_get(x, f'comm.{ch}.steady{sfx}'):.2f} (vs {self.duty_min} and "
                  f"{self.steady_min}), " if ch in PER_GPU else f"(vs {self.duty_min}), ")
               + f"autocorrelation peak {_get(x, f'comm.{ch}.acf_peak{sfx}'):.2f} (vs {self.acf_min})"
               + (f", one way per bin {_get(x, f'comm.{ch}.oneway_bins{sfx}'):.2f} (vs {self.alternating_min}: "
                  "pipeline sends, forward and back)" if ch in PER_GPU else "")
               + f": score {f['regularity']:.2f}"]
        bpj = _get(x, f"comm.{ch}.log_bytes_per_J" + (".mean" if ch in PER_GPU else ""))
        out.append(f"bytes per joule {10 ** bpj if math.isfinite(bpj) else math.nan:.3g} vs at most "
                   f"{self.bytes_per_J_max:.0e} for compute-bound work: score {f['compute_bound']:.2f}")
        if "simultaneity" in f:
            out.append(f"bursts on all GPUs at once: co-activity {_get(x, f'comm.{ch}.coactive'):.2f}, "
                       f"correlation {_get(x, f'comm.{ch}.simult_corr'):.2f}: score {f['simultaneity']:.2f}")
        return out

    def describe(self) -> dict:
        return {**super().describe(), "volume_Bps": self.volume_Bps, "sym_min": self.sym_min,
                "simult_min": self.simult_min, "duty_min": self.duty_min, "acf_min": self.acf_min,
                "steady_min": self.steady_min, "alternating_min": self.alternating_min,
                "bytes_per_J_max": self.bytes_per_J_max, "keep_training": getattr(self, "keep_training", None),
                "calibration": self.calibration}
