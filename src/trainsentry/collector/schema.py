"""The collector's SQLite schema and its numbered migrations, in one place.

Every change to the tables is a new entry in :data:`MIGRATIONS`; :func:`open_db` applies the
pending ones in order inside one transaction each and records them in ``schema_version``, so a
database written by any earlier version opens and upgrades in place, and one written by a *newer*
version is refused rather than silently misread.

Durability: the database runs in WAL mode. ``synchronous=NORMAL`` (the default here) makes every
committed transaction survive a crash or SIGKILL of the server process (the commit is in the WAL
file before ``COMMIT`` returns), but not a power loss or kernel crash before the WAL is fsynced.
The checkpoint thread fsyncs it about every 0.25 s while batches arrive and keeps, per node, the
last batch known to be on disk; every ack reports it (``durable_seq``), and the agent keeps each
batch until it is covered, so a power loss loses nothing the agent cannot resend
(:mod:`trainsentry.collector.checkpoint`). ``synchronous=FULL`` fsyncs the WAL on every commit, so
each ack is durable at once, at the cost of one fsync per batch.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from ..traces.schema import METRICS
from .auth import DDL as _AUTH_DDL
from .verdicts import (ABSTAIN_DDL as _ABSTAIN_DDL, DDL as _VERDICTS_DDL, FLOOR_DDL as _FLOOR_DDL,
                       LEAD_DDL as _LEAD_DDL, LEAD_INDEX_DDL as _LEAD_INDEX_DDL, NODE_STATE_DDL as _NODE_STATE_DDL,
                       UNJUDGED_DDL as _UNJUDGED_DDL)

SYNC_LEVELS = ("normal", "full")

# Metric columns of the samples table, in schema order (the order rows are built in).
SAMPLE_METRICS: tuple[str, ...] = tuple(m.name for m in METRICS)
SAMPLE_KEY_COLUMNS: tuple[str, ...] = ("node_id", "device", "kind", "t")
SAMPLE_COLUMNS: tuple[str, ...] = SAMPLE_KEY_COLUMNS + SAMPLE_METRICS


def _sql_type(m) -> str:
    return "INTEGER" if m.integer else "REAL"


def _samples_ddl() -> str:
    # No secondary index on samples: a batch's samples get consecutive sample_ids (appended in one
    # transaction) and the batches row records that range, so reads find samples through the small,
    # indexed batches table and a rowid range scan. Ingest then pays for one B-tree append per sample
    # instead of two B-tree inserts, which is most of the difference between 60k and 100k+ samples/s.
    # The columns of the first schema; metrics added later (``late``) arrive in their own migration.
    metric_cols = ",\n  ".join(f"{m.name} {_sql_type(m)}" for m in METRICS if not m.late)
    return f"""
CREATE TABLE samples (
  sample_id INTEGER PRIMARY KEY,
  node_id INTEGER NOT NULL,
  device TEXT NOT NULL,
  kind TEXT NOT NULL,
  t REAL NOT NULL,
  {metric_cols}
);
"""


_V1 = """
CREATE TABLE nodes (
  node_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  key TEXT NOT NULL,             -- HMAC key, hex; the database file is therefore a secret (mode 0600)
  enrolled_at REAL NOT NULL,
  key_rotated_at REAL,
  last_seq INTEGER,              -- NULL until the first batch
  last_digest TEXT,              -- sha256 of the last accepted batch's bytes: the next batch's prev
  last_seen REAL,                -- server clock when the last batch was committed
  last_t REAL,                   -- latest sample time seen (the agent's clock)
  interval_s REAL NOT NULL DEFAULT 1.0
);
CREATE TABLE batches (
  node_id INTEGER NOT NULL REFERENCES nodes(node_id),
  seq INTEGER NOT NULL,
  digest TEXT NOT NULL,
  prev TEXT NOT NULL,
  received_at REAL NOT NULL,
  n_samples INTEGER NOT NULL,
  t_first REAL,
  t_last REAL,
  first_sample INTEGER,          -- sample_id range of this batch's samples (NULL when it had none)
  last_sample INTEGER,
  body BLOB NOT NULL,            -- the exact signed bytes, so any batch can be re-verified later
  PRIMARY KEY (node_id, seq)
);
CREATE INDEX batches_by_time ON batches(node_id, t_last);
CREATE TABLE devices (
  node_id INTEGER NOT NULL REFERENCES nodes(node_id),
  device TEXT NOT NULL,
  kind TEXT NOT NULL,
  first_t REAL NOT NULL,
  PRIMARY KEY (node_id, device)
);
CREATE TABLE unmonitored (
  node_id INTEGER NOT NULL REFERENCES nodes(node_id),
  start_t REAL NOT NULL,
  end_t REAL NOT NULL,
  reason TEXT NOT NULL CHECK (reason IN ('silence', 'seq_hole', 'declared_loss')),
  seq_from INTEGER,              -- for holes: the first and last missing batch
  seq_to INTEGER,
  recorded_at REAL NOT NULL
);
CREATE INDEX unmonitored_by_node ON unmonitored(node_id, start_t);
CREATE TABLE rejections (
  at REAL NOT NULL,
  node TEXT,                     -- as claimed in X-TS-Node: unauthenticated for 401s
  status INTEGER NOT NULL,
  code TEXT NOT NULL,
  remote TEXT,
  detail TEXT
);
CREATE INDEX rejections_by_code ON rejections(code);
""" + _samples_ddl()

# Refusals past the per-minute row limit are one row that counts them (store.record_rejection).
_V5 = "ALTER TABLE rejections ADD COLUMN n INTEGER NOT NULL DEFAULT 1;  -- refusals this row stands for\n"

# unmonitored.reason may also be 'time_regression' (a batch stamped back into history already
# received: store.py). SQLite cannot change a CHECK in place, so the table is rebuilt with every row
# (rowids kept: the live processor reads a batch's intervals back in rowid order) and its index.
_V8 = """
CREATE TABLE unmonitored_v8 (
  node_id INTEGER NOT NULL REFERENCES nodes(node_id),
  start_t REAL NOT NULL,
  end_t REAL NOT NULL,
  reason TEXT NOT NULL CHECK (reason IN ('silence', 'seq_hole', 'declared_loss', 'time_regression')),
  seq_from INTEGER,
  seq_to INTEGER,
  recorded_at REAL NOT NULL
);
INSERT INTO unmonitored_v8 (rowid, node_id, start_t, end_t, reason, seq_from, seq_to, recorded_at)
  SELECT rowid, node_id, start_t, end_t, reason, seq_from, seq_to, recorded_at FROM unmonitored;
DROP TABLE unmonitored;
ALTER TABLE unmonitored_v8 RENAME TO unmonitored;
CREATE INDEX unmonitored_by_node ON unmonitored(node_id, start_t);
"""

# The GPM FP32, FP16 and integer pipe utilizations (traces/schema.py, added 2026-12-01).
_V9 = """
ALTER TABLE samples ADD COLUMN gpm_fp32_util_pct REAL;
ALTER TABLE samples ADD COLUMN gpm_fp16_util_pct REAL;
ALTER TABLE samples ADD COLUMN gpm_integer_util_pct REAL;
"""

# The host source (telemetry/host.py): CPU time, RAPL package energy, host memory in use.
_V16 = """
ALTER TABLE samples ADD COLUMN cpu_user_ms INTEGER;
ALTER TABLE samples ADD COLUMN cpu_system_ms INTEGER;
ALTER TABLE samples ADD COLUMN cpu_idle_ms INTEGER;
ALTER TABLE samples ADD COLUMN cpu_energy_uj INTEGER;
ALTER TABLE samples ADD COLUMN host_mem_used_bytes INTEGER;
"""

# Back-dated batches: how many of a node's batches started before its latest sample already stored,
# and by how much at most (store.py; time regressions beyond the tolerance are also unmonitored).
_V12 = """
ALTER TABLE nodes ADD COLUMN backdated_batches INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN backdated_max_s REAL;
"""

# The server time of the last batch that carried samples: a node sending empty batches is silent
# (store.py, query.py). Nodes stored before it start from their last batch.
_V13 = """
ALTER TABLE nodes ADD COLUMN last_data_seen REAL;
UPDATE nodes SET last_data_seen = last_seen;
"""

# Each device's latest sample time (the agent's clock): a device that stops reporting while its node
# goes on is served as silent (query.silent_devices). Devices stored before it start from first_t.
_V14 = """
ALTER TABLE devices ADD COLUMN last_t REAL;
UPDATE devices SET last_t = first_t;
"""

# The spans a single GPU or IB port went unreported while its node went on (store.py), closed when
# it reported again; the open one is query.silent_devices. Served by query.unmonitored.
_V15 = """
CREATE TABLE device_silences (
  node_id INTEGER NOT NULL REFERENCES nodes(node_id),
  device TEXT NOT NULL,
  start_t REAL NOT NULL,          -- the device's latest sample before the span (agent clock)
  end_t REAL NOT NULL,            -- its next sample
  recorded_at REAL NOT NULL       -- the batch's commit time (server clock)
);
CREATE INDEX device_silences_by_node ON device_silences(node_id, start_t);
UPDATE devices SET last_t = max(last_t, coalesce((SELECT n.last_t FROM nodes n WHERE n.node_id = devices.node_id), last_t))
  WHERE last_t = first_t;
"""
# (The UPDATE: migration 14 started each device's last_t at its first_t. Where it has not moved since,
# the device's real latest sample is unknown; the node's latest stands in for it, or the first batch
# after the upgrade would record every such GPU as unreported since its first sample.)

# (version, DDL). Append only: never edit a migration that has shipped.
MIGRATIONS: tuple[tuple[int, str], ...] = (
    (1, _V1),
    (2, _AUTH_DDL),  # inspector tokens and login sessions (collector/auth.py)
    (3, _VERDICTS_DDL),  # live verdicts, alerts and jobs (collector/verdicts.py)
    (4, _NODE_STATE_DDL),  # the live processor's per-node state, restored after a restart (collector/nodestate.py)
    (5, _V5),  # rejections.n: one row may count the refusals past the per-minute row limit
    (6, _UNJUDGED_DDL),  # spans of stored samples the live processor did not judge, and why (collector/live.py)
    (7, _ABSTAIN_DDL),  # verdicts.abstain: a paused job's idle window neither votes nor clears an alert
    (8, _V8),  # unmonitored.reason 'time_regression': samples stamped before ones already received
    (9, _V9),  # samples: GPM FP32, FP16 and integer pipe utilization
    (10, _LEAD_DDL),  # verdicts.lead_p: the single-device lead's P(training) per window, served summarised
    (11, _LEAD_INDEX_DDL),  # the windows the lead spoke on, so a long job's lead summary reads only those
    (12, _V12),  # nodes.backdated_batches, backdated_max_s: batches stamped before samples already received
    (13, _V13),  # nodes.last_data_seen: when the last batch carrying samples was committed (server clock)
    (14, _V14),  # devices.last_t: each device's latest sample, so a device that stops reporting is seen
    (15, _V15),  # device_silences: the spans a GPU or IB port went unreported while its node went on
    (16, _V16),  # samples: the host source's CPU time, CPU package energy and host memory in use
    (17, _FLOOR_DDL),  # verdicts.floor_flop: the bound on a window's work below the busy floor, served summed
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


class SchemaError(RuntimeError):
    """The database cannot be used by this version of trainsentry."""


def connect(path: str | Path, synchronous: str = "normal", readonly: bool = False) -> sqlite3.Connection:
    """A connection with the collector's pragmas. Autocommit mode: transactions are explicit."""
    if synchronous not in SYNC_LEVELS:
        raise ValueError(f"synchronous must be one of {SYNC_LEVELS}")
    if readonly:
        conn = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True, isolation_level=None,
                               check_same_thread=False)
    else:
        conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA busy_timeout=10000")
    if not readonly:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def _statements(ddl: str) -> list[str]:
    """Split a script into statements (executescript would commit the open transaction)."""
    out, buf = [], ""
    for line in ddl.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    if buf.strip():
        raise SchemaError(f"incomplete statement in migration: {buf.strip()[:80]!r}")
    return out


def current_version(conn: sqlite3.Connection) -> int:
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
    if not has:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def migrate(conn: sqlite3.Connection) -> int:
    """Apply every pending migration; return the resulting version."""
    conn.execute("BEGIN IMMEDIATE")  # one migrator at a time when two processes open a new file
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
        version = current_version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaError(f"database schema version {version} is newer than this trainsentry "
                              f"understands ({SCHEMA_VERSION}); upgrade trainsentry")
        for number, ddl in MIGRATIONS:
            if number <= version:
                continue
            for statement in _statements(ddl):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (number, time.time()))
            version = number
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return version


def open_db(path: str | Path, synchronous: str = "normal") -> sqlite3.Connection:
    """Open (creating if needed, mode 0600: it holds node keys) and migrate the collector database."""
    path = Path(path)
    if str(path) != ":memory:" and not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
    conn = connect(path, synchronous)
    migrate(conn)
    return conn
