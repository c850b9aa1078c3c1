"""Red-team strategies that still synchronise (nearly) every step, but change how, when or how much.

- DDP with a changed rhythm: micro-pauses after each step (throttle), a small batch held to a low
  duty cycle (low utilisation), a run cut into parts with idle gaps (split), a feedback controller
  that shapes the duty cycle (or board power) toward a serving profile (shape).
- DDP with PowerSGD (torch's comm hook, ranks 1–8, error feedback).
- Explicit gradient exchanges: top-k with error feedback, averaging through host memory (PCIe) or
  gloo sockets (host path), or one-way KV-cache-shaped bursts interleaved with real decoding.
"""

from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist

from . import parallel as par
from .adversarial_core import Phases, Replica, count_first, run_steps, sleep_s, strategy_extra
from .adversarial_sync import (HostShm, TopK, flat, mean_gloo, mean_kv_shaped, powersgd_hook, stop_counting,
                               unflat_into)
from .base import Context
from .comm import CollectiveCounter
from .infer_common import IdlePause
from .infer_parallel import kv_transfer_bytes
from .train_diffusion import DitReplica


def ddp_replica(ctx: Context, cfg: dict, hook: str = "counting") -> Replica | DitReplica:
    """A replica whose ``net`` is DDP over all ranks (a single rank without a process group trains
    alone, so the strategy still runs on one GPU). ``arch: dit`` trains ``train.diffusion``'s
    diffusion transformer (``train_diffusion.DitReplica``) instead of the GPT."""
    rep = DitReplica(ctx, cfg) if cfg.get("arch") == "dit" else Replica(ctx, cfg)
    if not dist.is_initialized():
        ctx.ledger.extra["collective_method"] = "none"
        return rep
    if hook == "counting":
        rep.net = par.wrap_ddp(ctx, rep.model)
        ctx.ledger.extra["collective_method"] = "ddp-comm-hook"
    return rep


def _ddp_step(rep: Replica | DitReplica, ph: Phases, micro: int = 1) -> torch.Tensor:
    loss = ph.timed("compute", rep.forward_backward, micro)
    ph.timed("compute", rep.apply)
    rep.ctx.sync()
    return loss


def run_throttle(ctx: Context, cfg: dict) -> None:
    """DDP with an idle pause after every step, or held to a duty cycle (compute / wall time). The pause
    is ``pause_s`` exactly, or (``pause_dist: exp``) exponential with that mean, the gaps a service
    with random arrivals shows (``IdlePause``, as the benign services draw theirs)."""
    rep = ddp_replica(ctx, cfg)
    # one draw sequence for all ranks: DDP's exchange makes every rank wait for the slowest anyway
    pause, duty = IdlePause(ctx, cfg, "const", per_rank=False), cfg.get("duty")
    strategy_extra(ctx, cfg, "throttle", pause_s=pause.mean_s, pause_dist=pause.dist, duty=duty, batch=cfg["batch"])

    def step(ph: Phases):
        t0 = time.perf_counter()
        loss = _ddp_step(rep, ph)
        busy = time.perf_counter() - t0
        # duty d: sleep so that busy / (busy + sleep) = d
        sleep_s(ph, pause.draw() + (busy * (1 / float(duty) - 1) if duty else 0.0))
        return loss

    run_steps(ctx, step, rep.tokens_per_micro)
    rep.val_loss()


def run_split(ctx: Context, cfg: dict) -> None:
    """One DDP run cut into ``parts`` with idle gaps of ``gap_s`` (the process and GPU memory stay):
    the seed study's daemon ends a workload after 3 polls (4.5 s) under 5 % utilisation."""
    rep = ddp_replica(ctx, cfg)
    parts, gap_s = int(cfg["parts"]), float(cfg["gap_s"])
    part_steps = cfg.get("part_steps")
    total_s = max(0.0, ctx.deadline - time.time() - (parts - 1) * gap_s)
    part_s = total_s / parts
    strategy_extra(ctx, cfg, "split", parts=parts, gap_s=gap_s, part_s=round(part_s, 3), part_steps=part_steps)
    state = {"part": 0, "part_end": time.time() + part_s, "part_start_step": 0}
    boundaries: list[int] = []

    def step(ph: Phases):
        return _ddp_step(rep, ph)

    def before_step(s: int) -> None:
        # a part ends by time (GPU) or by step count (tests); ranks agree on it, then all pause
        ended = (s - state["part_start_step"] >= part_steps) if part_steps else time.time() >= state["part_end"]
        if s > 0 and state["part"] < parts - 1 and _agree_end(ctx, ended):
            boundaries.append(s)
            time.sleep(gap_s)
            state.update(part=state["part"] + 1, part_end=time.time() + part_s, part_start_step=s)

    run_steps(ctx, step, rep.tokens_per_micro, before_step=before_step)
    ctx.ledger.extra["part_boundaries_steps"] = boundaries
    rep.val_loss()


def _agree_end(ctx: Context, ended: bool) -> bool:
    """Any rank's part ended → all end it (MAX), so the gap starts together."""
    if not dist.is_initialized() or ctx.world_size == 1:
        return ended
    flag = torch.tensor([1 if ended else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=ctx.cpu_group)
    return bool(flag.item())


class DutyPID:
    """PID on the measured duty cycle (compute share of wall time over a rolling window): its
    output is the idle time after each step, so training follows a target utilisation profile."""

    def __init__(self, kp: float = 0.6, ki: float = 0.15, kd: float = 0.0, window: int = 20):
        self.kp, self.ki, self.kd, self.window = kp, ki, kd, window
        self.busy: list[float] = []
        self.wall: list[float] = []
        self.integral = self.prev = 0.0

    def measured(self) -> float:
        return sum(self.busy[-self.window:]) / max(1e-9, sum(self.wall[-self.window:]))

    def pause_s(self, busy_s: float, target: float) -> float:
        """Idle to insert after a step that computed ``busy_s``; feed the actual wall time back
        with :meth:`observe`."""
        err = self.measured() - target if self.wall else 0.0         # > 0: too busy
        self.integral = max(-5.0, min(5.0, self.integral + err))
        deriv = err - self.prev
        self.prev = err
        # the open-loop pause for the target, corrected by the PID terms
        base = busy_s * (1 / max(target, 1e-3) - 1)
        return max(0.0, base * (1 + self.kp * err + self.ki * self.integral + self.kd * deriv))

    def observe(self, busy_s: float, wall_s: float) -> None:
        self.busy.append(busy_s)
        self.wall.append(wall_s)


def serving_profile(t_s: float, mean: float, swing: float, period_s: float) -> float:
    """Target duty at time t: a serving load that rises and falls, kept within (0.05, 0.95)."""
    return min(0.95, max(0.05, mean + swing * math.sin(2 * math.pi * t_s / period_s)))


def run_shape(ctx: Context, cfg: dict) -> None:
    """DDP whose duty cycle is steered by a PID toward an inference-like, load-following profile."""
    rep = ddp_replica(ctx, cfg)
    pid = DutyPID(cfg.get("kp", 0.6), cfg.get("ki", 0.15))
    mean, swing, period = float(cfg["target_duty"]), float(cfg.get("swing", 0.15)), float(cfg.get("period_s", 40.0))
    strategy_extra(ctx, cfg, "shape", target_duty=mean, swing=swing, period_s=period, signal="duty")
    t_start = time.time()
    trace: list[tuple[float, float]] = []

    def step(ph: Phases):
        t0 = time.perf_counter()
        loss = _ddp_step(rep, ph)
        busy = time.perf_counter() - t0
        target = serving_profile(time.time() - t_start, mean, swing, period)
        sleep_s(ph, pid.pause_s(busy, target))
        pid.observe(busy, time.perf_counter() - t0)
        trace.append((round(target, 4), round(pid.measured(), 4)))
        return loss

    run_steps(ctx, step, rep.tokens_per_micro)
    ctx.ledger.extra["duty_target_measured"] = trace
    rep.val_loss()


def run_powersgd(ctx: Context, cfg: dict) -> None:
    """DDP with torch's PowerSGD hook: rank-r factors P and Q all-reduced instead of gradients."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rep = Replica(ctx, cfg)
    rank_r, start = int(cfg["psgd_rank"]), int(cfg.get("psgd_start_iter", 10))
    strategy_extra(ctx, cfg, "powersgd", rank=rank_r, start_powerSGD_iter=start, error_feedback=True)
    if dist.is_initialized():
        ids = [ctx.device.index] if ctx.is_cuda else None
        with CollectiveCounter(ctx.ledger):
            # one bucket for the whole model, so the byte count per step is one formula
            rep.net = DDP(rep.model, device_ids=ids, bucket_cap_mb=1 << 16)
        state, hook = powersgd_hook(ctx, rank_r, start)
        rep.net.register_comm_hook(state, hook)
        ctx.ledger.extra["collective_method"] = "powersgd-hook-counting"
    ctx.ledger.extra["grad_shapes"] = [list(p.shape) for p in rep.params]
    try:
        run_steps(ctx, lambda ph: _ddp_step(rep, ph), rep.tokens_per_micro)
    finally:
        stop_counting()
    rep.val_loss()


def run_grad_exchange(ctx: Context, cfg: dict) -> None:
    """Local backward, then the flat gradient averaged by an explicit method, then AdamW."""
    rep = Replica(ctx, cfg)
    method = cfg["exchange"]
    numel = sum(p.numel() for p in rep.params)
    params = {"exchange": method}
    if method == "topk":
        topk = TopK(numel, float(cfg["topk_fraction"]), ctx.device)
        params.update(topk_fraction=cfg["topk_fraction"], k=topk.k)
        mean = lambda v: topk.mean(ctx, v)                                   # noqa: E731
    elif method == "host_shm":
        shm = HostShm(ctx, numel, run_tag=f"{ctx.seed}-{int(ctx.deadline)}")
        mean = lambda v: shm.mean(ctx, v)                                    # noqa: E731
    elif method == "gloo":
        mean = lambda v: mean_gloo(ctx, v)                                   # noqa: E731
    elif method == "kv":
        decoder = Decoder(ctx, rep, cfg)
        chunk = kv_transfer_bytes(rep.mcfg, 1, int(cfg["kv_prompt_len"]), 2)
        params.update(kv_chunk_bytes=chunk, kv_prompt_len=cfg["kv_prompt_len"])
        mean = lambda v: mean_kv_shaped(ctx, v, chunk, between=decoder.step)  # noqa: E731
    else:
        raise ValueError(f"unknown gradient exchange {method!r}")
    strategy_extra(ctx, cfg, {"topk": "topk", "host_shm": "hostsync", "gloo": "hostsync", "kv": "kvdisguise"}[method],
                   **params)
    ctx.ledger.extra["collective_method"] = "explicit"

    def step(ph: Phases):
        loss = ph.timed("compute", count_first, ctx, rep.forward_backward)
        grads = rep.grads()
        vec = ph.timed("comm", mean, flat(grads))
        with torch.no_grad():
            unflat_into(vec, grads)
            for p, g in zip(rep.params, grads):
                p.grad = g
        ph.timed("compute", rep.apply)
        return loss

    # decode steps run inside the exchange: count training compute only
    run_steps(ctx, step, rep.tokens_per_micro, measure_first=False)
    if method == "host_shm":
        shm.close(ctx)
    if method == "kv":
        ctx.ledger.extra["decode_tokens"] = decoder.tokens
    rep.val_loss()


class Decoder:
    """Real KV-cache decoding with the replica's current weights (the cover work of a decode
    server): each :meth:`step` generates one token for ``decode_batch`` sequences, restarting from a
    fresh prompt when the cache is full. Its collectives (none) and tokens are kept off the ledger's
    training counts."""

    def __init__(self, ctx: Context, rep: Replica, cfg: dict):
        from .infer_common import prompt_source, sample
        from .model import KVCache

        self.ctx, self.rep, self.sample = ctx, rep, sample
        self.batch, self.prompt_len = int(cfg.get("decode_batch", 8)), int(cfg.get("decode_prompt_len", 32))
        self.max_len = min(rep.mcfg.seq_len, self.prompt_len + int(cfg.get("decode_len", 64)))
        dtype = ctx.dtype if ctx.is_cuda else torch.float32
        self.cache = KVCache(rep.mcfg, rep.mcfg.n_layers, self.batch, self.max_len, ctx.device, dtype)
        self.src = prompt_source(ctx, salt=ctx.rank)
        self.tok = None
        self.tokens = 0

    @torch.no_grad()
    def step(self) -> None:
        model = self.rep.model
        was_training = model.training
        model.eval()
        with par.autocast(self.ctx):
            if self.tok is None or self.cache.length >= self.max_len:
                self.cache.length = 0
                logits = model(self.src.prompts(self.batch, self.prompt_len), self.cache)
            else:
                logits = model(self.tok, self.cache)
        self.tok = self.sample(logits[:, -1])
        self.tokens += self.batch
        model.train(was_training)

    def round(self) -> None:
        """One served batch: a fresh prompt batch prefilled, then decoded until the cache is full."""
        self.tok = None
        self.step()
        while self.cache.length < self.max_len:
            self.step()
