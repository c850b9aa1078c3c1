"""Post-commit hook: live processing (segmentation, detectors) subscribes to committed batches.

``bus.subscribe(callback)`` registers ``callback(event: CommittedBatch)``. Callbacks run on one
dispatcher thread, in commit order per node, *after* the batch is committed and off the request's
critical path: a slow or failing subscriber never delays or fails an acknowledgement. Duplicates
are not published.

The queue is bounded twice: 10,000 events (``TRAINSENTRY_BUS_QUEUE``) and 500,000 samples in the
queued events together (``TRAINSENTRY_BUS_SAMPLES``), so its memory does not grow with the size of
the batches nodes send (one event larger than the bound alone is still queued when the queue is
empty). When subscribers fall behind and either
bound is reached, an event is not queued: it is counted (``dropped``) and its node is
remembered with the highest seq dropped; once the dispatcher has handed on the event it is busy
with, every subscriber gets one **catch-up notice** per such node: a :class:`CommittedBatch` with
``from_store=True`` and no samples, meaning "this node's batches up to ``seq`` are committed: read
them from the store". The store is the source of truth (every committed batch is there, with its
seq), so memory stays bounded whatever a node sends and nothing is lost to a subscriber that reads
back what it was not handed (the live processor does: :meth:`.live.LiveProcessor.catch_up`).
:meth:`CommitBus.resync` posts the same notice on purpose (the live processor's backlog at start).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("trainsentry.collector.hooks")

QUEUE_ENV = "TRAINSENTRY_BUS_QUEUE"     # events queued at most (default 10,000); tests force overflows
DEFAULT_QUEUE = 10_000
SAMPLES_ENV = "TRAINSENTRY_BUS_SAMPLES"  # samples in the queued events together, at most (default 500,000)
DEFAULT_SAMPLES = 500_000
_WAKE = object()                         # wakes the dispatcher for catch-up notices


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    node: str
    seq: int
    digest: str
    received_at: float               # server clock at commit
    samples: list[dict]              # wire samples: {"dev", "kind", "t", "m": {metric: value}}
    unmonitored: list[dict]          # intervals this batch revealed (see store.Accepted.gaps)
    from_store: bool = False         # a catch-up notice: batches up to seq were not handed on, read them back


Subscriber = Callable[[CommittedBatch], None]


class CommitBus:
    def __init__(self, maxsize: int | None = None, max_samples: int | None = None):
        if maxsize is None:
            maxsize = int(os.environ.get(QUEUE_ENV, DEFAULT_QUEUE))
        if max_samples is None:
            max_samples = int(os.environ.get(SAMPLES_ENV, DEFAULT_SAMPLES))
        if maxsize < 1 or max_samples < 1:
            raise ValueError("the commit bus needs room for at least one event and one sample")
        self.maxsize, self.max_samples = maxsize, max_samples
        self._queued_samples = 0   # samples in the events queued now (guarded by _lock)
        self._subscribers: list[Subscriber] = []
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._behind: dict[str, int] = {}   # node -> highest seq not handed on (catch-up notice pending)
        self.delivered = 0
        self.dropped = 0
        self.notices = 0
        self.errors = 0

    def subscribe(self, callback: Subscriber) -> None:
        with self._lock:
            self._subscribers.append(callback)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="trainsentry-commit-bus", daemon=True)
                self._thread.start()

    def publish(self, event: CommittedBatch) -> None:
        if not self._subscribers:
            return  # nothing listens: no queueing cost on the ingest path
        n = len(event.samples)
        with self._lock:
            if not (self._queued_samples and self._queued_samples + n > self.max_samples):
                try:
                    self._queue.put_nowait(event)
                    self._queued_samples += n
                    return
                except queue.Full:
                    pass
            # Not queued, not forgotten: the node gets a catch-up notice once the dispatcher is free.
            # Marked under the lock the dispatcher reads _behind with, then the dispatcher is woken:
            # with few events queued (the sample bound) it may otherwise have handed them all and be
            # waiting, and the notice would wait for the next event (a node's last batch, for good).
            self.dropped += 1
            if event.seq > self._behind.get(event.node, -1):
                self._behind[event.node] = event.seq
        try:
            self._queue.put_nowait(_WAKE)
        except queue.Full:
            pass  # full of events: the dispatcher looks at the notices after each of them

    def resync(self, node: str, seq: int) -> None:
        """Send subscribers a catch-up notice for ``node`` up to ``seq`` (batches already committed)."""
        self._mark(node, seq)
        try:
            self._queue.put_nowait(_WAKE)
        except queue.Full:
            pass  # the dispatcher is busy with queued events and looks at the notices after each

    def _mark(self, node: str, seq: int) -> None:
        with self._lock:
            if seq > self._behind.get(node, -1):
                self._behind[node] = seq

    def _hand(self, event: CommittedBatch) -> None:
        for cb in list(self._subscribers):
            try:
                cb(event)
                self.delivered += 1
            except Exception:  # a subscriber's bug must not stop the others or the collector
                self.errors += 1
                log.exception("commit subscriber %r failed on %s seq %d", cb, event.node, event.seq)

    def _notify_behind(self) -> None:
        while True:
            with self._lock:
                if not self._behind:
                    return
                node, seq = self._behind.popitem()
            self.notices += 1
            self._hand(CommittedBatch(node, seq, "", time.time(), [], [], from_store=True))

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            if isinstance(event, CommittedBatch):
                with self._lock:
                    self._queued_samples -= len(event.samples)
            try:
                if event is not _WAKE:
                    self._hand(event)
                self._notify_behind()
            finally:
                self._queue.task_done()

    def drain(self, timeout_s: float = 5.0) -> bool:
        """Wait until every queued event was handed to the subscribers (tests, orderly shutdown)."""
        if self._thread is None:
            return True
        done = threading.Event()
        threading.Thread(target=lambda: (self._queue.join(), done.set()), daemon=True).start()
        return done.wait(timeout_s)

    def close(self) -> None:
        if self._thread is not None:
            self.drain()
            self._queue.put(None)
            self._thread.join(timeout=5.0)
            self._thread = None

    def stats(self) -> dict:
        return {"subscribers": len(self._subscribers), "maxsize": self.maxsize, "max_samples": self.max_samples,
                "delivered": self.delivered, "dropped": self.dropped, "catch_up_notices": self.notices,
                "errors": self.errors, "queued": self._queue.qsize(), "queued_samples": self._queued_samples}
