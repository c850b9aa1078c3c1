"""The workload contract: a registry of declarative configs and the context a workload runs in.

A workload is a function ``fn(ctx, cfg) -> None`` registered with a name, a class (training /
inference / other), a family and a default config (GPU size) plus a toy override (CPU, gloo, a few
steps). It runs on every rank of one torchrun launch; ``ctx.active`` says whether this rank takes
part (a single-GPU workload on a 2-GPU node leaves rank 1 idle: idle on the CPU, never spinning in a
GPU collective). It keeps working until ``ctx.deadline`` (or ``ctx.max_steps`` in tests) and reports
ground truth through ``ctx.ledger``: steps, tokens, step times, loss curve, FLOPs (from
FlopCounterMode), and the bytes it handed to collectives. The ledger is never shown to detectors.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import _disable_current_modes

CLASSES = ("training", "inference", "other")


def host_cores() -> int:
    """The cores this process may run on (its affinity), else the host's: how many threads a workload
    gives the work it does on the host (a launcher may have set torch's threads to 1)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def use_host_threads(cfg: dict) -> int:
    """Give the work a workload does on the host ``cfg["host_threads"]`` threads (default: every core
    it may use) and return how many: torch's count is process-wide, and the worker restores the
    launch's own before each run."""
    threads = int(cfg.get("host_threads") or host_cores())
    torch.set_num_threads(threads)
    return threads


@dataclass
class Ledger:
    """Ground truth a workload records about itself (rank-local; merged across ranks by the worker)."""

    steps: int = 0
    tokens: int = 0
    step_times_s: list[float] = field(default_factory=list)
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    flops_per_step: int | None = None          # this rank, from FlopCounterMode on one representative step
    flops: float = 0.0                          # this rank, total
    collective_bytes: dict[str, int] = field(default_factory=dict)  # op -> bytes this rank handed over
    # the same bytes by who was on the other end: "0,1,2,3" (the global ranks of the collective's
    # group), "->5" (a send to rank 5), "<-0" (a receive from rank 0); "?" when it is not known
    collective_by_group: dict[str, dict[str, int]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    # wall clock (seconds since the epoch) at which the first step began: its distance from the manifest's
    # ``start`` is the set-up (process launch, model, data) that precedes any step
    first_step_t: float | None = None

    def step(self, dt_s: float, tokens: int, loss: float | None = None, flops: int | None = None) -> None:
        if self.first_step_t is None:
            self.first_step_t = round(time.time() - float(dt_s), 3)
        self.steps += 1
        self.tokens += int(tokens)
        self.step_times_s.append(round(float(dt_s), 6))
        if loss is not None:
            self.loss_curve.append((self.steps, float(loss)))
        step_flops = self.flops_per_step if flops is None else flops
        if step_flops:
            self.flops += float(step_flops)

    def collective(self, op: str, nbytes: int, group: str | None = None) -> None:
        self.collective_bytes[op] = self.collective_bytes.get(op, 0) + int(nbytes)
        if nbytes:   # who was on the other end of bytes actually handed over
            by_op = self.collective_by_group.setdefault(group or "?", {})
            by_op[op] = by_op.get(op, 0) + int(nbytes)

    def clear_collectives(self) -> None:
        self.collective_bytes.clear()
        self.collective_by_group.clear()

    def to_dict(self) -> dict:
        return {"steps": self.steps, "tokens": self.tokens, "first_step_t": self.first_step_t,
                "step_times_s": self.step_times_s,
                "loss_curve": self.loss_curve, "flops_per_step": self.flops_per_step, "flops": self.flops,
                "collective_bytes": self.collective_bytes, "collective_by_group": self.collective_by_group,
                "extra": self.extra}


@dataclass
class Context:
    rank: int
    world_size: int
    device: torch.device
    dtype: torch.dtype               # bf16 on GPU, fp32 on CPU
    deadline: float                  # time.time() at which to stop
    max_steps: int | None = None     # tests: stop after this many steps
    min_steps: int = 0               # tests: go on past the deadline until this many steps are done
                                     # (a loaded CPU may not finish a toy step before a short deadline)
    toy: bool = False
    ranks: tuple[int, ...] = ()      # the ranks taking part; () = all
    cpu_group: Any = None            # gloo group for coordination (barriers that do not spin a GPU)
    active_group: Any = None         # gloo group of exactly the ranks taking part in this run
    run_group: Any = None            # default-backend (NCCL on GPUs) group of the ranks taking part when
                                     # they are fewer than the launch (None: the whole launch, WORLD)
    ledger: Ledger = field(default_factory=Ledger)
    seed: int = 0

    @property
    def active(self) -> bool:
        return not self.ranks or self.rank in self.ranks

    @property
    def n_active(self) -> int:
        return len(self.ranks) if self.ranks else self.world_size

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def keep_going(self) -> bool:
        if self.max_steps is not None and self.ledger.steps >= self.max_steps:
            return False
        return self.ledger.steps < self.min_steps or time.time() < self.deadline

    def keep_going_together(self) -> bool:
        """``keep_going`` agreed by every rank taking part: True only while all of them want to go on.

        A lock-step workload (one collective per step) must stop on the same step on every rank:
        deadlines read off each rank's clock can disagree by one step, and the rank that takes the
        extra step would wait forever in its collective. The vote is a MIN over a gloo group of the
        active ranks (CPU only: no GPU traffic shows in the telemetry)."""
        return self.agree(self.keep_going())

    def agree(self, go: bool) -> bool:
        """True only if every active rank says ``go`` (a MIN over the run's gloo group of active ranks)."""
        if self.n_active <= 1 or not dist.is_initialized():
            return go
        group = self.active_group if self.active_group is not None else self.cpu_group
        flag = torch.tensor([1 if go else 0], dtype=torch.int32)
        # a control vote, not the workload's traffic: keep it out of the collective-byte counter
        # (a TorchDispatchMode that may be active around the workload)
        with _disable_current_modes():
            dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
        return bool(flag.item())

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        """Barrier over all ranks on the CPU group (an NCCL barrier would show as GPU activity)."""
        if dist.is_initialized():
            dist.barrier(group=self.cpu_group)


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    cls: str
    family: str
    fn: Callable[[Context, dict], None]
    config: dict
    toy: dict
    gpus: int                        # ranks it uses: 1 (rank 0 only) or 0 meaning all ranks
    description: str = ""
    min_ranks: int = 0               # the launch must have at least this many ranks (0: no requirement)

    def rank_error(self, world_size: int) -> str | None:
        """Why a launch of ``world_size`` ranks cannot run this workload, or None if it can."""
        need = self.min_ranks
        if world_size < need:
            return (f"workload {self.name!r} needs at least {need} ranks; this launch has {world_size} "
                    f"(run it with torchrun --nproc_per_node={need} or more)")
        return None

    def resolve(self, toy: bool, overrides: dict | None = None) -> dict:
        cfg = dict(self.config)
        if toy:
            cfg.update(self.toy)
        cfg.update(overrides or {})
        return cfg


WORKLOADS: dict[str, WorkloadSpec] = {}


def register(name: str, cls: str, family: str, config: dict, toy: dict | None = None, gpus: int = 0,
             description: str = "", min_ranks: int = 0):
    """Decorator registering ``fn(ctx, cfg)`` under ``name``; each distinct config gets its own name."""
    if cls not in CLASSES:
        raise ValueError(f"class must be one of {CLASSES}")

    def deco(fn):
        if name in WORKLOADS:
            raise ValueError(f"workload {name!r} registered twice")
        WORKLOADS[name] = WorkloadSpec(name, cls, family, fn, dict(config), dict(toy or {}), gpus,
                                       description or (fn.__doc__ or "").strip().split("\n")[0], min_ranks)
        return fn
    return deco


def variants(base_name: str, cls: str, family: str, fn, base: dict, toy: dict, grid: dict[str, dict],
             gpus: int = 0, description: str = "", min_ranks: int = 0) -> None:
    """Register one workload per entry of ``grid`` (suffix -> config overrides) sharing ``fn``."""
    for suffix, over in grid.items():
        register(f"{base_name}.{suffix}", cls, family, {**base, **over}, toy, gpus, description, min_ranks)(fn)
