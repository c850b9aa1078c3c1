"""The durable watermark: an ack says how far a node's chain is committed (stored_seq) and how far it
is known to be on disk (durable_seq); with --sync normal the second follows the WAL's fdatasync."""

from __future__ import annotations

import os
import threading
import time

from conftest import gpu_samples

from trainsentry.collector import checkpoint
from trainsentry.collector.checkpoint import Checkpointer
from trainsentry.collector.store import Store
from trainsentry.wire.batch import GENESIS_PREV, digest, encode_batch, sign


def chain(n: int) -> list[bytes]:
    """n chained batches of node-a."""
    out, prev = [], GENESIS_PREV
    for seq in range(n):
        body = encode_batch("node-a", seq, prev, gpu_samples(1000.0 + seq), 1000.0 + seq, 1.0)
        out.append(body)
        prev = digest(body)
    return out


def wait_for(cond, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.01)
    return cond()


def _failing_sync(self):
    raise OSError("the disk does not answer")


def test_durable_seq_lags_stored_seq_until_the_wal_is_synced(agent, client, monkeypatch):
    gate = threading.Event()
    real = Checkpointer._sync_wal
    monkeypatch.setattr(Checkpointer, "_sync_wal", lambda self: gate.wait(10) and real(self))
    store = client.app.collector.store
    bodies = chain(2)
    try:
        acks = [agent.post(b).json() for b in bodies]
        assert [(a["stored_seq"], a["durable_seq"]) for a in acks] == [(0, None), (1, None)]
        assert store.durable_seq(1) is None
    finally:
        gate.set()
    assert wait_for(lambda: store.durable_seq(1) == 1)      # the next rounds sync what was committed
    resent = agent.post(bodies[1])                          # identical resend: a duplicate, now durable
    assert resent.status_code == 200, resent.text
    assert resent.json()["duplicate"] is True
    assert (resent.json()["stored_seq"], resent.json()["durable_seq"]) == (1, 1)
    later = agent.post(bodies[0])
    assert later.json()["duplicate"] is True and (later.json()["stored_seq"], later.json()["durable_seq"]) == (1, 1)


def test_the_durable_step_fsyncs_the_wal_file(tmp_path, monkeypatch):
    synced: list[int] = []
    real = checkpoint._fdatasync
    monkeypatch.setattr(checkpoint, "_fdatasync", lambda fd: synced.append(os.fstat(fd).st_ino) or real(fd))
    db = tmp_path / "c.db"
    store = Store(db)
    try:
        key = store.enroll("node-a")
        (body,) = chain(1)
        assert store.ingest("node-a", sign(key, body), body).stored_seq == 0
        assert wait_for(lambda: store.durable_seq(1) == 0)
        assert os.stat(f"{db}-wal").st_ino in synced
    finally:
        store.close()


def test_a_failed_sync_holds_the_watermark_and_a_restart_syncs_what_was_committed(tmp_path, monkeypatch, caplog):
    db = tmp_path / "c.db"
    store = Store(db)
    key = store.enroll("node-a")
    monkeypatch.setattr(Checkpointer, "_sync_wal", _failing_sync)
    bodies = chain(3)
    try:
        acks = [store.ingest("node-a", sign(key, b), b) for b in bodies]
        assert [(a.stored_seq, a.durable_seq) for a in acks] == [(0, None), (1, None), (2, None)]
        assert wait_for(lambda: store._checkpointer.errors >= 2)   # retried, still failing
        assert store.durable_seq(1) is None
        # said, not only counted: once (rate-limited to a line a minute), naming the WAL
        failures = [r for r in caplog.records if "cannot fsync the WAL" in r.getMessage()]
        assert len(failures) == 1 and failures[0].levelname == "ERROR" and store._checkpointer.errors >= 2
    finally:
        store.close()
    monkeypatch.undo()
    store = Store(db)                                             # what the last process committed ...
    try:
        assert wait_for(lambda: store.durable_seq(1) == 2)        # ... is synced by the first round
        again = store.ingest("node-a", sign(key, bodies[2]), bodies[2])
        assert again.duplicate and (again.stored_seq, again.durable_seq) == (2, 2)
    finally:
        store.close()


def test_with_sync_full_every_committed_batch_is_durable_when_acknowledged(tmp_path, monkeypatch):
    db = tmp_path / "c.db"
    store = Store(db, "full")
    monkeypatch.setattr(Checkpointer, "_sync_wal", _failing_sync)   # the COMMIT's own fsync is enough
    try:
        key = store.enroll("node-a")
        acks = [store.ingest("node-a", sign(key, b), b) for b in chain(3)]
        assert [(a.stored_seq, a.durable_seq) for a in acks] == [(0, 0), (1, 1), (2, 2)]
        assert acks[-1].body()["durable_seq"] == 2
    finally:
        store.close()
