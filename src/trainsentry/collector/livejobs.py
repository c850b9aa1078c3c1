"""Jobs across nodes: which active nodes run one workload together, and its verdict.

The rule (simple, and all it claims): two active nodes belong to one job when

* their jobs started within ``job_start_tol_s`` (10 s) of each other — a distributed launch starts
  every rank together (a node's job: its segments linked across pauses, :mod:`.nodestate`); and
* their *network* traffic is simultaneous over the latest window: the per-node byte series (all
  interfaces but loopback, TX+RX, on one 10 Hz grid of the same clock span) are active together in
  at least half the bins where either is active, or correlate at 0.5 or more — the co-activity
  and correlation that :func:`trainsentry.features.comm.cross_device_features` computes across
  GPUs, used here across nodes, with comm-rules' simultaneity threshold.

Only the network counts: whatever one job's nodes exchange must cross it, while NVLink stays
inside a node. Two unrelated nodes that each run their own busy 2-GPU job started in the same
10 s (the demo's replays did) keep NVLink busy all the time and would look "simultaneous" on it;
without traffic on their network they are two jobs.

Jobs are the connected groups of that relation; a node active alone is a job of one node. A job
is named after its nodes' earliest job start and its first node, so the name stays while the job
runs, pauses included. A node is judged before its peers (their batches come later, or their
traffic is not yet simultaneous in the window where the job starts): it forms a job of its own
first, which its peers' windows then join under the group's name; that first job no longer has
a node and its nodes are all in the new one, so it is merged into it (its verdicts, alerts and
its nodes' verdicts renamed, its row removed, its alert votes carried on) instead of staying
behind as a job of one window. A job of several nodes is judged on the *union* of its nodes' samples (devices renamed
``node/device``), cut by the same :func:`trainsentry.features.window_features`, so collectives that
span nodes show as simultaneous bursts across all their GPUs; a job of one node takes its node's
verdict. Node clocks are assumed synchronised (NTP): windows of different nodes are matched by
their agents' timestamps.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..detect.segment import MAX_GAP_S
from ..features import window_features
from ..features.comm import cross_device_features
from ..features.grid import to_grids
from . import verdicts as V

GRID_HZ = 10.0


def comm_series(table: pa.Table, t0: float, t1: float) -> np.ndarray:
    """Bytes/s a node moves over its network (every interface but loopback, TX+RX) per bin of [t0, t1]."""
    grid = next(iter(to_grids(table, GRID_HZ, t0, t1).values()), None)
    if grid is None:
        return np.zeros(0)
    total = np.zeros(grid.t.size)
    for series in grid.nets.values():
        for k in ("net_tx_Bps", "net_rx_Bps"):
            if k in series:
                total += np.nan_to_num(series[k])
    return total


def simultaneity(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(co-activity, correlation) of two nodes' byte series; zeros when either moved nothing."""
    if a.size < 2 or a.size != b.size:
        return 0.0, 0.0
    f = cross_device_features({"a": a, "b": b}, "net")
    return float(f.get("coactive", 0.0)), float(f.get("simult_corr", 0.0))


def union_table(tables: dict[str, pa.Table], job: str, t0: float, t1: float) -> pa.Table:
    """The nodes' samples in [t0, t1] as one node named ``job``, devices renamed ``node/device``."""
    parts = []
    for node, tb in sorted(tables.items()):
        tb = tb.filter(pc.and_(pc.greater_equal(tb["t"], t0), pc.less_equal(tb["t"], t1)))
        n = tb.num_rows
        tb = tb.set_column(tb.schema.get_field_index("node"), "node", pa.array([job] * n, pa.string()))
        devices = pa.array([f"{node}/{d}" for d in tb["device"].to_pylist()], pa.string())
        parts.append(tb.set_column(tb.schema.get_field_index("device"), "device", devices))
    return pa.concat_tables(parts)


class JobTracker:
    def __init__(self, cfg):
        self.cfg = cfg
        self.judged_until: dict[str, float] = {}
        self.members: dict[str, list[str]] = {}     # each job's nodes when last formed

    def _merges(self, before: dict[str, str | None], proc) -> list[tuple[str, str, list[str]]]:
        """(old job, new job, old job's nodes) for each job that no node is in any more and whose
        nodes still in a job are all in one: it was that job seen before its peers were judged (or
        under the name of a node that since left it), so it merges into it rather than staying
        behind as a job of its own. A job whose nodes went to different jobs split: it stays."""
        nodes = proc.nodes
        current = {st.job for st in nodes.values() if st.job is not None}
        out, seen = [], set()
        for n, old in sorted(before.items()):
            if old is None or old in current or old in seen:
                continue
            seen.add(old)
            members = self._members(old, proc)
            now_in = {nodes[m].job for m in members if m in nodes and nodes[m].job is not None}
            if len(now_in) == 1:
                new = now_in.pop()
                out.append((old, new, list(members)))
                self.members.pop(old, None)
                self.judged_until.pop(old, None)
                for st in nodes.values():
                    if st.last_job == old:
                        st.last_job = new
                    if st.paused_in == old:
                        st.paused_in = new
        return out

    def _members(self, job: str, proc) -> list[str]:
        if job not in self.members:
            self.members[job] = (V.job(proc.conn, job) or {}).get("nodes", [])
        return self.members[job]

    def idle_verdicts(self, node: str, e: float, proc) -> list[dict]:
        """Verdicts at ``e`` for the jobs of ``node`` that no node is active in (docs/collector.md,
        "Alerts and pauses"): while one of their nodes may still resume them (its pause can be
        linked by the job rule), an idle window that abstains (no vote, no clearing: the job goes
        on); once none may, the job has ended and, while its alert is open, an idle window that
        votes no, as a node's idle windows do, so its alert clears after n of them. A job that ended
        without an open alert gets no more verdicts."""
        from .live import classify  # (live imports this module)
        cfg, nodes = self.cfg, proc.nodes
        running = {st.job for st in nodes.values() if st.job is not None}
        jobs = {nodes[node].last_job} | {s for (scope, s), tr in proc.tracks.items() if scope == "job" and tr.open}
        out = []
        for job in sorted(j for j in jobs if j is not None and j not in running):
            members = [m for m in self._members(job, proc) if m in nodes]
            if node not in members:
                continue
            if job not in self.judged_until:
                last = V.latest(proc.conn, "job", job)
                self.judged_until[job] = last["t_end"] if last else -math.inf
            # wait for members still on their way to this window (not for one long silent)
            if self.judged_until[job] >= e or any(
                    nodes[m].last_end is not None and e - cfg.window_s <= nodes[m].last_end < e - 1e-6 for m in members):
                continue
            paused = [m for m in members if nodes[m].paused_in == job]
            if not paused and proc._track("job", job).open is None:
                continue
            self.judged_until[job] = e
            if paused:
                line = (f"paused: no node of job {job} is active; {', '.join(paused)} may still resume it as the "
                        f"same job (memory held, within {MAX_GAP_S / 60:.0f} min): this idle window neither votes "
                        "for nor clears the job's alert")
            else:
                line = (f"ended: no node of job {job} is active or may resume it (memory released, over "
                        f"{MAX_GAP_S / 60:.0f} min, or no GPU memory to show it held): its idle windows vote no "
                        "until its alert clears")
            out.append({"scope": "job", "subject": job, "t_start": e - cfg.window_s, "t_end": e, "state": "idle",
                        "p_training": None, "detector": proc.detector.name, "artifact": proc.artifact,
                        "evidence": [classify(False, None, None, cfg.training_p)[1], line, proc.detector_note],
                        "job": job, "abstain": bool(paused)})
            proc.windows_judged += 1
        return out

    def _groups(self, cand: list[str], nodes: dict, e: float) -> tuple[list[list[str]], dict]:
        cfg = self.cfg
        series = {n: comm_series(nodes[n].table, e - cfg.window_s, e) for n in cand}
        parent = {n: n for n in cand}

        def root(n: str) -> str:
            while parent[n] != n:
                n = parent[n]
            return n
        why: dict[frozenset, str] = {}
        for a, b in combinations(cand, 2):
            d_start = abs(nodes[a].active_since - nodes[b].active_since)
            if d_start > cfg.job_start_tol_s:
                continue
            co, corr = simultaneity(series[a], series[b])
            if max(co, corr) >= cfg.job_simult_min:
                parent[root(b)] = root(a)
                why[frozenset((a, b))] = (f"{a} and {b}: segments started {d_start:.1f} s apart (<= "
                                          f"{cfg.job_start_tol_s:.0f} s), network traffic co-activity {co:.2f}, "
                                          f"correlation {corr:.2f} (>= {cfg.job_simult_min})")
        groups: dict[str, list[str]] = {}
        for n in cand:
            groups.setdefault(root(n), []).append(n)
        return [sorted(g) for g in groups.values()], why

    def update(self, node: str, ends: list[float], proc, node_verdicts: list[dict]
               ) -> tuple[list[dict], list[dict], list[tuple[str, str, list[str]]]]:
        """Regroup after ``node`` was judged at the windows ending at ``ends`` (in order); (job verdicts,
        job rows) for its job, and the jobs merged into another (see :meth:`_merges`). The job gets a
        verdict at every one of those windows that every member has reached and it has not had yet: a
        batch completing several windows judges the job at each, not only at the last, and a window a
        lagging member had not reached is judged when that member's own windows get there."""
        cfg, nodes = self.cfg, proc.nodes
        e = ends[-1]
        me = nodes[node]
        if me.active_since is None:
            return self.idle_verdicts(node, e, proc), [], []
        cand = sorted(n for n, st in nodes.items() if st.active_since is not None and st.table is not None
                      and st.last_end is not None and abs(st.last_end - e) <= cfg.window_s)
        groups, why = self._groups(cand, nodes, e)
        verdicts, rows = [], []
        before = {n: st.job for n, st in nodes.items()}
        for members in groups:
            start = min(nodes[m].active_since for m in members)
            job = f"job-{math.floor(start)}-{members[0]}"
            for m in members:
                nodes[m].job = nodes[m].last_job = job
            self.members[job] = members
        merges = self._merges(before, proc)
        for members in groups:
            job = nodes[members[0]].job
            start = min(nodes[m].active_since for m in members)
            if node not in members:
                continue
            rows.append({"job": job, "nodes": members, "start_t": start, "last_t": e})
            if job not in self.judged_until:  # first sight since start: the store knows (a restart)
                last = V.latest(proc.conn, "job", job)
                self.judged_until[job] = last["t_end"] if last else -math.inf
            # windows not judged here yet, ending after the job's latest segment began (on its earliest
            # member), that every member has reached (a lagging member's own windows bring the job's
            # verdicts there later). A batch's windows before that segment were idle or a pause: they
            # are the node verdicts' (abstaining in a pause), never votes of the job
            seg = min((nodes[m].track.seg_start if nodes[m].track.seg_start is not None else nodes[m].active_since)
                      for m in members)
            lo = max(self.judged_until[job], seg)
            todo = [x for x in ends if x > lo + 1e-6 and all(nodes[m].last_end >= x - 1e-6 for m in members)]
            if not todo:
                continue
            self.judged_until[job] = todo[-1]
            if len(members) == 1:
                for x in todo:
                    mine = next((v for v in reversed(node_verdicts) if abs(v["t_end"] - x) < 1e-6), None)
                    if mine is not None:
                        verdicts.append({**mine, "scope": "job", "subject": job, "job": job,
                                         "evidence": [f"job of one node ({node}): the node's verdict", *mine["evidence"]]})
                continue
            reasons = [r for pair, r in why.items() if pair <= set(members)]
            gaps = [g for m in members for g in nodes[m].gaps]
            extra = [f"job of {len(members)} nodes ({', '.join(members)}), judged on the union of their samples",
                     *reasons]
            table = union_table({m: nodes[m].table for m in members}, job, todo[0] - cfg.window_s - 1.0, todo[-1])
            for x in todo:   # one union for the batch's windows, cut per window
                rows_f = window_features(table, x - cfg.window_s, x)
                verdicts += proc.judge_rows("job", job, rows_f, [x], lambda _e: True, gaps, extra,
                                            job_of=lambda _e, j=job: j, table=table)
        # a job this node left for another (not merged into it) ended: its open alert must clear
        return verdicts + self.idle_verdicts(node, e, proc), rows, merges
