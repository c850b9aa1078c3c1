"""Warm the live processor's per-node buffers from the store when it starts.

Without this a restarted collector starts every node's buffer empty, and the first verdict after
a restart waits for a full window (8 s) of *new* samples. The samples are in the database already:
for each node heard from recently, the last ``window_s`` (plus one second, so counters have a
previous reading to turn into a rate at the window's start) of its samples are read back, in the
wire form the bus delivers, together with its unmonitored intervals in that span. The next window
is set after the node's last judged one, so nothing already judged is judged again and the first
new batch that completes a window gets its verdict at once.
"""

from __future__ import annotations

import math
import sqlite3
import time

from . import verdicts as V
from .schema import SAMPLE_METRICS

# Nodes silent for longer than this (server clock) are not warmed: a node that comes back after
# an hour starts a new buffer anyway (its old samples fall outside any window of the new ones).
WARM_MAX_AGE_S = 3600.0
_COLS = ", ".join(("device", "kind", "t", *SAMPLE_METRICS))


def node_samples(conn: sqlite3.Connection, node_id: int, since_t: float) -> list[dict]:
    """Samples of one node with ``t >= since_t`` as wire dicts ({dev, kind, t, m}), in time order.

    Found through the indexed batches table (samples have no index of their own): the batches
    that end at or after ``since_t`` give the sample_id range to scan."""
    lo, hi = conn.execute("SELECT min(first_sample), max(last_sample) FROM batches WHERE node_id = ? AND t_last >= ?",
                          (node_id, since_t)).fetchone()
    if lo is None:
        return []
    rows = conn.execute(f"SELECT {_COLS} FROM samples WHERE sample_id BETWEEN ? AND ? AND node_id = ? AND t >= ? "
                        "ORDER BY t, device", (lo, hi, node_id, since_t)).fetchall()
    names = SAMPLE_METRICS
    return [{"dev": r[0], "kind": r[1], "t": r[2], "m": {k: v for k, v in zip(names, r[3:]) if v is not None}}
            for r in rows]


def restore(conn: sqlite3.Connection, cfg, make_state, now: float | None = None) -> tuple[dict, int]:
    """({node: state} with warmed buffers, samples read). ``make_state`` builds an empty NodeState."""
    now = time.time() if now is None else now
    nodes, n = {}, 0
    span_s = cfg.window_s + 1.0
    for node_id, name, last_t in conn.execute(
            "SELECT node_id, name, last_t FROM nodes WHERE last_t IS NOT NULL AND last_seen >= ? ORDER BY name",
            (now - WARM_MAX_AGE_S,)).fetchall():
        samples = node_samples(conn, node_id, last_t - span_s)
        if not samples:
            continue
        st = make_state()
        st.add(samples, cfg.buffer_s)
        st.gaps = [(s, e) for s, e in conn.execute(
            "SELECT start_t, end_t FROM unmonitored WHERE node_id = ? AND end_t >= ?", (node_id, last_t - span_s))]
        v = V.latest(conn, "node", name)
        if v is not None:  # continue after the last judged window, never re-judge it
            st.next_k = math.floor(v["t_end"] / cfg.stride_s + 1e-9) + 1
        nodes[name] = st
        n += len(samples)
    return nodes, n
