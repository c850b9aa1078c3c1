"""Live verdicts: segmentation and a detector over each node's stream as its batches commit.

:class:`LiveProcessor` subscribes to the commit bus (:mod:`trainsentry.collector.hooks`) and keeps,
per node, the last ``buffer_s`` seconds of samples. Every ``stride_s`` of the node's own clock
(window ends on absolute multiples of the stride, so the windows of different nodes line up) it

1. turns the buffer into a trace table with :mod:`trainsentry.traces.io` (rates derived there,
   nowhere else) and finds the active workload segments (:func:`detect.segment.segment_stream`;
   a node without GPUs: its network traffic, see :func:`node_segments`), and keeps the node's job
   across buffers and pauses by the offline job rule (:class:`.nodestate.NodeJob`);
2. cuts the window with the one feature entry :func:`trainsentry.features.sliding_windows` and
   scores it with the detector (a trained artifact from ``models/``, else untrained comm-rules);
3. names the state (:func:`classify`), keeps the evidence (``detector.explain`` as the detector
   wrote it, plus why the state was chosen) and runs the k-of-n alert rule (:class:`detect.alert.AlertRule`);
4. groups active nodes into jobs (:mod:`trainsentry.collector.livejobs`) and judges each job of
   several nodes on the union of its nodes' samples.

Verdicts, alerts and jobs go to SQLite (:mod:`trainsentry.collector.verdicts`) in one transaction
per batch; the API reads them from there. All of it runs on the bus's dispatcher thread, never on
the ingest path.

The store, not the bus, is the source of truth. Each node's state remembers ``seq``, the last
stored batch its buffer has read. An event whose seq is not the next one (the bus dropped events
when its queue was full), a catch-up notice from the bus, or the backlog found at start makes the
processor read the missing batches back from the store (:meth:`LiveProcessor.catch_up`), one at a
time and in seq order, through the same path as an event: the verdicts are those of a processor
that was handed every batch. What it cannot judge (a batch it cannot read back after
``READ_RETRIES`` attempts, windows skipped when a node's samples jump ahead by more than
``max_catchup`` windows) is recorded in ``unjudged`` with the reason and served by the verdict API.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import sqlite3
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from ..detect.alert import AlertRule
from ..detect.base import Detector, load_detector
from ..detect.rules import CommRules
from ..detect.segment import HELD_FRAC, MAX_GAP_S, Segment, _runs_with_hysteresis, segment_stream
from ..detect.single_device import verdict_p
from ..features import FEATURE_VERSION, sliding_windows
from ..features.comm import ACTIVE_FLOOR_BPS
from ..features.grid import to_grids
from . import livejobs, query, verdicts as V, warm
from .evidence import detector_lines, host_lines
from .hooks import CommittedBatch
from .nodestate import LOOPBACK_LINK, NodeState
from .schema import connect
from .store import TIME_REGRESSION

log = logging.getLogger("trainsentry.collector.live")

LIVE_ENV = "TRAINSENTRY_LIVE"                   # "0": do not start the live processor
MODELS_ENV = "TRAINSENTRY_MODELS"               # where trained detectors are looked for (default ./models)
LOOPBACK_ENV = "TRAINSENTRY_LIVE_LOOPBACK"      # "1": count the loopback interface as a network link
LEAD_VERDICT_ENV = "TRAINSENTRY_LEAD_VERDICT"   # "0": the single-device check is evidence only, not a path to the verdict
# Trained artifacts the live path can use, best first (rt-baseline reads other features).
PREFERENCE = ("fused", "comm-ml", "comm-rules")
# "other" = a large symmetric exchange that is not training: the comm-rules defaults for volume
# and symmetry (docs/detector.md), so the state rule and the detector speak of the same quantities.
COLLECTIVE_BPS = 1e8
COLLECTIVE_SYM = 0.7
# Where GPM reports tensor-core and SM activity (Hopper and later), inference vs other is read from
# the work itself: a neural network's forward pass spends part of its SM time in tensor-core matrix
# multiplies and part in the kernels around them (attention softmax, norms, activations); copies,
# collectives and FP32 numerics use no tensor cores, a matmul burn almost nothing else. The share is
# the busiest GPU's tensor activity over the busiest GPU's SM activity (scripts/state_rule.py,
# docs/collector.md: 3 % lies between the stencil solver's 2.4 % and the lowest inference window's 3.2 %).
TENSOR_SHARE_MIN = 0.03         # below: GPU work without neural-network matmuls
TENSOR_SHARE_GEMM_ONLY = 0.9    # at or above: tensor-core GEMMs and little else (a matmul burn)
SM_ACTIVE_MIN = 1.0             # % SM activity below which a share is not read ...
TENSOR_ANY = 0.001              # ... only whether tensor cores worked at all (% activity; exactly 0 when idle)
TENSOR_KEY, SM_KEY = "act.gpm_tensor_util_pct.mean.max", "act.gpm_sm_util_pct.mean.max"
READ_RETRIES = 3        # attempts at reading a node's missing batches back before they are marked unjudged


@dataclass
class LiveConfig:
    window_s: float = 8.0
    stride_s: float = 2.0
    buffer_s: float = 30.0          # samples kept per node: a window plus room for segmentation
    training_p: float = 0.5         # state "training" at or above this P(training)
    alert: AlertRule = field(default_factory=AlertRule)
    job_start_tol_s: float = 10.0   # the nodes of one job started it within this of each other ...
    job_simult_min: float = 0.5     # ... and their traffic is simultaneous (co-activity or correlation)
    loopback_as_link: bool = False
    # the single-device check is the verdict's second path: where it speaks, P(training) is the larger
    # of the detector's and the check's (detect.single_device.verdict_p), as the evaluation's
    # ``fused+single-device-live-noconv`` scores it; False: the check is a line in the evidence only
    lead_in_verdict: bool = True
    models_dir: Path = Path("models")
    max_catchup: int = 30           # windows judged at most at once (more: the node's samples jumped ahead)
    piece_s: float = 10.0           # a batch spanning more is judged in pieces of this span, in time order

    @classmethod
    def from_env(cls) -> "LiveConfig":
        return cls(loopback_as_link=os.environ.get(LOOPBACK_ENV, "0") == "1",
                   lead_in_verdict=os.environ.get(LEAD_VERDICT_ENV, "1") != "0",
                   models_dir=Path(os.environ.get(MODELS_ENV, "models")))


# Evidence checks: each adds its own line to a window's evidence. name -> module of trainsentry.detect
# holding ``load(path)``; the artifact is models/<name>.joblib.
EVIDENCE_CHECKS = {"familiarity": "familiarity", "single-device": "single_device"}
# The check that is also a number: its P is stored beside each verdict (``lead_p``) and summed up, and
# (``LiveConfig.lead_in_verdict``) it is the verdict's second path, for training on one device that
# exchanges nothing: the other checks change no verdict.
LEAD_CHECK = "single-device"


def load_live_check(models_dir: Path, name: str):
    """The evidence check ``name`` (EVIDENCE_CHECKS) when ``models/<name>.joblib`` is usable, else None:
    it only adds a line to the evidence, so a missing or bad one is logged and verdicts go on."""
    path = Path(models_dir) / f"{name}.joblib"
    if not path.exists():
        return None
    try:
        import importlib
        return importlib.import_module(f"..detect.{EVIDENCE_CHECKS[name]}", __package__).load(path)
    except Exception as e:  # evidence only: never worth stopping verdicts for
        log.error("cannot use %s artifact %s: %s", name, path, e)
        return None


def load_live_detector(models_dir: Path) -> tuple[Detector, str | None, str]:
    """(detector, artifact path or None, one line saying which and why)."""
    problems = []
    for name in PREFERENCE:
        path = Path(models_dir) / f"{name}.joblib"
        if not path.exists():
            continue
        try:
            det = load_detector(path)
            if det.feature_set != "trainsentry":
                raise ValueError(f"reads the {det.feature_set!r} feature set, not the live one")
            meta_path = path.with_suffix(".json")
            meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
            fitted_on = meta.get("feature_version")
            if fitted_on is not None and fitted_on != FEATURE_VERSION:
                # columns of another version may be missing (read as NaN, silently) or mean something else
                raise ValueError(f"fitted on window features version {fitted_on}, this collector computes "
                                 f"version {FEATURE_VERSION}: refit it (`trainsentry eval --train-final {name}`)")
            trained_by = meta.get("trained_by", "unknown command (no .json beside it)")
            note = f"detector {det.name} from {path}, trained by `{trained_by}`" + (
                f" on window features version {fitted_on}" if fitted_on is not None
                else "; its window feature version is not recorded")
            return det, str(path), note + "".join(f"; unusable artifact {p}" for p in problems)
        except Exception as e:  # a bad artifact must not stop verdicts: say so and fall back
            problems.append(f"{path}: {e}")
            log.error("cannot use detector artifact %s: %s", path, e)
    det = CommRules()
    note = (f"detector comm-rules, untrained: no usable artifact in {models_dir} "
            f"(`trainsentry eval --train-final NAME` writes one); documented default thresholds: volume "
            f"{det.volume_Bps / 1e6:.0f} MB/s per GPU, symmetry {det.sym_min}, simultaneity {det.simult_min}, "
            f"busy {det.duty_min} or autocorrelation {det.acf_min}, at most {det.bytes_per_J_max:.0e} B/J")
    if problems:
        note += "; unusable artifacts: " + "; ".join(problems)
    return det, None, note


def node_segments(table: pa.Table, hz: float = 2.0) -> list[Segment]:
    """Active spans of one node's buffer: segment_stream's rule; a node without GPUs is active
    while its busiest interface moves more than the network's active floor (1 MB/s)."""
    if table.num_rows == 0:
        return []
    seg = next(iter(segment_stream(table, hz).values()), {"segments": []})
    if "gpu" in set(table.column("kind").to_pylist()):
        return [Segment(**s) for s in seg["segments"]]
    grid = next(iter(to_grids(table, hz).values()))
    nets = [np.nan_to_num(s["net_tx_Bps"]) + np.nan_to_num(s["net_rx_Bps"])
            for s in grid.nets.values() if "net_tx_Bps" in s and "net_rx_Bps" in s]
    if not nets or grid.t.size == 0:
        return []
    active = np.max(np.vstack(nets), axis=0) > ACTIVE_FLOOR_BPS["net"]
    t0 = grid.t - grid.dt_s
    # the same hysteresis as segment_stream: on after 1 s active, off after 2 s quiet
    return [Segment(float(t0[a]), float(t0[b]) if b < t0.size else float(grid.t[-1]))
            for a, b in _runs_with_hysteresis(active, max(1, round(hz)), max(1, round(2 * hz)))]


def _collective(row: dict) -> tuple[str, float, float] | None:
    """(channel, B/s, symmetry) when the window holds a large symmetric exchange, else None."""
    for ch, sfx, label in (("nvlink", ".min", "NVLink"), ("net", "", "network")):
        bps, sym = row.get(f"comm.{ch}.Bps{sfx}", math.nan), row.get(f"comm.{ch}.sym{sfx}", math.nan)
        if math.isfinite(bps) and math.isfinite(sym) and bps >= COLLECTIVE_BPS and sym >= COLLECTIVE_SYM:
            return label, bps, sym
    return None


def pause_line(job: str, paused_s: float) -> str:
    return (f"paused {paused_s:.0f} s: job {job} may still resume as the same job (at most {MAX_GAP_S / 60:.0f} min, "
            f"every GPU holding >= {HELD_FRAC:.0%} of its memory above its idle floor so far): this idle window "
            "neither votes for nor clears an alert")


def classify(active: bool, p: float | None, row: dict | None, training_p: float) -> tuple[str, str]:
    """(state, why). The detector answers training or not; inference vs other is this rule: the
    tensor-core share of SM activity where GPM reports both, else whether the window holds a large
    symmetric exchange that is not training (other) or not (inference)."""
    if not active:
        return "idle", ("idle: no workload segment active at the window's end (GPUs: utilisation <= 5 %, "
                        "power within 40 W of idle, no NVLink bytes; no GPUs: network below 1 MB/s)")
    if p is None or row is None:
        return "other", "other: a segment is active but the window had too few samples for features"
    if p >= training_p:
        return "training", f"training: P(training) {p:.2f} >= {training_p}"
    tensor, sm = row.get(TENSOR_KEY, math.nan), row.get(SM_KEY, math.nan)
    if math.isfinite(tensor) and math.isfinite(sm):
        return _by_tensor_share(p, training_p, tensor, sm)
    coll = _collective(row)
    if coll:
        return "other", (f"other: not training (P {p:.2f} < {training_p}) yet a large symmetric exchange "
                         f"({coll[0]} {coll[1] / 1e6:.0f} MB/s, symmetry {coll[2]:.2f}): collective traffic "
                         "that is not shaped like training (benchmark, sweep, copies)")
    return "inference", (f"inference: active, not training (P {p:.2f} < {training_p}), and no large "
                         f"symmetric exchange (>= {COLLECTIVE_BPS / 1e6:.0f} MB/s at symmetry >= "
                         f"{COLLECTIVE_SYM}): compute with little or one-way traffic")


def _by_tensor_share(p: float, training_p: float, tensor: float, sm: float) -> tuple[str, str]:
    """Inference vs other from the tensor-core share of SM activity (GPM), for a window not training."""
    head = f"not training (P {p:.2f} < {training_p})"
    if sm < SM_ACTIVE_MIN:   # too little SM work for a share to mean anything: any tensor-core work at all?
        if tensor >= TENSOR_ANY:
            return "inference", (f"inference: {head}; SM activity {sm:.2f} % (busiest GPU), too little for a share, "
                                 f"with tensor-core work ({tensor:.3f} %): a light decode or an idle server")
        return "other", (f"other: {head}; SM activity {sm:.2f} % (busiest GPU) and no tensor-core work: copy "
                         "engines, the host, or kernels without matrix multiplies")
    share = tensor / sm
    line = f"tensor-core share of SM activity {share:.1%} (tensor {tensor:.1f} %, SM {sm:.1f} %, busiest GPU)"
    if share < TENSOR_SHARE_MIN:
        return "other", (f"other: {head}; {line} < {TENSOR_SHARE_MIN:.0%}: GPU work without neural-network "
                         "matrix multiplies (copies, collectives, FP32 numerics)")
    if share >= TENSOR_SHARE_GEMM_ONLY:
        return "other", (f"other: {head}; {line} >= {TENSOR_SHARE_GEMM_ONLY:.0%}: tensor-core GEMMs and almost "
                         "no other kernel, as a matmul burn (a network's layers add attention, norms, activations)")
    return "inference", (f"inference: {head}; {line}: neural-network compute (tensor-core matrix multiplies "
                         "between other kernels)")


@dataclass
class _Track:
    """k-of-n alert state of one subject."""
    votes: deque                    # (window end, vote) of the last n voting windows, oldest first
    open: dict | None = None        # the open alert (has "id" once written)

    def cast(self, t_end: float, vote: bool) -> None:
        """Vote for the window ending at ``t_end``; a window voted before (judged again, as when a
        job of one node is merged into the job its peers form) replaces its earlier vote."""
        while self.votes and self.votes[-1][0] >= t_end - 1e-6:
            self.votes.pop()
        self.votes.append((t_end, vote))

    def yes(self) -> int:
        return sum(v for _, v in self.votes)


def _gpu_count(table: pa.Table | None) -> int | None:
    """The GPUs whose samples ``table`` holds (a job's union names them node/device), or None."""
    if table is None or table.num_rows == 0:
        return None
    kinds, devices = table.column("kind").to_pylist(), table.column("device").to_pylist()
    return len({d for k, d in zip(kinds, devices) if k == "gpu"}) or None


class LiveProcessor:
    def __init__(self, db_path: str | Path, synchronous: str = "normal", config: LiveConfig | None = None,
                 reader=None):
        self.cfg = config or LiveConfig.from_env()
        # read connections for the API's threads: ``reader()`` of the collector (one per thread,
        # closed with it), else this processor's own per-thread ones
        self._reader, self._local, self._readers = reader, threading.local(), []
        self.detector, self.artifact, self.detector_note = load_live_detector(self.cfg.models_dir)
        self.checks = {n: c for n in EVIDENCE_CHECKS if (c := load_live_check(self.cfg.models_dir, n)) is not None}
        # the lead "reads like training" at its artifact's threshold, else the check's default (the read
        # API counts stored lead_p with it too, also once the check is dropped or absent)
        from ..detect.single_device import THRESHOLD
        self.lead_threshold = float(getattr(self.checks.get(LEAD_CHECK), "threshold", THRESHOLD))
        # windows outside the artifact's domain (a sensor it always had is missing) get the rules
        self.fallback = CommRules()
        self.conn_path, self.synchronous = db_path, synchronous
        self.conn = connect(db_path, synchronous)
        self.writer = V.VerdictWriter(self.conn)
        self.nodes: dict[str, NodeState] = {}
        self.tracks: dict[tuple[str, str], _Track] = {}
        self.jobs = livejobs.JobTracker(self.cfg)
        self.windows_judged = 0
        # per node, for the dashboard's overview: {state, p_training, job, alerts, since, lead_p,
        # lead_like_training, floor_flop};
        # restored from the database so a restarted collector shows the last verdicts at once
        self.summary: dict[str, dict] = {}
        for (node,) in self.conn.execute("SELECT DISTINCT subject FROM verdicts WHERE scope = 'node'").fetchall():
            v = V.latest(self.conn, "node", node)
            self.summary[node] = {"state": v["state"], "p_training": v["p_training"], "job": v["job"],
                                  "since": v["t_end"], "alerts": len(V.alerts(self.conn, "node", node, True)),
                                  **self._lead_fields(v)}
        t = time.perf_counter()
        # the state beyond each buffer (jobs, idle floors, window clocks) and the buffers themselves
        # come back from the store: a restart does not start a running job over; the batches stored
        # after what each buffer had read are the backlog, read back by catch_up (install_live)
        self.nodes, self.warmed_samples, self.restored, self.backlog, unjudged = \
            warm.restore(self.conn, self.cfg, NodeState)
        self.warm_s = time.perf_counter() - t
        self._node_ids: dict[str, int] = {}
        self._stopping = False
        self._read_failures: dict[str, int] = {}
        self.caught_up = {"batches": 0, "samples": 0, "read_errors": 0, "unjudged": 0, "judge_errors": 0}
        if unjudged:  # the part of a backlog older than the catch-up horizon: said, with the skip
            self._mark_unjudged(unjudged)
        for a in V.alerts(self.conn, "job", open_only=True):  # a job that ends must clear its open alert
            self._track("job", a["subject"])

    def stop(self) -> None:
        """Stop judging: the collector is shutting down. Whatever is not judged yet is in the store
        and is read back when it starts again (the snapshot says from where)."""
        self._stopping = True

    def close(self) -> None:
        for c in self._readers:
            c.close()
        self.conn.close()

    def stats(self) -> dict:
        return {"detector": self.detector.name, "artifact": self.artifact, "note": self.detector_note,
                "evidence_checks": sorted(self.checks),
                # the single-device check as the verdict's second path (LiveConfig.lead_in_verdict), if loaded
                "single_device_path": self.cfg.lead_in_verdict and LEAD_CHECK in self.checks,
                "windows_judged": self.windows_judged, "nodes": len(self.nodes),
                "window_s": self.cfg.window_s, "stride_s": self.cfg.stride_s,
                "loopback_as_link": self.cfg.loopback_as_link,
                "warmed": {"nodes": sum(1 for st in self.nodes.values() if st.table is not None),
                           "samples": self.warmed_samples, "s": round(self.warm_s, 3)},
                "restored": self.restored, "caught_up": dict(self.caught_up),
                "behind": self.behind()}

    def behind(self, node: str | None = None) -> dict[str, int]:
        """{node: stored batches (by seq) the processor has not read yet}, nodes it owes any
        (one node, or all; from the API's threads)."""
        sql, args = "SELECT name, last_seq FROM nodes WHERE last_seq IS NOT NULL", ()
        if node is not None:
            sql, args = sql + " AND name = ?", (node,)
        out = {}
        for name, last_seq in self.reader().execute(sql, args).fetchall():
            st = self.nodes.get(name)
            n = last_seq - (st.seq if st is not None and st.seq is not None else -1)
            if n > 0:
                out[name] = n
        return out

    def not_judged_yet(self, node: str) -> list[dict]:
        """An open unjudged span while the processor is behind on the node's stored batches."""
        n = self.behind(node).get(node, 0)
        if not n:
            return []
        st = self.nodes.get(node)
        start = st.last_end if st is not None and st.last_end is not None else None
        return [{"start": start, "end": None, "open": True, "seq_from": None, "seq_to": None, "recorded_at": None,
                 "reason": f"not judged yet: {n} stored batch(es) of this node are still to be read back and "
                           "judged (the live processor is behind ingest and catching up from the store)"}]

    def overview_state(self) -> tuple[dict[str, dict], list[dict]]:
        """(verdict summary per node, jobs with their latest verdict) for the dashboard's overview.

        Called from the API's threads: one query over that thread's reader connection."""
        return dict(self.summary), V.jobs_with_latest(self.reader())

    def reader(self):
        """A read connection of the calling thread (the collector's, when it lent its own)."""
        if self._reader is not None:
            return self._reader()
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.conn_path, self.synchronous, readonly=True)
            self._readers.append(conn)
        return conn

    def _summarise(self, node_verdicts: list[dict]) -> None:
        v = node_verdicts[-1]
        old = self.summary.get(v["subject"], {})
        tr = self.tracks.get(("node", v["subject"]))
        since = old.get("since") if old.get("state") == v["state"] else v["t_start"]
        self.summary[v["subject"]] = {"state": v["state"], "p_training": v["p_training"], "job": v["job"],
                                      "since": since, "alerts": int(tr is not None and tr.open is not None),
                                      **self._lead_fields(v)}

    def _lead_fields(self, v: dict) -> dict:
        """The overview's view of a node's latest single-device check: the lead's P, whether that reads
        like training at the loaded check's threshold (else the check's default), decided here, not in
        the page, and the bound on the window's work where it lay below the check's busy floor."""
        p = v.get("lead_p")
        return {"lead_p": p, "lead_like_training": p is not None and p >= self.lead_threshold,
                "floor_flop": v.get("floor_flop")}

    # ---- alerts --------------------------------------------------------------------------------
    def _track(self, scope: str, subject: str) -> _Track:
        key = (scope, subject)
        tr = self.tracks.get(key)
        if tr is None:  # first sight since start: restore votes and the open alert from the database
            rule = self.cfg.alert
            votes = deque(((t, state != "idle" and p is not None and p >= rule.threshold)
                           for t, state, p in V.last_p(self.conn, scope, subject, rule.n)), maxlen=rule.n)
            opened = V.alerts(self.conn, scope, subject, open_only=True)
            tr = self.tracks[key] = _Track(votes, opened[-1] if opened else None)
        return tr

    def _vote(self, v: dict, out: dict) -> None:
        """Feed one verdict to its subject's k-of-n rule; record raised, updated and cleared alerts.
        A window that abstains (idle in a pause its job may resume from) neither raises nor clears."""
        if v.get("abstain"):
            return
        rule, tr = self.cfg.alert, self._track(v["scope"], v["subject"])
        p = v["p_training"]
        tr.cast(v["t_end"], v["state"] != "idle" and p is not None and p >= rule.threshold)
        if tr.open is None:
            if tr.yes() >= rule.k:
                tr.open = {"scope": v["scope"], "subject": v["subject"], "raised_t": v["t_end"], "cleared_t": None,
                           "threshold": rule.threshold, "k": rule.k, "n": rule.n, "p_max": p,
                           "detector": v["detector"], "evidence": v["evidence"]}
                out["new"].append(tr.open)
            return
        if p is not None and p > tr.open["p_max"]:
            tr.open["p_max"] = p
        if not tr.yes():  # cleared once no window of the last n votes for training
            tr.open["cleared_t"] = v["t_end"]
        if "id" in tr.open:
            out["updated"][tr.open["id"]] = tr.open
        if tr.open["cleared_t"] is not None:
            tr.open = None

    def _merge_tracks(self, old: str, new: str, e: float, out: dict) -> None:
        """Job ``old`` was ``new`` seen before its peers (livejobs.JobTracker._merges): its votes
        and open alert carry on as ``new``'s (the store renames its rows in the same transaction)."""
        tp = self._track("job", old)
        del self.tracks[("job", old)]
        tn = self._track("job", new)
        if not tn.votes:       # a job just formed: the alert clock of its first node's job runs on
            tn.votes.extend(tp.votes)
        if tp.open is not None:
            if tn.open is None:
                tn.open = tp.open
                tn.open["subject"] = new
            else:              # both had one: the older history is closed where the two became one
                tp.open["cleared_t"] = e
                if "id" in tp.open:
                    out["updated"][tp.open["id"]] = tp.open

    # ---- judging ---------------------------------------------------------------------------------
    def judge_rows(self, scope: str, subject: str, rows: list[dict], ends: list[float],
                   active_at, gaps: list[tuple[float, float, str]], extra: list[str], job_of=None,
                   table: pa.Table | None = None) -> list[dict]:
        """Verdicts for windows ending at ``ends`` from feature ``rows`` (matched by end time);
        ``table`` (the samples judged) says why a quantity the detector could not measure is missing."""
        cfg = self.cfg
        by_end = {round(r["t_end"] / cfg.stride_s): r for r in rows}
        matched = [by_end.get(round(e / cfg.stride_s)) for e in ends]
        have = [r for r in matched if r is not None]
        frame = pd.DataFrame(have)
        ood = self.detector.out_of_domain(frame) if have else np.zeros(0, bool)
        ps = np.full(len(have), np.nan)
        if (~ood).any():
            ps[~ood] = self.detector.predict_proba(frame[~ood])
        if ood.any():
            ps[ood] = self.fallback.predict_proba(frame[ood])
        checked, lead, floor = self._check_lines(frame, _gpu_count(table)) if have else ({}, [], [])
        check_lines, leads, floors = {name: iter(lines) for name, lines in checked.items()}, iter(lead), iter(floor)
        ps, oods = iter(ps), iter(ood)
        out = []
        for e, row in zip(ends, matched):
            p = float(next(ps)) if row is not None else None
            det = self.fallback if row is not None and next(oods) else self.detector
            active = active_at(e)
            lead_p = next(leads, None) if row is not None else None
            floor_flop = next(floors, None) if row is not None else None
            # the single-device path: where the check speaks and reads more training than the detector,
            # its P is the verdict's (the detector's exchange gate holds P down where nothing is exchanged,
            # and its trees can doubt a multi-GPU trainer whose GPUs' activity reads like training)
            pv = float(verdict_p(p, lead_p)) if cfg.lead_in_verdict and active and p is not None else p
            via_lead = pv is not None and p is not None and pv > p
            state, why = classify(active, pv, row, cfg.training_p)
            if via_lead and state == "training":
                why += (f" (the single-device path: {det.name} reads {p:.2f}; the busiest GPU's activity reads "
                        f"{lead_p:.2f}, see the single-device check's line)")
            elif via_lead:
                why += f" (P from the single-device check; {det.name} reads {p:.2f})"
            evidence = [why, *extra, self.detector_note]
            if det is self.fallback:
                evidence.append(f"this window lacks a sensor {self.detector.name} was always fitted with "
                                f"({', '.join(getattr(self.detector, 'groups_seen_', []))}): judged by comm-rules with its "
                                f"documented default thresholds instead")
            if row is not None:  # the checks' lines, then the detector's own, passed through (collector/evidence.py)
                lines = {name: next(it, None) for name, it in check_lines.items()}
                if state == "idle":
                    # the workload has ended (or paused) by the window's end: the busy tail the window still
                    # holds is no lead, and counting it would add a "like training" window per burst. A
                    # window below the check's busy floor gives no P but a bound on its work (a line the
                    # check writes where it has no P), kept: it is how a node kept under the floor shows
                    if lead_p is not None:
                        lines.pop(LEAD_CHECK, None)
                    lead_p = None
                evidence += [line for line in lines.values() if line is not None]
                evidence += detector_lines(det.explain(row), table, e - cfg.window_s, e)
                evidence += host_lines(table, e - cfg.window_s, e)
            touched = [g for g in gaps if g[0] < e and g[1] > e - cfg.window_s]
            lost = [g for g in touched if g[2] != TIME_REGRESSION]
            back = [g for g in touched if g[2] == TIME_REGRESSION]
            if lost:
                evidence.append("window overlaps an unmonitored interval: " + ", ".join(
                    f"{g[0]:.1f}-{g[1]:.1f}" for g in lost) + " (the verdict rests on the samples that arrived)")
            if back:
                evidence.append("window overlaps an unmonitored interval, time regression: " + ", ".join(
                    f"{g[0]:.1f}-{g[1]:.1f}" for g in back) + " (samples stamped before ones already received: "
                    "history rewritten or clock stepped back; windows judged before they came did not see them)")
            out.append({"scope": scope, "subject": subject, "t_start": e - cfg.window_s, "t_end": e,
                        "state": state, "p_training": pv,
                        "detector": f"{det.name}+{LEAD_CHECK}" if via_lead else det.name,
                        "artifact": self.artifact if det is self.detector else None, "evidence": evidence,
                        "job": job_of(e) if job_of else None, "lead_p": lead_p, "floor_flop": floor_flop})
            self.windows_judged += 1
        return out

    def _check_lines(self, frame: pd.DataFrame, gpus: int | None = None) -> tuple[
            dict[str, list[str | None]], list[float | None], list[float | None]]:
        """Per evidence check (by name), its entry for each row (a line, or None), the single-device
        lead's P(training) per row (None where it did not speak; all None without it) and its bound on
        the work of each row below its busy floor over the ``gpus`` GPUs judged (None elsewhere): a check
        that fails (an artifact this sklearn cannot run, odd input) is logged and dropped, never a reason
        to stop verdicts."""
        out: dict[str, list[str | None]] = {}
        lead: list[float | None] = [None] * len(frame)
        floor: list[float | None] = [None] * len(frame)
        for name, check in list(self.checks.items()):
            try:
                if name == LEAD_CHECK:
                    lead, out[name], floor = check.read(frame, gpus)
                else:
                    out[name] = check.lines(frame)
            except Exception as e:
                log.error("%s check failed, dropped from the evidence from now on: %s", name, e)
                del self.checks[name]
                if name == LEAD_CHECK:
                    lead, floor = [None] * len(frame), [None] * len(frame)
        return out, lead, floor

    def judge_node(self, node: str, st: NodeState, ends: list[float]) -> list[dict]:
        cfg = self.cfg
        segs = node_segments(st.table)
        mem = st.memory()

        def active_seg(e: float) -> Segment | None:
            return next((s for s in segs if s.start < e and s.end > e - cfg.stride_s), None)
        rows = sliding_windows(st.table, cfg.window_s, cfg.stride_s, t0=ends[0] - cfg.window_s, t1=ends[-1])
        extra = [f"{LOOPBACK_LINK}: the loopback interface counts as a network link (single-machine run)"] \
            if cfg.loopback_as_link and LOOPBACK_LINK in set(st.table.column("device").to_pylist()) else []
        verdicts = self.judge_rows("node", node, rows, ends, lambda e: active_seg(e) is not None, st.gaps, extra,
                                   table=st.table)
        quiet = self._silent_devices(node)
        for v in verdicts:
            if quiet:
                self._silent_device_line(v, *quiet)
            seg = active_seg(v["t_end"])
            # the job outlives the buffer and its pauses: nodestate.NodeJob keeps it (the offline rule)
            st.track.see(segs, v["t_end"], mem, st.mem_floor)
            if seg is None:
                st.active_since, st.job = None, None
                # a pause the job rule may still link: its job goes on, so its alert neither clears
                # nor grows here (docs/collector.md, "Alerts and pauses")
                st.paused_in = st.last_job if st.track.may_resume(v["t_end"], st.mem_floor) else None
                if st.paused_in is not None:
                    v["abstain"], v["job"] = True, st.paused_in
                    v["evidence"].insert(1, pause_line(st.paused_in, v["t_end"] - st.track.seg_end))
                continue
            st.paused_in = None
            st.active_since = st.track.start
            v["evidence"][1:1] = st.track.evidence(v["t_end"])
            if seg.start > v["t_start"]:
                # a window straddling the start mixes idle and work: its rates and regularity
                # are diluted, so the state is said to be provisional rather than hidden
                v["evidence"].insert(1, f"provisional: only {v['t_end'] - seg.start:.1f} s of this "
                                        f"{cfg.window_s:.0f} s window lie inside the segment")
        st.last_end = ends[-1]
        return verdicts

    def _silent_devices(self, node: str) -> tuple[list[tuple], float] | None:
        """(the node's GPUs and IB ports as query.watched_devices reads them, its interval), or None."""
        try:
            nid = self._node_id(node)
            (interval_s,) = self.conn.execute("SELECT interval_s FROM nodes WHERE node_id = ?", (nid,)).fetchone()
            devs = query.watched_devices(self.conn, nid)
        except (sqlite3.Error, TypeError):
            return None
        return (devs, interval_s) if devs else None

    @staticmethod
    def _silent_device_line(v: dict, devs: list[tuple], interval_s: float) -> None:
        """A window judged while a GPU was silent says so: the verdict rests on the node's other devices
        (query.silent_among at the window's end). A device that reported again after the window (read
        back late) is not named: its latest sample is later."""
        quiet = query.silent_among(devs, v["t_end"], interval_s)
        if quiet:
            v["evidence"].append("devices silent in this window (their latest samples well before it; what they "
                                 "did is unmonitored, the verdict rests on the node's other devices): " +
                                 ", ".join(f"{d['device']} (last at {d['last_t']:.1f})" for d in quiet))

    # ---- the bus callback and the catch-up from the store ----------------------------------------
    def on_batch(self, ev: CommittedBatch) -> None:
        if self._stopping:
            return
        st = self.nodes.setdefault(ev.node, NodeState())
        if ev.seq <= st.seq:
            return  # already read back from the store
        if ev.from_store or ev.seq > st.seq + 1:
            # events were not handed on (the bus's queue was full), or batches are owed from the
            # backlog: the store has them (and no batch for seqs declared lost)
            self.catch_up(ev.node, ev.seq if ev.from_store else ev.seq - 1)
            if ev.from_store or ev.seq <= st.seq or st.seq < ev.seq - 1:
                return  # (still behind after a read error: the next event or notice tries again)
        self._consume(ev.node, st, ev.seq, ev.samples, ev.unmonitored)

    def _node_id(self, node: str) -> int:
        if node not in self._node_ids:
            self._node_ids[node] = self.conn.execute("SELECT node_id FROM nodes WHERE name = ?", (node,)).fetchone()[0]
        return self._node_ids[node]

    def catch_up(self, node: str, upto: int) -> None:
        """Read the node's stored batches after the last one read, up to seq ``upto``, back from the
        store and judge them in seq order, as if each had just arrived. A batch that cannot be read
        is tried again with the node's next event or notice; after READ_RETRIES failed attempts the
        batches left are recorded as unjudged (with the error) and skipped."""
        st = self.nodes.setdefault(node, NodeState())
        while st.seq < upto and not self._stopping:
            try:
                node_id = self._node_id(node)
                rows = warm.stored_batches(self.conn, node_id, st.seq, upto)
            except sqlite3.Error as e:
                self._read_failed(node, st, upto, e)
                return
            if not rows:
                self._read_failures.pop(node, None)
                st.seq = upto  # the seqs left were declared lost: never stored, recorded as unmonitored
                return
            for seq, rcv, lo, hi, _, _ in rows:
                if self._stopping:
                    return
                try:  # one batch's samples in memory at a time, however large the node made its batches
                    samples, gaps = warm.batch_samples(self.conn, node_id, lo, hi), warm.batch_gaps(self.conn, node_id, rcv)
                except sqlite3.Error as e:
                    self._read_failed(node, st, upto, e)
                    return
                self._read_failures.pop(node, None)
                self.caught_up["batches"] += 1
                self.caught_up["samples"] += len(samples)
                self._consume(node, st, seq, samples, gaps)

    def _read_failed(self, node: str, st: NodeState, upto: int, err: Exception) -> None:
        self.caught_up["read_errors"] += 1
        n = self._read_failures[node] = self._read_failures.get(node, 0) + 1
        log.error("live: cannot read batches %d..%d of node %s back from the store (attempt %d of %d): %s",
                  st.seq + 1, upto, node, n, READ_RETRIES, err)
        if n < READ_RETRIES:
            return
        try:
            t0, t1 = self.conn.execute("SELECT min(t_first), max(t_last) FROM batches WHERE node_id = ? AND seq > ? "
                                       "AND seq <= ?", (self._node_id(node), st.seq, upto)).fetchone()
        except sqlite3.Error:
            t0 = t1 = None
        if t0 is None:  # not even their times: the span from the last sample read
            t0 = t1 = st.t_latest if math.isfinite(st.t_latest) else time.time()
        self._mark_unjudged([{"node": node, "start": t0, "end": t1, "seq_from": st.seq + 1, "seq_to": upto,
                              "reason": f"stored batches {st.seq + 1}..{upto} could not be read back from the store "
                                        f"({READ_RETRIES} attempts; {type(err).__name__}: {err})"}])
        st.seq = upto
        self._read_failures.pop(node, None)

    def _mark_unjudged(self, spans: list[dict]) -> None:
        """Record unjudged spans with the state of their nodes (which no longer owes them)."""
        states = {u["node"]: (self.nodes[u["node"]].last_end if self.nodes[u["node"]].last_end is not None
                              else -math.inf, self.nodes[u["node"]].snapshot()) for u in spans}
        self.writer.write([], [], [], None, states, spans)
        self.caught_up["unjudged"] += len(spans)

    def _pieces(self, samples: list[dict]) -> list[list[dict]]:
        """A batch's samples in time order, cut into spans of at most ``piece_s`` (usually one)."""
        if not samples:
            return [[]]
        ss = sorted(samples, key=lambda s: (s["t"], s["dev"]))
        t0, span = ss[0]["t"], self.cfg.piece_s
        if ss[-1]["t"] - t0 <= span:
            return [ss]
        return [list(g) for _, g in itertools.groupby(ss, key=lambda s: math.floor((s["t"] - t0) / span))]

    def _consume(self, node: str, st: NodeState, seq: int, samples: list[dict], gaps: list[dict]) -> None:
        """One batch, from an event or read back from the store: the same path either way. A batch
        spanning more than ``piece_s`` is judged piece by piece, so no window falls out of the buffer."""
        pieces = self._pieces(samples)
        for i, piece in enumerate(pieces):
            if i == len(pieces) - 1:
                st.seq = seq  # (a snapshot written by an earlier piece still owes this batch)
            self._feed(node, st, piece, gaps if i == 0 else [], seq)

    def _feed(self, node: str, st: NodeState, samples: list[dict], gaps: list[dict], seq: int | None = None) -> None:
        cfg = self.cfg
        st.add(samples, cfg.buffer_s)
        st.gaps.extend((g["start"], g["end"], g["reason"]) for g in gaps)
        st.gaps = [g for g in st.gaps if g[1] >= st.t_latest - cfg.buffer_s]
        ends, skipped = st.pending_ends(cfg)
        if not ends:
            return
        unjudged = []
        if skipped:
            a, b, n = skipped
            unjudged.append({"node": node, "start": a - cfg.window_s, "end": b, "seq_from": None, "seq_to": None,
                             "reason": f"{n} windows (ending {a:.1f} to {b:.1f}) not judged: the node's samples jumped "
                                       f"ahead to {st.t_latest:.1f}, completing {n + len(ends)} windows at once, and "
                                       f"at most {cfg.max_catchup} (the latest) are judged at once"})
            self.caught_up["unjudged"] += 1
        try:
            self._judge(node, st, ends, unjudged)
        except Exception as e:  # noqa: BLE001  (whatever a node's samples do to the judging, it is said)
            # The window clock has moved past these windows: they are recorded as unjudged with the
            # error, never silently lost, and the node's next windows are judged as usual.
            log.exception("live: windows ending %.1f..%.1f of node %s could not be judged", ends[0], ends[-1], node)
            self.caught_up["judge_errors"] += 1
            span = {"node": node, "start": ends[0] - cfg.window_s, "end": ends[-1], "seq_from": seq, "seq_to": seq,
                    "reason": f"{len(ends)} windows (ending {ends[0]:.1f} to {ends[-1]:.1f}) could not be judged: "
                              f"{type(e).__name__}: {str(e)[:200]}"}
            # what judging changed in memory but did not store (alert votes, an alert opened without a
            # row, how far the node's jobs were judged) is forgotten, so it is read back from the store
            jobs = {st.job, st.last_job, st.paused_in} - {None}
            for key in [k for k in self.tracks if k == ("node", node) or (k[0] == "job" and k[1] in jobs)]:
                del self.tracks[key]
            for j in jobs:
                self.jobs.judged_until.pop(j, None)
            try:
                if self.conn.in_transaction:
                    self.conn.rollback()
                self._mark_unjudged(unjudged + [span])
            except Exception:  # noqa: BLE001
                log.exception("live: could not record the unjudged windows of node %s either", node)

    def _judge(self, node: str, st: NodeState, ends: list[float], unjudged: list[dict]) -> None:
        st.table = st.build_table(node, self.cfg.loopback_as_link)
        out: dict = {"verdicts": [], "new": [], "updated": {}}
        node_verdicts = self.judge_node(node, st, ends)
        job_verdicts, job_rows, merges = self.jobs.update(node, ends, self, node_verdicts)
        for old, new, _ in merges:
            self._merge_tracks(old, new, ends[-1], out)
        for v in node_verdicts:  # (an idle window in a pause names the job it may resume: judge_node)
            if v["state"] != "idle":
                v["job"] = st.job
            elif not v.get("abstain"):
                v["job"] = None
        for v in node_verdicts + job_verdicts:
            self._vote(v, out)
            out["verdicts"].append(v)
        # the node's state goes with the verdicts it led to, in their transaction (restored after a restart)
        ids = self.writer.write(out["verdicts"], out["new"],
                                [(a["id"], a["p_max"], a["cleared_t"]) for a in out["updated"].values()], job_rows,
                                {node: (ends[-1], st.snapshot())}, unjudged, merges)
        for a, aid in zip(out["new"], ids):
            a["id"] = aid
        self._summarise(node_verdicts)


def install_live(app, col) -> LiveProcessor | None:
    """Start the live processor on the collector's bus and add the verdict routes (one call from
    :func:`trainsentry.collector.app.create_app`). ``TRAINSENTRY_LIVE=0`` leaves both out."""
    if os.environ.get(LIVE_ENV, "1") == "0" or str(col.db_path) == ":memory:":
        return None
    proc = LiveProcessor(col.db_path, col.store.synchronous, reader=col.reader)
    col.bus.subscribe(proc.on_batch)
    for node, seq in proc.backlog.items():  # stored but not judged when the processor stopped: read back
        col.bus.resync(node, seq)
    close = col.close

    def close_all() -> None:  # the bus drains first, so no callback runs on a closed connection
        proc.stop()  # a long catch-up stops at the next batch; the store keeps the rest for the next start
        close()
        proc.close()
    col.close = close_all
    app.state.live = proc
    V.add_routes(app, col, proc)
    return proc
