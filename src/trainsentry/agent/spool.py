"""The durable spool: every encoded+signed batch stays on disk until the collector acknowledges it.

One SQLite file (standard library; WAL journal, ``synchronous=FULL`` so a commit survives power
loss) holds

* ``pending``: batches not yet acknowledged, keyed by ``seq``, with the exact bytes and signature
  that go on the wire. A batch is encoded and signed once, in :meth:`Spool.append`; every resend
  sends the stored bytes, so the collector sees a retry as byte-identical and can answer
  "duplicate" instead of storing it twice.
* ``staged``: each tick's readings, written as they are taken, until the batch they belong to is
  sealed. An agent killed mid-batch (SIGKILL, power loss) therefore loses at most the tick being
  read; the next start seals what was staged as the first thing it does. Each tick is staged as
  canonical JSON (the wire's own encoding of its samples) with its sample count, so sealing splices
  the staged text into the batch instead of decoding and re-encoding every sample: JSON is encoded
  once per sample, not twice (at 10 Hz that decode + encode was most of the spool's CPU).
* ``meta``: the node id and the chain state (``next_seq``, ``last_digest``). It is updated in the
  same transaction as the insert, so an agent restart continues the hash chain where it stopped,
  with no repeated and no skipped sequence number.

The only time stored bytes change is :meth:`Spool.rechain`: the collector says batches are missing
that the spool no longer has (the collector lost acknowledged data), and the agent must declare the
loss with ``gap_from``. Adding that field changes the oldest pending batch's bytes, hence its
digest, hence every later ``prev``: all pending batches are re-encoded in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..wire.batch import GENESIS_PREV, digest, encode_batch, sign

_SAMPLES_SLOT = b'"samples":[]'
# The wire's canonical encoding (wire.batch.canonical_bytes), made once: json.dumps with options
# builds a new encoder on every call, ten times a second here.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)

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


class SpoolError(RuntimeError):
    """The spool file cannot be used as asked (another node's spool, unreadable file)."""


@dataclass(frozen=True, slots=True)
class SpooledBatch:
    seq: int
    body: bytes
    signature: str
    n_samples: int


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

    # -- internals -----------------------------------------------------------------------------
    def _tx(self, durable: bool = False):
        """BEGIN IMMEDIATE .. COMMIT (ROLLBACK on error); ``durable``: the commit is fsynced (FULL)."""
        db = self._db

        class _Tx:
            def __enter__(self_inner):
                if durable:
                    db.execute("PRAGMA synchronous=FULL")
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self_inner, exc_type, exc, tb):
                try:
                    db.execute("ROLLBACK" if exc_type else "COMMIT")
                finally:
                    if durable:
                        db.execute("PRAGMA synchronous=NORMAL")
                return False
        return _Tx()

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
        """Keep one tick's samples until :meth:`seal` puts them in a batch (one autocommitted insert).

        Committed without its own fsync (synchronous=NORMAL): it survives the agent being killed,
        and the next seal's FULL commit fsyncs it with the batch. Only a power loss inside the batch
        interval can take the staged ticks of that interval.
        """
        if not samples:
            return
        text = _CANONICAL.encode(samples)
        with self._lock:
            self._db.execute("INSERT INTO staged(samples, n) VALUES (?, ?)", (text, len(samples)))

    def seal(self, interval_s: float, created: float | None = None) -> list[int]:
        """Turn everything staged into the next batch(es) of the chain, atomically; return their seqs."""
        created = time.time() if created is None else created
        with self._lock, self._tx(durable=True):
            rows = self._db.execute("SELECT id, samples, n FROM staged ORDER BY id").fetchall()
            if not rows:
                return []
            total = sum(n or 0 for _, _, n in rows)
            if all(n is not None for _, _, n in rows) and total <= MAX_SAMPLES_PER_BATCH:
                seqs = [self._append_locked(None, interval_s, created, [t for _, t, _ in rows], total)]
            else:  # ticks staged before counts were kept, or more than one batch may hold: decode
                samples = [s for _, text, _ in rows for s in json.loads(text)]
                seqs = [self._append_locked(samples[i:i + MAX_SAMPLES_PER_BATCH], interval_s, created)
                        for i in range(0, len(samples), MAX_SAMPLES_PER_BATCH)]
            self._db.execute("DELETE FROM staged WHERE id <= ?", (rows[-1][0],))
        return seqs

    def staged_samples(self) -> int:
        with self._lock:
            return sum(len(json.loads(t)) if n is None else n
                       for t, n in self._db.execute("SELECT samples, n FROM staged"))

    # -- the sender's side ---------------------------------------------------------------------
    def oldest(self) -> SpooledBatch | None:
        with self._lock:
            row = self._db.execute("SELECT seq, body, signature, n_samples FROM pending "
                                   "ORDER BY seq LIMIT 1").fetchone()
        return None if row is None else SpooledBatch(row[0], bytes(row[1]), row[2], row[3])

    def get(self, seq: int) -> SpooledBatch | None:
        with self._lock:
            row = self._db.execute("SELECT seq, body, signature, n_samples FROM pending WHERE seq = ?",
                                   (seq,)).fetchone()
        return None if row is None else SpooledBatch(row[0], bytes(row[1]), row[2], row[3])

    def ack(self, seq: int) -> None:
        """The collector has committed batch ``seq``: forget it."""
        with self._lock, self._tx():
            self._db.execute("DELETE FROM pending WHERE seq = ?", (seq,))

    def ack_below(self, seq: int) -> int:
        """The collector holds every batch below ``seq``: forget those; return how many."""
        with self._lock, self._tx():
            return self._db.execute("DELETE FROM pending WHERE seq < ?", (seq,)).rowcount

    def pending_stats(self) -> tuple[int, int, int]:
        """(batches, samples, bytes) waiting for acknowledgement."""
        with self._lock:
            n, samples, size = self._db.execute(
                "SELECT COUNT(*), COALESCE(SUM(n_samples), 0), COALESCE(SUM(LENGTH(body)), 0) FROM pending").fetchone()
        return int(n), int(samples), int(size)

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
