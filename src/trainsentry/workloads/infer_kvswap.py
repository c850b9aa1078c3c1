"""Multi-turn chat serving with a host-memory KV tier (family ``kvswap``, class inference), as
CachedAttention / AttentionStore (Gao et al., 2024), LMCache and vLLM's CPU swap space serve more
conversations than the GPU's memory holds caches for: between turns a conversation's KV cache lives
in pinned host memory; its next turn loads the cache host to device, prefills the user's new message
into it, decodes the reply, and saves the grown cache device to host.

Conversations are served in cohorts of ``batch`` (one batch per turn). Two device caches alternate:
after a cohort's turn a copy stream saves its cache from one and loads the cohort after next into the
same one, while the next cohort computes in the other. The save and the load run one after the other
on that stream, so PCIe carries both directions within a fraction of a second, not at the same instant;
and because every ledger step synchronises the whole device (all streams), the copies overlap only the
next turn's prefill, whose recorded step time includes them (as the H200 runs of 2026-12-02 were
recorded). A conversation that would outgrow ``seq_len`` ends and a new one starts in its place
(nothing to load); the cohorts' conversations start at staggered ages (their histories prefilled
before the run) so a run sees every length, as a server with many users does.

``save``: ``full`` writes the whole cache back each turn (a swap space: the device blocks are freed,
the host copy is the only one), ``new`` only the turn's tokens (a persistent host tier that keeps
what it had): the first saves a little more than it loads (the turn's tokens, and a new conversation
loads nothing but saves its first turn), the second mostly loads.

Why in the benign corpus: heavy PCIe traffic both ways at similar rates, within a fraction of a
second, is what ZeRO-Offload training (train_offload.py) does with gradients down and weights up, and
what the exchange gate reads as training on a one-GPU node.

Ground truth: ``turns``, ``conversations_ended``, ``bytes_to_device`` / ``bytes_to_host`` (the run's
loads and saves, counted where they are issued; the warm-up's saves are apart in
``warmup_bytes_to_host``), ``kv_bytes_per_token``, ``host_kv_bytes``. FLOPs: the generation fit, a turn
being ``FlopFit.extend`` of the message into the history plus one decode step per reply token.
"""

from __future__ import annotations

import time

import torch

from .base import Context, variants
from .infer_common import build_model, fit_model, inference_entry, model_config, prompt_source, sample
from .model import KVCache, ModelConfig


class SwapCache(KVCache):
    """A KV cache whose per-layer storage is ``[max_len, batch, kv_heads, head_dim]``, exposed to the
    model as the usual ``[batch, kv_heads, max_len, head_dim]`` views: a conversation's first ``L``
    tokens are one contiguous block per layer, so the cache crosses PCIe as 2 · layers plain copies.
    In host memory (``pin``: page-locked, for asynchronous copies) it is a conversation's stored cache."""

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, device, dtype, pin: bool = False):
        shape = (max_len, batch, cfg.kv_heads, cfg.head_dim)
        self.store = [torch.empty(shape, device=device, dtype=dtype, pin_memory=pin) for _ in range(2 * cfg.n_layers)]
        self.k = [s.permute(1, 2, 0, 3) for s in self.store[:cfg.n_layers]]
        self.v = [s.permute(1, 2, 0, 3) for s in self.store[cfg.n_layers:]]
        self.length = 0

    def copy_from(self, other: "SwapCache", tokens: int, start: int = 0) -> int:
        """Copy tokens ``start:tokens`` of ``other`` into this cache (asynchronously where both allow);
        returns the bytes copied."""
        for dst, src in zip(self.store, other.store):
            dst[start:tokens].copy_(src[start:tokens], non_blocking=True)
        return self.nbytes(tokens) - self.nbytes(start)


class KVTier:
    """Two device caches served alternately, one stored cache per cohort in host memory, and the copy
    stream that moves caches between them. ``lengths[c]``: tokens in cohort ``c``'s stored cache."""

    def __init__(self, ctx: Context, mcfg: ModelConfig, cohorts: int, batch: int, save: str):
        if cohorts < 3:
            raise ValueError("a KV tier needs at least 3 cohorts (two in the device caches, one stored)")
        if save not in ("full", "new"):
            raise ValueError(f"save must be 'full' or 'new', not {save!r}")
        self.ctx, self.save = ctx, save
        self.slots = [SwapCache(mcfg, batch, mcfg.seq_len, ctx.device, ctx.dtype) for _ in range(2)]
        self.host = [SwapCache(mcfg, batch, mcfg.seq_len, "cpu", ctx.dtype, pin=ctx.is_cuda) for _ in range(cohorts)]
        self.lengths = [0] * cohorts
        self.stream = torch.cuda.Stream(ctx.device) if ctx.is_cuda else None
        self.ready: list = [None, None]
        self.to_device = self.to_host = 0

    def _on_copy_stream(self, slot: int, work) -> None:
        if self.stream is None:
            work()
            return
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.ctx.device))   # the slot's compute has been issued
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(done)
            work()
            ready = torch.cuda.Event()
            ready.record(self.stream)
        self.ready[slot] = ready

    def load(self, cohort: int, slot: int, length: int) -> None:
        """Bring cohort ``cohort``'s stored ``length`` tokens into device cache ``slot`` (0: a new
        conversation, nothing to load)."""
        def work():
            self.to_device += self.slots[slot].copy_from(self.host[cohort], length)
        self.slots[slot].length = length
        self._on_copy_stream(slot, work)

    def store(self, cohort: int, slot: int, since: int) -> None:
        """Save device cache ``slot`` to cohort ``cohort``'s host copy: everything (``full``) or the
        tokens after ``since`` (``new``)."""
        n = self.slots[slot].length
        start = since if self.save == "new" else 0

        def work():
            self.to_host += self.host[cohort].copy_from(self.slots[slot], n, start)
        self.lengths[cohort] = n
        self._on_copy_stream(slot, work)

    def wait(self, slot: int) -> None:
        if self.ready[slot] is not None:
            torch.cuda.current_stream(self.ctx.device).wait_event(self.ready[slot])

    def finish(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()


@inference_entry
def run_kvswap(ctx: Context, cfg: dict) -> None:
    """Turns of ``cohorts`` × ``batch`` conversations: each turn prefills ``turn_len`` tokens of the
    user's message into the conversation's cache and decodes ``reply_len`` tokens, the caches moving
    between host and device memory around every turn."""
    mcfg = model_config(cfg)
    batch, cohorts = int(cfg["batch"]), int(cfg["cohorts"])
    turn, reply = int(cfg["turn_len"]), int(cfg["reply_len"])
    per_turn = turn + reply
    max_turns = mcfg.seq_len // per_turn
    if max_turns < 1:
        raise ValueError(f"turn_len + reply_len = {per_turn} exceeds seq_len {mcfg.seq_len}")
    pause_s = float(cfg.get("pause_s", 0.0))
    model = build_model(ctx, mcfg)
    fit = fit_model(model, mcfg, ctx)
    tier = KVTier(ctx, mcfg, cohorts, batch, str(cfg.get("save", "full")))
    src = prompt_source(ctx, salt=ctx.rank)

    # Warm-up (before the run): cohort c's conversation has had c · max_turns // cohorts turns, its
    # history (real text) prefilled in a device cache and saved to the host.
    for c in range(cohorts):
        age = c * max_turns // cohorts * per_turn
        if age:
            cache = tier.slots[0]
            tier.wait(0)    # the previous cohort's save from this cache has been done
            cache.length = 0
            model(src.prompts(batch, age), cache)
            tier.store(c, 0, 0)
    tier.finish()
    warmup_bytes = tier.to_host
    tier.to_host = 0
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    ctx.ledger.extra.update(fit.as_dict(), params=mcfg.params(), cohorts=cohorts, batch=batch,
                            kv_bytes_per_token=tier.slots[0].nbytes(1) // batch,
                            host_kv_bytes=sum(h.nbytes(mcfg.seq_len) for h in tier.host),
                            warmup_bytes_to_host=warmup_bytes, save=tier.save)
    ctx.ledger.clear_collectives()

    def start_of(c: int) -> int:
        """The length cohort ``c``'s next turn starts from (0: its conversation ended, a new one starts)."""
        return tier.lengths[c] if tier.lengths[c] + per_turn <= mcfg.seq_len else 0

    starts = [start_of(0), start_of(1)]
    tier.load(0, 0, starts[0])
    tier.load(1, 1, starts[1])
    rng = torch.Generator().manual_seed(ctx.seed + ctx.rank)
    turns = ended = 0
    while ctx.keep_going():
        slot, c = turns % 2, turns % cohorts
        cache, start = tier.slots[slot], starts[slot]
        ended += start == 0 and tier.lengths[c] > 0
        tier.wait(slot)
        t0 = time.perf_counter()
        tok = sample(model(src.prompts(batch, turn), cache)[:, -1])
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * turn, flops=fit.extend(batch, turn, start))
        for _ in range(reply):   # the reply's tokens are fed back: the cache grows by turn + reply
            t0 = time.perf_counter()
            tok = sample(model(tok, cache)[:, -1])
            ctx.sync()
            ctx.ledger.step(time.perf_counter() - t0, batch, flops=fit.decode(batch, cache.length))
        tier.store(c, slot, start)
        nxt = (turns + 2) % cohorts
        starts[slot] = start_of(nxt)
        tier.load(nxt, slot, starts[slot])
        turns += 1
        if pause_s > 0:
            time.sleep(float(torch.empty(1).exponential_(1 / pause_s, generator=rng)))
    tier.finish()
    ctx.ledger.extra.update(turns=turns, conversations_ended=ended, bytes_to_device=tier.to_device,
                            bytes_to_host=tier.to_host)


variants("infer.kvswap", "inference", "kvswap", run_kvswap,
         base={"model": "gpt1b", "seq_len": 2048, "cohorts": 6, "batch": 16, "turn_len": 256, "reply_len": 64,
               "save": "full"},
         toy={"model": "toy", "seq_len": 48, "cohorts": 3, "batch": 2, "turn_len": 6, "reply_len": 4},
         gpus=1, description="multi-turn chat with every conversation's KV cache kept in host memory between turns",
         grid={
             "l1b_b16_full": {},
             "xl3b_b16_full": {"model": "gpt3b", "cohorts": 4, "reply_len": 128},
             "l1b_b16_new": {"save": "new"},
             # retrieval-augmented chat: documents pasted into every turn, short answers
             "l1b_b32_rag_full": {"batch": 32, "cohorts": 4, "turn_len": 512, "reply_len": 16},
         })
