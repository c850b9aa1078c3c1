"""Live verdicts and alerts in SQLite, and the read API that serves them.

Tables (migration in :mod:`trainsentry.collector.schema`, DDL here):

* ``verdicts``: one row per window a subject (a node, or a job = union of nodes) was judged on:
  state, P(training), the detector and its artifact, the evidence strings (JSON), the job the node
  belonged to. Keyed by (scope, subject, t_end), so re-judging a window after a restart replaces
  the row instead of doubling it.
* ``alerts``: the k-of-n alert rule's history: when it fired (window end, agent clock), when it
  cleared (NULL while open), the highest P(training) seen while open and the evidence of the
  window that fired it.
* ``jobs``: the current membership of every job the live processor has formed. A job formed by
  one node before its peers were judged (a job of one, or under a name its later-judged peers
  change) is merged into the job they form: its rows are renamed, it does not stay behind.
* ``live_node_state`` (migration 4, :data:`NODE_STATE_DDL`): per node, what the live processor
  knows beyond its sample buffer (its job, the GPUs' idle memory floors, its window clock; JSON of
  :meth:`trainsentry.collector.nodestate.NodeState.snapshot`), written in the same transaction as
  the verdicts it led to and read back by a restarted processor.
* ``unjudged`` (migration 6, :data:`UNJUDGED_DDL`): per node, spans of stored samples the live
  processor did not judge and why (its catch-up from the store could not read them, the backlog it
  found at start reached further back than it catches up, or a node's samples jumped ahead by more
  windows than it judges at once). Never a silent hole: the verdict API serves them.
* ``verdicts.abstain`` (migration 7, :data:`ABSTAIN_DDL`): 1 for a window that neither votes nor
  clears in the k-of-n alert rule: an idle window of a pause from which the job may still resume
  (see docs/collector.md, "Alerts and pauses"). The votes read back at a restart skip them.

Everything the API answers is read from these tables, so verdicts survive a collector restart, and
so does the state that the next verdicts are computed from.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time

DDL = """
CREATE TABLE verdicts (
  scope TEXT NOT NULL CHECK (scope IN ('node', 'job')),
  subject TEXT NOT NULL,         -- node name or job id
  t_start REAL NOT NULL,         -- window, agent clock (epoch s)
  t_end REAL NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('idle', 'inference', 'training', 'other')),
  p_training REAL,               -- NULL when the window had no features (too few samples)
  detector TEXT NOT NULL,
  artifact TEXT,                 -- models/<name>.joblib, or NULL for untrained comm-rules
  evidence TEXT NOT NULL,        -- JSON list of strings
  job TEXT,                      -- for a node: the job it belonged to in this window
  computed_at REAL NOT NULL,     -- server clock
  PRIMARY KEY (scope, subject, t_end)
);
CREATE TABLE alerts (
  alert_id INTEGER PRIMARY KEY,
  scope TEXT NOT NULL CHECK (scope IN ('node', 'job')),
  subject TEXT NOT NULL,
  raised_t REAL NOT NULL,        -- end of the window that completed the k-th vote (agent clock)
  cleared_t REAL,                -- end of the window after which no vote of the last n remained
  threshold REAL NOT NULL,
  k INTEGER NOT NULL,
  n INTEGER NOT NULL,
  p_max REAL NOT NULL,
  detector TEXT NOT NULL,
  evidence TEXT NOT NULL,
  raised_at REAL NOT NULL        -- server clock
);
CREATE INDEX alerts_by_subject ON alerts(scope, subject, raised_t);
CREATE TABLE jobs (
  job TEXT PRIMARY KEY,
  nodes TEXT NOT NULL,           -- JSON list of node names
  start_t REAL NOT NULL,         -- earliest segment start of its nodes
  last_t REAL NOT NULL,          -- end of the last window it was judged on
  updated_at REAL NOT NULL
);
"""

NODE_STATE_DDL = """
CREATE TABLE live_node_state (
  node TEXT PRIMARY KEY,
  t_end REAL NOT NULL,           -- end of the node's last judged window when this was written
  state TEXT NOT NULL,           -- JSON: nodestate.NodeState.snapshot()
  updated_at REAL NOT NULL       -- server clock
);
"""

UNJUDGED_DDL = """
CREATE TABLE unjudged (
  node TEXT NOT NULL,
  start_t REAL NOT NULL,         -- agent clock: the span of samples (or windows) not judged
  end_t REAL NOT NULL,
  reason TEXT NOT NULL,
  seq_from INTEGER,              -- the stored batches not read, when the span is batches
  seq_to INTEGER,
  recorded_at REAL NOT NULL      -- server clock
);
CREATE INDEX unjudged_by_node ON unjudged(node, start_t);
"""

ABSTAIN_DDL = "ALTER TABLE verdicts ADD COLUMN abstain INTEGER NOT NULL DEFAULT 0;  -- 1: no vote (a pause)\n"

# The single-device lead's P(training) per window (detect/single_device.py): NULL where it did not
# speak (an exchange seen, no GPU busy, no artifact loaded, or a window judged before migration 10).
LEAD_DDL = "ALTER TABLE verdicts ADD COLUMN lead_p REAL;  -- the single-device lead's P(training), if it spoke\n"
# A partial covering index of the windows the lead spoke on: a job's summary over its whole life (a
# month is ~1.3 M windows) reads those rows from the index alone instead of every verdict of the job.
LEAD_INDEX_DDL = ("CREATE INDEX verdicts_lead ON verdicts(scope, subject, t_end, lead_p) "
                  "WHERE lead_p IS NOT NULL;\n")

# Below the lead's busy floor it gives no P but a bound on the window's tensor-core work (FLOPs,
# detect/single_device.below_floor_flops), stored to be summed per node and per job; NULL elsewhere and
# for windows judged before migration 17. A partial covering index, as for the lead.
FLOOR_DDL = ("ALTER TABLE verdicts ADD COLUMN floor_flop REAL;  -- bound on a window's work below the busy floor\n"
             "CREATE INDEX verdicts_floor ON verdicts(scope, subject, t_end, t_start, floor_flop) "
             "WHERE floor_flop IS NOT NULL;\n")

_VERDICT_COLS = ("scope, subject, t_start, t_end, state, p_training, detector, artifact, evidence, job, computed_at, "
                 "abstain, lead_p, floor_flop")


def _verdict(row: tuple) -> dict:
    scope, subject, t_start, t_end, state, p, det, artifact, evidence, job, computed_at, abstain, lead_p, floor = row
    return {"scope": scope, "subject": subject, "t_start": t_start, "t_end": t_end, "state": state,
            "p_training": p, "detector": det, "artifact": artifact, "evidence": json.loads(evidence),
            "job": job, "computed_at": computed_at, "abstain": bool(abstain), "lead_p": lead_p,
            "floor_flop": floor}


def _alert(row: tuple) -> dict:
    aid, scope, subject, raised_t, cleared_t, thr, k, n, p_max, det, evidence, raised_at = row
    return {"id": aid, "scope": scope, "subject": subject, "raised_t": raised_t, "cleared_t": cleared_t,
            "open": cleared_t is None, "rule": {"threshold": thr, "k": k, "n": n}, "p_max": p_max,
            "detector": det, "evidence": json.loads(evidence), "raised_at": raised_at}


class VerdictWriter:
    """The live processor's own write connection (the ingest connection belongs to the event loop)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def write(self, verdicts: list[dict], new_alerts: list[dict], updates: list[tuple[int, float, float | None]],
              jobs: list[dict] | None = None, node_states: dict[str, tuple[float, dict]] | None = None,
              unjudged: list[dict] | None = None, merges: list[tuple[str, str, list[str]]] | None = None) -> list[int]:
        """One transaction: verdict rows, new alerts (their ids returned, in order), updates of
        alerts written before as (id, p_max, cleared_t), job rows, the live state of nodes as
        {node: (last judged window end, snapshot)}: stored state and verdicts never disagree, and
        unjudged spans ({node, start, end, reason, seq_from, seq_to}) with the state that skipped them.
        ``merges`` (old job, new job, old job's nodes), applied first: the old job's rows become the
        new one's (its verdicts where the new one has none at that window, its alerts, its nodes'
        verdicts' job) and its job row goes: a job seen before its peers joined it converges."""
        c, now, ids = self.conn, time.time(), []
        c.execute("BEGIN IMMEDIATE")
        try:
            for old, new, nodes in merges or []:
                since = c.execute("SELECT start_t FROM jobs WHERE job = ?", (old,)).fetchone()
                c.execute("UPDATE OR IGNORE verdicts SET subject = ? WHERE scope = 'job' AND subject = ?", (new, old))
                c.execute("DELETE FROM verdicts WHERE scope = 'job' AND subject = ?", (old,))
                c.executemany("UPDATE verdicts SET job = ? WHERE scope = 'node' AND subject = ? AND t_end >= ? AND job = ?",
                              [(new, n, since[0] if since else -math.inf, old) for n in nodes])
                c.execute("UPDATE alerts SET subject = ? WHERE scope = 'job' AND subject = ?", (new, old))
                c.execute("DELETE FROM jobs WHERE job = ?", (old,))
            c.executemany(f"INSERT OR REPLACE INTO verdicts ({_VERDICT_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                          [(v["scope"], v["subject"], v["t_start"], v["t_end"], v["state"], v["p_training"],
                            v["detector"], v["artifact"], json.dumps(v["evidence"]), v.get("job"), now,
                            int(bool(v.get("abstain"))), v.get("lead_p"), v.get("floor_flop")) for v in verdicts])
            for a in new_alerts:
                cur = c.execute("INSERT INTO alerts (scope, subject, raised_t, cleared_t, threshold, k, n, p_max, "
                                "detector, evidence, raised_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                                (a["scope"], a["subject"], a["raised_t"], a["cleared_t"], a["threshold"], a["k"],
                                 a["n"], a["p_max"], a["detector"], json.dumps(a["evidence"]), now))
                ids.append(int(cur.lastrowid))
            c.executemany("UPDATE alerts SET p_max = MAX(p_max, ?), cleared_t = ? WHERE alert_id = ?",
                          [(p, cleared, aid) for aid, p, cleared in updates])
            for j in jobs or []:
                c.execute("INSERT OR REPLACE INTO jobs (job, nodes, start_t, last_t, updated_at) VALUES (?,?,?,?,?)",
                          (j["job"], json.dumps(j["nodes"]), j["start_t"], j["last_t"], now))
            c.executemany("INSERT OR REPLACE INTO live_node_state (node, t_end, state, updated_at) VALUES (?,?,?,?)",
                          [(n, t, json.dumps(st, default=float), now) for n, (t, st) in (node_states or {}).items()])
            c.executemany("INSERT INTO unjudged (node, start_t, end_t, reason, seq_from, seq_to, recorded_at) "
                          "VALUES (?,?,?,?,?,?,?)", [(u["node"], u["start"], u["end"], u["reason"], u.get("seq_from"),
                                                      u.get("seq_to"), now) for u in unjudged or []])
            c.execute("COMMIT")
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return ids


# ---- reads (also used by the processor to restore its state after a restart) -------------------
def latest(conn: sqlite3.Connection, scope: str, subject: str) -> dict | None:
    row = conn.execute(f"SELECT {_VERDICT_COLS} FROM verdicts WHERE scope = ? AND subject = ? "
                       "ORDER BY t_end DESC LIMIT 1", (scope, subject)).fetchone()
    return _verdict(row) if row else None


def jobs_with_latest(conn: sqlite3.Connection) -> list[dict]:
    """Every job with the state and P(training) of its latest verdict, in one query.

    The latest verdict is found per job by a correlated ``max(t_end)``, which SQLite answers with
    one seek into the (scope, subject, t_end) primary key: cost grows with the number of jobs, not
    with the verdict history (a GROUP BY over all job verdicts would scan every row ever written)."""
    rows = conn.execute(
        "SELECT j.job, j.nodes, j.start_t, j.last_t, j.updated_at, v.state, v.p_training FROM jobs j "
        "LEFT JOIN verdicts v ON v.scope = 'job' AND v.subject = j.job AND v.t_end = "
        "(SELECT max(t_end) FROM verdicts WHERE scope = 'job' AND subject = j.job) "
        "ORDER BY j.start_t, j.job").fetchall()
    return [{"job": j, "nodes": json.loads(n), "start_t": s, "last_t": last, "updated_at": u,
             "state": state, "p_training": p} for j, n, s, last, u, state, p in rows]


def lead_summary(conn: sqlite3.Connection, scope: str, subject: str, start: float, end: float,
                 threshold: float) -> dict:
    """The single-device lead over the windows ending in [start, end] (8 s windows every 2 s: they
    overlap): how many it spoke on, how many of those read like training (P ≥ threshold), the seconds
    those windows cover together (their union: overlapping windows counted once), the highest P and
    the latest window it spoke on. The counts come from the partial index ``verdicts_lead`` alone; the
    seconds read the like-training windows' rows."""
    n, like, p_max, t_last = conn.execute(
        "SELECT count(*), coalesce(sum(lead_p >= ?), 0), max(lead_p), max(t_end) FROM verdicts "
        "WHERE scope = ? AND subject = ? AND t_end >= ? AND t_end <= ? AND lead_p IS NOT NULL",
        (threshold, scope, subject, start, end)).fetchone()
    last = None
    if t_last is not None:
        (p_last,) = conn.execute("SELECT lead_p FROM verdicts WHERE scope = ? AND subject = ? AND t_end = ?",
                                 (scope, subject, t_last)).fetchone()
        last = {"t_end": t_last, "p": p_last}
    covered, reach = 0.0, float("-inf")
    if like:
        for t0, t1 in conn.execute("SELECT t_start, t_end FROM verdicts WHERE scope = ? AND subject = ? AND t_end >= ? "
                                   "AND t_end <= ? AND lead_p >= ? ORDER BY t_start",
                                   (scope, subject, start, end, threshold)):
            covered += max(0.0, t1 - max(t0, reach))
            reach = max(reach, t1)
    return {"start": start, "end": end, "threshold": threshold, "windows_spoken": n, "like_training": like,
            "seconds_like_training": covered, "p_max": p_max, "last": last}


def floor_summary(conn: sqlite3.Connection, scope: str, subject: str, start: float, end: float) -> dict:
    """The single-device check's bounds below its busy floor over the windows ending in [start, end]:
    how many windows had one, the seconds they cover together (their union), and the bound summed over
    those seconds: each window's bound is its GPUs' tensor activity over its whole span, and
    overlapping windows share their seconds, so each window counts for the share of its span no earlier
    window in the sum covered (with windows every 2 s of 8 s, a quarter). Read from the partial index
    ``verdicts_floor`` alone (migration 17)."""
    windows, covered, total, reach = 0, 0.0, 0.0, float("-inf")
    for t0, t1, f in conn.execute("SELECT t_start, t_end, floor_flop FROM verdicts WHERE scope = ? AND subject = ? "
                                  "AND t_end >= ? AND t_end <= ? AND floor_flop IS NOT NULL ORDER BY t_end",
                                  (scope, subject, start, end)):
        new = max(0.0, t1 - max(t0, reach))
        windows, covered, reach = windows + 1, covered + new, max(reach, t1)
        if t1 > t0:
            total += f * new / (t1 - t0)
    return {"start": start, "end": end, "windows": windows, "seconds": covered, "tensor_flop_max": total}


def timeline(conn: sqlite3.Connection, scope: str, subject: str, start: float, end: float,
             limit: int = 5000) -> list[dict]:
    rows = conn.execute(f"SELECT {_VERDICT_COLS} FROM verdicts WHERE scope = ? AND subject = ? AND t_end >= ? "
                        "AND t_start <= ? ORDER BY t_end LIMIT ?", (scope, subject, start, end, limit)).fetchall()
    return [_verdict(r) for r in rows]


def last_p(conn: sqlite3.Connection, scope: str, subject: str, n: int) -> list[tuple[float, str, float | None]]:
    """(t_end, state, P) of the last n windows that voted (not abstaining), oldest first."""
    rows = conn.execute("SELECT t_end, state, p_training FROM verdicts WHERE scope = ? AND subject = ? AND abstain = 0 "
                        "ORDER BY t_end DESC LIMIT ?", (scope, subject, n)).fetchall()
    return rows[::-1]


def node_states(conn: sqlite3.Connection) -> dict[str, tuple[float, str]]:
    """{node: (last judged window end, snapshot JSON)} as the live processor last wrote them."""
    return {n: (t, st) for n, t, st in conn.execute("SELECT node, t_end, state FROM live_node_state")}


def unjudged(conn: sqlite3.Connection, node: str, start: float, end: float) -> list[dict]:
    """Unjudged spans of ``node`` overlapping [start, end], oldest first."""
    rows = conn.execute("SELECT start_t, end_t, reason, seq_from, seq_to, recorded_at FROM unjudged WHERE node = ? "
                        "AND end_t >= ? AND start_t <= ? ORDER BY start_t", (node, start, end)).fetchall()
    return [{"start": s, "end": e, "reason": r, "seq_from": a, "seq_to": b, "recorded_at": at, "open": False}
            for s, e, r, a, b, at in rows]


def alerts(conn: sqlite3.Connection, scope: str, subject: str | None = None, open_only: bool = False) -> list[dict]:
    sql = "SELECT * FROM alerts WHERE scope = ?"
    args: list = [scope]
    if subject is not None:
        sql += " AND subject = ?"
        args.append(subject)
    if open_only:
        sql += " AND cleared_t IS NULL"
    return [_alert(r) for r in conn.execute(sql + " ORDER BY raised_t", args).fetchall()]


def jobs(conn: sqlite3.Connection) -> list[dict]:
    return [{"job": j, "nodes": json.loads(n), "start_t": s, "last_t": last, "updated_at": u}
            for j, n, s, last, u in conn.execute(
                "SELECT job, nodes, start_t, last_t, updated_at FROM jobs ORDER BY start_t, job").fetchall()]


def job(conn: sqlite3.Connection, name: str) -> dict | None:
    row = conn.execute("SELECT job, nodes, start_t, last_t, updated_at FROM jobs WHERE job = ?", (name,)).fetchone()
    if row is None:
        return None
    j, n, s, last, u = row
    return {"job": j, "nodes": json.loads(n), "start_t": s, "last_t": last, "updated_at": u}


# ---- the read API ----------------------------------------------------------------------------
def add_routes(app, col, proc) -> None:
    """GET /v1/nodes/{node}/verdict, /verdicts, /alerts; GET /v1/jobs, /v1/jobs/{job}; /v1/live.

    (Imports here: :mod:`trainsentry.collector.schema` imports this module for its DDL.)"""
    import orjson
    from fastapi.responses import Response

    from . import query

    def _json(obj, status: int = 200) -> Response:
        return Response(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                        media_type="application/json")

    def _error(e: query.QueryError) -> Response:
        return _json({"error": e.code, "detail": e.detail}, e.status)

    _unmonitored = query.unmonitored

    def _silent_devices(conn, nid: int) -> list[dict]:
        last_t, interval_s = conn.execute("SELECT last_t, interval_s FROM nodes WHERE node_id = ?", (nid,)).fetchone()
        return query.silent_devices(conn, nid, last_t, interval_s)

    def _unjudged(conn, node: str, start: float, end: float) -> list[dict]:
        # recorded spans, plus an open one while the processor still owes the node stored batches
        return unjudged(conn, node, start, end) + proc.not_judged_yet(node)

    def _lead(conn, scope: str, subject: str, start: float, end: float) -> dict:
        """The single-device lead summarised over [start, end] from the stored ``lead_p`` (also when no
        lead is loaded now), counted at the live processor's lead threshold."""
        from .live import LEAD_CHECK

        return {**lead_summary(conn, scope, subject, start, end, proc.lead_threshold),
                "check_loaded": LEAD_CHECK in proc.checks}

    @app.get("/v1/nodes/{node}/verdict")
    def get_verdict(node: str) -> Response:
        conn = col.reader()
        try:
            nid = query.node_id(conn, node)
            v = latest(conn, "node", node)
            now = time.time()
            body = {"node": node, "detector": proc.detector.name, "artifact": proc.artifact,
                    "alerts_open": alerts(conn, "node", node, open_only=True),
                    "silent_devices": _silent_devices(conn, nid)}
            if v is None:
                body.update(state=None, p_training=None, evidence=[f"no window judged yet: a node needs "
                                                                   f"{proc.cfg.window_s:.0f} s of samples"],
                            updated_at=None, unmonitored=_unmonitored(conn, node, 0.0, now),
                            unjudged=_unjudged(conn, node, 0.0, now))
                return _json(body)
            body.update(state=v["state"], p_training=v["p_training"], evidence=v["evidence"],
                        detector=v["detector"], artifact=v["artifact"], window={"start": v["t_start"], "end": v["t_end"]},
                        job=v["job"], updated_at=v["computed_at"], lead_p=v["lead_p"], floor_flop=v["floor_flop"],
                        single_device_lead=_lead(conn, "node", node, v["t_end"] - 3600.0, v["t_end"]),
                        below_floor=floor_summary(conn, "node", node, v["t_end"] - 3600.0, v["t_end"]),
                        unmonitored=_unmonitored(conn, node, v["t_end"] - 3600.0, now),
                        unjudged=_unjudged(conn, node, v["t_end"] - 3600.0, now))
            return _json(body)
        except query.QueryError as e:
            return _error(e)

    @app.get("/v1/nodes/{node}/verdicts")
    def get_verdicts(node: str, start: float | None = None, end: float | None = None) -> Response:
        conn = col.reader()
        end = time.time() if end is None else end
        start = end - 3600.0 if start is None else start
        if not end > start:
            return _json({"error": "bad_range", "detail": "end must be after start"}, 400)
        try:
            query.node_id(conn, node)
            return _json({"node": node, "start": start, "end": end, "verdicts": timeline(conn, "node", node, start, end),
                          "unmonitored": _unmonitored(conn, node, start, end),
                          "unjudged": _unjudged(conn, node, start, end)})
        except query.QueryError as e:
            return _error(e)

    @app.get("/v1/nodes/{node}/alerts")
    def get_alerts(node: str) -> Response:
        conn = col.reader()
        try:
            query.node_id(conn, node)
        except query.QueryError as e:
            return _error(e)
        return _json({"node": node, "rule": vars(proc.cfg.alert), "alerts": alerts(conn, "node", node)})

    @app.get("/v1/jobs")
    def get_jobs() -> Response:
        conn = col.reader()
        out = []
        for j in jobs(conn):
            v = latest(conn, "job", j["job"])
            out.append({**j, "state": v and v["state"], "p_training": v and v["p_training"],
                        "alerts_open": len(alerts(conn, "job", j["job"], open_only=True))})
        return _json({"jobs": out})

    @app.get("/v1/jobs/{name}")
    def get_job(name: str, start: float | None = None, end: float | None = None) -> Response:
        conn = col.reader()
        j = job(conn, name)
        if j is None:
            return _json({"error": "unknown_job", "detail": f"no job {name[:128]!r}"}, 404)
        end = time.time() if end is None else end
        start = j["start_t"] - 60.0 if start is None else start
        v = latest(conn, "job", name)
        return _json({**j, "start": j["start_t"], "state": v and v["state"], "p_training": v and v["p_training"],
                      "verdict": v, "verdicts": timeline(conn, "job", name, start, end),
                      "alerts": alerts(conn, "job", name),
                      "single_device_lead": _lead(conn, "job", name, start, end),
                      "below_floor": floor_summary(conn, "job", name, start, end),
                      "unmonitored": {n: _unmonitored(conn, n, j["start_t"], end) for n in j["nodes"]},
                      "unjudged": {n: _unjudged(conn, n, j["start_t"], end) for n in j["nodes"]}})

    @app.get("/v1/live")
    def get_live() -> Response:
        return _json(proc.stats())
