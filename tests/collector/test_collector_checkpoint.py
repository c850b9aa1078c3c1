"""WAL checkpoints run on their own thread: the WAL is copied back and the data stays readable."""

from __future__ import annotations

import sqlite3
import time

from conftest import gpu_samples

from trainsentry.collector.store import Store
from trainsentry.wire.batch import GENESIS_PREV, digest, encode_batch, sign


def test_checkpoint_thread_backfills_the_wal_and_stops_on_close(tmp_path):
    db = tmp_path / "c.db"
    store = Store(db)
    key = store.enroll("node-a")
    assert store.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0  # the thread does it
    size_before = db.stat().st_size
    prev = GENESIS_PREV
    for seq in range(5):
        body = encode_batch("node-a", seq, prev, gpu_samples(1000.0 + seq, n=50), 1.0, 1.0)
        store.ingest("node-a", sign(key, body), body)
        prev = digest(body)
    deadline = time.monotonic() + 10
    while store._checkpointer.checkpoints == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert store._checkpointer.checkpoints >= 1 and store._checkpointer.errors == 0
    # Committed pages were copied from the WAL into the main file (without a checkpoint it would
    # still hold only the schema and the node).
    while db.stat().st_size <= size_before + 50 * 1024 and time.monotonic() < deadline:
        time.sleep(0.01)       # a first checkpoint may copy part of the WAL; the thread goes on
    assert db.stat().st_size > size_before + 50 * 1024
    thread = store._checkpointer._thread
    store.close()
    assert not thread.is_alive()
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 250


def _store_checkpointing(db, monkeypatch, max_wal_pages: int):
    """A Store whose checkpoint thread runs every 50 ms with a WAL bound of ``max_wal_pages``."""
    from trainsentry.collector import checkpoint
    real = checkpoint.Checkpointer.__init__
    monkeypatch.setattr(checkpoint.Checkpointer, "__init__",
                        lambda self, *a, **kw: real(self, *a, **{**kw, "min_interval_s": 0.05,
                                                                 "max_wal_pages": max_wal_pages}))
    store = Store(db)
    return store, store.enroll("node-a")


def _ingest(store, key, seq: int, prev: str) -> str:
    """One 100-sample batch of node-a; returns its digest (the next batch's prev)."""
    body = encode_batch("node-a", seq, prev, gpu_samples(1000.0 + seq, n=100), 1.0, 1.0)
    store.ingest("node-a", sign(key, body), body)
    return digest(body)


def test_the_wal_stays_bounded_under_continuous_ingest(tmp_path, monkeypatch):
    """A writer that never pauses: PASSIVE checkpoints cannot catch up, so the thread restarts the
    WAL once it passes its bound, and the file is cut back (it grew without end before)."""
    db = tmp_path / "c.db"
    store, key = _store_checkpointing(db, monkeypatch, max_wal_pages=256)
    prev, biggest, seq = GENESIS_PREV, 0, 0
    deadline = time.monotonic() + 60
    while (store._checkpointer.restarts < 3 or seq < 300) and time.monotonic() < deadline:
        prev, seq = _ingest(store, key, seq, prev), seq + 1
        biggest = max(biggest, (tmp_path / "c.db-wal").stat().st_size)
    page = store.conn.execute("PRAGMA page_size").fetchone()[0]
    assert store._checkpointer.restarts >= 3 and store._checkpointer.errors == 0
    # bounded: the limit plus what one checkpoint interval lets through, far below 300 batches' WAL
    assert biggest < 8 * 256 * page, biggest
    store.close()
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 100 * seq


def test_a_restart_held_up_by_a_reader_gives_up_quickly_and_ingest_goes_on(tmp_path, monkeypatch):
    """A reader with an old snapshot keeps the WAL from starting over: the RESTART checkpoint waits
    at most restart_wait_s for it (holding writers off meanwhile), then gives up until later."""
    db = tmp_path / "c.db"
    store, key = _store_checkpointing(db, monkeypatch, max_wal_pages=64)
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM samples").fetchall()     # a snapshot held open
    prev, slowest, t0 = GENESIS_PREV, 0.0, time.monotonic()
    for seq in range(120):
        t = time.monotonic()
        prev = _ingest(store, key, seq, prev)
        slowest = max(slowest, time.monotonic() - t)
    elapsed = time.monotonic() - t0
    time.sleep(0.3)
    ck = store._checkpointer
    assert ck.restarts == 0 and ck.restarts_given_up >= 1      # it could not start the WAL over ...
    assert slowest < 2.0, slowest                              # ... no commit waited long for it ...
    assert ck.restarts_given_up <= 1 + elapsed / ck.restart_backoff_s   # ... nor was it tried often
    reader.execute("COMMIT")
    reader.close()
    store.close()


class _FakeCheckpointConn:
    """Stands in for the checkpoint thread's connection: records whether the writer was parked
    while the RESTART ran, and takes ``seconds`` to run it."""

    def __init__(self, ck, seconds: float):
        self.ck, self.seconds, self.saw_parked = ck, seconds, []

    def execute(self, sql):
        assert sql == "PRAGMA wal_checkpoint(RESTART)"
        self.saw_parked.append(self.ck._writer_parked)
        time.sleep(self.seconds)
        return self

    def fetchall(self):
        return [(0, 0, 0)]


def test_a_due_restart_parks_the_writer_in_poke_until_it_is_over(tmp_path):
    """The writer waits for a RESTART between its transactions (in poke) and goes on as soon as it
    is over, instead of polling for the lock in SQLite's busy handler (sleeps of up to 20 ms)."""
    import threading

    from trainsentry.collector.checkpoint import Checkpointer
    ck = Checkpointer(tmp_path / "c.db", min_interval_s=0.01)
    ck.park_wait_s = 5.0     # a loaded machine's writer may take longer than the default to come to poke
    fake = _FakeCheckpointConn(ck, seconds=0.2)
    results = []
    thread = threading.Thread(target=lambda: results.append(ck._restart(fake)))
    thread.start()
    longest = 0.0
    while thread.is_alive():  # a writer committing continuously: poke after every commit
        t = time.monotonic()
        ck.poke()
        longest = max(longest, time.monotonic() - t)
        time.sleep(0.001)
    thread.join()
    assert results == [True] and fake.saw_parked == [True]
    assert 0.15 < longest < 1.0, longest            # parked for the RESTART, not beyond it
    assert 0.15 < ck.writer_parked_s < 1.0
    parked, t = ck.writer_parked_s, time.monotonic()
    ck.poke()                                       # nothing due: poke neither parks nor waits
    assert ck.writer_parked_s == parked and time.monotonic() - t < 0.5
    ck.close()


def test_a_restart_does_not_wait_long_for_a_writer_that_does_not_come(tmp_path):
    from trainsentry.collector.checkpoint import Checkpointer
    ck = Checkpointer(tmp_path / "c.db")
    fake = _FakeCheckpointConn(ck, seconds=0.0)
    t = time.monotonic()
    assert ck._restart(fake) is True
    assert fake.saw_parked == [False] and time.monotonic() - t < ck.park_wait_s + 0.5
    assert not ck._restart_due
    ck.close()


def test_the_database_file_is_synced_through_sqlites_own_descriptor(tmp_path, monkeypatch):
    """Opening and closing a descriptor of our own would drop every POSIX lock the process's SQLite
    connections hold on the file: the pre-RESTART sync must use one SQLite has open."""
    import os

    import pytest

    from trainsentry.collector import checkpoint
    if not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd (Linux)")
    store = Store(tmp_path / "c.db")
    deadline = time.monotonic() + 10       # the thread's first round syncs the WAL through a descriptor of its own
    while store._checkpointer.durable_steps == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    synced = []

    def no_open(*a, **kw):
        raise AssertionError("the checkpointer opened a descriptor of its own")

    real_fdatasync = os.fdatasync
    monkeypatch.setattr(checkpoint.os, "open", no_open)
    monkeypatch.setattr(checkpoint.os, "close", no_open)
    monkeypatch.setattr(checkpoint.os, "fdatasync",
                        lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fdatasync(fd)))
    assert store._checkpointer._sync_database_file() is True
    assert synced == [os.path.realpath(tmp_path / "c.db")]
    monkeypatch.undo()
    store.close()


def test_restarts_under_continuous_ingest_park_the_writer(tmp_path, monkeypatch):
    """The real thread: every RESTART under a writer that never pauses is run with it parked."""
    db = tmp_path / "c.db"
    store, key = _store_checkpointing(db, monkeypatch, max_wal_pages=256)
    ck = store._checkpointer
    ck.park_wait_s = 5.0  # a loaded test machine may take long over one batch: do not run without it
    parked_during_restart = []
    real_restart = ck._restart

    def watching(conn):
        class Watch:
            def execute(self, sql):
                parked_during_restart.append(ck._writer_parked)
                return conn.execute(sql)
        return real_restart(Watch())

    ck._restart = watching
    prev, seq = GENESIS_PREV, 0
    deadline = time.monotonic() + 60
    while (ck.restarts < 3 or seq < 100) and time.monotonic() < deadline:
        prev, seq = _ingest(store, key, seq, prev), seq + 1
    assert ck.restarts >= 3 and ck.errors == 0
    assert parked_during_restart and all(parked_during_restart[:3]), parked_during_restart
    assert ck.writer_parked_s > 0
    store.close()
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 100 * seq
