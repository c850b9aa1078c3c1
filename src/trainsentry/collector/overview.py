"""``GET /v1/overview``: every node's state in one answer, aggregated on the server.

An inspector's browser polls this every few seconds for the whole fleet, so its cost must not grow
with one query per node: the node rows, their device counts, open sequence holes and recorded
unmonitored time come from four set-wise SQL queries over small indexed tables (never the samples
table), and the verdicts from the live engine's in-memory state (``verdicts`` below). The result is
cached for ``ttl_s`` so many open dashboards cost one aggregation per second, not one each.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

from . import query
from .store import silence_after

STATES = ("idle", "inference", "training", "other", "unmonitored")
RECENT_S = 3600.0  # "unmonitored in the last hour" counts over this window


def node_rows(conn: sqlite3.Connection, now: float) -> list[dict]:
    """Per node: last seen, devices, and whether it is unmonitored now (silent or stuck behind a hole)."""
    nodes = conn.execute("SELECT node_id, name, enrolled_at, last_seq, last_seen, last_t, interval_s, last_data_seen "
                         "FROM nodes ORDER BY name").fetchall()
    devices: dict[int, dict[str, int]] = {}
    for nid, kind, n in conn.execute("SELECT node_id, kind, COUNT(*) FROM devices GROUP BY node_id, kind"):
        devices.setdefault(nid, {})[kind] = n
    stuck = dict(conn.execute("SELECT node, MAX(at) FROM rejections WHERE code = 'out_of_order' GROUP BY node"))
    watched: dict[int, list[tuple]] = {}   # query.silent_devices for the fleet, in one query
    for row in query.watched_devices(conn):
        watched.setdefault(row[0], []).append(row)
    recent: dict[int, float] = {}
    for nid, s, e in conn.execute("SELECT node_id, start_t, end_t FROM unmonitored WHERE end_t >= ?",
                                  (now - RECENT_S,)):
        recent[nid] = recent.get(nid, 0.0) + (min(e, now) - max(s, now - RECENT_S))
    out = []
    for nid, name, enrolled_at, last_seq, last_seen, last_t, interval_s, data_seen in nodes:
        since = last_seen if last_seen is not None else enrolled_at
        reason = None
        if stuck.get(name) is not None and stuck[name] > since:
            reason = "seq_hole"
        elif now - (data_seen if data_seen is not None else enrolled_at) > silence_after(interval_s):
            reason = "silence" if last_seq is not None else "never_reported"
        silent = [d["device"] for d in query.silent_among(watched.get(nid, []), last_t, interval_s)]
        out.append({"node": name, "last_seen": last_seen, "last_sample_t": last_t, "interval_s": interval_s,
                    "devices": devices.get(nid, {}), "silent_devices": silent, "unmonitored": reason,
                    "unmonitored_recent_s": round(recent.get(nid, 0.0), 3)})
    return out


def aggregate(rows: list[dict], verdicts: dict[str, dict], jobs: list[dict], now: float) -> dict:
    """Merge node rows with the live verdicts; group jobs; count states for the header.

    ``verdicts[node]`` (from the live engine) may hold ``state``, ``p_training``, ``job``,
    ``alerts`` (open alert count), ``since``, ``lead_p`` (the single-device lead's P in the latest
    window, None where it did not speak), ``lead_like_training`` (that P at the check's threshold) and
    ``floor_flop`` (the check's bound on the latest window's tensor-core work where the window lay below
    its busy floor, None elsewhere). A node that is unmonitored now shows as
    ``unmonitored`` whatever its last verdict said: the last verdict is kept beside it.
    """
    counts = dict.fromkeys(STATES, 0)
    nodes = []
    for r in rows:
        v = verdicts.get(r["node"], {})
        last_state = v.get("state")
        state = "unmonitored" if r["unmonitored"] else (last_state if last_state in STATES else None)
        if state is not None:
            counts[state] += 1
        nodes.append({**r, "state": state, "last_verdict": last_state, "p_training": v.get("p_training"),
                      "verdict_since": v.get("since"), "job": v.get("job"), "alerts": int(v.get("alerts") or 0),
                      "lead_p": v.get("lead_p"), "lead_like_training": bool(v.get("lead_like_training")),
                      "floor_flop": v.get("floor_flop")})
    counts["pending"] = sum(1 for n in nodes if n["state"] is None)
    return {"now": now, "n_nodes": len(nodes), "counts": counts, "nodes": nodes,
            "jobs": sorted(jobs, key=lambda j: (-len(j.get("nodes", ())), str(j.get("job"))))}


class Overview:
    """The cached aggregation. ``live`` returns ``(verdicts by node, jobs)`` from the live engine."""

    def __init__(self, reader: Callable[[], sqlite3.Connection],
                 live: Callable[[], tuple[dict[str, dict], list[dict]]], ttl_s: float = 1.0):
        self.reader, self.live, self.ttl_s = reader, live, ttl_s
        self._lock = threading.Lock()
        self._cached: tuple[float, bytes, bytes | None] | None = None  # (at, json, gzip)

    def compute(self, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        verdicts, jobs = self.live()
        return aggregate(node_rows(self.reader(), now), verdicts, jobs, now)

    def encoded(self, gzipped: bool = False) -> bytes:
        """The JSON body (or its gzip), recomputed at most once per ``ttl_s`` however many dashboards
        poll. 1,000 nodes are ~0.5 MB of JSON and ~30 kB gzipped, so browsers get the gzip."""
        import gzip

        import orjson
        with self._lock:
            t = time.monotonic()
            if self._cached is None or t - self._cached[0] >= self.ttl_s:
                self._cached = (t, orjson.dumps(self.compute(), option=orjson.OPT_SERIALIZE_NUMPY), None)
            if gzipped and self._cached[2] is None:
                self._cached = (*self._cached[:2], gzip.compress(self._cached[1], 5))
            return self._cached[2] if gzipped else self._cached[1]
