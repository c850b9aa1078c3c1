"""The sampling loop: read every source on a fixed monotonic schedule, group readings into batches.

Tick ``k`` is due at ``t0 + k / hz`` on the monotonic clock, so a slow read delays one tick but
never shifts the ones after it (no drift). A tick that is already past when the loop gets to it is
skipped and counted in ``missed_ticks`` rather than read late in a burst: a burst would put several
readings a few microseconds apart and make derived rates noisy. Batches close on tick-count
boundaries (``round(batch_s * hz)`` ticks), so with no missed ticks every batch holds the same
number of readings per device.

A value that is not a finite number (NaN or infinity: GPM metrics over too short an interval read
NaN on the H200s) is dropped where it is read, counted in ``dropped_values`` and logged once per
metric: the wire format and the store hold finite numbers only, and a missing metric is missing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..telemetry.base import Reading

log = logging.getLogger(__name__)

# A source signals "no more data" (a replayed trace that has ended) by raising one of these from
# read() or by exposing a true ``done`` (ReplaySource) or ``exhausted`` attribute.
_END_OF_SOURCE = (StopIteration, EOFError)
_SLEEP_MAX_S = 0.25   # waits up to this long sleep; longer ones wait on the stop event


@dataclass
class SamplerStats:
    ticks: int = 0
    missed_ticks: int = 0
    readings: int = 0
    batches: int = 0
    read_errors: int = 0
    dropped_values: int = 0   # non-finite values dropped (see the module docstring)


class Sampler:
    """Reads ``sources`` at ``hz``; hands each batch of readings to ``on_batch(readings, interval_s)``.

    ``on_tick(readings)`` (optional) sees every tick's readings as they are taken (the Prometheus
    exporter keeps the latest). ``run()`` blocks until ``stop()``, ``duration_s`` or every source
    is exhausted, then hands over the last, partial batch so nothing read is left behind.
    """

    def __init__(self, sources: Sequence, hz: float = 10.0, batch_s: float = 1.0,
                 on_batch: Callable[[list[Reading], float], None] | None = None,
                 on_tick: Callable[[list[Reading]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        if not hz > 0 or hz > 1000:
            raise ValueError(f"hz must be in (0, 1000], got {hz}")
        if not batch_s > 0 or batch_s > 3600:
            raise ValueError(f"batch_s must be in (0, 3600], got {batch_s}")
        if not sources:
            raise ValueError("at least one source is needed")
        self.sources = list(sources)
        self.hz = float(hz)
        self.batch_s = float(batch_s)
        self.ticks_per_batch = max(1, round(batch_s * hz))
        self.on_batch = on_batch
        self.on_tick = on_tick
        self.clock = clock
        self.stats = SamplerStats()
        self._stop = threading.Event()
        self._finished: set[int] = set()
        self._error_logged: set[int] = set()
        self._nonfinite_logged: set[str] = set()

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _read_all(self) -> list[Reading]:
        out: list[Reading] = []
        for i, src in enumerate(self.sources):
            if i in self._finished:
                continue
            try:
                out.extend(src.read())
            except _END_OF_SOURCE:
                self._finished.add(i)
                continue
            except Exception as e:  # one flaky source must not stop the others
                self.stats.read_errors += 1
                if i not in self._error_logged:  # once per source, not ten times a second
                    log.error("source %s failed to read (%s: %s); will keep trying",
                              getattr(src, "name", i), type(e).__name__, e)
                    self._error_logged.add(i)
                continue
            if getattr(src, "done", False) or getattr(src, "exhausted", False):
                self._finished.add(i)
        isfinite = math.isfinite
        for r in out:
            # _drop_nonfinite's first test written out: every reading, every tick
            try:
                if isfinite(sum(r.values.values())):
                    continue
            except (TypeError, OverflowError):
                pass
            self._drop_nonfinite(r)
        return out

    def _drop_nonfinite(self, r: Reading) -> None:
        try:
            # Every tick, every reading: one C-level sum instead of a Python loop over the values. A
            # NaN or an infinity makes the sum non-finite, so a finite sum means nothing to drop; a
            # non-finite one (or an overflow, or a value that is not a number) takes the exact
            # look below, which alone decides what is dropped.
            if math.isfinite(sum(r.values.values())):
                return
        except (TypeError, OverflowError):
            pass
        bad = [k for k, v in r.values.items() if isinstance(v, float) and not math.isfinite(v)]
        for k in bad:
            if k not in self._nonfinite_logged:
                log.warning("%s read %s = %r: not a finite number, dropped (logged once per metric)",
                            r.device, k, r.values[k])
                self._nonfinite_logged.add(k)
            del r.values[k]
        self.stats.dropped_values += len(bad)

    def _all_finished(self) -> bool:
        return len(self._finished) == len(self.sources)

    def run(self, duration_s: float | None = None) -> SamplerStats:
        period = 1.0 / self.hz
        t0 = self.clock()
        end = None if duration_s is None else t0 + duration_s
        pending: list[Reading] = []
        k = 0                      # index of the tick being taken
        batch_index = 0
        try:
            while not self._stop.is_set():
                readings = self._read_all()
                self.stats.ticks += 1
                self.stats.readings += len(readings)
                pending.extend(readings)
                if self.on_tick is not None and readings:
                    self.on_tick(readings)
                if self._all_finished():
                    break
                now = self.clock()
                nxt = k + 1
                due = t0 + nxt * period
                if now > due:  # overran: skip the ticks already past instead of bursting
                    late = int((now - t0) / period) + 1
                    self.stats.missed_ticks += late - nxt
                    nxt = late
                    due = t0 + nxt * period
                if nxt // self.ticks_per_batch != batch_index:
                    batch_index = nxt // self.ticks_per_batch
                    self._emit(pending)
                    pending = []
                if end is not None and due >= end:
                    break
                k = nxt
                delay = due - self.clock()
                if delay > _SLEEP_MAX_S:
                    if self._stop.wait(delay):
                        break
                elif delay > 0:
                    # A short wait sleeps: Event.wait costs more CPU than a sleep per tick (it
                    # allocates and tears down a waiter lock each time), and stop() is still seen
                    # within one tick.
                    time.sleep(delay)
                    if self._stop.is_set():
                        break
        finally:
            self._emit(pending)
        return self.stats

    def _emit(self, readings: list[Reading]) -> None:
        if not readings:
            return
        self.stats.batches += 1
        if self.on_batch is not None:
            self.on_batch(readings, self.batch_s)
