"""Multi-GPU inference: tensor-parallel decode, pipeline-parallel inference and disaggregated
prefill/decode serving. Parallelism is applied to the one GPT from outside.

What each shows on the GPU link (the reason these workloads exist):
- tensor parallel: 2 all-reduces of batch × tokens × d_model per layer per forward, small, very frequent,
  symmetric, never a parameter-sized collective;
- pipeline: activations one way stage to stage, the sampled token ids (a few bytes) back to stage 0;
- disaggregated: one-way bursts of KV cache, 2 · layers · kv_heads · head_dim · bytes per prompt token.
Bytes are counted where this code hands a tensor to torch.distributed (sends and all-reduce inputs).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
import torch.nn as nn

from .base import Context, Ledger, variants
from .comm import group_label, group_ranks, peer_label
from .infer_common import (agree, build_model, fit_model, generate_rounds, inference_entry, model_config,
                           need_all_ranks, prompt_source, sample)
from .model import GPT, KVCache, ModelConfig

TOY = {"model": "toy", "seq_len": 64, "batch": 4, "prompt_len": 8, "gen_len": 4, "micro_batches": 2,
       "pause_s": 0.0}


# --------------------------------------------------------------------------- tensor parallel
class RowParallel(nn.Module):
    """A row-sharded linear whose partial outputs are summed over the tensor-parallel group."""

    def __init__(self, linear: nn.Linear, group, ledger: Ledger | None):
        super().__init__()
        self.linear, self.group, self.ledger = linear, group, ledger
        self.label = group_label(group_ranks(group))

    def forward(self, x):
        y = self.linear(x)
        dist.all_reduce(y, group=self.group)
        if self.ledger is not None:
            self.ledger.collective("all_reduce", y.numel() * y.element_size(), self.label)
        return y


def _shard(linear: nn.Linear, dim: int, rank: int, world: int) -> nn.Linear:
    w = linear.weight.detach()
    if w.shape[dim] % world:
        raise ValueError(f"cannot split {tuple(w.shape)} along dim {dim} over {world} ranks")
    linear.weight = nn.Parameter(w.chunk(world, dim)[rank].clone(), requires_grad=False)
    linear.out_features, linear.in_features = linear.weight.shape
    return linear


def shard_tensor_parallel(model: GPT, rank: int, world: int, group=None, ledger: Ledger | None = None) -> int:
    """Megatron-style sharding in place: q/k/v and fc1 split by output (whole heads per rank), o and
    fc2 split by input and followed by an all-reduce. Returns the local number of KV heads."""
    cfg = model.cfg
    if cfg.n_heads % world or cfg.kv_heads % world:
        raise ValueError(f"heads {cfg.n_heads} / kv_heads {cfg.kv_heads} do not split over {world} ranks")
    for block in model.layers.values():
        attn, mlp = block.attn, block.mlp
        for lin in (attn.q, attn.k, attn.v, mlp.fc1):
            _shard(lin, 0, rank, world)
        attn.o = RowParallel(_shard(attn.o, 1, rank, world), group, ledger)
        mlp.fc2 = RowParallel(_shard(mlp.fc2, 1, rank, world), group, ledger)
    return cfg.kv_heads // world


def tp_groups(ctx: Context, tp: int):
    """This rank's tensor-parallel group when ``tp`` consecutive ranks share a model: (group, index of
    the group, rank inside it). One group over the whole launch uses the default group."""
    if tp < 1 or ctx.world_size % tp:
        raise ValueError(f"tensor-parallel degree {tp} does not divide the {ctx.world_size} ranks")
    if tp == ctx.world_size:
        return None, 0, ctx.rank
    # every rank creates every group (new_group is collective over the launch), keeps its own
    group, _ = dist.new_subgroups_by_enumeration([list(range(i, i + tp)) for i in range(0, ctx.world_size, tp)])
    return group, ctx.rank // tp, ctx.rank % tp


@inference_entry
def run_tp(ctx: Context, cfg: dict) -> None:
    """Tensor-parallel batched decode (Megatron sharding, all-reduce per layer) over groups of ``tp``
    ranks (default all); several groups serve their own users as replicas."""
    need_all_ranks(ctx, "tensor-parallel decode")
    tp = int(cfg.get("tp") or ctx.world_size)
    group, index, tp_rank = tp_groups(ctx, tp)
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    kv_local = shard_tensor_parallel(model, tp_rank, tp, group, ctx.ledger)
    ctx.ledger.extra.update(params=mcfg.params(), tp=tp, tp_group=group_ranks(group), tp_index=index)
    generate_rounds(ctx, model, mcfg, cfg, count_tokens=tp_rank == 0, lockstep=True, kv_heads=kv_local,
                    prompt_salt=index)


variants("infer.tp", "inference", "tp", run_tp,
         base={"model": "gpt3b", "seq_len": 2048, "batch": 32, "prompt_len": 512, "gen_len": 256},
         toy=TOY, gpus=0, grid={
             "xl3b_b32": {},
             "g7b_b64": {"model": "gpt7b", "batch": 64, "prompt_len": 1024, "gen_len": 512},
             "l1b_b1_latency": {"model": "gpt1b", "batch": 1, "prompt_len": 128, "gen_len": 512},
             "m350m_b256": {"model": "gpt350m", "batch": 256, "prompt_len": 256, "gen_len": 256},
         })


# --------------------------------------------------------------------------- pipeline parallel
def split_stages(model: GPT, rank: int, world: int) -> range:
    """Keep this rank's contiguous slice of layers; embeddings on the first stage, head on the last."""
    n = model.cfg.n_layers
    if n < world:
        raise ValueError(f"{n} layers cannot fill {world} pipeline stages")
    lo, hi = rank * n // world, (rank + 1) * n // world
    for key in list(model.layers.keys()):
        if not lo <= int(key) < hi:
            del model.layers[key]
    if rank != 0:
        model.tok = model.pos = None
    if rank != world - 1:
        model.norm = model.head = None
    return range(lo, hi)


def _pp_phase(ctx: Context, model: GPT, caches: list[KVCache], inputs: list[torch.Tensor] | None,
              shape: tuple[int, ...]) -> torch.Tensor | None:
    """One forward of every micro-batch through this stage; returns all next tokens on every rank
    (the last stage samples them and sends them back to stage 0, the only other rank needing them)."""
    rank, world = ctx.rank, ctx.world_size
    outs = []
    for m, cache in enumerate(caches):
        if rank == 0:
            x = inputs[m]
        else:
            x = torch.empty(shape, dtype=ctx.dtype, device=ctx.device)
            dist.recv(x, src=rank - 1)
        y = model(x, cache)
        if rank < world - 1:
            y = y.contiguous()
            dist.send(y, dst=rank + 1)
            ctx.ledger.collective("send_activations", y.numel() * y.element_size(), peer_label("send", rank + 1))
        else:
            outs.append(sample(y[:, -1]))
    batch = shape[0] * len(caches)
    if rank == world - 1:
        tokens = torch.cat(outs)
        dist.send(tokens, dst=0)
        ctx.ledger.collective("send_tokens", tokens.numel() * tokens.element_size(), peer_label("send", 0))
        return tokens
    if rank == 0:
        tokens = torch.empty(batch, 1, dtype=torch.long, device=ctx.device)
        dist.recv(tokens, src=world - 1)
        return tokens
    return None


@inference_entry
def run_pp(ctx: Context, cfg: dict) -> None:
    """Pipeline-parallel generation: layers split over ranks, micro-batches flow one way."""
    need_all_ranks(ctx, "pipeline-parallel inference")
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    layers = split_stages(model, ctx.rank, ctx.world_size)
    batch, plen, glen, n_micro = (int(cfg[k]) for k in ("batch", "prompt_len", "gen_len", "micro_batches"))
    if batch % n_micro:
        raise ValueError(f"batch {batch} does not split into {n_micro} micro-batches")
    mb = batch // n_micro
    fit = fit_model(model, mcfg, ctx, first_stage=ctx.rank == 0)
    ctx.ledger.extra.update(fit.as_dict(), params=mcfg.params(), layers=[layers.start, layers.stop])
    caches = [KVCache(mcfg, len(layers), mb, plen + glen, ctx.device, ctx.dtype) for _ in range(n_micro)]
    src = prompt_source(ctx)
    last = ctx.rank == ctx.world_size - 1
    rounds = 0
    while agree(ctx, ctx.keep_going()):
        prompts = src.prompts(batch, plen).chunk(n_micro) if ctx.rank == 0 else None
        for c in caches:
            c.length = 0
        t0 = time.perf_counter()
        tok = _pp_phase(ctx, model, caches, prompts, (mb, plen, mcfg.d_model))
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * plen if last else 0, flops=fit.prefill(batch, plen))
        for _ in range(glen - 1):
            inputs = tok.chunk(n_micro) if ctx.rank == 0 else None
            t0 = time.perf_counter()
            tok = _pp_phase(ctx, model, caches, inputs, (mb, 1, mcfg.d_model))
            ctx.sync()
            ctx.ledger.step(time.perf_counter() - t0, batch if last else 0,
                            flops=fit.decode(batch, caches[0].length))
        rounds += 1
    ctx.ledger.extra["rounds"] = rounds


# Issue 9 (8 × H200): 8-way tensor parallel, the 2-GPU configs' models on a quarter of the weights each.
variants("infer.tp8", "inference", "tp", run_tp,
         base={"model": "gpt7b", "seq_len": 2048, "batch": 64, "prompt_len": 1024, "gen_len": 512, "tp": 8},
         toy={**TOY, "model": "toy8"}, gpus=0, min_ranks=8, grid={
             "g7b_b64": {},
             "xl3b_b128": {"model": "gpt3b", "batch": 128, "prompt_len": 512, "gen_len": 256},
         })


variants("infer.pp", "inference", "pp", run_pp,
         base={"model": "gpt3b", "seq_len": 2048, "batch": 64, "prompt_len": 512, "gen_len": 256,
               "micro_batches": 4},
         toy=TOY, gpus=0, grid={
             "xl3b_b64_mb4": {},
             "g7b_b32_mb2": {"model": "gpt7b", "batch": 32, "prompt_len": 1024, "gen_len": 128,
                             "micro_batches": 2},
             "l1b_b128_mb8": {"model": "gpt1b", "batch": 128, "prompt_len": 256, "gen_len": 384,
                              "micro_batches": 8},
         })


# --------------------------------------------------------------------------- disaggregated serving
def kv_transfer_bytes(mcfg: ModelConfig, batch: int, prompt_len: int, bytes_per_value: int) -> int:
    """Bytes of KV cache one prefill hands to the decode rank: 2 · layers · kv_heads · head_dim · bytes
    per prompt token."""
    return 2 * mcfg.n_layers * mcfg.kv_heads * mcfg.head_dim * bytes_per_value * batch * prompt_len


def _prefill_rank(ctx: Context, model: GPT, mcfg: ModelConfig, cfg: dict, fit, dst: int) -> None:
    batch, plen = int(cfg["batch"]), int(cfg["prompt_len"])
    pause_s = float(cfg.get("pause_s", 0.0))
    # Cache exactly prompt_len long, so each layer's keys and values are contiguous and go as they are.
    cache = KVCache(mcfg, mcfg.n_layers, batch, plen, ctx.device, ctx.dtype)
    src = prompt_source(ctx, salt=ctx.rank)
    header = torch.ones(1, dtype=torch.long, device=ctx.device)
    to = peer_label("send", dst)
    rounds = 0
    while ctx.keep_going():
        prompts = src.prompts(batch, plen)
        cache.length = 0
        t0 = time.perf_counter()
        tok = sample(model(prompts, cache)[:, -1])
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * plen, flops=fit.prefill(batch, plen))
        for t in (header, tok):
            dist.send(t, dst=dst)
            ctx.ledger.collective("send_control", t.numel() * t.element_size(), to)
        for kv in (*cache.k, *cache.v):
            dist.send(kv, dst=dst)
            ctx.ledger.collective("send_kv_cache", kv.numel() * kv.element_size(), to)
        ctx.sync()   # back-pressure: wait until the decode rank took the cache
        rounds += 1
        if pause_s > 0:
            time.sleep(pause_s)
    header.zero_()
    dist.send(header, dst=dst)
    ctx.ledger.collective("send_control", header.numel() * header.element_size(), to)
    ctx.ledger.extra["rounds"] = rounds


def _decode_rank(ctx: Context, model: GPT, mcfg: ModelConfig, cfg: dict, fit, src: int) -> None:
    batch, plen, glen = int(cfg["batch"]), int(cfg["prompt_len"]), int(cfg["gen_len"])
    cache = KVCache(mcfg, mcfg.n_layers, batch, plen + glen, ctx.device, ctx.dtype)
    staging = torch.empty_like(cache.k[0][:, :, :plen])
    header = torch.empty(1, dtype=torch.long, device=ctx.device)
    tok = torch.empty(batch, 1, dtype=torch.long, device=ctx.device)
    rounds = 0
    while True:
        dist.recv(header, src=src)
        if int(header.item()) == 0:
            break
        dist.recv(tok, src=src)
        for kv in (*cache.k, *cache.v):
            dist.recv(staging, src=src)
            kv[:, :, :plen].copy_(staging)
        cache.length = plen
        for _ in range(glen - 1):   # a round always finishes: the prefill rank decides when to stop
            t0 = time.perf_counter()
            tok = sample(model(tok, cache)[:, -1])
            ctx.sync()
            ctx.ledger.step(time.perf_counter() - t0, batch, flops=fit.decode(batch, cache.length))
        rounds += 1
    ctx.ledger.extra["rounds"] = rounds


def disagg_peer(rank: int, world: int) -> tuple[str, int]:
    """Role and partner of a rank in disaggregated serving: the first half of the ranks prefill, the
    second half decode, and prefill rank i hands its caches to decode rank i + world / 2."""
    if world < 2 or world % 2:
        raise ValueError(f"disaggregated serving pairs prefill and decode ranks: needs an even world, got {world}")
    half = world // 2
    return ("prefill", rank + half) if rank < half else ("decode", rank - half)


@inference_entry
def run_disagg(ctx: Context, cfg: dict) -> None:
    """Disaggregated serving: the first half of the ranks prefill and send each KV cache over NCCL to
    their partner in the second half, which decodes (2 ranks: prefill on 0, decode on 1)."""
    need_all_ranks(ctx, "disaggregated serving")
    role, peer = disagg_peer(ctx.rank, ctx.world_size)
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    fit = fit_model(model, mcfg, ctx)
    ctx.ledger.extra.update(fit.as_dict(), params=mcfg.params(), role=role, peer=peer,
                            kv_bytes_per_round=kv_transfer_bytes(mcfg, int(cfg["batch"]), int(cfg["prompt_len"]),
                                                                 torch.empty(0, dtype=ctx.dtype).element_size()))
    (_prefill_rank if role == "prefill" else _decode_rank)(ctx, model, mcfg, cfg, fit, peer)


variants("infer.disagg", "inference", "disagg", run_disagg,
         base={"model": "gpt1b", "seq_len": 4096, "batch": 32, "prompt_len": 2048, "gen_len": 256},
         toy=TOY, gpus=0, grid={
             "l1b_b32_p2k": {},
             "xl3b_b16_p4k": {"model": "gpt3b", "seq_len": 4608, "batch": 16, "prompt_len": 4096,
                              "gen_len": 128},
             "m350m_b64_p1k_bursty": {"model": "gpt350m", "seq_len": 2048, "batch": 64, "prompt_len": 1024,
                                      "gen_len": 512, "pause_s": 1.5},
         })

# Issue 9 (8 × H200): four prefill ranks each feeding one decode rank.
variants("infer.disagg4x4", "inference", "disagg", run_disagg,
         base={"model": "gpt1b", "seq_len": 4096, "batch": 32, "prompt_len": 2048, "gen_len": 256},
         toy=TOY, gpus=0, min_ranks=8, grid={
             "l1b_b32_p2k": {},
             "xl3b_b16_p4k": {"model": "gpt3b", "seq_len": 4608, "batch": 16, "prompt_len": 4096,
                              "gen_len": 128},
         })
