"""A tool-calling agent (family ``agent``): a benign inference service whose model stops in every
turn while the host runs the tool it called, then reads the tool's answer into its cache. The GPU
works in bursts between stretches of host work, as in the short-answer RAG runs that fooled the
single-device lead (docs/host.md), but the host work is a database query, often on one thread (agent
frameworks commonly run a turn's tool calls one after another), the thread count of ZeRO-Offload's
cheapest red-team setting.

The tool is a real SQL database: SQLite in host memory holding ``n_rows`` passages of ``doc_len``
tokens of the corpus's training split (bytes: the vocabulary is byte-level), one copy per tool thread
(``host_threads``). ``batch`` agents run an episode in lock step:

1. the model prefills ``prompt_len`` tokens of a prompt (validation split);
2. ``turns`` times: it decodes a tool call of ``call_len`` tokens; the call's last ``pattern_len``
   bytes go to the host (device to host) and the tool runs, per agent, ``SELECT count(*), min(id)
   FROM passages WHERE instr(text, ?) > 0`` (a full scan); the first matching passage (or, with no
   match, the passage the pattern's bytes number: most calls in the H200 runs) goes back to the GPU
   (host to device, batch × doc_len × 8 bytes) and is appended to the model's cache (the call's last
   token, sampled but not yet fed, is not: a simplification that shortens each turn by one token);
3. it decodes an answer of ``answer_len`` tokens.

Ledger: one step per forward call (a prefill, a decode step, a tool result's append); the append's
time includes the tool's run before it (as RAG's search is in its prefill step); tokens the prompts',
the decoded and the tool results'; FLOPs from the fit infer.generate uses. Extra: the tool's host
time, the calls and how many found a match, the threads, the database's size, the bytes each way.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from .base import Context, use_host_threads, variants
from .infer_common import build_model, fit_model, inference_entry, model_config, prompt_source, sample
from .infer_rag import passages
from .model import KVCache

QUERY = "SELECT count(*), min(id) FROM passages WHERE instr(text, ?) > 0"


def database(docs: torch.Tensor) -> bytes:
    """The passages (row i: passage i's tokens as bytes) as a serialized SQLite database."""
    con = sqlite3.connect(":memory:")
    con.execute("CREATE TABLE passages (id INTEGER PRIMARY KEY, text BLOB NOT NULL)")
    rows = docs.to(torch.uint8).numpy()
    con.executemany("INSERT INTO passages VALUES (?, ?)", ((i, row.tobytes()) for i, row in enumerate(rows)))
    con.commit()
    image = con.serialize()
    con.close()
    return image


class Tool:
    """The database on ``threads`` threads, each with its own copy (a connection is not shared)."""

    def __init__(self, image: bytes, threads: int):
        self.image, self.local = image, threading.local()
        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="tool")

    def _query(self, pattern: bytes) -> tuple[int, int | None]:
        con = getattr(self.local, "con", None)
        if con is None:
            con = self.local.con = sqlite3.connect(":memory:")
            con.deserialize(self.image)
        count, first = con.execute(QUERY, (pattern,)).fetchone()
        return int(count), first

    def run(self, patterns: list[bytes]) -> list[tuple[int, int | None]]:
        return list(self.pool.map(self._query, patterns))

    def close(self) -> None:
        self.pool.shutdown()


def answer_rows(results: list[tuple[int, int | None]], patterns: list[bytes], n_rows: int) -> list[int]:
    """The passage each call returns: its first match, else the one the pattern's bytes number."""
    return [first if first is not None else int.from_bytes(p, "big") % n_rows for (_, first), p in zip(results, patterns)]


@inference_entry
def run_agent(ctx: Context, cfg: dict) -> None:
    mcfg = model_config(cfg)
    batch, plen, turns = int(cfg["batch"]), int(cfg["prompt_len"]), int(cfg["turns"])
    clen, dlen, alen = int(cfg["call_len"]), int(cfg["doc_len"]), int(cfg["answer_len"])
    n_rows, plen_pat = int(cfg["n_rows"]), int(cfg["pattern_len"])
    total = plen + turns * (clen + dlen) + alen
    if total + 1 > mcfg.seq_len:
        raise ValueError(f"prompt_len + turns·(call_len + doc_len) + answer_len + 1 = {total + 1} exceeds seq_len {mcfg.seq_len}")
    if not 0 < plen_pat <= clen:
        raise ValueError(f"pattern_len must be between 1 and call_len {clen}, got {plen_pat}")
    docs = passages(n_rows, dlen)     # before any GPU work: a corpus too small is a clear error at once
    threads = use_host_threads(cfg)
    t0 = time.perf_counter()
    image = database(docs)
    tool = Tool(image, threads)
    db_build_s = time.perf_counter() - t0
    model = build_model(ctx, mcfg)
    fit = fit_model(model, mcfg, ctx)
    ctx.ledger.extra.update(fit.as_dict())
    ctx.ledger.clear_collectives()
    src = prompt_source(ctx, salt=ctx.rank)
    cache = KVCache(mcfg, mcfg.n_layers, batch, total + 1, ctx.device, ctx.dtype)
    episodes = calls = matched = decoded = appended = 0
    tool_s = 0.0

    def decode(n: int, tok: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        nonlocal decoded
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            tok = sample(model(tok, cache)[:, -1])
            ctx.sync()
            ctx.ledger.step(time.perf_counter() - t0, batch, flops=fit.decode(batch, cache.length))
            decoded += batch
            out.append(tok)
        return tok, out

    try:
        while ctx.keep_going():
            cache.length = 0
            t0 = time.perf_counter()
            tok = sample(model(src.prompts(batch, plen), cache)[:, -1])
            ctx.sync()
            ctx.ledger.step(time.perf_counter() - t0, batch * plen, flops=fit.prefill(batch, plen))
            for _ in range(turns):
                if not ctx.keep_going():
                    break
                tok, call = decode(clen, tok)
                t0 = time.perf_counter()
                tail = torch.cat(call[-plen_pat:], dim=1).cpu()                 # device to host
                patterns = [row.tobytes() for row in tail.to(torch.uint8).numpy()]
                ts = time.perf_counter()
                results = tool.run(patterns)
                tool_s += time.perf_counter() - ts
                rows = answer_rows(results, patterns, n_rows)
                start = cache.length
                tok = sample(model(docs[rows].to(ctx.device), cache)[:, -1])    # host to device
                ctx.sync()
                ctx.ledger.step(time.perf_counter() - t0, batch * dlen, flops=fit.extend(batch, dlen, start))
                calls += batch
                matched += sum(1 for count, _ in results if count > 0)
                appended += batch * dlen
            else:
                decode(alen, tok)
                episodes += 1
    finally:
        tool.close()
    ctx.ledger.extra.update(
        episodes=episodes, tool_calls=calls, tool_matches=matched, tool_s=round(tool_s, 3),
        tokens_generated=decoded, tokens_appended=appended, host_threads=threads, n_rows=n_rows,
        db_bytes=len(image), db_build_s=round(db_build_s, 3), params=mcfg.params(),
        bytes_d2h_per_turn=batch * plen_pat * 8, bytes_h2d_per_turn=batch * dlen * 8)


variants("infer.agent", "inference", "agent", run_agent,
         base={"model": "gpt1b", "seq_len": 1024, "batch": 32, "prompt_len": 128, "turns": 4, "call_len": 16,
               "doc_len": 64, "answer_len": 64, "n_rows": 131072, "pattern_len": 3, "host_threads": 1},
         toy={"model": "toy", "seq_len": 64, "batch": 2, "prompt_len": 8, "turns": 2, "call_len": 4, "doc_len": 8,
              "answer_len": 4, "n_rows": 512, "pattern_len": 2}, gpus=1, grid={
             # 32 agents, 4 tool calls an episode, the calls run one after another on one host thread
             "l1b_b32_t1": {},
             # the same calls on 8 threads: shorter stops, more busy cores
             "l1b_b32_t8": {"host_threads": 8},
             # 8 agents: each stop and each burst shorter
             "l1b_b8_t1": {"batch": 8},
             # a 0.35 B model serving 64 agents, tools on 4 threads
             "m350m_b64_t4": {"model": "gpt350m", "batch": 64, "host_threads": 4},
             # longer tool calls (64 tokens): more decoding between stops
             "l1b_b32_t1_c64": {"call_len": 64},
         })
