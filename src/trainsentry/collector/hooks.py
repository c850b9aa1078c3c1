"""Post-commit hook: live processing (segmentation, detectors) subscribes to committed batches.

``bus.subscribe(callback)`` registers ``callback(event: CommittedBatch)``. Callbacks run on one
dispatcher thread, in commit order per node, *after* the batch is committed and off the request's
critical path: a slow or failing subscriber never delays or fails an acknowledgement. The queue is
bounded; when subscribers fall behind, events are dropped and counted (``dropped``) rather than
growing memory without limit; a subscriber that must see everything can re-read the store
(every committed batch is there, with its seq). Duplicates are not published.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("trainsentry.collector.hooks")


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    node: str
    seq: int
    digest: str
    received_at: float               # server clock at commit
    samples: list[dict]              # wire samples: {"dev", "kind", "t", "m": {metric: value}}
    unmonitored: list[dict]          # intervals this batch revealed (see store.Accepted.gaps)


Subscriber = Callable[[CommittedBatch], None]


class CommitBus:
    def __init__(self, maxsize: int = 10_000):
        self._subscribers: list[Subscriber] = []
        self._queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.delivered = 0
        self.dropped = 0
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
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            if event is None:
                return
            for cb in list(self._subscribers):
                try:
                    cb(event)
                    self.delivered += 1
                except Exception:  # a subscriber's bug must not stop the others or the collector
                    self.errors += 1
                    log.exception("commit subscriber %r failed on %s seq %d", cb, event.node, event.seq)
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
        return {"subscribers": len(self._subscribers), "delivered": self.delivered,
                "dropped": self.dropped, "errors": self.errors, "queued": self._queue.qsize()}
