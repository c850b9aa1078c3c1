"""Restore the live processor's per-node state from the store when it starts.

The store is the source of truth; a restarted processor starts from what it holds, not from zero:

* **what outlives the buffer** — each node's job (first-seen start of its latest segment, its end
  and signature, the lowest memory of the current pause, the pauses linked so far), the GPUs' idle
  memory floors, the job the node was last put in and its last judged window — is the snapshot
  written with the node's verdicts, in their transaction (table ``live_node_state``, see
  :meth:`trainsentry.collector.nodestate.NodeState.snapshot`). It is restored for every node that
  has one, however long ago: a node that comes back after its job's longest pause (10 min) starts a
  new job by the job rule itself, and its idle floors are still known.
* **the sample buffer** — for each node heard from in the last hour, the samples of the last
  ``buffer_s`` (30 s) before its latest one: exactly what the buffer of a processor that never
  stopped holds, so segmentation sees the same segments; with its unmonitored intervals in that
  span, found through the indexed batches table. Samples committed after the last judged window
  (the processor runs behind ingest) are among them and are judged with the next batch.

The next window is set after the node's last judged one, so nothing already judged is judged
again and the first new batch that completes a window gets its verdict at once. The k-of-n votes
and open alerts are read back from the verdict and alert tables by the processor itself.
"""

from __future__ import annotations

import json
import logging
import math
import sqlite3
import time

from . import verdicts as V
from .schema import SAMPLE_METRICS

log = logging.getLogger("trainsentry.collector.warm")

# Nodes silent for longer than this (server clock) get no buffer: a node that comes back after
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


def restore(conn: sqlite3.Connection, cfg, make_state, now: float | None = None) -> tuple[dict, int, dict]:
    """({node: state}, samples read, {"states": nodes whose snapshot was restored, "unusable":
    {node: why}}). ``make_state`` is the NodeState class."""
    now = time.time() if now is None else now
    nodes, n, unusable = {}, 0, {}
    for name, (t_end, raw) in sorted(V.node_states(conn).items()):
        try:
            nodes[name] = make_state.from_snapshot(json.loads(raw))
        except ValueError as e:  # a snapshot this version cannot read: that node starts afresh, said
            unusable[name] = str(e)
            log.error("live state of node %s not restored: %s", name, e)
    restored = len(nodes)
    for node_id, name, last_t in conn.execute(
            "SELECT node_id, name, last_t FROM nodes WHERE last_t IS NOT NULL AND last_seen >= ? ORDER BY name",
            (now - WARM_MAX_AGE_S,)).fetchall():
        samples = node_samples(conn, node_id, last_t - cfg.buffer_s)
        if not samples:
            continue
        st = nodes.get(name) or nodes.setdefault(name, make_state())
        st.add(samples, cfg.buffer_s)
        st.gaps = [(s, e) for s, e in conn.execute(
            "SELECT start_t, end_t FROM unmonitored WHERE node_id = ? AND end_t >= ?", (node_id, last_t - cfg.buffer_s))]
        st.table = st.build_table(name, cfg.loopback_as_link)  # a peer's view for jobs across nodes
        v = V.latest(conn, "node", name)
        if v is not None:  # continue after the last judged window, never re-judge it
            st.next_k = math.floor(v["t_end"] / cfg.stride_s + 1e-9) + 1
        n += len(samples)
    return nodes, n, {"states": restored, "unusable": unusable}
