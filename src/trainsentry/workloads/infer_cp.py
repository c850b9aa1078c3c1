"""Context-parallel long-context prefill (class ``inference``, family ``cp``).

Why it is in the benign corpus: a prompt too long for one GPU's time budget (a book, a code base, a
long video transcript) is prefilled with its sequence split over the GPUs, and every GPU needs the
keys and values of the tokens before its chunk. With all-gather context parallelism (the variant
Llama 3 describes for long-context training and inference) every layer of every prefill all-gathers
the chunks' keys and values: per layer, the same bytes leave and enter every GPU at the same moment,
and the GPUs are compute-bound in between. On the links that is symmetric, simultaneous and regular
traffic at hundreds of MB/s to GB/s from inference — like the TP and expert-parallel families, a
benign workload the exchange signals must not call training.

Each rank holds ``prompt_len / N`` consecutive tokens; its queries attend to its own chunk causally
and to every earlier chunk in full (``causal_lower_right`` over the keys of chunks 0..rank), so the
last rank's last position gives the same next token as one GPU prefilling the whole prompt (a test
checks). The later ranks do more attention work than the first: plain all-gather CP, no load
balancing; the H200 runs show it in the two larger configurations (power balance 0.59–0.64 between
the GPUs; the 16k-token one reads 0.86–0.94, where multi-GPU training sits at 0.95 or more:
results/hardneg-signals.json), a difference a detector could learn that a production server does
not have. With ``balanced`` the prompt is cut into 2N chunks and rank
r holds chunks r and 2N−1−r (the "zigzag" split of ring-attention implementations): every rank then
does the same attention work (balance 0.998–0.999 on the H200s), the exchange is the same all-gather. A step is one prefill of ``batch`` prompts; the rank holding
the last position samples the first output token. Bytes are counted where this code hands a tensor
to torch.distributed: the all-gathered K and V.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from . import flops as flopcount
from .base import Context, Ledger, variants
from .comm import group_label, group_ranks
from .infer_common import build_model, inference_entry, model_config, need_all_ranks, prompt_source, sample
from .model import GPT, Attention

TOY = {"model": "toy", "seq_len": 64, "batch": 2, "prompt_len": 32, "pause_s": 0.0}


class ContextParallelAttention(nn.Module):
    """The block's own attention projections; K and V of every chunk all-gathered over the group."""

    def __init__(self, attn: Attention, rank: int, world: int, group=None, ledger: Ledger | None = None,
                 balanced: bool = False):
        super().__init__()
        self.attn, self.rank, self.world, self.group, self.ledger = attn, rank, world, group, ledger
        self.balanced = balanced
        self.label = group_label(group_ranks(group)) if world > 1 else ""
        self._bias: dict[tuple[int, int], object] = {}

    def bias(self, queries: int, keys: int):
        """Lower-right causal mask of ``queries`` × ``keys`` (the queries are the last ``queries``
        positions). Built once per shape: a CausalBias cannot be created under FlopCounterMode."""
        if (queries, keys) not in self._bias:
            self._bias[(queries, keys)] = causal_lower_right(queries, keys)
        return self._bias[(queries, keys)]

    def forward(self, x, cache=None, layer: int = 0):
        if cache is not None:
            raise ValueError("context-parallel attention prefills; it keeps no KV cache")
        a, (b, c, _) = self.attn, x.shape
        hd = a.cfg.head_dim
        q = a.q(x).view(b, c, -1, hd).transpose(1, 2)
        kv = torch.stack([a.k(x).view(b, c, -1, hd).transpose(1, 2),
                          a.v(x).view(b, c, -1, hd).transpose(1, 2)]).contiguous()   # [2, b, h, c, hd]
        if self.world > 1:
            chunks = [torch.empty_like(kv) for _ in range(self.world)]
            dist.all_gather(chunks, kv, group=self.group)
            if self.ledger is not None:
                self.ledger.collective("all_gather", kv.numel() * kv.element_size(), self.label)
        else:
            chunks = [kv]
        # every rank's pieces of the prompt (chunk_positions) put back in sequence order, up to the
        # last key this rank's queries need; each of its pieces attends to the keys up to its end
        plen, mine = self.world * c, chunk_positions(self.rank, self.world, self.world * c, self.balanced)
        pieces = []
        for s, ch in enumerate(chunks):
            off = 0
            for lo, hi in chunk_positions(s, self.world, plen, self.balanced):
                if lo < mine[-1][1]:
                    pieces.append((lo, ch[..., off:off + hi - lo, :]))
                off += hi - lo
        keys = torch.cat([piece for _, piece in sorted(pieces, key=lambda x: x[0])], dim=3)
        outs, off = [], 0
        for lo, hi in mine:
            outs.append(self._attend(q[..., off:off + hi - lo, :], keys[..., :hi, :]))
            off += hi - lo
        y = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
        return a.o(y.transpose(1, 2).reshape(b, c, -1))

    def _attend(self, q, kv):
        """Queries (the last ``q``-many positions of the keys) over ``kv`` [2, b, h, keys, hd]."""
        k, v = kv[0], kv[1]
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if k.shape[2] == q.shape[2]:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.bias(q.shape[2], k.shape[2]))


def make_context_parallel(model: GPT, rank: int, world: int, group=None, ledger: Ledger | None = None,
                          balanced: bool = False) -> GPT:
    for block in model.layers.values():
        block.attn = ContextParallelAttention(block.attn, rank, world, group, ledger, balanced)
    return model


def chunk_positions(rank: int, world: int, prompt_len: int, balanced: bool) -> list[tuple[int, int]]:
    """The [start, end) token ranges of the prompt this rank holds, in the order it holds them."""
    if not balanced:
        c = prompt_len // world
        return [(rank * c, (rank + 1) * c)]
    h = prompt_len // (2 * world)
    return [(rank * h, (rank + 1) * h), ((2 * world - 1 - rank) * h, (2 * world - rank) * h)]


@inference_entry
def run_cp(ctx: Context, cfg: dict) -> None:
    """Long-context prefill with the sequence split over every rank (all-gather context parallel)."""
    need_all_ranks(ctx, "context-parallel prefill")
    mcfg = model_config(cfg)
    batch, plen = int(cfg["batch"]), int(cfg["prompt_len"])
    balanced = bool(cfg.get("balanced", False))
    parts = 2 * ctx.world_size if balanced else ctx.world_size
    if plen % parts or plen > mcfg.seq_len:
        raise ValueError(f"prompt_len {plen} must split into {parts} chunks and fit seq_len {mcfg.seq_len}")
    chunk = plen // ctx.world_size
    ranges = chunk_positions(ctx.rank, ctx.world_size, plen, balanced)
    model = make_context_parallel(build_model(ctx, mcfg), ctx.rank, ctx.world_size, None, ctx.ledger, balanced)
    src = prompt_source(ctx, salt=0)           # the same prompts on every rank, each takes its chunks
    pause_s = float(cfg.get("pause_s", 0.0))
    last = ranges[-1][1] == plen               # this rank holds the last position
    positions = torch.cat([torch.arange(a, b, device=ctx.device) for a, b in ranges])

    def prefill(prompts):
        return model(torch.cat([prompts[:, a:b] for a, b in ranges], dim=1), positions=positions)

    for block in model.layers.values():      # every mask shape up front (none under FlopCounterMode)
        for a, b in ranges:
            block.attn.bias(b - a, b)

    ctx.ledger.flops_per_step = flopcount.measure(lambda: prefill(src.prompts(batch, plen)))
    ctx.ledger.clear_collectives()   # the counting pass is not part of the run
    ctx.ledger.extra.update(params=mcfg.params(), method="flop_counter", chunk_tokens=chunk,
                            kv_bytes_gathered_per_layer=2 * batch * mcfg.kv_heads * chunk * mcfg.head_dim
                            * torch.empty(0, dtype=ctx.dtype).element_size() * ctx.world_size)
    first_tokens = 0
    while ctx.keep_going_together():
        prompts = src.prompts(batch, plen)
        t0 = time.perf_counter()
        logits = prefill(prompts)
        if last:
            first_tokens += int(sample(logits[:, -1]).numel())
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * chunk)
        if pause_s > 0:
            time.sleep(pause_s)
    ctx.ledger.extra["first_tokens"] = first_tokens


# Sizes: per GPU the whole model (bf16) plus activations of one chunk and the gathered K/V of one layer.
variants("infer.cp", "inference", "cp", run_cp,
         base={"model": "gpt3b", "seq_len": 32768, "batch": 1, "prompt_len": 32768},
         toy=TOY, gpus=0, grid={
             "xl3b_ctx32k": {},
             "l1b_ctx64k": {"model": "gpt1b", "seq_len": 65536, "prompt_len": 65536},
             "g7b_ctx16k_b2": {"model": "gpt7b", "seq_len": 16384, "batch": 2, "prompt_len": 16384,
                               "pause_s": 0.3},
             # load-balanced (zigzag) split: the same exchange, equal work on every GPU
             "xl3b_ctx32k_zz": {"balanced": True},
             "g7b_ctx16k_b2_zz": {"model": "gpt7b", "seq_len": 16384, "batch": 2, "prompt_len": 16384,
                                  "pause_s": 0.3, "balanced": True},
         }, description="all-gather context-parallel long-context prefill: K/V all-gathered every layer")
