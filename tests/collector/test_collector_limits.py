"""Limits a hostile node (or anyone without a key) must not get past."""

from __future__ import annotations

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


def test_unauthenticated_junk_cannot_grow_the_rejection_log(store):
    err = IngestError(401, "unknown_node", "not enrolled")
    for _ in range(5 * REJECTION_ROWS_PER_MINUTE):
        store.record_rejection(err, "nobody", "127.0.0.1")
    rows = store.conn.execute("SELECT COUNT(*) FROM rejections").fetchone()[0]
    assert rows == REJECTION_ROWS_PER_MINUTE
    assert store.rejections_not_logged == 4 * REJECTION_ROWS_PER_MINUTE
