"""The read path: nodes, time series at a requested resolution, unmonitored intervals, totals.

Series are aggregated server-side into buckets ``[start + k·step, start + (k+1)·step)``:
gauges and GPM rates are averaged, derived counter rates (bytes/s, watts, from
:func:`trainsentry.traces.rates.derive_rates`, which owns wrap and reset handling) are
time-weighted (Σ increment / Σ Δt inside the bucket), and raw counters report their last value.
One sample before ``start`` is read per device so the first bucket's rate is not lost.
"""

from __future__ import annotations

import sqlite3
import time

import numpy as np

from ..traces.rates import derive_rates
from ..traces.schema import COUNTERS, METRICS
from .schema import SAMPLE_METRICS
from .store import TIME_REGRESSION_TOLERANCE_S, WATCHED_DEVICE_KINDS, hole_after, silence_after

MAX_BUCKETS = 20_000
MAX_ROWS = 2_000_000
_COUNTER_NAMES = tuple(m.name for m in COUNTERS)
_AVERAGED = tuple(m.name for m in METRICS if m.kind != "counter")


class QueryError(Exception):
    def __init__(self, status: int, code: str, detail: str):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


def node_id(conn: sqlite3.Connection, node: str) -> int:
    row = conn.execute("SELECT node_id FROM nodes WHERE name = ?", (node,)).fetchone()
    if row is None:
        raise QueryError(404, "unknown_node", f"node {node[:128]!r} is not enrolled")
    return row[0]


def devices_of(conn: sqlite3.Connection, nid: int) -> list[str]:
    return [r[0] for r in conn.execute("SELECT device FROM devices WHERE node_id = ? ORDER BY device", (nid,))]


def _silent(last_data_seen: float | None, since: float, interval_s: float, now: float) -> bool:
    """No batch carrying samples for longer than a silence (an empty batch is no evidence)."""
    return now - (last_data_seen if last_data_seen is not None else since) > silence_after(interval_s)


def watched_devices(conn: sqlite3.Connection, nid: int | None = None) -> list[tuple[int, str, str, float]]:
    """(node_id, device, kind, latest sample time) of the GPUs and IB ports of one node, or of every
    node with ``nid`` None (the overview's one query for the fleet); network interfaces are left out
    (store.WATCHED_DEVICE_KINDS)."""
    where = "kind IN (?, ?) AND last_t IS NOT NULL" + ("" if nid is None else " AND node_id = ?")
    return conn.execute(f"SELECT node_id, device, kind, last_t FROM devices WHERE {where} ORDER BY node_id, device",
                        (*WATCHED_DEVICE_KINDS, *(() if nid is None else (nid,)))).fetchall()


def silent_among(devices, at: float | None, interval_s: float) -> list[dict]:
    """Of ``devices`` (rows of :func:`watched_devices`), those silent at time ``at`` (the node's latest
    sample, or a window's end): their latest sample lies further before it than a silence plus the
    clock tolerance (a GPU's NVML stamps may run up to 5 s off the host clock). A device the agent
    stopped reporting (a failing source, a GPU fallen off the bus, or a node leaving out the GPU that
    trains) while the rest of the node goes on: whatever it does meanwhile is unmonitored."""
    if at is None:
        return []
    cutoff = at - hole_after(interval_s)
    return [{"device": d, "kind": k, "last_t": t} for _, d, k, t in devices if t < cutoff]


def silent_devices(conn: sqlite3.Connection, nid: int, node_last_t: float | None, interval_s: float) -> list[dict]:
    """The node's GPUs and IB ports silent as of its latest sample (:func:`silent_among`)."""
    return silent_among(watched_devices(conn, nid), node_last_t, interval_s)


def list_nodes(conn: sqlite3.Connection, now: float | None = None) -> list[dict]:
    now = time.time() if now is None else now
    out = []
    for nid, name, enrolled_at, last_seq, last_seen, last_t, interval_s, back_n, back_s, data_seen in conn.execute(
            "SELECT node_id, name, enrolled_at, last_seq, last_seen, last_t, interval_s, backdated_batches, "
            "backdated_max_s, last_data_seen FROM nodes ORDER BY name"
    ).fetchall():
        devices = devices_of(conn, nid) if last_seq is not None else []
        out.append({"node": name, "enrolled_at": enrolled_at, "last_seen": last_seen, "last_seq": last_seq,
                    "last_sample_t": last_t, "interval_s": interval_s, "devices": devices,
                    "silent": _silent(data_seen, enrolled_at, interval_s, now),
                    "silent_devices": silent_devices(conn, nid, last_t, interval_s),
                    "backdated": {"batches": back_n, "max_s": back_s}})
    return out


def unmonitored(conn: sqlite3.Connection, node: str, start: float, end: float,
                now: float | None = None) -> list[dict]:
    """Recorded intervals overlapping [start, end], plus an open one (``end: null``) for a node that is
    silent now (no batch for 3 × interval) or stuck behind a sequence hole it has not repaired. A GPU or
    IB port that went unreported while the node went on is listed too (``reason: device_silence``, with
    ``device``): closed when it reported again, open while it is silent now (:func:`silent_devices`).
    The node's own intervals have ``device: null``."""
    now = time.time() if now is None else now
    nid = node_id(conn, node)
    out = [{"start": s, "end": e, "reason": r, "seq_from": a, "seq_to": b, "device": None, "open": False}
           for s, e, r, a, b in conn.execute(
               "SELECT start_t, end_t, reason, seq_from, seq_to FROM unmonitored "
               "WHERE node_id = ? AND end_t >= ? AND start_t <= ? ORDER BY start_t", (nid, start, end))]
    out += [{"start": s, "end": e, "reason": "device_silence", "seq_from": None, "seq_to": None, "device": d,
             "open": False} for d, s, e in conn.execute(
                 "SELECT device, start_t, end_t FROM device_silences WHERE node_id = ? AND end_t >= ? AND start_t <= ? "
                 "ORDER BY start_t", (nid, start, end))]
    enrolled_at, last_seq, last_seen, last_t, interval_s, data_seen = conn.execute(
        "SELECT enrolled_at, last_seq, last_seen, last_t, interval_s, last_data_seen FROM nodes WHERE node_id = ?",
        (nid,)).fetchone()
    # The open interval starts at the last evidence we hold: the latest sample time, else enrolment;
    # never later than the clock tolerance after the collector received that sample (a node that
    # stamped one sample minutes ahead and went dark would otherwise open its silence in the future,
    # out of every range asked for until then)
    open_start = last_t if last_t is not None else (data_seen if data_seen is not None else enrolled_at)
    if data_seen is not None:
        open_start = min(open_start, data_seen + TIME_REGRESSION_TOLERANCE_S)
    stuck = conn.execute("SELECT MAX(at) FROM rejections WHERE node = ? AND code = 'out_of_order' AND at > ?",
                         (node, last_seen if last_seen is not None else enrolled_at)).fetchone()[0]
    reason = None
    if stuck is not None:
        reason = "seq_hole"  # the node is talking, but every batch skips one we never got
    elif _silent(data_seen, enrolled_at, interval_s, now):
        reason = "silence"
    if reason and open_start <= end:
        out.append({"start": open_start, "end": None, "reason": reason, "seq_from": None if last_seq is None
                    else last_seq + 1, "seq_to": None, "device": None, "open": True})
    out += [{"start": d["last_t"], "end": None, "reason": "device_silence", "seq_from": None, "seq_to": None,
             "device": d["device"], "open": True}
            for d in silent_devices(conn, nid, last_t, interval_s) if d["last_t"] <= end]
    return sorted(out, key=lambda i: (i["start"], i["device"] or ""))


def _bucket_mean(bucket: np.ndarray, n_buckets: int, values: np.ndarray, weights: np.ndarray | None = None):
    ok = np.isfinite(values)
    w = ok.astype(np.float64) if weights is None else np.where(ok, weights, 0.0)
    total = np.bincount(bucket, weights=np.where(ok, values, 0.0) * w, minlength=n_buckets)
    count = np.bincount(bucket, weights=w, minlength=n_buckets)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(count > 0, total / count, np.nan)


def _device_series(t: np.ndarray, cols: dict[str, np.ndarray], start: float, end: float, step: float) -> dict:
    rates = derive_rates(t, {n: cols[n] for n in _COUNTER_NAMES if np.isfinite(cols[n]).any()})
    dt = np.concatenate(([np.nan], np.diff(t)))
    inside = (t >= start) & (t < end)
    t_in = t[inside]
    bucket_all = np.floor((t_in - start) / step).astype(np.int64)
    buckets, bucket = np.unique(bucket_all, return_inverse=True)
    nb = len(buckets)
    last_idx = np.full(nb, -1, dtype=np.int64)
    last_idx[bucket] = np.arange(len(t_in))  # rows are time-sorted, so the last write wins
    out: dict[str, list] = {}
    for name in _AVERAGED:
        v = cols[name][inside]
        if np.isfinite(v).any():
            out[name] = _bucket_mean(bucket, nb, v)
    for name, r in rates.items():
        out[name] = _bucket_mean(bucket, nb, r[inside], dt[inside])
    for name in _COUNTER_NAMES:
        v = cols[name][inside]
        if np.isfinite(v).any():
            out[f"{name}_last"] = v[last_idx]
    return {"t": (start + buckets * step).tolist(), "n": np.bincount(bucket, minlength=nb).tolist(),
            "columns": {k: [None if not np.isfinite(x) else float(x) for x in v] for k, v in out.items()}}


def series(conn: sqlite3.Connection, node: str, start: float, end: float, step: float,
           device: str | None = None) -> dict:
    if not (np.isfinite(start) and np.isfinite(end) and end > start):
        raise QueryError(400, "bad_range", "end must be after start")
    if not (np.isfinite(step) and step > 0):
        raise QueryError(400, "bad_step", "step must be a positive number of seconds")
    if (end - start) / step > MAX_BUCKETS:
        raise QueryError(400, "too_many_buckets", f"(end - start) / step exceeds {MAX_BUCKETS}; use a larger step")
    nid = node_id(conn, node)
    # Samples are reached through their batches (see schema: no per-sample index). One batch before
    # the range supplies the previous counter value, so the first bucket's rate is not lost.
    dev_filter = "" if device is None else " AND s.device = :device"
    select = (f"SELECT s.device, s.kind, s.t, {', '.join('s.' + m for m in SAMPLE_METRICS)} "
              "FROM batches b JOIN samples s ON s.sample_id BETWEEN b.first_sample AND b.last_sample "
              "WHERE b.node_id = :nid" + dev_filter)
    args = {"nid": nid, "device": device, "start": start, "end": end}
    before = select.replace("FROM batches b", "FROM (SELECT * FROM batches WHERE node_id = :nid AND t_last < :start "
                                              "ORDER BY t_last DESC LIMIT 1) b")
    prior = conn.execute(before, args).fetchall()
    # read at most one row past the limit: a range over it is refused before it is all in memory
    cur = conn.execute(select + " AND b.t_last >= :start AND b.t_first < :end AND s.t < :end", args)
    rows = prior + cur.fetchmany(max(1, MAX_ROWS + 1 - len(prior)))
    cur.close()
    if len(rows) > MAX_ROWS:
        raise QueryError(400, "too_many_rows", f"range holds more than {MAX_ROWS} samples; narrow it")
    rows.sort(key=lambda r: (r[0], r[2]))
    result: dict[str, dict] = {}
    i = 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0] == rows[i][0]:
            j += 1
        chunk = rows[i:j]
        dev = chunk[0][0]
        i = j
        t = np.array([r[2] for r in chunk], dtype=np.float64)
        if not ((t >= start) & (t < end)).any():
            continue
        cols = {name: np.array([np.nan if r[k] is None else r[k] for r in chunk], dtype=np.float64)
                for k, name in enumerate(SAMPLE_METRICS, start=3)}
        result[dev] = {"kind": chunk[-1][1], **_device_series(t, cols, start, end, step)}
    if device is not None and not result:
        known = conn.execute("SELECT 1 FROM devices WHERE node_id = ? AND device = ?", (nid, device)).fetchone()
        if not known:
            raise QueryError(404, "unknown_device", f"node {node!r} has no samples from device {device[:64]!r}")
    return {"node": node, "start": start, "end": end, "step": step, "devices": result}


def totals(conn: sqlite3.Connection) -> dict:
    """Persistent totals over the whole database (survive restarts, unlike per-process counters)."""
    n_batches, n_samples = conn.execute("SELECT COUNT(*), COALESCE(SUM(n_samples), 0) FROM batches").fetchone()
    rejected = {code: n for code, n in conn.execute("SELECT code, SUM(n) FROM rejections GROUP BY code ORDER BY code")}
    n_gaps = conn.execute("SELECT reason, COUNT(*) FROM unmonitored GROUP BY reason").fetchall()
    return {"batches": n_batches, "samples": n_samples, "rejected": rejected,
            "unmonitored": {r: n for r, n in n_gaps}}
