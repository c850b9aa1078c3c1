"""A serving loop as a real LLM server runs it: requests arrive at random (Poisson, optionally in
bursts) with random prompt and output lengths, and continuous batching lets them join and leave the
running batch at every iteration. Each running request owns a slot of one preallocated KV-cache pool.

One iteration (one ledger step) = admit waiting requests up to the free slots and a prefill-token
budget (the joining prompts are prefilled together, padded, straight into their slots), then one decode step over every
running request, whose lengths differ: attention is masked per row. Finished requests leave, and the
last slot moves into the hole, so the running batch stays a contiguous prefix of the pool.

Variants: one GPU; independent replicas on every GPU; tensor-parallel over all GPUs, where rank 0
schedules and broadcasts its decisions on the CPU group (as vLLM's driver does), so every rank runs
the same batch and the per-layer all-reduces vary in size with the load.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .base import Context, variants
from .infer_common import (build_model, fit_model, inference_entry, model_config, need_all_ranks, prompt_source,
                           sample)
from .infer_parallel import shard_tensor_parallel
from .model import GPT, KVCache, ModelConfig


class SlotPool:
    """KV cache of ``slots`` requests; slot i holds the i-th running request, ``lengths[i]`` tokens."""

    def __init__(self, mcfg: ModelConfig, slots: int, max_len: int, device, dtype, kv_heads: int | None):
        self.cache = KVCache(mcfg, mcfg.n_layers, slots, max_len, device, dtype, kv_heads)
        self.slots = slots
        self.lengths: list[int] = []
        self.tokens = torch.zeros(slots, 1, dtype=torch.long, device=device)

    @property
    def n(self) -> int:
        return len(self.lengths)

    def view(self, slot: int, count: int = 1) -> KVCache:
        """A KVCache over slots ``slot .. slot+count-1`` (views), so a prefill writes in place."""
        v = KVCache.__new__(KVCache)
        v.k = [k[slot:slot + count] for k in self.cache.k]
        v.v = [x[slot:slot + count] for x in self.cache.v]
        v.length = 0
        return v

    def release(self, slot: int) -> None:
        last = self.n - 1
        if slot != last:
            n = self.lengths[last]
            for t in (*self.cache.k, *self.cache.v):
                t[slot, :, :n] = t[last, :, :n]
            self.tokens[slot] = self.tokens[last]
            self.lengths[slot] = n
        self.lengths.pop()


def decode_pool(model: GPT, pool: SlotPool) -> torch.Tensor:
    """One decode step of every running slot (tokens in ``pool.tokens``); returns logits [n, vocab].
    Uses the model's own modules; rows attend to their own length only (boolean mask)."""
    n, hd = pool.n, model.cfg.head_dim
    device = pool.tokens.device
    pos = torch.tensor(pool.lengths, device=device)
    attended = max(pool.lengths) + 1
    mask = (torch.arange(attended, device=device)[None, :] <= pos[:, None])[:, None, None, :]
    rows = torch.arange(n, device=device)
    x = model.tok(pool.tokens[:n]) + model.pos(pos)[:, None, :]
    for i, block in enumerate(model.layers.values()):
        a, h = block.attn, block.ln1(x)
        q = a.q(h).view(n, 1, -1, hd).transpose(1, 2)
        k = a.k(h).view(n, 1, -1, hd).transpose(1, 2)
        v = a.v(h).view(n, 1, -1, hd).transpose(1, 2)
        pool.cache.k[i][rows, :, pos] = k[:, :, 0]
        pool.cache.v[i][rows, :, pos] = v[:, :, 0]
        kk = pool.cache.k[i][:n, :, :attended]
        vv = pool.cache.v[i][:n, :, :attended]
        rep = q.shape[1] // kk.shape[1]
        if rep > 1:
            kk, vv = kk.repeat_interleave(rep, dim=1), vv.repeat_interleave(rep, dim=1)
        y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
        x = x + a.o(y.transpose(1, 2).reshape(n, 1, -1))
        x = x + block.mlp(block.ln2(x))
    return model.head(model.norm(x))[:, -1]


def prefill_into_pool(model: GPT, pool: SlotPool, prompts: list[list[int]]) -> list[int]:
    """Prefill the joining prompts into the next free slots in one forward, right-padded to the
    longest: causal attention keeps each real token blind to the padding after it, and the pads'
    cache entries lie beyond the request's length, masked in decode and overwritten as it grows.
    Sets each slot's first generated token; returns the prompt lengths."""
    device = pool.tokens.device
    first, lens = pool.n, [len(p) for p in prompts]
    rows = torch.zeros(len(prompts), max(lens), dtype=torch.long)
    for j, p in enumerate(prompts):
        rows[j, :lens[j]] = torch.tensor(p)
    logits = model(rows.to(device), pool.view(first, len(prompts)))
    last = torch.tensor(lens, device=device) - 1
    pool.tokens[first:first + len(prompts)] = sample(logits[torch.arange(len(prompts), device=device), last])
    pool.lengths.extend(lens)
    return lens


@dataclass
class Request:
    rid: int
    prompt: list[int]
    out_len: int
    arrival_s: float
    generated: int = 0
    first_token_s: float | None = None


class Arrivals:
    """Poisson arrivals (rate ``rate_rps``); with ``burst_period_s`` the rate is ``burst_factor``× in
    the first quarter of each period and correspondingly lower in the rest (same mean)."""

    def __init__(self, cfg: dict, seed: int, src):
        self.rng = random.Random(seed)
        self.rate = float(cfg["rate_rps"])
        self.period = float(cfg.get("burst_period_s", 0.0))
        self.factor = float(cfg.get("burst_factor", 1.0))
        self.cfg, self.src = cfg, src
        self.next_s = self._gap(0.0)
        self.rid = 0

    def _rate(self, t: float) -> float:
        if self.period <= 0:
            return self.rate
        hi = self.rate * self.factor
        lo = max(self.rate * (4 - self.factor) / 3, self.rate * 0.05)
        return hi if (t % self.period) < self.period / 4 else lo

    def _gap(self, t: float) -> float:
        return t + self.rng.expovariate(self._rate(t))

    def _length(self, median: float, hi: int) -> int:
        return max(1, min(hi, int(round(self.rng.lognormvariate(math.log(median), 0.6)))))

    def due(self, now_s: float) -> list[Request]:
        out = []
        seq_len = int(self.cfg["seq_len"])
        while self.next_s <= now_s:
            plen = self._length(float(self.cfg["prompt_median"]), int(self.cfg["prompt_max"]))
            olen = self._length(float(self.cfg["output_median"]), seq_len - plen)
            prompt = self.src.prompts(1, plen)[0].tolist()
            out.append(Request(self.rid, prompt, olen, self.next_s))
            self.rid += 1
            self.next_s = self._gap(self.next_s)
        return out


class Scheduler:
    """Rank 0's decisions: which waiting requests join this iteration, or how long to sleep."""

    def __init__(self, ctx: Context, cfg: dict, slots: int):
        self.arrivals = Arrivals(cfg, ctx.seed * 104729 + ctx.rank, prompt_source(ctx, salt=ctx.rank))
        self.queue: deque[Request] = deque()
        self.slots, self.budget = slots, int(cfg["max_prefill_tokens"])
        self.t0 = time.time()
        self.max_queue = 0

    def now(self) -> float:
        return time.time() - self.t0

    def plan(self, running: int, go: bool) -> dict:
        self.queue.extend(self.arrivals.due(self.now()))
        self.max_queue = max(self.max_queue, len(self.queue))
        admit, longest = [], 0
        # The budget counts padded prefill tokens (joining prompts are padded to the longest).
        while go and self.queue and running + len(admit) < self.slots and (
                not admit or (len(admit) + 1) * max(longest, len(self.queue[0].prompt)) <= self.budget):
            req = self.queue.popleft()
            longest = max(longest, len(req.prompt))
            admit.append(req)
        idle = go and not running and not admit
        sleep_s = min(0.25, max(0.0, self.arrivals.next_s - self.now())) if idle else 0.0
        return {"go": go, "admit": admit, "sleep_s": sleep_s}


@inference_entry
def run_serve(ctx: Context, cfg: dict) -> None:
    """Continuous-batching server with random arrivals and lengths (one GPU, replicas, or TP)."""
    tp = bool(cfg.get("tp", False))
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    kv_heads = None
    if tp:
        need_all_ranks(ctx, "tensor-parallel serving")
        kv_heads = shard_tensor_parallel(model, ctx.rank, ctx.world_size, None, ctx.ledger)
    if int(cfg["prompt_max"]) >= mcfg.seq_len:
        raise ValueError("prompt_max must leave room for output tokens below seq_len")
    fit = fit_model(model, mcfg, ctx, kv_heads=kv_heads)
    ctx.ledger.clear_collectives()
    pool = SlotPool(mcfg, int(cfg["slots"]), mcfg.seq_len, ctx.device, ctx.dtype, kv_heads)
    lead = not tp or ctx.rank == 0
    sched = Scheduler(ctx, cfg, pool.slots) if lead else None
    running: list[Request] = []
    done_latency_s, ttft_s = [], []
    while True:
        plan = sched.plan(len(running), ctx.keep_going()) if lead else None
        if tp:
            box = [plan]
            dist.broadcast_object_list(box, src=0, group=ctx.cpu_group)
            plan = box[0]
        if not plan["go"]:
            break   # shut down as a server does at the end of its slot; unfinished requests are dropped
        if plan["sleep_s"] > 0:
            time.sleep(plan["sleep_s"])
            continue
        t0 = time.perf_counter()
        step_flops = tokens = 0
        admit = plan["admit"]
        if admit:
            lens = prefill_into_pool(model, pool, [r.prompt for r in admit])
            for req in admit:
                req.generated = 1
                running.append(req)
            tokens += sum(lens)
            step_flops += fit.prefill(len(admit), max(lens))
        decoding = [i for i, r in enumerate(running) if r.generated < r.out_len]
        if pool.n:
            attended = max(pool.lengths) + 1
            pool.tokens[:pool.n] = sample(decode_pool(model, pool))
            step_flops += fit.decode(pool.n, attended)
            tokens += len(decoding)
            for i in range(pool.n):
                pool.lengths[i] += 1
            for i in decoding:
                running[i].generated += 1
        out = pool.tokens[:pool.n].tolist()   # a server streams each new token to its client
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, tokens if lead else 0, flops=step_flops)
        now = time.time()
        for req in plan["admit"]:
            req.first_token_s = now
        for i in sorted((i for i, r in enumerate(running) if r.generated >= r.out_len), reverse=True):
            req = running[i]
            if lead:
                done_latency_s.append(sched.now() - req.arrival_s)
                ttft_s.append(req.first_token_s - sched.t0 - req.arrival_s)
            pool.release(i)
            running[i] = running[-1]
            running.pop()
        del out
    if lead:
        med = (lambda xs: sorted(xs)[len(xs) // 2] if xs else None)
        ctx.ledger.extra.update(requests_done=len(done_latency_s), requests_arrived=sched.arrivals.rid,
                                requests_unfinished=len(running) + len(sched.queue),
                                median_latency_s=med(done_latency_s), median_ttft_s=med(ttft_s),
                                max_queue=sched.max_queue)
    ctx.ledger.extra.update(fit.as_dict(), params=mcfg.params())


BASE = {"model": "gpt350m", "seq_len": 2048, "slots": 128, "rate_rps": 8.0, "prompt_median": 256,
        "prompt_max": 1536, "output_median": 128, "max_prefill_tokens": 4096}
TOY = {"model": "toy", "seq_len": 64, "slots": 4, "rate_rps": 400.0, "prompt_median": 8, "prompt_max": 24,
       "output_median": 4, "max_prefill_tokens": 48, "burst_period_s": 0.0}

variants("infer.serve", "inference", "serve", run_serve, BASE, TOY, gpus=1, grid={
    "s125m_r4_light": {"model": "gpt125m", "rate_rps": 4.0, "slots": 64},
    "m350m_r40_heavy": {"rate_rps": 40.0, "slots": 256},
    "l1b_r10_bursty": {"model": "gpt1b", "rate_rps": 10.0, "burst_period_s": 20.0, "burst_factor": 3.0},
    "xl3b_r1_idle": {"model": "gpt3b", "rate_rps": 1.0, "slots": 32, "output_median": 256},
    "l1b_r6_longctx": {"model": "gpt1b", "seq_len": 8192, "rate_rps": 6.0, "prompt_median": 2048,
                       "prompt_max": 7000, "output_median": 256, "max_prefill_tokens": 8192},
})
variants("infer.serve", "inference", "serve", run_serve, BASE, TOY, gpus=0, grid={
    "m350m_r16_replicas": {"rate_rps": 16.0},
    "l1b_r20_tp2": {"model": "gpt1b", "rate_rps": 20.0, "tp": True},
    "g7b_r6_tp2": {"model": "gpt7b", "rate_rps": 6.0, "slots": 64, "tp": True, "burst_period_s": 30.0,
                   "burst_factor": 2.0},
})
