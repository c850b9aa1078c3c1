"""Limits a hostile node (or anyone without a key) must not get past."""

from __future__ import annotations

import sqlite3
import time

import pytest

from trainsentry.collector.store import (MAX_DEVICES_PER_NODE, MAX_FUTURE_S, REJECTION_ROWS_PER_MINUTE,
                                         IngestError, Store)
from trainsentry.wire.batch import GENESIS_PREV, digest, encode_batch, sign


def _batch(key, seq, prev, samples, interval_s=1.0):
    body = encode_batch("n1", seq, prev, samples, time.time(), interval_s)
    return body, sign(key, body)


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "c.db")
    yield s
    s.close()


def test_far_future_sample_is_refused_and_stores_nothing(store):
    key = store.enroll("n1")
    now = time.time()
    body, sig = _batch(key, 0, GENESIS_PREV, [{"dev": "gpu0", "kind": "gpu", "t": now + 2 * MAX_FUTURE_S,
                                               "m": {"power_mw": 1}}])
    with pytest.raises(IngestError) as e:
        store.ingest("n1", sig, body)
    assert e.value.code == "bad_time"
    assert store.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 0
    # a normal batch after it is still seq 0
    body, sig = _batch(key, 0, GENESIS_PREV, [{"dev": "gpu0", "kind": "gpu", "t": now, "m": {"power_mw": 1}}])
    assert store.ingest("n1", sig, body).n_samples == 1


def test_a_sample_before_the_epoch_is_refused_and_stores_nothing(store):
    """A negative time is no node's clock; an integer one below -2**63 would also overflow the int64
    columns mid-transaction (an OverflowError, not a clear refusal)."""
    key = store.enroll("n1")
    for t in (-1.0, -(2 ** 63) - 5):
        body, sig = _batch(key, 0, GENESIS_PREV, [{"dev": "gpu0", "kind": "gpu", "t": t, "m": {"power_mw": 1}},
                                                  {"dev": "gpu0", "kind": "gpu", "t": time.time(), "m": {"power_mw": 1}}])
        with pytest.raises(IngestError) as e:
            store.ingest("n1", sig, body)
        assert e.value.code == "bad_time" and "before the epoch" in e.value.detail
    assert store.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 0


def test_silence_is_recorded_even_when_the_node_claims_a_long_interval(store):
    key = store.enroll("n1")
    t = time.time() - 1000
    b0, s0 = _batch(key, 0, GENESIS_PREV, [{"dev": "eth0", "kind": "net", "t": t, "m": {"net_tx_bytes": 1}}],
                    interval_s=3600)
    store.ingest("n1", s0, b0)
    b1, s1 = _batch(key, 1, digest(b0), [{"dev": "eth0", "kind": "net", "t": t + 600, "m": {"net_tx_bytes": 2}}],
                    interval_s=3600)
    acc = store.ingest("n1", s1, b1)
    assert [g["reason"] for g in acc.gaps] == ["silence"]


def test_a_node_cannot_create_devices_without_bound(store):
    key = store.enroll("n1")
    t = time.time()
    many = [{"dev": f"eth{i}", "kind": "net", "t": t, "m": {"net_tx_bytes": 1}} for i in range(MAX_DEVICES_PER_NODE + 1)]
    body, sig = _batch(key, 0, GENESIS_PREV, many)
    with pytest.raises(IngestError) as e:
        store.ingest("n1", sig, body)
    assert e.value.code == "too_many_devices"
    assert store.conn.execute("SELECT COUNT(*) FROM devices").fetchone()[0] == 0


def test_a_restart_does_not_count_a_nodes_devices_twice(tmp_path):
    """The devices a node already has are known to a restarted store: a node with more than half the
    bound once got too_many_devices on every batch after a restart (its devices counted twice)."""
    db = tmp_path / "c.db"
    store = Store(db)
    key = store.enroll("n1")
    t = time.time() - 10
    n = MAX_DEVICES_PER_NODE // 2 + 2
    prev = GENESIS_PREV
    for seq in range(3):
        if seq == 2:   # the collector restarts
            store.close()
            store = Store(db)
        body, sig = _batch(key, seq, prev, [{"dev": f"eth{i}", "kind": "net", "t": t + seq, "m": {"net_tx_bytes": 1}}
                                            for i in range(n)])
        assert store.ingest("n1", sig, body).seq == seq
        prev = digest(body)
    assert store.conn.execute("SELECT COUNT(*) FROM devices").fetchone()[0] == n
    store.close()


def _audit(path) -> list[tuple]:
    c = sqlite3.connect(path)
    try:
        return c.execute("SELECT node, code, n FROM rejections ORDER BY rowid").fetchall()
    finally:
        c.close()


def test_unauthenticated_junk_cannot_grow_the_rejection_log_yet_every_refusal_is_recorded(store):
    store.enroll("n1")
    t = 1_790_000_040.0  # the start of a minute
    err = IngestError(401, "unknown_node", "not enrolled")
    # a flood from one name, and one that puts a new name in every request
    for i in range(5 * REJECTION_ROWS_PER_MINUTE):
        store.record_rejection(err, "nobody", "127.0.0.1", now=t + i * 0.01)
        store.record_rejection(err, f"junk-{i}", "127.0.0.1", now=t + i * 0.01)
    # an enrolled node has its own budget: a flood of junk does not hide its refusals
    bad = IngestError(401, "bad_signature", "HMAC does not match")
    for i in range(3):
        store.record_rejection(bad, "n1", "10.0.0.1", now=t + 1 + i)
    rows = _audit(store.path)
    assert len(rows) == REJECTION_ROWS_PER_MINUTE + 3      # one budget for every name that is not enrolled
    assert store.rejections_not_logged == 9 * REJECTION_ROWS_PER_MINUTE
    # the next minute: the rest of the last one is one row that counts them
    store.record_rejection(err, "nobody", "127.0.0.1", now=t + 60.5)
    rows = _audit(store.path)
    summary = [r for r in rows if r[2] > 1]
    assert summary == [(None, "unknown_node", 9 * REJECTION_ROWS_PER_MINUTE)]
    assert len(rows) == REJECTION_ROWS_PER_MINUTE + 3 + 1 + 1
    total = 2 * 5 * REJECTION_ROWS_PER_MINUTE + 3 + 1
    assert sum(r[2] for r in rows) == total                # every refusal is in the table
    assert store.rejections_unrecorded == 0


def test_counted_refusals_are_written_when_the_store_closes(tmp_path):
    s = Store(tmp_path / "c.db")
    err = IngestError(400, "bad_request", "Content-Length is not a number")
    for _ in range(REJECTION_ROWS_PER_MINUTE + 7):
        s.record_rejection(err, None, "127.0.0.1")
    s.close()
    rows = _audit(tmp_path / "c.db")
    assert sum(n for *_, n in rows) == REJECTION_ROWS_PER_MINUTE + 7 and rows[-1] == (None, "bad_request", 7)
