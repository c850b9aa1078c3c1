"""Shared pieces of the inference workloads: model presets, building on device, prompts, FLOP fits,
the batched generation loop, and the small control messages ranks use to agree on stopping.

Conventions every inference workload follows (documented in docs/workloads-inference.md):
- A ledger step is one forward call of the model (a prefill or one decode step over the batch), except
  for serving, where a step is one scheduler iteration, and embedding, where a step is one batch.
- Tokens are counted once per token over the whole run (the worker sums ledgers over ranks): replicas
  count their own tokens; tensor-parallel runs count on rank 0; pipeline runs on the last stage.
- Decode FLOPs change as the cache grows, so FLOPs come from a fit to FlopCounterMode: one decode step
  is counted at two context lengths and, because the counter's matmul and attention formulas are linear
  in the number of rows and in the attended length, ``n·(w + c·L)`` is exact for any batch ``n`` and
  context ``L``; a prefill of ``T`` tokens is ``n·(T·w + c·T²)`` (full QKᵀ, no causal discount, as the
  counter does), and ``T`` tokens appended to a cache of ``S`` are ``n·(T·w + c·T·(S + T))``.
  The tests compare the fit with a direct count.
"""

from __future__ import annotations

import contextlib
import functools
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from . import flops as flopcount
from .base import Context
from .data import Batches
from .model import GPT, KVCache, ModelConfig

# Model presets (decoder); parameter counts are for vocab 256, seq_len 4096.
MODELS: dict[str, dict] = {
    "gpt50m": dict(d_model=768, n_layers=7, n_heads=12),                      # ~50 M
    "gpt125m": dict(d_model=768, n_layers=12, n_heads=12),                    # ~88 M
    "gpt350m": dict(d_model=1024, n_layers=24, n_heads=16, n_kv_heads=4),     # ~265 M, GQA
    "gpt1b": dict(d_model=2048, n_layers=20, n_heads=16, n_kv_heads=8),       # ~0.9 B, GQA
    "gpt3b": dict(d_model=2560, n_layers=32, n_heads=32, n_kv_heads=8),       # ~2.3 B, GQA
    "gpt7b": dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8),       # ~5.6 B, GQA
    # CPU tests: tiny, but with GQA and two heads per TP rank so every code path runs.
    "toy": dict(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2),
    # CPU tests of 8-way tensor parallel: one KV head per rank, two query heads.
    "toy8": dict(d_model=64, n_layers=2, n_heads=16, n_kv_heads=8),
}


# Attention kernels for inference. cuDNN attention is left out: it builds an execution graph per shape,
# and in decode the key length changes at every step. On the H200s every decode step then took
# ~40 ms whatever the model size (50 M to 5.6 B, batch 1 to 256), where flash attention needs well
# under a millisecond; servers use flash / paged kernels for the same reason.
INFERENCE_SDPA = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def inference_entry(fn):
    """Run a workload under torch.inference_mode with the inference attention kernels."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with torch.inference_mode(), sdpa_kernel(INFERENCE_SDPA):
            return fn(*args, **kwargs)
    return wrapper


def model_config(cfg: dict, causal: bool = True) -> ModelConfig:
    if cfg["model"] not in MODELS:
        raise ValueError(f"unknown model preset {cfg['model']!r}; known: {sorted(MODELS)}")
    return ModelConfig(**MODELS[cfg["model"]], seq_len=int(cfg["seq_len"]), causal=causal)


def build_model(ctx: Context, mcfg: ModelConfig, dtype: torch.dtype | None = None) -> GPT:
    """Same weights on every rank (seeded by ctx.seed, not the rank), built directly on the device
    so a multi-billion model never passes through host memory; in ``dtype`` (default the context's)."""
    torch.manual_seed(ctx.seed)
    with torch.device(ctx.device):
        model = GPT(mcfg)
    return model.to(dtype or ctx.dtype).eval()


def prompt_source(ctx: Context, salt: int = 0) -> Batches:
    """Real-text prompts (validation split), different per rank unless the caller passes salt=0 on all."""
    return Batches("val", 1, 8, ctx.device, seed=ctx.seed * 7919 + salt)


@dataclass
class FlopFit:
    """Per-sequence FLOPs of this rank's model: decode at attended length L = w + c·L;
    prefill of T tokens = T·w + c·T²."""

    w: float
    c: float

    def decode(self, n: int, attended: int) -> int:
        return int(round(n * (self.w + self.c * attended)))

    def prefill(self, n: int, tokens: int) -> int:
        return self.extend(n, tokens, 0)

    def extend(self, n: int, tokens: int, start: int) -> int:
        """``tokens`` new tokens appended to a cache already holding ``start``: each attends to every
        key of the chunk's end (full QKᵀ, as the counter does)."""
        return int(round(n * (tokens * self.w + self.c * tokens * (start + tokens))))

    @classmethod
    def measure(cls, decode_at: Callable[[int], None], l1: int = 4, l2: int = 12) -> "FlopFit":
        """``decode_at(L)`` runs one decode step of one sequence attending to L keys."""
        f1 = flopcount.measure(lambda: decode_at(l1))
        f2 = flopcount.measure(lambda: decode_at(l2))
        c = (f2 - f1) / (l2 - l1)
        return cls(w=f1 - c * l1, c=c)

    def as_dict(self) -> dict:
        return {"method": "flop_counter_fit", "w_flops_per_token": self.w, "c_flops_per_token_per_key": self.c}


def fit_model(model, mcfg: ModelConfig, ctx: Context, n_layers: int | None = None,
              kv_heads: int | None = None, first_stage: bool = True, device=None,
              dtype: torch.dtype | None = None) -> FlopFit:
    """Fit this rank's model (a whole GPT, a tensor-parallel shard or a pipeline stage), on the
    context's device and dtype unless ``device`` / ``dtype`` say otherwise (a draft on the host)."""
    n_layers = n_layers or len(model.layers)
    device, dtype = device or ctx.device, dtype or ctx.dtype
    cache = KVCache(mcfg, n_layers, 1, 16, device, dtype, kv_heads)
    if first_stage:
        x = torch.zeros(1, 1, dtype=torch.long, device=device)
    else:
        x = torch.zeros(1, 1, mcfg.d_model, dtype=dtype, device=device)

    def decode_at(attended: int) -> None:
        cache.length = attended - 1
        model(x, cache)

    return FlopFit.measure(decode_at)


# How long a service waits between batches (``pause_dist``): ``exp`` draws each gap from an exponential
# of mean ``pause_s`` (users arriving at random, a Poisson process), ``const`` waits exactly ``pause_s``
# (a batch job throttled to a fixed rhythm, as regular as a training step).
PAUSE_DISTS = ("exp", "const")


class IdlePause:
    """The idle gap after each batch: ``pause_s`` (0: none) drawn by ``pause_dist`` from a generator
    seeded per rank (independent services), or with ``per_rank=False`` the same on every rank (ranks
    that synchronise each step, which would otherwise all wait for the longest draw), so a run's gaps
    are reproducible."""

    def __init__(self, ctx: Context, cfg: dict, default_dist: str, per_rank: bool = True):
        self.mean_s = float(cfg.get("pause_s", 0.0))
        self.dist = str(cfg.get("pause_dist", default_dist))
        if self.dist not in PAUSE_DISTS:
            raise ValueError(f"pause_dist must be one of {PAUSE_DISTS}, got {self.dist!r}")
        if self.mean_s < 0:
            raise ValueError(f"pause_s must be >= 0, got {self.mean_s}")
        self.rng = torch.Generator().manual_seed(ctx.seed + (ctx.rank if per_rank else 0))

    def draw(self) -> float:
        if self.mean_s == 0 or self.dist == "const":
            return self.mean_s
        return float(torch.empty(1).exponential_(1 / self.mean_s, generator=self.rng))

    def wait(self) -> None:
        if self.mean_s > 0:
            time.sleep(self.draw())


def sample(logits: torch.Tensor) -> torch.Tensor:
    """Greedy next token from [batch, vocab] logits, as [batch, 1]."""
    return logits.argmax(dim=-1, keepdim=True)


def generate_rounds(ctx: Context, model: GPT, mcfg: ModelConfig, cfg: dict, *, count_tokens: bool = True,
                    lockstep: bool = False, kv_heads: int | None = None, prompt_salt: int | None = None,
                    counting: Callable = contextlib.nullcontext) -> None:
    """Batched generation with a KV cache until the deadline: prefill ``batch`` prompts of
    ``prompt_len`` tokens, then ``gen_len`` decode steps; optional idle pause between rounds
    (``IdlePause``, exponential gaps unless ``pause_dist`` says otherwise).

    ``lockstep`` (tensor parallel): every rank of a group sees the same prompts (``prompt_salt``: one
    stream per group), rank 0 decides at each round whether every rank goes on, and rounds run to
    their end so the ranks' collectives always pair up. ``counting``: the context the FLOP fit's forward
    passes run in (``fp8.setup``'s, where the model serves in FP8)."""
    batch, plen, glen = int(cfg["batch"]), int(cfg["prompt_len"]), int(cfg["gen_len"])
    if plen + glen > mcfg.seq_len:
        raise ValueError(f"prompt_len + gen_len = {plen + glen} exceeds seq_len {mcfg.seq_len}")
    pause = IdlePause(ctx, cfg, "exp")
    with counting():
        fit = fit_model(model, mcfg, ctx, kv_heads=kv_heads)
    ctx.ledger.extra.update(fit.as_dict())
    ctx.ledger.clear_collectives()   # the fit's own forward passes are not part of the run
    src = prompt_source(ctx, salt=prompt_salt if prompt_salt is not None else 0 if lockstep else ctx.rank)
    cache = KVCache(mcfg, mcfg.n_layers, batch, plen + glen, ctx.device, ctx.dtype, kv_heads)
    rounds = generated = 0
    while agree(ctx, ctx.keep_going()) if lockstep else ctx.keep_going():
        prompts = src.prompts(batch, plen)
        cache.length = 0
        t0 = time.perf_counter()
        tok = sample(model(prompts, cache)[:, -1])
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * plen if count_tokens else 0,
                        flops=fit.prefill(batch, plen))
        for _ in range(glen - 1):
            if not lockstep and not ctx.keep_going():
                break
            t0 = time.perf_counter()
            tok = sample(model(tok, cache)[:, -1])
            ctx.sync()
            ctx.ledger.step(time.perf_counter() - t0, batch if count_tokens else 0,
                            flops=fit.decode(batch, cache.length))
            generated += batch
        rounds += 1
        pause.wait()   # a lightly loaded server: the GPU waits for the next batch of users
    ctx.ledger.extra.update(rounds=rounds, tokens_generated=generated + rounds * batch,
                            tokens_prefilled=rounds * batch * plen)


def agree(ctx: Context, go: bool) -> bool:
    """One decision for every rank of a lock-step workload (see ``Context.agree``), so all run the
    same number of rounds and none waits forever in a collective."""
    return ctx.agree(go)


def need_all_ranks(ctx: Context, name: str, minimum: int = 2) -> None:
    if ctx.n_active != ctx.world_size or ctx.world_size < minimum:
        raise ValueError(f"{name} needs all ranks of the launch and at least {minimum} "
                         f"(world {ctx.world_size}, active {ctx.n_active})")
