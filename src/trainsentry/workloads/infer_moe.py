"""Expert-parallel mixture-of-experts inference (class ``inference``, family ``ep``).

Why it is in the benign corpus: serving a mixture-of-experts model with its experts spread over the
GPUs (as DeepSeek-V3 and Mixtral deployments do) exchanges tokens between every pair of GPUs twice
per MoE layer of every forward pass: an all-to-all that dispatches each token to the GPUs holding
its top-k experts and one that returns the experts' outputs. That traffic is symmetric (every GPU
sends as much as it receives), simultaneous on every GPU and frequent — the physical signature a
communication detector reads as a collective gradient exchange. Between the exchanges the GPUs do
decode's work, little tensor activity per DRAM byte (on the H200s 0.15–0.51 per run, where the
narrowest DDP training reads 0.46: results/hardneg-signals.json), so intensity alone does not set it
apart either. It is inference, and a
monitor that calls it training fails a real customer: it is the most plausible false positive of
the exchange signals, so the detectors must be judged on it (docs/detector.md, the gate).

The model is the one GPT (model.py) with each block's dense feed-forward replaced by
:class:`ExpertParallelMoE`: a router (replicated), ``experts`` feed-forward experts of width
``expert_ff`` split evenly over the ranks, top-``top_k`` routing with renormalised weights and a
fixed capacity per expert (``capacity_factor`` × the even share; tokens over capacity skip the
layer, the GShard/Switch convention), so every all-to-all has equal splits. Attention is data
parallel: every rank serves its own prompts with its own KV cache and the ranks step together
(generate_rounds' lock step), as an EP deployment's decode iterations do.

Bytes are counted where this code hands a tensor to torch.distributed: both all-to-alls, whole
buffers (the part that stays on the rank included, as the NCCL call is handed it).
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from .base import Context, Ledger, variants
from .comm import group_label, group_ranks
from .infer_common import build_model, generate_rounds, inference_entry, model_config, need_all_ranks
from .model import GPT, ModelConfig

TOY = {"model": "toy", "seq_len": 64, "batch": 4, "prompt_len": 8, "gen_len": 4, "experts": 4,
       "top_k": 2, "expert_ff": 32, "pause_s": 0.0}


def capacity(n_tokens: int, experts: int, top_k: int, factor: float) -> int:
    """Slots per expert for one forward pass: ``factor`` × the even share of the n·k assignments."""
    return max(1, math.ceil(factor * n_tokens * top_k / experts))


def _draw(shape: tuple[int, int], seed: int, stream: int, device) -> torch.Tensor:
    """Weights of one stream of one layer (0: router, 1 + 2e / 2 + 2e: expert e), N(0, 0.02²)."""
    g = torch.Generator(device=device or "cpu").manual_seed(seed * 1_000_003 + stream)
    return torch.randn(shape, generator=g, device=device) * 0.02


class ExpertParallelMoE(nn.Module):
    """Top-k routed experts, ``experts / world`` of them on this rank, exchanged by all-to-all.

    With ``group`` None and world 1 it is the same layer on one device (every expert local, no
    exchange): the tests compare the two."""

    def __init__(self, d_model: int, expert_ff: int, experts: int, top_k: int, capacity_factor: float,
                 rank: int, world: int, group=None, ledger: Ledger | None = None,
                 seed: int = 0, device: torch.device | str | None = None):
        super().__init__()
        if experts % world:
            raise ValueError(f"{experts} experts do not split over {world} ranks")
        if not 1 <= top_k <= experts:
            raise ValueError(f"top_k {top_k} must lie in 1..{experts}")
        self.experts, self.top_k, self.factor = experts, top_k, float(capacity_factor)
        self.rank, self.world, self.local = rank, world, experts // world
        self.group, self.ledger = group, ledger
        self.label = group_label(group_ranks(group)) if world > 1 else ""
        # The router and every expert have their own seeded stream, drawn on the device: a rank
        # draws only its own experts (a 13 B expert model drawn whole on the host by every rank
        # outlived its deadline on the H200s), yet the model is the same on any number of ranks
        # (the tests rely on it) and the router is identical everywhere.
        self.router = nn.Parameter(_draw((d_model, experts), seed, 0, device), requires_grad=False)
        mine = range(rank * self.local, (rank + 1) * self.local)
        self.w1 = nn.Parameter(torch.stack([_draw((d_model, expert_ff), seed, 1 + 2 * e, device) for e in mine]),
                               requires_grad=False)
        self.w2 = nn.Parameter(torch.stack([_draw((expert_ff, d_model), seed, 2 + 2 * e, device) for e in mine]),
                               requires_grad=False)

    def _exchange(self, buf: torch.Tensor) -> torch.Tensor:
        if self.world == 1:
            return buf
        out = torch.empty_like(buf)
        dist.all_to_all_single(out, buf, group=self.group)
        if self.ledger is not None:
            self.ledger.collective("all_to_all", buf.numel() * buf.element_size(), self.label)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xs = x.reshape(-1, shape[-1])
        n, d = xs.shape
        probs = torch.softmax((xs @ self.router.to(xs.dtype)).float(), dim=-1)
        weight, expert = probs.topk(self.top_k, dim=-1)                  # [n, k]
        weight = (weight / weight.sum(dim=-1, keepdim=True)).to(xs.dtype)
        cap = capacity(n, self.experts, self.top_k, self.factor)
        flat = expert.reshape(-1)                                        # [n·k], token-major
        onehot = F.one_hot(flat, self.experts)
        slot = ((onehot.cumsum(0) - 1) * onehot).sum(-1)                 # place in its expert's queue
        keep = slot < cap
        src = torch.arange(n, device=xs.device).repeat_interleave(self.top_k)
        buf = xs.new_zeros(self.experts, cap, d)                         # experts in rank order
        buf[flat[keep], slot[keep]] = xs[src[keep]]
        # [world, local, cap, d]: chunk r goes to rank r; what comes back is chunk r from rank r
        got = self._exchange(buf.view(self.world, self.local * cap * d)).view(self.world, self.local, cap, d)
        h = F.gelu(torch.einsum("wecd,edf->wecf", got, self.w1.to(xs.dtype)), approximate="tanh")
        y = torch.einsum("wecf,efd->wecd", h, self.w2.to(xs.dtype))
        back = self._exchange(y.reshape(self.world, -1)).view(self.experts, cap, d)
        out = xs.new_zeros(n * self.top_k, d)
        out[keep] = back[flat[keep], slot[keep]]
        return (out.view(n, self.top_k, d) * weight.unsqueeze(-1)).sum(dim=1).view(shape)


def moe_params(mcfg: ModelConfig, cfg: dict) -> int:
    """Parameters of the whole MoE model: the GPT without its dense feed-forward, plus routers and
    experts (every rank's share)."""
    dense_ff = 2 * mcfg.d_model * mcfg.ff * mcfg.n_layers
    e, f = int(cfg["experts"]), int(cfg["expert_ff"])
    return mcfg.params() - dense_ff + mcfg.n_layers * (mcfg.d_model * e + 2 * e * mcfg.d_model * f)


def make_moe(model: GPT, cfg: dict, rank: int, world: int, group=None, ledger: Ledger | None = None,
             seed: int = 0) -> GPT:
    """Replace every block's dense MLP by this rank's share of the expert-parallel MoE, in place."""
    dev = model.head.weight.device
    dtype = model.head.weight.dtype
    for i, block in enumerate(model.layers.values()):
        moe = ExpertParallelMoE(model.cfg.d_model, int(cfg["expert_ff"]), int(cfg["experts"]),
                                int(cfg["top_k"]), float(cfg.get("capacity_factor", 1.25)), rank, world,
                                group, ledger, seed=seed * 1000 + i, device=dev)
        block.mlp = moe.to(dtype=dtype)
    return model


@inference_entry
def run_ep(ctx: Context, cfg: dict) -> None:
    """Expert-parallel MoE decode: data-parallel attention, experts split over every rank, two
    all-to-alls per layer per forward, every rank serving its own prompts in lock step."""
    need_all_ranks(ctx, "expert-parallel MoE inference")
    mcfg = model_config(cfg)
    # the dense feed-forward is built narrow and thrown away: only attention, embeddings and head stay
    model = build_model(ctx, ModelConfig(**{**mcfg.to_dict(), "d_ff": 8}))
    make_moe(model, cfg, ctx.rank, ctx.world_size, None, ctx.ledger, seed=ctx.seed)
    ctx.ledger.extra.update(params=moe_params(mcfg, cfg), experts=int(cfg["experts"]),
                            top_k=int(cfg["top_k"]), expert_ff=int(cfg["expert_ff"]),
                            capacity_factor=float(cfg.get("capacity_factor", 1.25)),
                            experts_per_rank=int(cfg["experts"]) // ctx.world_size)
    generate_rounds(ctx, model, model.cfg, cfg, lockstep=True, prompt_salt=ctx.rank)


# Sizes: weights per GPU = (attention + embeddings) + half the experts, bf16. l1b_e8: 20 layers of
# 8 experts of 2048 × 8192 -> 5.4 B expert params, ~6 GB per GPU; xl3b_e16: 32 layers of 16 experts
# of 2560 × 5120 -> 13.4 B, ~14 GB per GPU; m350m_e32_k1: 24 × 32 experts of 1024 × 2048 -> 3.2 B.
variants("infer.ep", "inference", "ep", run_ep,
         base={"model": "gpt1b", "seq_len": 2048, "batch": 64, "prompt_len": 512, "gen_len": 256,
               "experts": 8, "top_k": 2, "expert_ff": 8192, "capacity_factor": 1.25},
         toy=TOY, gpus=0, grid={
             "l1b_e8_k2_b64": {},
             "xl3b_e16_k2_b128": {"model": "gpt3b", "batch": 128, "experts": 16, "expert_ff": 5120},
             "m350m_e32_k1_b256": {"model": "gpt350m", "batch": 256, "prompt_len": 256, "experts": 32,
                                   "top_k": 1, "expert_ff": 2048},
             "l1b_e8_k2_b8_bursty": {"batch": 8, "pause_s": 0.5},
         }, description="expert-parallel MoE decode: two symmetric all-to-alls per layer per step")
