"""Retrieval-augmented generation with the vector index in host memory (family ``rag``): a benign
inference service that keeps host cores busy and moves data both ways over PCIe in every round, which
is what the host witness and the exchange gate look for in ZeRO-Offload (docs/host.md).

Start-up: an encoder (``embedder``: bidirectional attention, mean-pooled) embeds ``n_docs``
consecutive passages of ``doc_len`` tokens of the corpus's training split on the GPU. The normalised
vectors go to host memory (fp32), which holds the index and the passages' tokens. Then, every round:

1. the encoder embeds ``batch`` queries (``query_len`` tokens of the validation split) on the GPU;
2. the query vectors go to the host (device to host, batch × d × 4 bytes);
3. the host scores every passage against every query (an exact inner-product search: one matrix
   product on ``host_threads`` threads, default every core this process may use) and keeps the
   ``top_k`` best passages per query;
4. their tokens go to the GPU (host to device, batch × top_k × doc_len × 8 bytes) and are put before
   the query;
5. the generator prefills those ``top_k · doc_len + query_len`` tokens and decodes ``gen_len`` tokens.

Ledger: the index build is one step (its tokens and FLOPs: most of a run's tokens are the passages');
each round's embedding, search and prefill are one step, each decode one step
(docs/workloads-inference.md's convention), FLOPs from the same fits as infer.generate plus the
counted embedding. Extra: the search's total time, the bytes each way,
the threads, and whether a passage's own text retrieves it (a check that the index works).
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F

from . import flops as flopcount
from .base import Context, use_host_threads, variants
from .data import split
from .infer_common import build_model, fit_model, inference_entry, model_config, prompt_source, sample
from .model import KVCache

INDEX_BATCH = 1024   # passages embedded per forward call at start-up


def passages(n_docs: int, doc_len: int) -> torch.Tensor:
    """``n_docs`` consecutive, non-overlapping passages of the training split, [n_docs, doc_len] int64."""
    data = split("train")
    if data.size < n_docs * doc_len:
        raise ValueError(f"the corpus's training split has {data.size} tokens, fewer than n_docs × doc_len = "
                         f"{n_docs * doc_len}")
    return torch.from_numpy(data[:n_docs * doc_len].astype(np.int64)).view(n_docs, doc_len)


def embed_unit(model, tokens: torch.Tensor) -> torch.Tensor:
    return F.normalize(model.embed(tokens).float(), dim=-1)


def search(index: torch.Tensor, queries: torch.Tensor, k: int) -> torch.Tensor:
    """Exact inner-product search on the host: the ``k`` best passages per query, [batch, k]."""
    return (queries @ index.T).topk(k, dim=1).indices


@inference_entry
def run_rag(ctx: Context, cfg: dict) -> None:
    gcfg = model_config(cfg)
    batch, qlen, dlen = int(cfg["batch"]), int(cfg["query_len"]), int(cfg["doc_len"])
    k, glen, n_docs = int(cfg["top_k"]), int(cfg["gen_len"]), int(cfg["n_docs"])
    plen = k * dlen + qlen
    if plen + glen > gcfg.seq_len:
        raise ValueError(f"top_k·doc_len + query_len + gen_len = {plen + glen} exceeds seq_len {gcfg.seq_len}")
    if k > n_docs:
        raise ValueError(f"top_k {k} exceeds n_docs {n_docs}")
    ecfg = model_config({"model": cfg["embedder"], "seq_len": max(qlen, dlen)}, causal=False)
    docs = passages(n_docs, dlen)     # before any GPU work: a corpus too small is a clear error at once
    threads = use_host_threads(cfg)
    embedder, generator = build_model(ctx, ecfg), build_model(ctx, gcfg)

    t0 = time.perf_counter()
    index = torch.empty(n_docs, ecfg.d_model, dtype=torch.float32)
    for i in range(0, n_docs, INDEX_BATCH):
        index[i:i + INDEX_BATCH] = embed_unit(embedder, docs[i:i + INDEX_BATCH].to(ctx.device)).cpu()
    chunk_flops = flopcount.measure(lambda: embedder.embed(docs[:1].to(ctx.device)))   # per passage
    ctx.ledger.step(time.perf_counter() - t0, n_docs * dlen, flops=chunk_flops * n_docs)
    # the index works: a passage's own text retrieves it, or a passage of the same text, first
    probe = n_docs // 2
    best = int(search(index, embed_unit(embedder, docs[probe:probe + 1].to(ctx.device)).cpu(), 1)[0, 0])
    self_retrieved = bool(torch.equal(docs[best], docs[probe]))

    fit = fit_model(generator, gcfg, ctx)
    ctx.ledger.extra.update(fit.as_dict())
    ctx.ledger.clear_collectives()
    src = prompt_source(ctx, salt=ctx.rank)
    query_flops = flopcount.measure(lambda: embedder.embed(src.prompts(batch, qlen)))
    cache = KVCache(gcfg, gcfg.n_layers, batch, plen + glen, ctx.device, ctx.dtype)
    rounds = generated = 0
    search_s = 0.0
    while ctx.keep_going():
        q = src.prompts(batch, qlen)
        t0 = time.perf_counter()
        qv = embed_unit(embedder, q).cpu()                                 # device to host
        ts = time.perf_counter()
        top = search(index, qv, k)
        search_s += time.perf_counter() - ts
        context = docs[top.flatten()].view(batch, k * dlen).to(ctx.device)  # host to device
        cache.length = 0
        tok = sample(generator(torch.cat([context, q], dim=1), cache)[:, -1])
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, batch * plen, flops=query_flops + fit.prefill(batch, plen))
        for _ in range(glen - 1):
            if not ctx.keep_going():
                break
            t0 = time.perf_counter()
            tok = sample(generator(tok, cache)[:, -1])
            ctx.sync()
            ctx.ledger.step(time.perf_counter() - t0, batch, flops=fit.decode(batch, cache.length))
            generated += batch
        rounds += 1
    ctx.ledger.extra.update(
        rounds=rounds, tokens_generated=generated + rounds * batch, host_threads=threads, n_docs=n_docs,
        index_bytes=index.numel() * 4, search_s=round(search_s, 3), self_retrieved=self_retrieved,
        bytes_d2h_per_round=batch * ecfg.d_model * 4, bytes_h2d_per_round=batch * k * dlen * 8,
        params=gcfg.params(), embedder_params=ecfg.params())


variants("infer.rag", "inference", "rag", run_rag,
         base={"model": "gpt1b", "embedder": "gpt125m", "seq_len": 1024, "batch": 256, "query_len": 64,
               "doc_len": 64, "top_k": 4, "gen_len": 64, "n_docs": 131072},
         toy={"model": "toy", "embedder": "toy", "seq_len": 64, "batch": 2, "query_len": 8, "doc_len": 8,
              "top_k": 2, "gen_len": 4, "n_docs": 512}, gpus=1, grid={
             # 131,072 passages (8.4 M tokens: the training split of the corpus holds about 10 M) searched for 256 queries a round on every host core
             "l1b_b256_n128k": {},
             # fewer users, a longer answer: the search is a smaller share of the round
             "l1b_b64_n128k_g256": {"batch": 64, "gen_len": 256},
             # the same search on four threads: longer, fewer busy cores
             "l1b_b256_n128k_t4": {"host_threads": 4},
             # short answers (extraction, classification): the search is a large share of each round
             "l1b_b256_n128k_g8": {"gen_len": 8},
             "l1b_b256_n128k_g8_t4": {"gen_len": 8, "host_threads": 4},
             # more short-answer services, so that a refit learns the family rather than one configuration:
             # half the users and twice the answer; a smaller generator (the search a larger share); 8 threads
             "l1b_b128_n128k_g16": {"batch": 128, "gen_len": 16},
             "m350m_b256_n128k_g8": {"model": "gpt350m", "gen_len": 8},
             "l1b_b256_n128k_g8_t8": {"gen_len": 8, "host_threads": 8},
         })
