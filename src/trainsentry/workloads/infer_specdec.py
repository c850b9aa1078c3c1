"""Speculative decoding with the draft on the host's cores (family ``specdec``): a benign inference
service whose GPU runs in short bursts between stretches of host computation, the rhythm of the
short-answer RAG runs that fooled the single-device lead (docs/host.md), with another cause.

The draft is the target's own first ``draft_layers`` layers with its embeddings, final norm and head
(self-speculative decoding by layer skipping: Zhang et al. 2023, "Draft & Verify", arXiv:2309.08168;
Elhoushi et al. 2024, "LayerSkip", arXiv:2404.16710), copied to host memory in fp32 and run on
``host_threads`` threads, so that it costs no GPU memory: the deployment for a GPU that the target
fills. Every round of ``batch`` users:

1. the target prefills the prompts on the GPU, the draft prefills them on the host;
2. until at least ``gen_len`` tokens (the last verification may overshoot by up to ``gamma``): the
   draft proposes ``gamma`` tokens per sequence on the host; they go to the GPU with the last kept
   token (host to device, batch × (gamma + 1) × 8 bytes; ``bytes_h2d_per_verification`` counts the
   proposals only, batch × gamma × 8); the target scores the last kept token and the proposals in one
   forward call; its greedy choices come back (device to host, batch × (gamma + 1) × 8 bytes); the
   longest prefix of proposals that every sequence's target agrees with is kept, plus the target's own
   next token, so the output is the target's greedy output (a test checks that against plain
   decoding in fp32; in bf16 a verification and a one-token step may break near-ties differently);
   both caches are cut back to what was kept. Each round also copies the prompts to the host.

Ledger: one step per forward call of the target (a prefill, a verification), its time including the
host's drafting before it (as RAG's search is in its prefill step); tokens the prompts' and the kept
ones; FLOPs the target's (the GPU's), from the fit infer.generate uses. Extra: the draft's FLOPs and
host time, the share of proposals kept (``acceptance``), the bytes each way, the threads.
"""

from __future__ import annotations

import time

import torch

from . import flops as flopcount
from .base import Context, use_host_threads, variants
from .infer_common import FlopFit, build_model, fit_model, inference_entry, model_config, prompt_source, sample
from .model import GPT, KVCache, ModelConfig


def host_draft(target: GPT, layers: int) -> GPT:
    """The target's first ``layers`` layers, embeddings, final norm and head, in fp32 on the host."""
    cfg = ModelConfig(**{**target.cfg.to_dict(), "n_layers": layers})
    if not 0 < layers < target.cfg.n_layers:
        raise ValueError(f"draft_layers must be between 1 and {target.cfg.n_layers - 1}, got {layers}")
    with torch.device("cpu"):
        draft = GPT(cfg)
    want = draft.state_dict()
    draft.load_state_dict({k: v.detach().cpu().float() for k, v in target.state_dict().items() if k in want})
    return draft.eval()


def accept(proposed: torch.Tensor, chosen: torch.Tensor) -> int:
    """How many of the ``proposed`` tokens [batch, gamma] every sequence keeps: the longest prefix on
    which the target's greedy choices ``chosen`` [batch, gamma + 1] agree, for all sequences."""
    agree = (proposed == chosen[:, :proposed.shape[1]]).long().cumprod(dim=1)
    return int(agree.sum(dim=1).min())


def speculate(target: GPT, draft: GPT, tcache: KVCache, dcache: KVCache, last: torch.Tensor,
              pending: torch.Tensor, gamma: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, float]:
    """One draft-and-verify round. ``last`` [batch, 1] on the device: the newest token, in neither
    cache; ``pending`` [batch, p] on the host: the tokens the draft's cache still lacks (``last`` at
    the end). Returns the kept tokens [batch, n + 1] (host), the new ``last`` (device), the new
    ``pending`` (host), n, and the host's drafting time."""
    t0 = time.perf_counter()
    proposed, x = [], pending
    for _ in range(gamma):
        x = sample(draft(x, dcache)[:, -1])
        proposed.append(x)
    proposed = torch.cat(proposed, dim=1)                        # [batch, gamma], host
    draft_s = time.perf_counter() - t0
    start = tcache.length
    chosen = target(torch.cat([last, proposed.to(device)], dim=1), tcache).argmax(dim=-1).cpu()
    n = accept(proposed, chosen)
    kept = torch.cat([proposed[:, :n], chosen[:, n:n + 1]], dim=1)
    tcache.length = start + 1 + n                                # last and the n kept proposals
    # the draft's cache holds last and proposals 1..gamma-1; the n-th kept one may be missing
    dcache.length = start + 1 + min(n, gamma - 1)
    pending = kept[:, -1:] if n < gamma else kept[:, -2:]
    return kept, kept[:, -1:].to(device), pending, n, draft_s


def drafting_flops(dfit: FlopFit, batch: int, pending: int, cached: int, gamma: int) -> int:
    """The draft's FLOPs for ``gamma`` proposals: it appends the ``pending`` tokens its cache (holding
    ``cached``) lacks, then decodes one token at a time."""
    return dfit.extend(batch, pending, cached) + sum(dfit.decode(batch, cached + pending + i) for i in range(1, gamma))


@inference_entry
def run_specdec(ctx: Context, cfg: dict) -> None:
    mcfg = model_config(cfg)
    batch, plen, glen, gamma = int(cfg["batch"]), int(cfg["prompt_len"]), int(cfg["gen_len"]), int(cfg["gamma"])
    if gamma < 1:
        raise ValueError(f"gamma (proposals per verification) must be at least 1, got {gamma}")
    if plen + glen + gamma + 1 > mcfg.seq_len:
        raise ValueError(f"prompt_len + gen_len + gamma + 1 = {plen + glen + gamma + 1} exceeds seq_len {mcfg.seq_len}")
    threads = use_host_threads(cfg)
    target = build_model(ctx, mcfg)
    draft = host_draft(target, int(cfg["draft_layers"]))
    fit, dfit = fit_model(target, mcfg, ctx), fit_model(draft, draft.cfg, ctx, device="cpu", dtype=torch.float32)
    ctx.ledger.extra.update(fit.as_dict())
    ctx.ledger.clear_collectives()
    src = prompt_source(ctx, salt=ctx.rank)
    tcache = KVCache(mcfg, mcfg.n_layers, batch, plen + glen + gamma + 1, ctx.device, ctx.dtype)
    dcache = KVCache(draft.cfg, draft.cfg.n_layers, batch, plen + glen + gamma + 1, "cpu", torch.float32)
    rounds = verifies = kept_total = generated = 0
    draft_s, draft_flops = 0.0, 0
    while ctx.keep_going():
        prompts = src.prompts(batch, plen)
        tcache.length = dcache.length = 0
        t0 = time.perf_counter()
        host_prompts = prompts.cpu()
        draft(host_prompts, dcache)
        draft_flops += dfit.prefill(batch, plen)
        last = sample(target(prompts, tcache)[:, -1])
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * plen, flops=fit.prefill(batch, plen))
        pending, made = last.cpu(), 1
        while made < glen and ctx.keep_going():
            t0 = time.perf_counter()
            start = tcache.length
            draft_flops += drafting_flops(dfit, batch, pending.shape[1], dcache.length, gamma)
            kept, last, pending, n, ds = speculate(target, draft, tcache, dcache, last, pending, gamma, ctx.device)
            ctx.ledger.step(time.perf_counter() - t0, batch * (n + 1), flops=fit.extend(batch, gamma + 1, start))
            draft_s += ds
            verifies += 1
            kept_total += n
            made += n + 1
        generated += made * batch
        rounds += 1
    ctx.ledger.extra.update(
        rounds=rounds, verifications=verifies, tokens_generated=generated, gamma=gamma,
        acceptance=round(kept_total / (verifies * gamma), 4) if verifies else None,
        draft_layers=draft.cfg.n_layers, draft_params=draft.cfg.params(), draft_flops=draft_flops,
        draft_s=round(draft_s, 3), host_threads=threads, params=mcfg.params(),
        bytes_h2d_per_verification=batch * gamma * 8, bytes_d2h_per_verification=batch * (gamma + 1) * 8)


variants("infer.specdec", "inference", "specdec", run_specdec,
         base={"model": "gpt1b", "seq_len": 1024, "batch": 32, "prompt_len": 128, "gen_len": 256, "gamma": 4,
               "draft_layers": 2},
         toy={"model": "toy", "seq_len": 64, "batch": 2, "prompt_len": 8, "gen_len": 12, "gamma": 3,
              "draft_layers": 1}, gpus=1, grid={
             # 32 users, 4 proposals of a 2-layer draft per verification, every host core drafting
             "l1b_b32_k4_d2": {},
             # fewer users: each verification is a shorter burst
             "l1b_b8_k4_d2": {"batch": 8},
             # 8 proposals: longer drafting between bursts, more tokens per burst when they are kept
             "l1b_b32_k8_d2": {"gamma": 8},
             # the same drafting on 4 threads: longer gaps, fewer busy cores
             "l1b_b32_k4_d2_t4": {"host_threads": 4},
             # a larger target (2.3 B) with a 1-layer draft
             "x3b_b16_k4_d1": {"model": "gpt3b", "batch": 16, "draft_layers": 1},
         })
