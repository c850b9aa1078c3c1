"""Cyclic GC is off only while a batch is ingested (app.Collector.handle_batch), whatever the outcome."""

from __future__ import annotations

import gc

import pytest
from conftest import gpu_samples

from trainsentry.collector.app import create_app
from trainsentry.wire.batch import GENESIS_PREV, encode_batch, sign


@pytest.fixture
def collector(db, key):
    col = create_app(db).collector
    yield col
    col.close()


def test_gc_is_off_during_ingest_and_back_on_after_acceptance_refusal_and_error(collector, key):
    seen = []
    ingest = collector.store.ingest

    def watching(*a, **k):
        seen.append(gc.isenabled())
        return ingest(*a, **k)

    collector.store.ingest = watching
    body = encode_batch("node-a", 0, GENESIS_PREV, gpu_samples(1000.0), 1000.0, 1.0)
    assert collector.handle_batch("node-a", sign(key, body), body, "127.0.0.1")[0] == 200
    assert gc.isenabled()
    assert collector.handle_batch("node-a", "00" * 32, body, "127.0.0.1")[0] == 401
    assert gc.isenabled() and seen == [False, False]

    def broken(*a, **k):
        raise RuntimeError("disk on fire")

    collector.store.ingest = broken
    with pytest.raises(RuntimeError):
        collector.handle_batch("node-a", sign(key, body), body, "127.0.0.1")
    assert gc.isenabled()


def test_a_caller_that_turned_gc_off_keeps_it_off(collector, key):
    body = encode_batch("node-a", 0, GENESIS_PREV, gpu_samples(1000.0), 1000.0, 1.0)
    gc.disable()
    try:
        assert collector.handle_batch("node-a", sign(key, body), body, None)[0] == 200
        assert not gc.isenabled()
    finally:
        gc.enable()
