"""The write path: enrol nodes, accept signed batches, record rejections.

A batch is acknowledged only after its transaction has committed, and the acknowledgement says
how far the node's chain is committed (``stored_seq``) and how far it is known to be on disk
(``durable_seq``, the durable watermark of :mod:`trainsentry.collector.checkpoint`): the agent
keeps a batch until ``durable_seq`` covers it, so a power loss that takes committed but unsynced
batches takes nothing the agent cannot resend. Checks run cheapest-first and
before anything is written: the node must be enrolled and the HMAC must match the exact bytes
(401), then the body must parse (400/413), then ``seq``/``prev`` must continue the node's chain
(409). Chain state is read inside the same ``BEGIN IMMEDIATE`` transaction that writes the batch,
so the decision and the write cannot interleave with another writer.

Chain rules (``E`` = last accepted seq + 1, or 0 for a node's first batch):

* ``seq < E``: a resend. Same digest as the stored batch of that seq → duplicate, acknowledged
  without storing again (the agent lost our ack, or asks whether it is durable yet). Anything
  else → ``replay`` (409).
* ``seq == E``: ``prev`` must equal the stored digest of seq-1 (``GENESIS_PREV`` for seq 0),
  else ``chain_broken`` (409).
* ``seq > E``: a hole. Only accepted when the agent declares the loss with ``gap_from <= E``; the
  missing seqs are recorded as an unmonitored interval (``declared_loss``) and ``prev`` cannot be
  checked (its batch never arrived). Otherwise ``out_of_order`` (409) with ``expected_seq`` so the
  agent resends from there.

Silence: when a batch's first sample is more than 3 × ``interval_s`` (capped at 10 s:
:func:`silence_after`) after the node's latest sample, the span between them is recorded as
unmonitored (``silence``); so is every hole between consecutive samples inside one batch longer
than that plus the 5 s clock tolerance (an agent that stalled mid-batch, or a node bridging a dark
stretch with one sample stamped ahead; the tolerance because a device whose NVML stamps run a few
seconds off the host clock leaves an honest hole that long beside the host-stamped readings). A
batch without samples is no evidence: it keeps the chain going but not the node's
``last_data_seen``, from which the read API measures a node that is silent now. Each device's latest
sample is kept too (``devices.last_t``): a GPU the node stops reporting while the rest goes on is
served as silent (``query.silent_devices``). When it reports again, the span it missed is kept
(``device_silences``, served by ``query.unmonitored`` with ``reason: device_silence`` and the device):
a GPU or IB port whose first sample in a batch comes more than a silence plus the clock tolerance
after its latest one, or whose samples inside one batch leave such a hole, for the parts the node's
own silences and declared losses do not already cover. Network interfaces are left out (they
come and go with containers), and so is the live processor: the node's other devices were watched,
and the windows judged while a device was past the cutoff name it.

Time regression: the chain orders batches, not their samples' times. A batch that continues the
chain but whose first sample is stamped more than ``TIME_REGRESSION_TOLERANCE_S`` before the node's
latest stored sample writes into history already received, and possibly judged: a party in control
of the node could thereby add samples to a window after its verdict was given. It is accepted, not
refused (an honest agent whose clock stepped back would keep the refused batch spooled and stall
for good), and the stretch it writes into, from its first sample to the node's latest sample before
it, is recorded as unmonitored (``time_regression``, ``seq_from`` = ``seq_to`` = the batch's seq) in
the batch's own transaction. Such a batch is never also a silence (its first sample is not after
the latest one), and the node's latest sample time stays where it was, so silence after it is still
measured from the latest sample.

Back-dating within the tolerance is not unmonitored (an NVML stamp a few seconds off the host clock
does it honestly), but it is not silent either: every batch whose first sample is stamped before the
node's latest stored sample, by any amount, is counted on the node (``backdated_batches``, and the
most seconds back, ``backdated_max_s``), served with the node (``GET /v1/nodes``). The real agent on
a steady clock never does it (tests/collector/test_collector_gaps.py): a node that does it often, by
seconds, is writing into windows already judged.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from dataclasses import dataclass, field
from bisect import bisect_right
from itertools import compress, repeat
from operator import itemgetter
from pathlib import Path

from ..telemetry.nvml import TIMESTAMP_TOLERANCE_S
from ..wire.batch import GENESIS_PREV, MAX_BATCH_INTERVAL_S, Batch, BatchError, new_key, parse_batch, verify
from .checkpoint import Checkpointer
from .schema import SAMPLE_COLUMNS, SAMPLE_KEY_COLUMNS, SAMPLE_METRICS, open_db

SILENCE_FACTOR = 3.0  # no data for this many batch intervals = unmonitored
# The node states its own batch interval; for silence it is capped, or a node could declare an hour
# and go quiet for three unrecorded.
MAX_SILENCE_INTERVAL_S = MAX_BATCH_INTERVAL_S   # 10 s: the agent refuses longer batches (agent/node.py)


def silence_after(interval_s: float) -> float:
    """Seconds without samples that make a silence, for a node stating this batch interval: the one
    rule behind recorded silences (ingest) and a node silent now (query, overview)."""
    return SILENCE_FACTOR * min(interval_s, MAX_SILENCE_INTERVAL_S)

# A sample stamped further ahead of the collector's clock than this is refused: one far-future
# timestamp would otherwise move the node's "last sample" past every real one and hide silences.
MAX_FUTURE_S = 300.0
# A batch whose first sample is stamped more than this before the node's latest stored sample is a
# time regression (module docstring). On a steady clock the real agent's batches never go back: it
# reads its sources one after another each tick, closes a batch on a tick boundary and stamps each
# reading while taking it (the host clock; for a GPU, NVML's stamp of the NVLink counters, taken
# inside the call, 0.3-36 ms after the host time read before it in the 2 x H200 recording of
# docs/telemetry.md, so before the next reading). The one stamp it does not take itself, NVML's, is
# used only within TIMESTAMP_TOLERANCE_S of the host clock: a driver whose stamps are off by up to
# that much, read between host-stamped readings (network, a GPU whose fields did not answer), can
# start a batch up to that much before the previous one ended. Further back is a clock stepped back
# or history rewritten. Within it nothing is recorded: a node can back-date samples by up to this
# much, into a window already judged, and the stored samples may then disagree with the verdict
# given. That is the price of not flagging honest NVML stamp offsets.
TIME_REGRESSION_TOLERANCE_S = TIMESTAMP_TOLERANCE_S


def hole_after(interval_s: float) -> float:
    """A silence plus the clock tolerance: the gap between samples that is unmonitored where some of
    them may be stamped by a device's clock (a hole inside one batch, a GPU's own silence recorded at
    ingest and served open by query.silent_among), since a GPU whose NVML stamps run up to 5 s off the
    host clock leaves an honest gap that long beside host-stamped readings."""
    return silence_after(interval_s) + TIME_REGRESSION_TOLERANCE_S
TIME_REGRESSION = "time_regression"   # the unmonitored reason such a batch is recorded with (live.py reads it)
MAX_DEVICES_PER_NODE = 256   # GPUs + interfaces + IB ports; a node cannot grow the device table at will
# Audit rows of their own per (node, code) per minute; the rest of the minute's refusals of that
# key are one row that counts them, so junk cannot grow the database without bound (see
# Store.record_rejection).
REJECTION_ROWS_PER_MINUTE = 10
_DETAIL_MAX = 500

_INSERT_SAMPLE = f"INSERT INTO samples ({', '.join(SAMPLE_COLUMNS)}) VALUES ({', '.join('?' * len(SAMPLE_COLUMNS))})"
_INSERT_BATCH = ("INSERT INTO batches (node_id, seq, digest, prev, received_at, n_samples, t_first, t_last, "
                 "first_sample, last_sample, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_INSERT_DEVICE = "INSERT OR IGNORE INTO devices (node_id, device, kind, first_t, last_t) VALUES (?, ?, ?, ?, ?)"
_DEVICE_SEEN = "UPDATE devices SET last_t = max(coalesce(last_t, ?), ?) WHERE node_id = ? AND device = ?"
_INSERT_REJECTION = "INSERT INTO rejections (at, node, status, code, remote, detail, n) VALUES (?, ?, ?, ?, ?, ?, ?)"
_INSERT_GAP = ("INSERT INTO unmonitored (node_id, start_t, end_t, reason, seq_from, seq_to, recorded_at) "
               "VALUES (?, ?, ?, ?, ?, ?, ?)")
_INSERT_DEVICE_GAP = ("INSERT INTO device_silences (node_id, device, start_t, end_t, recorded_at) "
                      "VALUES (?, ?, ?, ?, ?)")
# the device kinds whose silences are kept and served (query.watched_devices): network interfaces come
# and go with containers (the agent drops a vanished one), and a gone veth would read as silent for good
WATCHED_DEVICE_KINDS = ("gpu", "ib")
_SQLITE_INT_MAX = 2 ** 63 - 1
log = logging.getLogger("trainsentry.collector.store")
_DEV, _KIND, _T, _M = itemgetter("dev"), itemgetter("kind"), itemgetter("t"), itemgetter("m")
_METRIC_SET = frozenset(SAMPLE_METRICS)
_MAX_GROUPS = 8          # distinct metric sets in one batch before falling back to all-columns rows
_SQL_CACHE_MAX = 256
_insert_sql: dict[tuple[str, ...], str] = {}  # metric names (in wire order) -> INSERT naming just those


class IngestError(Exception):
    """A refused batch: HTTP ``status``, stable ``code``, a human ``detail`` and extra JSON fields."""

    def __init__(self, status: int, code: str, detail: str, **extra):
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra

    def body(self) -> dict:
        return {"error": self.code, "detail": self.detail, **self.extra}


class EnrollError(Exception):
    pass


@dataclass(slots=True)
class Accepted:
    """What the collector acknowledges; ``gaps`` lists unmonitored intervals this batch revealed."""
    node: str
    node_id: int
    seq: int
    digest: str
    n_samples: int
    duplicate: bool = False
    gaps: list[dict] = field(default_factory=list)
    device_gaps: list[dict] = field(default_factory=list)   # spans single GPUs / IB ports went unreported
    batch: Batch | None = None  # the parsed batch, for post-commit subscribers (None for duplicates)
    received_at: float = 0.0
    stored_seq: int | None = None   # the node's last committed seq (this batch's, unless a duplicate)
    durable_seq: int | None = None  # the node's last seq known to be on disk; None: none yet

    def body(self) -> dict:
        out = {"accepted": True, "node": self.node, "seq": self.seq, "digest": self.digest,
               "n_samples": self.n_samples, "stored_seq": self.stored_seq, "durable_seq": self.durable_seq}
        if self.duplicate:
            out["duplicate"] = True
        if self.gaps:
            out["unmonitored"] = self.gaps
        if self.device_gaps:
            out["devices_unmonitored"] = self.device_gaps
        return out


def _status_for(e: BatchError) -> int:
    return 413 if e.code == "too_large" else 400


def _rows(node_id: int, samples: list[dict]) -> list[tuple]:
    """Sample dicts to full rows in SAMPLE_COLUMNS order (absent metrics as None)."""
    names = SAMPLE_METRICS
    return [(node_id, s["dev"], s["kind"], s["t"], *map(s["m"].get, names)) for s in samples]


def _sql_for(names: tuple[str, ...]) -> str:
    sql = _insert_sql.get(names)
    if sql is None:
        if not _METRIC_SET.issuperset(names):  # parse_batch guarantees this; the names go into SQL
            raise ValueError(f"unknown metric in {names[:5]}")
        cols = SAMPLE_KEY_COLUMNS + names
        sql = f"INSERT INTO samples ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"
        if len(_insert_sql) < _SQL_CACHE_MAX:
            _insert_sql[names] = sql
    return sql


def sample_rows(node_id: int, samples: list[dict]) -> list[tuple[str, list[tuple]]]:
    """The batch as (INSERT statement, rows) pairs: one pair per distinct metric set.

    Each statement names only the metrics its rows carry, so a row binds no NULLs: binding ``None``
    goes through sqlite3's adapter lookup and made the full 26-column rows (a NIC sample has 2 of
    22 metrics) cost ~5 µs to insert against ~2.3 µs this way. Rows keep wire order within a group.
    A batch with more than ``_MAX_GROUPS`` metric sets (never seen from the agent) is stored as full
    rows, so one batch cannot make the store prepare thousands of statements.

    Readers order samples by device and time, never by sample_id within a batch, so the order of
    the groups is free: the common case (every device of a kind reports the same metrics) is built
    per kind by :func:`_kind_rows`; anything else takes :func:`_rows_by_metric_set`.
    """
    if not samples:
        return []
    kinds = list(map(_KIND, samples))
    distinct = dict.fromkeys(kinds)  # device kinds are validated by the parser: a handful
    out = []
    for kind in distinct:
        group = samples if len(distinct) == 1 else list(compress(samples, map(kind.__eq__, kinds)))
        pair = _kind_rows(node_id, kind, group)
        if pair is None:
            return _rows_by_metric_set(node_id, samples)
        out.append(pair)
    return out


def _kind_rows(node_id: int, kind: str, group: list[dict]) -> tuple[str, list[tuple]] | None:
    """Rows of samples of one kind when they all carry the same metric set; else None.

    Same set <=> every ``m`` has as many keys as the first and holds each of its names (an
    ``itemgetter`` miss raises KeyError). The getter also puts every row's values in the order of
    the statement's columns whatever the order of keys in the sample, and does it in C: 0.95 µs per
    sample of the benchmark's batches against 1.1-1.4 µs for a key tuple per sample to group by and
    a row from ``m.values()`` (docs/performance.md).
    """
    ms = list(map(_M, group))
    names = tuple(ms[0])
    if len(set(map(len, ms))) != 1:
        return None
    if len(names) > 1:
        values = map(itemgetter(*names), ms)
    elif names:
        values = zip(map(itemgetter(names[0]), ms))
    else:
        values = repeat((), len(ms))
    heads = zip(repeat(node_id), map(_DEV, group), repeat(kind), map(_T, group))
    try:
        return _sql_for(names), list(map(tuple.__add__, heads, values))
    except KeyError:  # another metric set of the same size
        return None


def _rows_by_metric_set(node_id: int, samples: list[dict]) -> list[tuple[str, list[tuple]]]:
    """The general case: one group per distinct metric set (in order of first appearance)."""
    ms = list(map(_M, samples))
    keys = list(map(tuple, ms))
    distinct = dict.fromkeys(keys)
    if len(distinct) > _MAX_GROUPS:
        return [(_INSERT_SAMPLE, _rows(node_id, samples))]
    groups: dict[tuple[str, ...], list[tuple]] = {k: [] for k in distinct}
    for s, m, k in zip(samples, ms, keys):
        groups[k].append((node_id, s["dev"], s["kind"], s["t"], *m.values()))
    return [(_sql_for(k), rows) for k, rows in groups.items()]


def _clamp_big_ints(rows: list[tuple]) -> list[tuple]:
    """SQLite integers are 64-bit signed; the wire allows |v| < 2**64. Store the rare wider value as
    REAL (what rates compute in anyway) instead of failing the batch."""
    def fix(v):
        return float(v) if isinstance(v, int) and not -_SQLITE_INT_MAX - 1 <= v <= _SQLITE_INT_MAX else v
    return [tuple(fix(v) for v in r) for r in rows]


class Store:
    """The collector database: one writer connection, owned by the thread that ingests."""

    def __init__(self, path: str | Path, synchronous: str = "normal"):
        self.path = Path(path)
        self.synchronous = synchronous
        self.conn = open_db(self.path, synchronous)
        self._checkpointer = None
        if str(path) != ":memory:":
            self.conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpoint thread does it instead
            self._checkpointer = Checkpointer(self.path, synchronous)
            # when this connection starts the WAL over, the file is cut back to the checkpointer's bound
            page = self.conn.execute("PRAGMA page_size").fetchone()[0]
            self.conn.execute(f"PRAGMA journal_size_limit={self._checkpointer.max_wal_pages * page}")
            # what an earlier process committed: durable after the checkpoint thread's first sync
            self._checkpointer.committed.update(self.conn.execute(
                "SELECT node_id, last_seq FROM nodes WHERE last_seq IS NOT NULL").fetchall())
            self._checkpointer.poke()
        self._keys: dict[str, tuple[int, bytes]] = {}  # name -> (node_id, key); refreshed on a miss
        # (node_id, device) known to be in `devices`: those an earlier process stored too, or a restart
        # would count a node's devices twice against MAX_DEVICES_PER_NODE and refuse it for good
        self._devices: set[tuple[int, str]] = set(self.conn.execute("SELECT node_id, device FROM devices"))
        # each watched device's latest sample time as committed (devices.last_t), so a batch finds the span
        # a GPU went unreported without a query; written after each COMMIT
        self._device_last: dict[tuple[int, str], float] = {
            (n, d): t for n, d, t in self.conn.execute(
                "SELECT node_id, device, last_t FROM devices WHERE kind IN (?, ?) AND last_t IS NOT NULL",
                WATCHED_DEVICE_KINDS)}
        # refusals of the current minute per (enrolled node or "", code): rows written, and the rest
        # as (count, last time, status), written as one row when the minute is over
        self._rejection_minute = -1
        self._rejection_rows: dict[tuple[str, str], int] = {}
        self._suppressed: dict[tuple[str, str], list] = {}
        self.rejections_not_logged = 0   # refusals without a row of their own (counted in a summary row)
        self.rejections_unrecorded = 0   # refusals the audit could not write at all (the store failing)

    def close(self) -> None:
        self._flush_suppressed()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self.conn.close()

    # -- enrolment ------------------------------------------------------------------------------
    def enroll(self, node: str, rotate: bool = False, key: str | None = None) -> str:
        """Create a node's key (or replace it with ``rotate``); return the key as hex."""
        from ..wire.batch import _NODE_RE  # the wire format owns what a node name may be
        if not _NODE_RE.match(node):
            raise EnrollError(f"invalid node name {node!r}: must match [A-Za-z0-9][A-Za-z0-9._-]{{0,127}}")
        key = key or new_key()
        bytes.fromhex(key)
        now = time.time()
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            row = c.execute("SELECT node_id FROM nodes WHERE name = ?", (node,)).fetchone()
            if row and not rotate:
                raise EnrollError(f"node {node!r} is already enrolled; pass --rotate to replace its key")
            if row:
                c.execute("UPDATE nodes SET key = ?, key_rotated_at = ? WHERE node_id = ?", (key, now, row[0]))
            else:
                c.execute("INSERT INTO nodes (name, key, enrolled_at) VALUES (?, ?, ?)", (node, key, now))
            c.execute("COMMIT")
        except BaseException:
            c.execute("ROLLBACK")
            raise
        self._keys.pop(node, None)
        return key

    def _lookup_key(self, node: str, refresh: bool = False) -> tuple[int, bytes] | None:
        if not refresh and node in self._keys:
            return self._keys[node]
        row = self.conn.execute("SELECT node_id, key FROM nodes WHERE name = ?", (node,)).fetchone()
        if row is None:
            self._keys.pop(node, None)
            return None
        self._keys[node] = (row[0], bytes.fromhex(row[1]))
        return self._keys[node]

    # -- ingest ---------------------------------------------------------------------------------
    def authenticate(self, node: str | None, signature: str | None, body: bytes) -> int:
        """The node id when ``signature`` is the node's HMAC of ``body``; else IngestError 401."""
        if not node:
            raise IngestError(401, "missing_node", "the X-TS-Node header is required")
        entry = self._lookup_key(node)
        if entry is None:
            raise IngestError(401, "unknown_node", f"node {node[:128]!r} is not enrolled")
        if not signature:
            raise IngestError(401, "missing_signature", "the X-TS-Signature header is required")
        if not verify(entry[1], body, signature):
            entry = self._lookup_key(node, refresh=True)  # the key may have been rotated by `enroll`
            if entry is None or not verify(entry[1], body, signature):
                raise IngestError(401, "bad_signature", "HMAC does not match the body under this node's key")
        return entry[0]

    def ingest(self, node: str | None, signature: str | None, body: bytes, max_bytes: int | None = None) -> Accepted:
        """Authenticate, parse, chain-check and commit one batch, or raise IngestError with nothing stored."""
        if self._suppressed and int(time.time() // 60) != self._rejection_minute:
            self._flush_suppressed()  # the past minute's counted refusals, if no refusal came since
        if max_bytes is not None and len(body) > max_bytes:
            raise IngestError(413, "too_large", f"batch of {len(body)} bytes exceeds the limit of {max_bytes}")
        node_id = self.authenticate(node, signature, body)
        try:
            batch = parse_batch(body) if max_bytes is None else parse_batch(body, max_bytes=max_bytes)
        except BatchError as e:
            raise IngestError(_status_for(e), e.code, e.message) from None
        if batch.node != node:
            raise IngestError(400, "node_mismatch", f"batch names node {batch.node!r} but was sent as {node!r}")
        return self._commit(node_id, batch)

    def _new_devices(self, node_id: int, samples: list[dict]) -> list[tuple]:
        unknown = {d for d in set(map(_DEV, samples)) if (node_id, d) not in self._devices}
        if not unknown:
            return []
        first: dict[str, tuple] = {}
        for s in samples:
            d = s["dev"]
            if d in unknown and (d not in first or s["t"] < first[d][3]):
                first[d] = (node_id, d, s["kind"], s["t"], s["t"])
        return list(first.values())

    def _commit(self, node_id: int, batch: Batch) -> Accepted:
        c = self.conn
        now = time.time()
        samples = batch.samples
        groups = sample_rows(node_id, samples)  # built before the write lock is taken
        n_rows = len(samples)
        ts = list(map(_T, samples))
        t_first = min(ts) if ts else None
        t_last = max(ts) if ts else None
        if t_first is not None and t_first < 0:   # (an int below -2**63 would also overflow the int64 columns)
            raise IngestError(400, "bad_time", f"sample time {t_first:.3f} is before the epoch")
        if t_last is not None and t_last > now + MAX_FUTURE_S:
            raise IngestError(400, "bad_time", f"sample time {t_last:.3f} is {t_last - now:.0f} s ahead of the "
                              f"collector's clock (at most {MAX_FUTURE_S:.0f} s allowed)")
        new_devices = self._new_devices(node_id, samples)
        if new_devices:
            known = c.execute("SELECT COUNT(*) FROM devices WHERE node_id = ?", (node_id,)).fetchone()[0]
            if known + len(new_devices) > MAX_DEVICES_PER_NODE:
                raise IngestError(400, "too_many_devices", f"node would have {known + len(new_devices)} devices; "
                                  f"at most {MAX_DEVICES_PER_NODE} are accepted")
        c.execute("BEGIN IMMEDIATE")
        try:
            last_seq, last_digest, last_t, interval_s, enrolled_at = c.execute(
                "SELECT last_seq, last_digest, last_t, interval_s, enrolled_at FROM nodes WHERE node_id = ?",
                (node_id,)).fetchone()
            expected = 0 if last_seq is None else last_seq + 1
            if batch.seq < expected:
                stored = c.execute("SELECT digest, n_samples FROM batches WHERE node_id = ? AND seq = ?",
                                   (node_id, batch.seq)).fetchone()
                c.execute("ROLLBACK")
                if stored and stored[0] == batch.digest:
                    return Accepted(batch.node, node_id, batch.seq, batch.digest, stored[1], duplicate=True,
                                    received_at=now, stored_seq=last_seq, durable_seq=self.durable_seq(node_id))
                raise IngestError(409, "replay", f"seq {batch.seq} is already past (next expected {expected}) "
                                  "and this is not the batch stored under it", expected_seq=expected)
            gaps: list[tuple] = []
            if batch.seq > expected:
                if batch.gap_from is None or batch.gap_from > expected:
                    c.execute("ROLLBACK")
                    declared = "" if batch.gap_from is None else f" (gap declared only from {batch.gap_from})"
                    raise IngestError(409, "out_of_order", f"seq {batch.seq} skips ahead of {expected}{declared}; "
                                      f"resend from {expected} or declare the loss with gap_from",
                                      expected_seq=expected)
                end = t_first if t_first is not None else now
                # Before a node's first sample the only time we have is enrolment (server clock); an
                # agent clock behind it, or a batch stamped before the latest sample (a time
                # regression, recorded below), must not make the interval end before it starts.
                start = min(last_t if last_t is not None else enrolled_at, end)
                gaps.append((node_id, start, end, "declared_loss", expected, batch.seq - 1, now))
            else:
                want_prev = GENESIS_PREV if last_digest is None else last_digest
                if batch.prev != want_prev:
                    c.execute("ROLLBACK")
                    raise IngestError(409, "chain_broken", f"prev does not match the digest of batch "
                                      f"{batch.seq - 1}", expected_prev=want_prev, expected_seq=expected)
            if not gaps and last_t is not None and t_first is not None and t_first - last_t > silence_after(interval_s):
                gaps.append((node_id, last_t, t_first, "silence", None, None, now))
            # holes inside the batch: longer than a silence plus the clock tolerance, since a device whose
            # NVML stamps run up to that far off the host clock leaves an honest hole that long between
            # its readings and the host-stamped ones beside them (sorted only when one can exist)
            hole = hole_after(batch.interval_s)
            if t_first is not None and t_last - t_first > hole:
                times = sorted(set(ts))
                gaps.extend((node_id, a, b, "silence", None, None, now) for a, b in zip(times, times[1:]) if b - a > hole)
            if last_t is not None and t_first is not None and last_t - t_first > TIME_REGRESSION_TOLERANCE_S:
                # (never with a silence: that needs t_first after last_t)
                gaps.append((node_id, t_first, last_t, TIME_REGRESSION, batch.seq, batch.seq, now))
            first = last = None
            device_gaps: list[tuple] = []
            if n_rows:
                # New rows get max(sample_id)+1, +2, ... : the batch's samples are one contiguous range.
                first = c.execute("SELECT COALESCE(MAX(sample_id), 0) + 1 FROM samples").fetchone()[0]
                try:
                    for sql, rows in groups:
                        c.executemany(sql, rows)
                except OverflowError:  # an int beyond SQLite's 64 bits, met part-way: redo the batch
                    c.execute("DELETE FROM samples WHERE sample_id >= ?", (first,))
                    for sql, rows in groups:
                        c.executemany(sql, _clamp_big_ints(rows))
                last = first + n_rows - 1
                if c.execute("SELECT MAX(sample_id) FROM samples").fetchone()[0] != last:
                    raise RuntimeError("sample ids of one batch are not contiguous")  # cannot happen below 2**63
                if new_devices:
                    c.executemany(_INSERT_DEVICE, new_devices)
                # each device's latest sample: one that stops reporting while the node goes on is seen
                latest: dict[str, float] = {}
                earliest: dict[str, float] = {}
                for dev, t in zip(map(_DEV, samples), ts):
                    if t > latest.get(dev, -math.inf):
                        latest[dev] = t
                    if t < earliest.get(dev, math.inf):
                        earliest[dev] = t
                c.executemany(_DEVICE_SEEN, [(t, t, node_id, dev) for dev, t in latest.items()])
                # between batches the stricter of the stored and this batch's interval (a node cannot widen
                # the rule in the batch that ends a GPU's silence); inside the batch, the batch's own hole
                between = hole_after(min(interval_s or batch.interval_s, batch.interval_s))
                device_gaps = self._device_silences(node_id, samples, ts, earliest, latest, gaps, between, hole,
                                                    {d[1] for d in new_devices if d[2] in WATCHED_DEVICE_KINDS}, now)
                if device_gaps:
                    c.executemany(_INSERT_DEVICE_GAP, device_gaps)
            c.execute(_INSERT_BATCH, (node_id, batch.seq, batch.digest, batch.prev, now, n_rows,
                                      t_first, t_last, first, last, batch.body))
            if gaps:
                c.executemany(_INSERT_GAP, gaps)
            new_last_t = t_last if last_t is None or (t_last is not None and t_last > last_t) else last_t
            c.execute("UPDATE nodes SET last_seq = ?, last_digest = ?, last_seen = ?, last_t = ?, interval_s = ?, "
                      "last_data_seen = CASE WHEN ? THEN ? ELSE last_data_seen END WHERE node_id = ?",
                      (batch.seq, batch.digest, now, new_last_t, batch.interval_s, n_rows > 0, now, node_id))
            if last_t is not None and t_first is not None and t_first < last_t:
                c.execute("UPDATE nodes SET backdated_batches = backdated_batches + 1, "
                          "backdated_max_s = max(coalesce(backdated_max_s, 0), ?) WHERE node_id = ?",
                          (last_t - t_first, node_id))
            c.execute("COMMIT")
            self._remember_devices(node_id, new_devices, latest if n_rows else {})
            if self._checkpointer is not None:
                self._checkpointer.poke(node_id, batch.seq)
        except IngestError:
            raise
        except BaseException:
            if c.in_transaction:
                c.execute("ROLLBACK")
            raise
        return Accepted(batch.node, node_id, batch.seq, batch.digest, n_rows, batch=batch, received_at=now,
                        gaps=[{"start": g[1], "end": g[2], "reason": g[3], "seq_from": g[4], "seq_to": g[5]}
                              for g in gaps],
                        device_gaps=[{"device": g[1], "start": g[2], "end": g[3]} for g in device_gaps],
                        stored_seq=batch.seq, durable_seq=self.durable_seq(node_id))

    def _remember_devices(self, node_id: int, new_devices: list[tuple], latest: dict[str, float]) -> None:
        """The caches of what was just committed (called right after COMMIT, before anything that may raise):
        the devices known, and each watched device's latest sample (as ``_DEVICE_SEEN`` wrote it)."""
        if new_devices:
            self._devices.update((d[0], d[1]) for d in new_devices)
            self._device_last.update(((node_id, d[1]), d[3]) for d in new_devices if d[2] in WATCHED_DEVICE_KINDS)
        last_of = self._device_last
        for dev, t in latest.items():
            key = (node_id, dev)
            if key in last_of and t > last_of[key]:
                last_of[key] = t

    def _device_silences(self, node_id: int, samples: list[dict], ts: list[float], earliest: dict[str, float],
                         latest: dict[str, float], node_gaps: list[tuple], between: float, hole: float,
                         new_watched: set[str], now: float) -> list[tuple]:
        """Rows for ``device_silences``: per watched device (a GPU or IB port as first stored: the kind
        a later sample claims changes nothing), the span since its latest committed sample longer than
        ``between``, and the holes between its own samples in this batch longer than ``hole``; of each,
        the pieces the node's own unmonitored intervals (this batch's, ``node_gaps``, and those stored
        before) do not cover, each kept when longer than that threshold. A device new to the store has
        no span before it. Linear in the batch's samples and spans (a node choosing its timestamps
        cannot make it quadratic: it runs inside the writer's transaction)."""
        last_of = self._device_last
        spans: list[tuple[str, float, float, float]] = []
        long = []
        for dev, t0 in earliest.items():
            prev = last_of.get((node_id, dev))   # None: not a watched device, or new to the store
            if prev is not None and t0 - prev > between:
                spans.append((dev, prev, t0, between))
            if (prev is not None or dev in new_watched) and latest[dev] - t0 > hole:
                long.append(dev)
        if long:   # a watched device's own samples spread over more than a hole: look for one between them
            times: dict[str, list[float]] = {d: [] for d in long}
            for d, t in zip(map(_DEV, samples), ts):
                if d in times:
                    times[d].append(t)
            for d, tt in times.items():
                tt.sort()
                spans.extend((d, a, b, hole) for a, b in zip(tt, tt[1:]) if b - a > hole)
        if not spans:
            return []
        lo, hi = min(sp[1] for sp in spans), max(sp[2] for sp in spans)
        covered = [(g[1], g[2]) for g in node_gaps if g[3] != TIME_REGRESSION]
        covered += self.conn.execute(   # the node's own intervals stored before (a device back a batch after it)
            "SELECT start_t, end_t FROM unmonitored WHERE node_id = ? AND reason != ? AND end_t > ? AND start_t < ?",
            (node_id, TIME_REGRESSION, lo, hi)).fetchall()
        merged: list[list[float]] = []
        for a, b in sorted(covered):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        starts = [m[0] for m in merged]
        out = []
        for dev, a, b, limit in spans:
            # the uncovered pieces of [a, b]: walk the merged cover from the first interval that may touch it
            i = max(bisect_right(starts, a) - 1, 0)
            cur = a
            while i < len(merged) and merged[i][0] < b:
                s_, e_ = merged[i]
                if e_ > cur:
                    if s_ > cur and s_ - cur > limit:
                        out.append((node_id, dev, cur, s_, now))
                    cur = max(cur, e_)
                i += 1
            if b - cur > limit:
                out.append((node_id, dev, cur, b, now))
        return out

    def durable_seq(self, node_id: int) -> int | None:
        """The node's last batch seq known to be on disk (None: none yet, or an in-memory store)."""
        return None if self._checkpointer is None else self._checkpointer.durable.get(node_id)

    # -- rejections -----------------------------------------------------------------------------
    def record_rejection(self, err: IngestError, node: str | None, remote: str | None,
                         now: float | None = None) -> None:
        """Record a refused batch in ``rejections`` (never its body: it may be hostile and large).

        Every refusal is recorded. The first ``REJECTION_ROWS_PER_MINUTE`` of a minute per (node,
        code) get a row each (time, claimed node, status, code, remote address, detail); the rest of
        that minute are one row with their count in ``n`` and the time of the last, written at the
        first refusal of a later minute or when the store closes (a SIGKILL loses at most the current
        minute's count; the per-process counters have it). The node of that key is the claimed name
        only when it is enrolled: senders that are not, whatever name they put in each request, share
        one key, so the table grows by at most (enrolled nodes + 1) × codes × (limit + 1) rows a
        minute. If the store itself fails, the refusal is counted in ``rejections_unrecorded``."""
        now = time.time() if now is None else now
        claimed = (node or "")[:128]
        try:
            minute = int(now // 60)
            if minute != self._rejection_minute:
                self._flush_suppressed()
                self._rejection_minute = minute
                self._rejection_rows.clear()
            key = (claimed if claimed and self._lookup_key(claimed) is not None else "", err.code)
            rows = self._rejection_rows.get(key, 0)
            if rows >= REJECTION_ROWS_PER_MINUTE:
                entry = self._suppressed.setdefault(key, [0, now, err.status])
                entry[0] += 1
                entry[1] = now
                self.rejections_not_logged += 1
                return
            self._rejection_rows[key] = rows + 1
            self.conn.execute(_INSERT_REJECTION, (now, claimed or None, err.status, err.code, remote,
                                                  err.detail[:_DETAIL_MAX], 1))
        except sqlite3.Error as e:
            self.rejections_unrecorded += 1
            log.error("refusal %s from %r not recorded: %s", err.code, claimed, e)

    def _flush_suppressed(self) -> None:
        """One row per key for the refusals of the past minute that had no row of their own."""
        pending, self._suppressed = self._suppressed, {}
        try:
            for (node, code), (n, last, status) in sorted(pending.items()):
                who = f"node {node}" if node else "senders that are not enrolled nodes"
                self.conn.execute(_INSERT_REJECTION, (
                    last, node or None, status, code, None,
                    f"{n} more refusals {code} from {who} in that minute, counted here rather than a row each", n))
        except sqlite3.Error as e:
            self.rejections_unrecorded += sum(v[0] for v in pending.values())
            log.error("summary of %d suppressed refusals not recorded: %s", len(pending), e)
