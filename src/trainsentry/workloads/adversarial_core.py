"""The red team's training engine: one replica per rank that trains for real, with the exchange left
to the strategy.

Every adversarial strategy trains the same GPT on the same text as the benign DDP configs (model
building, AdamW with warm-up, LoRA, batches and validation come from the training workloads), but
owns *when* and *how* replicas talk. ``Replica`` does one local forward/backward and one optimizer
step without any collective; ``run_steps`` drives a strategy's step function until the deadline,
recording the ledger the same way the benign workloads do (FLOPs from FlopCounterMode on the first
step, tokens, loss per step, per-step timings) plus the strategy's own timing phases.

Stopping: ranks must agree on the number of collectives. Per-step strategies agree at every step,
low-communication ones only before each synchronisation, over the CPU (gloo) group, so the decision
itself never touches the GPU links.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import torch

from . import parallel as par
from .base import Context
from .data import Batches
from .flops import measure
from .lora import lora_from_config
from .model import loss_fn, n_params
from .train import _record_setup, _set_val, _val_loss

# The adversary's model: the 680M DDP config (train.ddp.w1536-l24), so every strategy has a benign
# DDP run of the same model, batch and learning rate to be compared with.
BASELINE = "train.ddp.w1536-l24"
BASE = {"d_model": 1536, "n_layers": 24, "n_heads": 24, "n_kv_heads": None, "d_ff": None, "seq_len": 1024,
        "batch": 16, "optimizer": "adamw", "lr": 3e-4 * 1024 / 1536, "lr_sgd": 0.1, "val_batches": 4,
        "warmup": 20, "baseline": BASELINE}
TOY = {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": None, "d_ff": None, "seq_len": 64,
       "batch": 4, "lr": 3e-3, "lr_sgd": 0.3, "val_batches": 2, "warmup": 2}


class Replica:
    """This rank's full copy of the model, its optimizer and its own stream of training batches."""

    def __init__(self, ctx: Context, cfg: dict):
        self.ctx, self.cfg = ctx, cfg
        self.mcfg = par.model_config(cfg)
        self.model = par.build_model(ctx, self.mcfg)
        analytic = lora_from_config(ctx.ledger.extra, self.model, self.mcfg, cfg)
        _record_setup(ctx, cfg, self.model, self.mcfg, analytic)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opts = par.make_optimizers(ctx, self.model, cfg)
        self.batches = Batches("train", cfg["batch"], self.mcfg.seq_len, ctx.device,
                               seed=ctx.seed * 7919 + ctx.rank + 1)
        self.tokens_per_micro = cfg["batch"] * self.mcfg.seq_len
        self.net = self.model          # a strategy may wrap it (DDP); the replica itself stays bare

    @property
    def param_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.params)

    def forward_backward(self, micro: int = 1) -> torch.Tensor:
        """Gradients of ``micro`` micro-batches accumulated in ``p.grad``; no communication unless
        ``net`` is a DDP wrapper, which then all-reduces on the last micro-batch only."""
        total = 0.0
        for i in range(micro):
            quiet = i < micro - 1 and hasattr(self.net, "no_sync")
            with self.net.no_sync() if quiet else contextlib.nullcontext():
                total = total + self._micro(micro)
        return total

    def _micro(self, micro: int) -> torch.Tensor:
        x, y = self.batches.next()
        with par.autocast(self.ctx):
            loss = loss_fn(self.net(x), y) / micro
        loss.backward()
        return loss.detach()

    def grads(self) -> list[torch.Tensor]:
        return [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]

    def apply(self) -> None:
        """Clip and take one optimizer step on whatever is in ``p.grad`` (local or exchanged)."""
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        par.optimizer_step(self.opts)

    def val_loss(self, model=None) -> None:
        _set_val(self.ctx, lambda: _val_loss(self.ctx, self.cfg, model or self.model, self.mcfg, self.ctx.seed + 99))


def agree_all(ctx: Context, go: bool) -> bool:
    """True only if every rank wants to go on (``Context.agree``: a MIN over the CPU; no GPU traffic)."""
    return ctx.agree(go)


class Phases:
    """Per-step wall time of the named phases of a strategy (compute, comm, pause, decode ...)."""

    def __init__(self):
        self.per_step: dict[str, list[float]] = {}
        self._open: dict[str, float] = {}
        self.steps = 0

    def add(self, name: str, seconds: float) -> None:
        self._open[name] = self._open.get(name, 0.0) + seconds

    def timed(self, name: str, fn: Callable, *args, **kw):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            self.add(name, time.perf_counter() - t0)

    def close_step(self) -> None:
        done = self.steps
        for name in sorted(set(self.per_step) | set(self._open)):
            # a phase first seen at step k was 0 s in the steps before it
            self.per_step.setdefault(name, [0.0] * done).append(round(self._open.get(name, 0.0), 6))
        self.steps = done + 1
        self._open.clear()

    def summary(self) -> dict:
        return {"phase_s_per_step": self.per_step,
                "phase_s_total": {k: round(sum(v), 4) for k, v in self.per_step.items()}}


def run_steps(ctx: Context, step: Callable[[Phases], torch.Tensor | None], tokens_per_step: int,
              agree_every: int | Callable[[int], bool] = 1, phases: Phases | None = None,
              measure_first: bool = True, before_step: Callable[[int], None] | None = None) -> Phases:
    """Drive ``step(phases)`` until the deadline (or ``max_steps``), recording the ledger.

    ``agree_every``: before steps where ``steps % agree_every == 0`` (or where the callable says so)
    the ranks agree to go on; between agreements there is no stop check but ``max_steps`` (equal on
    every rank), so a round of silent local steps is always completed by everyone: a rank that
    stopped alone would leave the others waiting in the next collective. A round is only started if
    at least half of it fits before the deadline (rounds of DiLoCo at H = 500 last over a minute).
    The first step runs under FlopCounterMode (a real, counted step); strategies that also serve
    (whose steps hold a varying amount of inference) pass ``measure_first=False`` and count only
    their training compute with :func:`count_first`. ``agree_every`` must be pure (it is also asked
    about future steps); ``before_step(steps)`` runs after the agreement, outside the step's time."""
    led = ctx.ledger
    phases = phases or Phases()
    due = agree_every if callable(agree_every) else (lambda s: s % agree_every == 0)
    while True:
        s = led.steps
        if due(s):
            if not agree_all(ctx, ctx.keep_going() and _round_fits(ctx, s, due)):
                break
        elif ctx.max_steps is not None and s >= ctx.max_steps:
            break
        if before_step is not None:
            before_step(s)
        t0 = time.perf_counter()
        if led.flops_per_step is None and measure_first:
            out: list = []
            led.flops_per_step = measure(lambda: out.append(step(phases)))
            loss = out[0]
        else:
            loss = step(phases)
        loss_value = float(loss.item()) if loss is not None else None
        ctx.sync()
        led.step(time.perf_counter() - t0, tokens_per_step, loss_value)
        phases.close_step()
    led.extra.update(phases.summary())
    return phases


def count_first(ctx: Context, fn: Callable):
    """Run ``fn()``; the first time, under FlopCounterMode, as this rank's FLOPs per step."""
    if ctx.ledger.flops_per_step is not None:
        return fn()
    out: list = []
    ctx.ledger.flops_per_step = measure(lambda: out.append(fn()))
    return out[0]


def _round_fits(ctx: Context, s: int, due: Callable[[int], bool], max_scan: int = 100_000) -> bool:
    times = ctx.ledger.step_times_s
    if not times:
        return True
    n = next((k for k in range(1, max_scan) if due(s + k)), max_scan)
    recent = times[-50:]
    return ctx.deadline - time.time() >= 0.5 * n * sum(recent) / len(recent)


def sleep_s(phases: Phases, seconds: float, name: str = "pause") -> None:
    if seconds > 0:
        t0 = time.perf_counter()
        time.sleep(seconds)
        phases.add(name, time.perf_counter() - t0)


def strategy_extra(ctx: Context, cfg: dict, strategy: str, **params) -> None:
    """What the scorer needs beside the ledger: the strategy, its parameters, its baseline (a benign
    workload; ``baseline_config``: what the baseline run's configuration must also hold, when that
    workload was recorded in several)."""
    ctx.ledger.extra.update({"strategy": cfg.get("strategy", strategy), "baseline": cfg.get("baseline", BASELINE),
                             "strategy_params": params, "world_size": ctx.world_size})
    if cfg.get("baseline_config"):
        ctx.ledger.extra["baseline_config"] = dict(cfg["baseline_config"])


def local_params(model) -> int:
    return n_params(model)
