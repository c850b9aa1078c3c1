"""The durable spool: every encoded+signed batch stays on disk until the collector reports it durable.

One SQLite file (standard library; WAL journal, ``synchronous=FULL`` so a commit survives power
loss) holds

* ``pending``: batches not yet durably stored by the collector (sent and stored, but above the
  ``durable_seq`` of its receipts, included), keyed by ``seq``, with the exact bytes and signature
  that go on the wire. A batch is encoded and signed once, in :meth:`Spool.append`; every resend
  sends the stored bytes, so the collector sees a retry as byte-identical and can answer
  "duplicate" instead of storing it twice.
* ``meta``: the node id and the chain state (``next_seq``, ``last_digest``, ``staged_through``).
  It is updated in the same transaction as the insert, so an agent restart continues the hash chain
  where it stopped, with no repeated and no skipped sequence number.
* ``staged``: ticks staged by agents from before the tick log (below); sealed first, then unused.

Each tick's readings are staged as they are taken, until the batch they belong to is sealed, in
the **tick log** ``<spool>-ticks`` next to the database: one appended line per tick,
``<tick id> <samples> <canonical JSON>``, written with one ``write()`` and no fsync. It survives the
agent being killed (the data is in the kernel), not a power loss; an agent killed mid-batch
therefore loses at most the tick being read, and the next start seals what was staged as the first
thing it does. Sealing commits the batch together with ``staged_through`` (the last tick id in it)
and then empties the log, so a kill between the two seals nothing twice. A line torn by a kill in
mid-write is dropped at the next start. (A SQLite commit per tick did the same job at several times
the CPU.)
The staged text is the wire's own canonical JSON, so sealing splices it into the batch instead of
decoding and re-encoding every sample: JSON is encoded once per sample.

The only time stored bytes change is :meth:`Spool.rechain`: the collector says batches are missing
that the spool no longer has (the collector lost acknowledged data), and the agent must declare the
loss with ``gap_from``. Adding that field changes the oldest pending batch's bytes, hence its
digest, hence every later ``prev``: all pending batches are re-encoded in one transaction.
"""

from __future__ import annotations

import json
import math
import operator
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from pathlib import Path

from ..wire.batch import GENESIS_PREV, digest, encode_batch, sign

_SAMPLES_SLOT = b'"samples":[]'
# The wire's canonical encoding (wire.batch.canonical_bytes), made once: json.dumps with options
# builds a new encoder on every call, ten times a second here. check_circular=False writes the same
# bytes without keeping a table of every list and dict it enters (a tick's readings hold no cycle).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False,
                              check_circular=False)

# encode_samples' fast path: per set of metric names (in the order a reading holds them), a %-template
# of the sample's canonical JSON with the keys already sorted and escaped, and the getter of the
# values in that order; per device or kind name, its JSON string. Bounded, so readings with ever-new
# names cannot grow them without end (past the bound they are encoded by _CANONICAL).
_TEMPLATES: dict[tuple, tuple[str, Callable[[dict], tuple]]] = {}
_NAMES: dict[str, str] = {}
_CACHE_MAX = 4096
_NUMBERS = frozenset((int, float))

SPOOL_FORMAT = "trainsentry.spool/1"
# Well under the wire limits (20,000 samples, 4 MiB): a sample is about 0.3-0.6 kB of JSON.
MAX_SAMPLES_PER_BATCH = 4000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS staged (id INTEGER PRIMARY KEY, samples TEXT NOT NULL, n INTEGER);
CREATE TABLE IF NOT EXISTS pending (
    seq INTEGER PRIMARY KEY,
    body BLOB NOT NULL,
    signature TEXT NOT NULL,
    n_samples INTEGER NOT NULL,
    spooled_at REAL NOT NULL
);
"""


def encode_samples(samples: list[dict]) -> str:
    """``_CANONICAL.encode(samples)``, the same text, for a tick's wire samples.

    Samples shaped as the agent's (``{"dev": str, "kind": str, "t": number, "m": {str: number}}``
    with every number an exact int or a finite float) are written through a cached %-template per
    set of metric names: the encoder's own work on them (a list of items per dict, a sort, every key
    escaped again, ten times a second) was half of staging, the number formatting the other half.
    ``%r`` of an exact int or float is the text the encoder writes for it. Anything else (another
    shape, a bool, a NaN, a key that is not a string) goes to ``_CANONICAL``, which writes it, or
    refuses it, as always."""
    out = []
    for s in samples:
        try:
            if type(s) is not dict or len(s) != 4:
                raise TypeError
            dev, kind, t, m = s["dev"], s["kind"], s["t"], s["m"]
            template, values = _TEMPLATES.get(tuple(m)) or _template(m)
            got = values(m)
            # exact ints and floats only (no bool: the encoder writes true/false, %r True/False), and
            # finite: a NaN or infinity makes the sum non-finite (an overflow only sends it the slow way)
            if not (_NUMBERS.issuperset(map(type, got)) and type(t) in _NUMBERS and type(m) is dict
                    and math.isfinite(sum(got, t))):
                raise TypeError
            out.append(template % (_NAMES.get(dev) or _name(dev), _NAMES.get(kind) or _name(kind), *got, t))
        except (TypeError, KeyError, ValueError, OverflowError):
            return _CANONICAL.encode(samples)
    return "[" + ",".join(out) + "]"


def encode_readings(readings: list) -> str:
    """``encode_samples([r.to_wire() for r in readings])``, the same text, without building the wire
    dicts: the same fast path read from the readings' attributes, the same fallback."""
    out = []
    for r in readings:
        try:
            m, t = r.values, r.t
            template, values = _TEMPLATES.get(tuple(m)) or _template(m)
            got = values(m)
            if not (_NUMBERS.issuperset(map(type, got)) and type(t) in _NUMBERS and type(m) is dict
                    and math.isfinite(sum(got, t))):
                raise TypeError
            out.append(template % (_NAMES.get(r.device) or _name(r.device), _NAMES.get(r.kind) or _name(r.kind),
                                   *got, t))
        except (TypeError, KeyError, ValueError, OverflowError):
            return _CANONICAL.encode([r.to_wire() for r in readings])
    return "[" + ",".join(out) + "]"


def _template(m: dict) -> tuple[str, Callable[[dict], tuple]]:
    keys = sorted(m)      # as the encoder sorts them (a key that is not a string: TypeError, slow way)
    if any(type(k) is not str for k in keys):
        raise TypeError
    body = ",".join(encode_basestring_ascii(k).replace("%", "%%") + ":%r" for k in keys)
    if len(keys) > 1:
        values = operator.itemgetter(*keys)
    elif keys:
        key = keys[0]

        def values(d: dict, key: str = key) -> tuple:
            return (d[key],)
    else:
        def values(d: dict) -> tuple:
            return ()
    entry = ('{"dev":%s,"kind":%s,"m":{' + body + '},"t":%r}', values)
    if len(_TEMPLATES) < _CACHE_MAX:
        _TEMPLATES[tuple(m)] = entry
    return entry


def _name(name: str) -> str:
    if type(name) is not str:
        raise TypeError
    text = encode_basestring_ascii(name)
    if len(_NAMES) < _CACHE_MAX:
        _NAMES[name] = text
    return text


class SpoolError(RuntimeError):
    """The spool file cannot be used as asked (another node's spool, unreadable file)."""


@dataclass(frozen=True, slots=True)
class SpooledBatch:
    seq: int
    body: bytes
    signature: str
    n_samples: int


class _TickLog:
    """The append-only tick log (see the module doc): ``<id> <n> <canonical JSON>`` per line."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def read(self) -> list[tuple[int, int, str]]:
        """Every complete line; a torn last line (a kill in mid-write) is cut off the file."""
        size = os.fstat(self.fd).st_size
        data = os.pread(self.fd, size, 0) if size else b""
        out, end = [], 0
        while True:
            nl = data.find(b"\n", end)
            if nl < 0:
                break
            try:
                tick, n, text = data[end:nl].split(b" ", 2)
                out.append((int(tick), int(n), text.decode("ascii")))
            except ValueError:
                break          # garbled: nothing after it can be trusted either
            end = nl + 1
        if end < size:
            os.ftruncate(self.fd, end)
        return out

    def append(self, tick: int, n: int, text: str) -> None:
        buf = memoryview(f"{tick} {n} {text}\n".encode("ascii"))
        while buf:
            buf = buf[os.write(self.fd, buf):]

    def clear(self) -> None:
        os.ftruncate(self.fd, 0)

    def close(self) -> None:
        os.close(self.fd)


class _Tx:
    """:meth:`Spool._tx`'s context manager: one class made once (a class statement inside ``_tx``
    built a new class, a reference cycle for the garbage collector, at every seal and every ack)."""

    __slots__ = ("db", "durable")

    def __init__(self, db: sqlite3.Connection, durable: bool):
        self.db, self.durable = db, durable

    def __enter__(self) -> None:
        if self.durable:
            self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> bool:
        try:
            self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        finally:
            if self.durable:
                self.db.execute("PRAGMA synchronous=NORMAL")
        return False


class Spool:
    """Thread-safe: the sampler appends and the sender reads/acks from another thread."""

    def __init__(self, path: str | Path, node: str, key: str | bytes):
        self.path = Path(path)
        self.node = node
        self._key = key
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL by default: a commit survives the agent being killed, and a staged tick or an
            # ack needs no more (a lost ack only means a resend, answered "duplicate"). Everything
            # that writes the chain (append, seal, rechain) commits with FULL: it survives power loss.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            if "n" not in {row[1] for row in self._db.execute("PRAGMA table_info(staged)")}:
                self._db.execute("ALTER TABLE staged ADD COLUMN n INTEGER")  # a spool from before n
        except sqlite3.DatabaseError as e:
            raise SpoolError(f"{self.path}: not a usable spool file ({e})") from None
        meta = self._meta()
        if not meta:
            with self._tx(durable=True):
                self._set_meta(format=SPOOL_FORMAT, node=node, next_seq="0", last_digest=GENESIS_PREV)
        elif meta.get("format") != SPOOL_FORMAT:
            raise SpoolError(f"{self.path}: spool format {meta.get('format')!r}, expected {SPOOL_FORMAT!r}")
        elif meta.get("node") != node:
            # Continuing another node's chain would make the collector reject every batch.
            raise SpoolError(f"{self.path} is the spool of node {meta.get('node')!r}, not {node!r}; "
                             "use a separate --spool per node")
        # What is staged and not yet sealed: (tick id or None for a legacy row, samples, JSON text).
        through = int(self._meta().get("staged_through", "0"))
        self._staged: list[tuple[int | None, int | None, str]] = [
            (None, n, text) for _, text, n in self._db.execute("SELECT id, samples, n FROM staged ORDER BY id")]
        self._legacy_rows = bool(self._staged)
        try:
            self._ticks = _TickLog(self.path.with_name(self.path.name + "-ticks"))
            logged = [t for t in self._ticks.read() if t[0] > through]   # not sealed yet
        except OSError as e:
            raise SpoolError(f"{self.path}: cannot use the tick log next to it ({e.strerror})") from None
        self._staged += logged
        self._next_tick = max([through] + [t for t, _, _ in logged]) + 1

    # -- internals -----------------------------------------------------------------------------
    def _tx(self, durable: bool = False) -> "_Tx":
        """BEGIN IMMEDIATE .. COMMIT (ROLLBACK on error); ``durable``: the commit is fsynced (FULL)."""
        return _Tx(self._db, durable)

    def _meta(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT key, value FROM meta").fetchall())

    def _set_meta(self, **kv: str) -> None:
        self._db.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", list(kv.items()))

    # -- chain state ---------------------------------------------------------------------------
    @property
    def next_seq(self) -> int:
        with self._lock:
            return int(self._meta()["next_seq"])

    @property
    def last_digest(self) -> str:
        with self._lock:
            return self._meta()["last_digest"]

    # -- the sampler's side --------------------------------------------------------------------
    def append(self, samples: list[dict], interval_s: float, created: float | None = None) -> int:
        """Encode, sign and durably store the next batch of the chain; return its seq."""
        with self._lock, self._tx(durable=True):
            return self._append_locked(samples, interval_s, time.time() if created is None else created)

    def _append_locked(self, samples: list[dict] | None, interval_s: float, created: float,
                       samples_json: list[str] | None = None, n_samples: int = 0) -> int:
        """The next batch from ``samples``, or spliced from canonical JSON arrays ``samples_json``."""
        meta = self._meta()
        seq, prev = int(meta["next_seq"]), meta["last_digest"]
        if samples_json is None:
            body = encode_batch(self.node, seq, prev, samples, created=created, interval_s=interval_s)
            n_samples = len(samples)
        else:
            # encode_batch's bytes exactly: canonical JSON of a list is "[" + items joined by "," +
            # "]", so the staged arrays' items, joined, are the samples array it would write.
            head = encode_batch(self.node, seq, prev, [], created=created, interval_s=interval_s)
            items = ",".join(t[1:-1] for t in samples_json if len(t) > 2)
            body = head.replace(_SAMPLES_SLOT, b'"samples":[' + items.encode("ascii") + b"]", 1)
        self._db.execute("INSERT INTO pending(seq, body, signature, n_samples, spooled_at) VALUES (?, ?, ?, ?, ?)",
                         (seq, body, sign(self._key, body), n_samples, time.time()))
        self._set_meta(next_seq=str(seq + 1), last_digest=digest(body))
        return seq

    def stage(self, samples: list[dict]) -> None:
        """Keep one tick's samples until :meth:`seal` puts them in a batch: one line appended to the
        tick log, no fsync (it survives the agent being killed, not a power loss)."""
        if samples:
            self._stage_text(encode_samples(samples), len(samples))

    def stage_readings(self, readings: list) -> None:
        """:meth:`stage` of ``[r.to_wire() for r in readings]`` (the same line in the tick log),
        encoded from the readings without building the wire dicts."""
        if readings:
            self._stage_text(encode_readings(readings), len(readings))

    def _stage_text(self, text: str, n: int) -> None:
        """Stage one tick given as the canonical JSON array of its ``n`` samples."""
        with self._lock:
            tick = self._next_tick
            self._ticks.append(tick, n, text)
            self._next_tick += 1
            self._staged.append((tick, n, text))

    def seal(self, interval_s: float, created: float | None = None) -> list[int]:
        """Turn everything staged into the next batch(es) of the chain, atomically; return their seqs."""
        created = time.time() if created is None else created
        with self._lock:
            staged = self._staged
            if not staged:
                return []
            with self._tx(durable=True):
                total = sum(n or 0 for _, n, _ in staged)
                if all(n is not None for _, n, _ in staged) and total <= MAX_SAMPLES_PER_BATCH:
                    seqs = [self._append_locked(None, interval_s, created, [t for _, _, t in staged], total)]
                else:  # ticks staged without counts, or more than one batch may hold: decode
                    samples = [s for _, _, text in staged for s in json.loads(text)]
                    seqs = [self._append_locked(samples[i:i + MAX_SAMPLES_PER_BATCH], interval_s, created)
                            for i in range(0, len(samples), MAX_SAMPLES_PER_BATCH)]
                if self._legacy_rows:
                    self._db.execute("DELETE FROM staged")
                ticks = [t for t, _, _ in staged if t is not None]
                if ticks:
                    self._set_meta(staged_through=str(max(ticks)))
            # Committed: these ticks are in a batch. Emptying the log under the same lock, so no tick
            # staged after the commit is lost; a kill before this leaves only ids <= staged_through.
            self._staged, self._legacy_rows = [], False
            self._ticks.clear()
        return seqs

    def staged_samples(self) -> int:
        with self._lock:
            return sum(len(json.loads(t)) if n is None else n for _, n, t in self._staged)

    # -- the sender's side ---------------------------------------------------------------------
    def oldest(self, after: int = -1) -> SpooledBatch | None:
        """The pending batch of the lowest seq above ``after``."""
        with self._lock:
            row = self._db.execute("SELECT seq, body, signature, n_samples FROM pending WHERE seq > ? "
                                   "ORDER BY seq LIMIT 1", (after,)).fetchone()
        return None if row is None else SpooledBatch(row[0], bytes(row[1]), row[2], row[3])

    def get(self, seq: int) -> SpooledBatch | None:
        with self._lock:
            row = self._db.execute("SELECT seq, body, signature, n_samples FROM pending WHERE seq = ?",
                                   (seq,)).fetchone()
        return None if row is None else SpooledBatch(row[0], bytes(row[1]), row[2], row[3])

    def ack_below(self, seq: int) -> int:
        """The collector durably holds every batch below ``seq``: forget those; return how many."""
        with self._lock, self._tx():
            return self._db.execute("DELETE FROM pending WHERE seq < ?", (seq,)).rowcount

    def pending_stats(self, through: int = -1) -> tuple[int, int, int, int]:
        """(batches, samples, bytes) waiting for deletion, and how many of those batches have a seq at
        or below ``through``: one read, so the four agree with each other."""
        with self._lock:
            n, samples, size, below = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(n_samples), 0), COALESCE(SUM(LENGTH(body)), 0), "
                "COALESCE(SUM(seq <= ?), 0) FROM pending", (through,)).fetchone()
        return int(n), int(samples), int(size), int(below)

    def pending_seqs(self) -> list[int]:
        with self._lock:
            return [r[0] for r in self._db.execute("SELECT seq FROM pending ORDER BY seq")]

    def rechain(self, gap_from: int) -> int:
        """Declare batches ``gap_from .. oldest-1`` lost and re-encode every pending batch.

        Returns the seq of the oldest pending batch, which now carries ``gap_from``. Samples,
        timestamps and sequence numbers are kept; only ``gap_from`` and the ``prev`` links change.
        """
        with self._lock, self._tx(durable=True):
            rows = self._db.execute("SELECT seq, body FROM pending ORDER BY seq").fetchall()
            if not rows:
                raise SpoolError("nothing pending to rechain")
            first_seq = rows[0][0]
            if not 0 <= gap_from < first_seq:
                raise SpoolError(f"gap_from {gap_from} must be below the oldest pending seq {first_seq}")
            prev = json.loads(rows[0][1])["prev"]
            for i, (seq, old) in enumerate(rows):
                obj = json.loads(old)
                body = encode_batch(self.node, seq, prev, obj["samples"], created=obj["created"],
                                    interval_s=obj["interval_s"],
                                    gap_from=gap_from if i == 0 else obj.get("gap_from"))
                self._db.execute("UPDATE pending SET body = ?, signature = ? WHERE seq = ?",
                                 (body, sign(self._key, body), seq))
                prev = digest(body)
            self._set_meta(last_digest=prev)
        return first_seq

    def close(self) -> None:
        with self._lock:
            self._db.close()
            self._ticks.close()
