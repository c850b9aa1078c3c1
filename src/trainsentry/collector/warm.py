"""Restore the live processor's per-node state from the store when it starts, and read stored
batches back for it (its catch-up).

The store is the source of truth; a restarted processor starts from what it holds, not from zero:

* **what outlives the buffer** — each node's job (first-seen start of its latest segment, its end
  and signature, the lowest memory of the current pause, the pauses linked so far), the GPUs' idle
  memory floors, the job the node was last put in, its last judged window, and ``seq``, the last
  stored batch its buffer had read — is the snapshot written with the node's verdicts, in their
  transaction (table ``live_node_state``, see
  :meth:`trainsentry.collector.nodestate.NodeState.snapshot`). It is restored for every node that
  has one, however long ago: a node that comes back after its job's longest pause (10 min) starts a
  new job by the job rule itself, and its idle floors are still known.
* **the sample buffer** — the samples of the batches up to ``seq`` in the ``buffer_s`` (30 s) before
  the latest of them: exactly what the buffer of a processor that never stopped held when it wrote
  the snapshot, so segmentation sees the same segments; with the unmonitored intervals those
  batches revealed in that span.
* **the backlog** — the batches stored after ``seq`` (committed while the processor ran behind,
  or while it was not running) are *not* folded into the buffer: :func:`restore` returns them as
  the node's backlog and the processor reads them back one batch at a time, in seq order, judging
  every window they complete as if they had just arrived (:func:`stored_batches`,
  :func:`batch_samples`, :func:`batch_gaps`). Before, the buffer was the last 30 s before the
  latest sample and the windows of an older backlog were judged without samples ("other").

Where no usable snapshot says ``seq`` (none yet, one of version 1, or one this version cannot
read), the batches whose samples do not reach past the node's last judged window end (plus a
stride) count as read. A backlog that reaches back more than ``CATCHUP_MAX_S`` (1 h) before the
node's latest sample is judged from there on; the older part is recorded as *unjudged* with the
reason, never silently skipped.

The next window is set after the node's last judged one, so nothing already judged is judged
again. The k-of-n votes and open alerts are read back from the verdict and alert tables by the
processor itself.
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

# Nodes silent for longer than this (server clock) and without a backlog get no buffer: a node
# that comes back after an hour starts a new buffer anyway (its old samples fall outside any window).
WARM_MAX_AGE_S = 3600.0
# At start, a backlog is read back from at most this far (agent clock) before the node's latest sample.
CATCHUP_MAX_S = 3600.0
_COLS = ", ".join(("device", "kind", "t", *SAMPLE_METRICS))


def _wire(rows) -> list[dict]:
    names = SAMPLE_METRICS
    return [{"dev": r[0], "kind": r[1], "t": r[2], "m": {k: v for k, v in zip(names, r[3:]) if v is not None}}
            for r in rows]


def node_samples(conn: sqlite3.Connection, node_id: int, since_t: float, upto_seq: int | None = None) -> list[dict]:
    """Samples of one node with ``t >= since_t`` (of its batches up to ``upto_seq``) as wire dicts
    ({dev, kind, t, m}), in (t, device) order.

    Found through the indexed batches table (samples have no index of their own): the batches
    that end at or after ``since_t`` give the sample_id range to scan (a node's later batches have
    higher sample ids, so the range holds none after ``upto_seq``)."""
    lo, hi = conn.execute("SELECT min(first_sample), max(last_sample) FROM batches WHERE node_id = ? AND t_last >= ? "
                          "AND seq <= ?", (node_id, since_t, math.inf if upto_seq is None else upto_seq)).fetchone()
    if lo is None:
        return []
    return _wire(conn.execute(f"SELECT {_COLS} FROM samples WHERE sample_id BETWEEN ? AND ? AND node_id = ? AND t >= ? "
                              "ORDER BY t, device", (lo, hi, node_id, since_t)).fetchall())


def batch_samples(conn: sqlite3.Connection, node_id: int, first: int | None, last: int | None) -> list[dict]:
    """One stored batch's samples (its sample_id range) as wire dicts, in (t, device) order."""
    if first is None:
        return []
    return _wire(conn.execute(f"SELECT {_COLS} FROM samples WHERE sample_id BETWEEN ? AND ? AND node_id = ? "
                              "ORDER BY t, device", (first, last, node_id)).fetchall())


def batch_gaps(conn: sqlite3.Connection, node_id: int, received_at: float) -> list[dict]:
    """The unmonitored intervals one stored batch revealed: the store writes them in the batch's
    transaction, stamped with the batch's commit time."""
    return [{"start": s, "end": e, "reason": r, "seq_from": a, "seq_to": b} for s, e, r, a, b in conn.execute(
        "SELECT start_t, end_t, reason, seq_from, seq_to FROM unmonitored WHERE node_id = ? AND recorded_at = ? "
        "ORDER BY rowid", (node_id, received_at))]


def stored_batches(conn: sqlite3.Connection, node_id: int, after_seq: int, upto_seq: int,
                   limit: int = 64) -> list[tuple[int, float, int | None, int | None, float | None, float | None]]:
    """(seq, received_at, first_sample, last_sample, t_first, t_last) of the node's stored batches
    with after_seq < seq <= upto_seq, in seq order, at most ``limit``."""
    return conn.execute("SELECT seq, received_at, first_sample, last_sample, t_first, t_last FROM batches "
                        "WHERE node_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                        (node_id, after_seq, upto_seq, limit)).fetchall()


def _read_upto(conn: sqlite3.Connection, node_id: int, t_end: float, stride_s: float) -> int:
    """The last batch counted as read when no snapshot says: those whose samples end before the
    window after the last judged one (a processor judges a window once a sample reaches its end)."""
    row = conn.execute("SELECT max(seq) FROM batches WHERE node_id = ? AND t_last < ?",
                       (node_id, t_end + stride_s)).fetchone()
    return -1 if row[0] is None else int(row[0])


def restore(conn: sqlite3.Connection, cfg, make_state, now: float | None = None
            ) -> tuple[dict, int, dict, dict[str, int], list[dict]]:
    """({node: state}, samples read, {"states": nodes whose snapshot was restored, "unusable":
    {node: why}}, {node: last stored seq to read back}, [unjudged spans to record]).
    ``make_state`` is the NodeState class."""
    now = time.time() if now is None else now
    nodes, n, unusable = {}, 0, {}
    for name, (t_end, raw) in sorted(V.node_states(conn).items()):
        try:
            nodes[name] = make_state.from_snapshot(json.loads(raw))
        except ValueError as e:  # a snapshot this version cannot read: that node starts afresh, said
            unusable[name] = str(e)
            log.error("live state of node %s not restored: %s", name, e)
    restored = set(nodes)
    backlog: dict[str, int] = {}
    unjudged: list[dict] = []
    for node_id, name, last_seq, last_t, last_seen in conn.execute(
            "SELECT node_id, name, last_seq, last_t, last_seen FROM nodes WHERE last_seq IS NOT NULL "
            "ORDER BY name").fetchall():
        st = nodes.get(name) or nodes.setdefault(name, make_state())
        v = V.latest(conn, "node", name)
        if v is not None:  # continue after the last judged window, never re-judge it
            st.next_k = math.floor(v["t_end"] / cfg.stride_s + 1e-9) + 1
        if st.seq is None or name not in restored:
            st.seq = _read_upto(conn, node_id, v["t_end"], cfg.stride_s) if v is not None else -1
            st.t_latest = -math.inf
        if last_t is not None and st.seq < last_seq:
            # a backlog reaching back further than the processor catches up on: judged from the horizon
            horizon = last_t - CATCHUP_MAX_S
            first = stored_batches(conn, node_id, st.seq, last_seq, 1)
            if first and first[0][5] is not None and first[0][5] < horizon:
                skip = _read_upto(conn, node_id, horizon, 0.0)
                t_from, t_to = conn.execute("SELECT min(t_first), max(t_last) FROM batches WHERE node_id = ? "
                                            "AND seq > ? AND seq <= ?", (node_id, st.seq, skip)).fetchone()
                unjudged.append({"node": name, "start": t_from, "end": t_to, "seq_from": st.seq + 1, "seq_to": skip,
                                 "reason": f"stored but not judged when the live processor started: its backlog "
                                           f"reached back more than {CATCHUP_MAX_S:.0f} s before the node's latest "
                                           f"sample; the windows ending after {t_to:.1f} are judged"})
                # the skipped batches fill the buffer (they precede the windows judged) but close none
                st.seq, st.t_latest = skip, -math.inf
                st.next_k = math.floor(t_to / cfg.stride_s + 1e-9) + 1
        if st.seq < last_seq:
            backlog[name] = last_seq
        elif last_seen is None or last_seen < now - WARM_MAX_AGE_S:
            continue
        # the buffer as it was after batch st.seq: its latest sample and the 30 s before
        if not math.isfinite(st.t_latest):
            t, = conn.execute("SELECT max(t_last) FROM batches WHERE node_id = ? AND seq <= ?",
                              (node_id, st.seq)).fetchone()
            if t is None:
                continue
            st.t_latest = t
        since = st.t_latest - cfg.buffer_s
        samples = node_samples(conn, node_id, since, st.seq)
        if not samples:
            continue
        st.add(samples, cfg.buffer_s)
        received, = conn.execute("SELECT received_at FROM batches WHERE node_id = ? AND seq = ?",
                                 (node_id, st.seq)).fetchone() or (math.inf,)
        st.gaps = [(s, e, r) for s, e, r in conn.execute(
            "SELECT start_t, end_t, reason FROM unmonitored WHERE node_id = ? AND end_t >= ? AND recorded_at <= ? ORDER BY rowid",
            (node_id, since, received))]
        try:
            st.table = st.build_table(name, cfg.loopback_as_link)  # a peer's view for jobs across nodes
        except Exception:  # noqa: BLE001  (one node's samples never stop the collector from starting)
            log.exception("warm: node %s's buffer could not be rebuilt as a table; its next batch rebuilds it", name)
            st.table = None
        n += len(samples)
    return nodes, n, {"states": len(restored), "unusable": unusable}, backlog, unjudged
