"""The commit bus: a full queue drops events but never a node: its subscribers get a catch-up
notice for the highest seq dropped, before drain() returns."""

from __future__ import annotations

import threading

import pytest

from trainsentry.collector.hooks import CommitBus, CommittedBatch


def ev(node: str, seq: int) -> CommittedBatch:
    return CommittedBatch(node, seq, "d", 0.0, [{"t": float(seq)}], [])


def slow_bus() -> tuple[CommitBus, list, threading.Event]:
    """A bus whose one subscriber holds each event until the gate opens, recording what it was handed.
    ``bus.entered`` is set once the dispatcher is inside the subscriber (its bookkeeping for the event
    it took is over by then; an empty queue alone does not say so)."""
    bus = CommitBus()
    seen, gate, bus.entered = [], threading.Event(), threading.Event()

    def slow(e: CommittedBatch) -> None:
        bus.entered.set()
        gate.wait(10)
        seen.append((e.node, e.seq, e.from_store, len(e.samples)))
    bus.subscribe(slow)
    return bus, seen, gate


def test_a_full_queue_drops_events_and_sends_one_catch_up_notice_per_node(monkeypatch):
    monkeypatch.setenv("TRAINSENTRY_BUS_QUEUE", "2")
    bus, seen, gate = slow_bus()
    bus.publish(ev("a", 0))          # taken by the dispatcher, which waits on the gate ...
    assert bus.entered.wait(10)
    for i in range(1, 6):            # ... so the queue (2) fills: a1, a2 queued; a3..a5 dropped
        bus.publish(ev("a", i))
    bus.publish(ev("b", 0))          # dropped too
    assert bus.stats()["dropped"] == 4
    gate.set()
    assert bus.drain(10)
    handed = [s for s in seen if not s[2]]
    notices = sorted(s[:2] for s in seen if s[2])
    assert handed == [("a", 0, False, 1), ("a", 1, False, 1), ("a", 2, False, 1)]
    assert notices == [("a", 5), ("b", 0)]    # read the rest back from the store
    assert bus.stats()["catch_up_notices"] == 2
    bus.resync("c", 7)                        # on purpose (the live processor's backlog at start)
    assert bus.drain(10) and seen[-1] == ("c", 7, True, 0)
    bus.close()


def test_the_queue_size_must_hold_an_event():
    with pytest.raises(ValueError):
        CommitBus(0)


def test_the_queue_is_bounded_by_samples_too(monkeypatch):
    """Few events of huge batches reach the sample bound long before the event bound: the rest are
    dropped (catch-up notice), so a node making its batches large cannot grow the queue's memory."""
    monkeypatch.setenv("TRAINSENTRY_BUS_SAMPLES", "100")
    bus, seen, gate = slow_bus()
    big = lambda seq, n: CommittedBatch("a", seq, "d", 0.0, [{"t": float(seq)}] * n, [])  # noqa: E731
    bus.publish(big(0, 150))         # taken by the dispatcher at once: a lone event over the bound passes
    assert bus.entered.wait(10)
    bus.publish(big(1, 150))         # the queue is empty: queued though over the bound alone
    bus.publish(big(2, 10))          # 150 + 10 > 100: dropped
    assert bus.stats()["queued_samples"] == 150 and bus.stats()["dropped"] == 1
    gate.set()
    assert bus.drain(10)
    assert [s for s in seen if not s[2]] == [("a", 0, False, 150), ("a", 1, False, 150)]
    assert [s[:2] for s in seen if s[2]] == [("a", 2)] and bus.stats()["queued_samples"] == 0
    bus.close()
