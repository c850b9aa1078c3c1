"""Training hidden inside serving: online learning in an inference server, and white-box gating.

Online learning (R&T's "online learning disguised as serving" / "diluted training"): every rank
serves real generation batches with the live model and takes one training step (LoRA adapters or
the full model, gradients averaged across ranks) every k served batches.

White-box gating: the adversary runs its own copy of the monitor's logic on what it can see of
itself and trains only while that copy says P(training) is under a threshold (R&T's white-box
attackers trained only while P < 0.30), serving real batches otherwise. What it sees of itself is
a rolling record of its own activity (``SelfMonitor``): the share of the last ``window_s`` spent in
training steps, in serving, and the bytes its gradient exchanges moved per second — the physical
quantities behind the detectors' NVLink and utilisation features. Scorers:

- ``ProxyScorer``: a logistic function of those quantities (no model file needed);
- ``TreeScorer``: the surrogate ``trainsentry redteam surrogate`` writes (``models/redteam-surrogate.json``):
  boosted trees over SelfMonitor features as plain JSON, evaluated here without scikit-learn, so the
  GPU machine's own package versions cannot break or change it; the file also carries the window
  its features were computed over, which then replaces ``window_s`` (the gate must measure what the
  surrogate learned from);
- ``SklearnScorer``: any scikit-learn classifier saved with joblib whose ``feature_names_in_`` (or
  the configured ``surrogate_features``) are SelfMonitor feature names, e.g. fitted by the red team
  on its own self-observed runs labeled by the frozen detector's verdicts.

Neither is fed trainsentry.features windows: those need the NVML/NVLink telemetry table, which the
workload does not record (the adversary could poll NVML itself; that is future work). Pass the file
with the campaign override ``{surrogate_path: FILE}``; ``load_scorer`` picks the class by suffix.

Straddling: train only in bursts centred on window boundaries (multiples of the stride in wall
time), so each window holds at most half a burst.
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from pathlib import Path

import torch

from .adversarial_core import Phases, Replica, agree_all, count_first, run_steps, strategy_extra
from .adversarial_step import Decoder
from .adversarial_sync import flat, mean_allreduce, unflat_into
from .base import Context

FEATURES = ("train_frac", "serve_frac", "busy_frac", "log10_bytes_per_s", "train_steps_per_s")


class SelfMonitor:
    """What the workload did in the last ``window_s`` seconds: intervals of training and serving,
    and the bytes its exchanges moved."""

    def __init__(self, window_s: float):
        self.window_s = float(window_s)
        self.events: deque[tuple[float, float, str, int]] = deque()

    def record(self, kind: str, t0: float, t1: float, nbytes: int = 0) -> None:
        self.events.append((t0, t1, kind, int(nbytes)))

    def features(self, now: float) -> dict[str, float]:
        lo = now - self.window_s
        while self.events and self.events[0][1] < lo:
            self.events.popleft()
        busy = {"train": 0.0, "serve": 0.0}
        nbytes = steps = 0
        for t0, t1, kind, b in self.events:
            overlap = max(0.0, min(t1, now) - max(t0, lo))
            busy[kind] = busy.get(kind, 0.0) + overlap
            if kind == "train" and t1 >= lo:
                nbytes += b
                steps += 1
        w = self.window_s
        return {"train_frac": busy["train"] / w, "serve_frac": busy["serve"] / w,
                "busy_frac": (busy["train"] + busy["serve"]) / w,
                "log10_bytes_per_s": math.log10(1.0 + nbytes / w), "train_steps_per_s": steps / w}


class ProxyScorer:
    """P(training) = logistic(a·(train_frac − f0) + b·(log10 bytes/s − l0))."""

    def __init__(self, a: float = 10.0, f0: float = 0.25, b: float = 1.0, l0: float = 8.0):
        self.a, self.f0, self.b, self.l0 = a, f0, b, l0

    def __call__(self, feats: dict[str, float]) -> float:
        z = self.a * (feats["train_frac"] - self.f0) + self.b * (feats["log10_bytes_per_s"] - self.l0)
        return 1.0 / (1.0 + math.exp(-z))


class SklearnScorer:
    """A saved scikit-learn classifier (joblib) over SelfMonitor features; class 1 = training."""

    def __init__(self, path: str, features: list[str] | None = None):
        import joblib

        self.model = joblib.load(path)
        if not hasattr(self.model, "predict_proba"):
            raise ValueError(f"{path}: the surrogate must be a classifier with predict_proba")
        names = list(features) if features else [str(n) for n in getattr(self.model, "feature_names_in_", [])]
        unknown = [n for n in names if n not in FEATURES]
        if not names or unknown:
            raise ValueError(f"{path}: surrogate features must be a non-empty subset of {FEATURES}, got {names}")
        self.names = names

    def __call__(self, feats: dict[str, float]) -> float:
        import pandas as pd

        x = pd.DataFrame([[feats[n] for n in self.names]], columns=self.names)
        return float(self.model.predict_proba(x)[0, list(self.model.classes_).index(1)])


TREES_FORMAT = "trainsentry-surrogate-trees/1"


class TreeScorer:
    """A surrogate saved as boosted trees in JSON (:data:`TREES_FORMAT`): P(class 1) = logistic(baseline
    + the leaf value each tree reaches; left when x <= threshold). ``window_s``: the SelfMonitor window
    its features were computed over (None if the file does not say)."""

    def __init__(self, path: str, features: list[str] | None = None):
        d = json.loads(Path(path).read_text())
        if d.get("format") != TREES_FORMAT:
            raise ValueError(f"{path}: not a {TREES_FORMAT} file (format {d.get('format')!r})")
        names = list(d["features"])
        if features and list(features) != names:
            raise ValueError(f"{path}: its trees read {names}, not the configured {list(features)}")
        unknown = [n for n in names if n not in FEATURES]
        if not names or unknown:
            raise ValueError(f"{path}: surrogate features must be a non-empty subset of {FEATURES}, got {names}")
        self.names, self.baseline = names, float(d["baseline"])
        self.trees = [(t["feature"], t["threshold"], t["left"], t["right"], t["leaf"], t["value"]) for t in d["trees"]]
        self.window_s = d.get("window_s")

    def raw(self, x: list[float]) -> float:
        z = self.baseline
        for feat, thr, left, right, leaf, value in self.trees:
            i = 0
            while not leaf[i]:
                i = left[i] if x[feat[i]] <= thr[i] else right[i]
            z += value[i]
        return z

    def __call__(self, feats: dict[str, float]) -> float:
        z = self.raw([float(feats[n]) for n in self.names])
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def _sha1(path: str) -> str:
    """Which surrogate file gated the run (recorded beside its path)."""
    import hashlib
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def load_scorer(path: str, features: list[str] | None = None):
    """(scorer, kind) for a surrogate file: JSON trees ("trees") or a joblib classifier ("sklearn")."""
    if str(path).endswith(".json"):
        return TreeScorer(path, features), "trees"
    return SklearnScorer(path, features), "sklearn"


class Gate:
    """Train only while the scorer's P(training) over the last window is under ``threshold``."""

    def __init__(self, monitor: SelfMonitor, scorer, threshold: float):
        self.monitor, self.scorer, self.threshold = monitor, scorer, float(threshold)
        self.history: list[tuple[float, float, bool]] = []

    def allow(self, now: float) -> bool:
        p = self.scorer(self.monitor.features(now))
        ok = p < self.threshold
        self.history.append((round(now, 3), round(p, 4), ok))
        return ok


def in_straddle_burst(now: float, stride_s: float, burst_s: float) -> bool:
    """Whether ``now`` lies within ``burst_s / 2`` of a multiple of ``stride_s`` (a window edge)."""
    phase = now % stride_s
    return phase < burst_s / 2 or phase > stride_s - burst_s / 2


def _train_step(ctx: Context, rep: Replica, ph: Phases) -> tuple[torch.Tensor, int]:
    """One training step with the gradients averaged across ranks; returns (loss, bytes sent)."""
    before = sum(ctx.ledger.collective_bytes.values())
    loss = ph.timed("compute", count_first, ctx, rep.forward_backward)
    grads = rep.grads()
    vec = ph.timed("comm", mean_allreduce, ctx, flat(grads))
    with torch.no_grad():
        unflat_into(vec, grads)
        for p, g in zip(rep.params, grads):
            p.grad = g
    ph.timed("compute", rep.apply)
    return loss, sum(ctx.ledger.collective_bytes.values()) - before


def run_online(ctx: Context, cfg: dict) -> None:
    """Serve k generation batches, then one training step on corpus text; repeat."""
    rep = Replica(ctx, cfg)
    k = int(cfg["k"])
    decoder = Decoder(ctx, rep, cfg)
    strategy_extra(ctx, cfg, "online", k=k, lora_rank=cfg.get("lora_rank"), decode_batch=decoder.batch,
                   decode_len=decoder.max_len - decoder.prompt_len)
    ctx.ledger.extra["collective_method"] = "explicit"

    def step(ph: Phases):
        for _ in range(k):
            ph.timed("serve", decoder.round)
        loss, _ = _train_step(ctx, rep, ph)
        return loss

    run_steps(ctx, step, rep.tokens_per_micro, measure_first=False)
    ctx.ledger.extra["served_tokens"] = decoder.tokens
    ctx.ledger.extra["flops_note"] = "training steps only; serving FLOPs are not counted"
    rep.val_loss()


def run_whitebox(ctx: Context, cfg: dict) -> None:
    """Train only when the gate (a surrogate of the detector) or the straddle schedule allows;
    serve real decode steps otherwise."""
    rep = Replica(ctx, cfg)
    decoder = Decoder(ctx, rep, cfg)
    monitor = SelfMonitor(float(cfg.get("window_s", 30.0)))
    mode = cfg["gate"]
    gate = None
    if mode == "surrogate" and cfg.get("surrogate_path"):
        model, scorer = load_scorer(cfg["surrogate_path"], cfg.get("surrogate_features"))
        if getattr(model, "window_s", None):           # measure over the window the surrogate learned from
            monitor = SelfMonitor(float(model.window_s))
        gate = Gate(monitor, model, cfg["threshold"])
    elif mode in ("proxy", "surrogate"):
        gate = Gate(monitor, ProxyScorer(), cfg["threshold"])
        scorer = "proxy"
    elif mode == "straddle":
        scorer = "straddle"
    else:
        raise ValueError(f"unknown gate {mode!r}")
    stride, burst = float(cfg.get("stride_s", 15.0)), float(cfg.get("burst_s", 6.0))
    strategy_extra(ctx, cfg, "whitebox", gate=mode, scorer=scorer, threshold=cfg.get("threshold"),
                   window_s=monitor.window_s, window_s_config=cfg.get("window_s"), stride_s=stride, burst_s=burst,
                   lora_rank=cfg.get("lora_rank"), surrogate_path=cfg.get("surrogate_path") if gate else None,
                   surrogate_sha1=_sha1(cfg["surrogate_path"]) if gate and cfg.get("surrogate_path") else None)
    ctx.ledger.extra["collective_method"] = "explicit"
    served_rounds = [0]

    def allowed() -> bool:
        now = time.time()
        ok = gate.allow(now) if gate is not None else in_straddle_burst(now, stride, burst)
        return agree_all(ctx, ok or not ctx.keep_going())     # every rank trains, or none does

    def step(ph: Phases):
        waited = 0
        while not allowed() and waited < int(cfg.get("max_serve_per_step", 10_000)):
            t0 = time.time()
            ph.timed("serve", decoder.step)
            monitor.record("serve", t0, time.time())
            waited += 1
        served_rounds[0] += waited
        t0 = time.time()
        loss, nbytes = _train_step(ctx, rep, ph)
        ctx.sync()
        monitor.record("train", t0, time.time(), nbytes)
        return loss

    run_steps(ctx, step, rep.tokens_per_micro, measure_first=False)
    ctx.ledger.extra["flops_note"] = "training steps only; serving FLOPs are not counted"
    if gate is not None:
        ctx.ledger.extra["gate_history"] = gate.history[-2000:]
        ctx.ledger.extra["gate_denied"] = sum(1 for *_, ok in gate.history if not ok)
    ctx.ledger.extra.update(served_decode_steps=served_rounds[0], served_tokens=decoder.tokens)
    rep.val_loss()
