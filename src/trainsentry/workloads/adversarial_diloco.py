"""DiLoCo (arXiv 2311.08105) and streaming DiLoCo (arXiv 2501.18512) on the red team's replicas.

Every rank runs H inner AdamW steps on its own batches with no traffic at all, then the
pseudo-gradients (outer parameters − local parameters) are averaged across ranks and applied by an
outer SGD with Nesterov momentum (lr 0.7, momentum 0.9); every replica restarts from the new outer
parameters and keeps its own inner AdamW state. Pseudo-gradients travel as fp32 (one all-reduce),
as int8 blocks, or top-k with error feedback (adversarial_sync).

Streaming: the parameters are cut into F contiguous fragments (embeddings first, then the blocks
in order); fragment f is synchronised every H steps at offset f·H/F, so the link carries one
fragment every H/F steps — a smaller, steadier stream instead of one parameter-sized burst.
"""

from __future__ import annotations

import torch

from .adversarial_core import Phases, Replica, count_first, run_steps, strategy_extra
from .adversarial_sync import TopK, flat, mean_allreduce, mean_int8, mean_kv_shaped, unflat_into
from .base import Context

OUTER_LR, OUTER_MOMENTUM = 0.7, 0.9


def fragments(params: list[torch.Tensor], n: int) -> list[list[int]]:
    """Split parameter indices into ``n`` contiguous groups of about equal size (in values)."""
    n = max(1, min(n, len(params)))
    total = sum(p.numel() for p in params)
    groups: list[list[int]] = [[] for _ in range(n)]
    seen = 0
    for i, p in enumerate(params):
        g = min(n - 1, int(seen * n / total))
        groups[g].append(i)
        seen += p.numel()
    return [g for g in groups if g]


def sync_schedule(h: int, n_fragments: int) -> list[int]:
    """Offset (in inner steps, 0..h-1) at which each fragment is synchronised within a period of h."""
    return [(f * h) // n_fragments for f in range(n_fragments)]


def fragments_due(step_index: int, h: int, offsets: list[int]) -> list[int]:
    """Fragments synchronised at the end of 0-based inner step ``step_index``."""
    return [f for f, off in enumerate(offsets) if (step_index + 1 - off) % h == 0 and step_index + 1 >= max(off, 1)]


class Outer:
    """The outer model of one fragment: fp32 copies and a Nesterov SGD over them."""

    def __init__(self, params: list[torch.Tensor], lr: float, momentum: float):
        self.local = params
        self.master = [p.detach().float().clone() for p in params]
        self.opt = torch.optim.SGD(self.master, lr=lr, momentum=momentum, nesterov=True)

    def pseudo_gradient(self) -> torch.Tensor:
        return flat([m - p.detach().float() for m, p in zip(self.master, self.local)])

    def apply(self, mean_delta: torch.Tensor) -> None:
        grads = [torch.empty_like(m) for m in self.master]
        unflat_into(mean_delta, grads)
        for m, g in zip(self.master, grads):
            m.grad = g
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p, m in zip(self.local, self.master):
                p.copy_(m)


def run_diloco(ctx: Context, cfg: dict) -> None:
    """DiLoCo: H silent inner steps, then one averaged pseudo-gradient and an outer Nesterov step."""
    h = int(cfg["h"])
    n_frag = int(cfg.get("fragments", 1))
    compress = cfg.get("compress", "none")
    if h < 1 or n_frag < 1 or n_frag > h:
        raise ValueError(f"DiLoCo needs H >= 1 and 1 <= fragments <= H (H={h}, fragments={n_frag})")
    rep = Replica(ctx, cfg)
    groups = fragments(rep.params, n_frag)
    outers = [Outer([rep.params[i] for i in g], cfg.get("outer_lr", OUTER_LR),
                    cfg.get("outer_momentum", OUTER_MOMENTUM)) for g in groups]
    offsets = sync_schedule(h, len(groups))
    topk = [TopK(sum(p.numel() for p in o.local), float(cfg["topk_fraction"]), ctx.device)
            for o in outers] if compress == "topk" else None
    strategy_extra(ctx, cfg, "diloco", h=h, fragments=len(groups), compress=compress,
                   outer_lr=cfg.get("outer_lr", OUTER_LR), outer_momentum=cfg.get("outer_momentum", OUTER_MOMENTUM),
                   topk_fraction=cfg.get("topk_fraction"), fragment_values=[sum(p.numel() for p in o.local) for o in outers])
    ctx.ledger.extra["collective_method"] = "explicit"
    syncs: list[tuple[int, int]] = []

    decoder = chunk = None
    if compress == "kv":
        from .adversarial_step import Decoder
        from .infer_parallel import kv_transfer_bytes
        decoder = Decoder(ctx, rep, cfg)
        chunk = kv_transfer_bytes(rep.mcfg, 1, int(cfg["kv_prompt_len"]), 2)
        ctx.ledger.extra["strategy_params"]["kv_chunk_bytes"] = chunk
    decoy = Decoy(ctx, cfg, rep, outers) if cfg.get("decoy") else None

    def exchange(f: int, delta: torch.Tensor) -> torch.Tensor:
        if compress == "kv":
            return mean_kv_shaped(ctx, delta, chunk, between=decoder.step)
        if compress == "int8":
            return mean_int8(ctx, delta)
        if compress == "topk":
            return topk[f].mean(ctx, delta)
        return mean_allreduce(ctx, delta)

    def step(ph: Phases):
        s = ctx.ledger.steps
        loss = ph.timed("compute", count_first, ctx, rep.forward_backward)
        ph.timed("compute", rep.apply)
        due_now = fragments_due(s, h, offsets)
        for f in due_now:
            ctx.sync()
            ph.timed("comm", lambda: outers[f].apply(exchange(f, outers[f].pseudo_gradient())))
            syncs.append((s + 1, f))
        if decoy is not None:
            ph.timed("decoy", decoy.after_step, due_now)
        return loss

    def due(s: int) -> bool:   # agree before the first step and after every synchronisation
        return s == 0 or bool(fragments_due(s - 1, h, offsets))

    run_steps(ctx, step, rep.tokens_per_micro, agree_every=due, measure_first=decoder is None)
    ctx.ledger.extra["syncs"] = syncs
    if decoder is not None:
        ctx.ledger.extra["decode_tokens"] = decoder.tokens
    # The model of a DiLoCo run is the outer one (identical on every rank); the local replica's
    # score is kept beside it.
    rep.val_loss()
    ctx.ledger.extra["val_loss_local"] = ctx.ledger.extra.get("val_loss")
    with torch.no_grad():
        saved = [p.detach().clone() for p in rep.params]
        for o in outers:
            for p, m in zip(o.local, o.master):
                p.copy_(m)
    rep.val_loss()
    with torch.no_grad():
        for p, s in zip(rep.params, saved):
            p.copy_(s)


class Decoy:
    """Cover traffic beside DiLoCo's real exchanges, counted under ``all_reduce_decoy``.

    ``tp``: after every inner step, the all-reduces a tensor-parallel decode server would issue for
    ``decoy_tokens`` generated tokens: 2 per layer per token of ``decoy_batch × d_model`` bf16 values
    (small, frequent, symmetric). ``pad``: tops every step up to the bytes of the largest fragment,
    so with one fragment per step (streaming, fragments = H) the link carries a flat stream with no
    period to find."""

    def __init__(self, ctx: Context, cfg: dict, rep: Replica, outers: list[Outer]):
        self.ctx, self.kind = ctx, cfg["decoy"]
        if self.kind == "tp":
            self.buf = torch.zeros(int(cfg.get("decoy_batch", 32)), rep.mcfg.d_model, device=ctx.device,
                                   dtype=torch.bfloat16)
            self.count = 2 * rep.mcfg.n_layers * int(cfg.get("decoy_tokens", 4))
        elif self.kind == "pad":
            self.sizes = [4 * sum(p.numel() for p in o.local) for o in outers]
            self.buf = torch.zeros(max(self.sizes) // 4, device=ctx.device, dtype=torch.float32)
        else:
            raise ValueError(f"unknown decoy {self.kind!r}")

    def after_step(self, synced: list[int]) -> None:
        import torch.distributed as dist

        if self.ctx.world_size == 1:
            return
        if self.kind == "tp":
            for _ in range(self.count):
                self.ctx.ledger.collective("all_reduce_decoy", self.buf.numel() * 2)
                dist.all_reduce(self.buf)
            return
        missing = max(self.sizes) - sum(self.sizes[f] for f in synced)
        if missing > 0:
            part = self.buf[: missing // 4]
            self.ctx.ledger.collective("all_reduce_decoy", part.numel() * 4)
            dist.all_reduce(part)
