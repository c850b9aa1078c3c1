"""Play a recorded trace (``samples.parquet`` + ``manifest.json``) back as a live source.

Each :meth:`ReplaySource.read` returns the readings whose time has come: trace time runs at
``speed`` times the wall clock from the moment the source was made. With ``retime`` every timestamp
is shifted so the trace's first sample lands at that moment; only shifted, never scaled, so the
intervals (and every rate derived from them) stay as recorded, and at ``speed > 1`` the timestamps
simply run ahead of the wall clock. With ``loop`` the trace repeats; cumulative counters keep
growing across the seam (each pass adds what the trace added), so the repeat reads as more of the
same run, not as a counter reset.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from ..traces.io import read_samples
from ..traces.schema import COUNTERS, METRIC_NAMES
from .base import Reading, SourceError

_COUNTER_NAMES = tuple(m.name for m in COUNTERS)


def readings_from_table(table: pa.Table) -> list[Reading]:
    """A trace table's rows back as raw Readings (schema metrics only; derived rates dropped)."""
    cols = table.select([c for c in ("device", "kind", "t", *METRIC_NAMES) if c in table.column_names]).to_pydict()
    metrics = [m for m in METRIC_NAMES if m in cols]
    out = []
    for i in range(table.num_rows):
        values = {m: cols[m][i] for m in metrics if cols[m][i] is not None}
        out.append(Reading(device=cols["device"][i], kind=cols["kind"][i], t=float(cols["t"][i]), values=values))
    return out


def read_trace_readings(run_dir: str | Path) -> list[Reading]:
    """Every reading of a recorded run, in time order."""
    return sorted(readings_from_table(read_samples(run_dir)), key=lambda r: (r.t, r.device))


class ReplaySource:
    name = "replay"

    def __init__(self, run_dir: str | Path, speed: float = 1.0, retime: bool = True, loop: bool = False,
                 clock: Callable[[], float] = time.time):
        if not speed > 0:
            raise ValueError("speed must be > 0")
        try:
            self.readings = read_trace_readings(run_dir)
        except (OSError, ValueError, pa.ArrowInvalid) as e:
            raise SourceError(f"cannot replay {run_dir}: {e}") from e
        if not self.readings:
            raise SourceError(f"cannot replay {run_dir}: the trace has no samples")
        self.run_dir = Path(run_dir)
        self.speed, self.retime, self.loop, self.clock = speed, retime, loop, clock
        self.t0 = self.readings[0].t
        t_end = self.readings[-1].t
        gaps = [b.t - a.t for a, b in zip(self.readings, self.readings[1:]) if b.t > a.t]
        # One pass lasts the trace's span plus one typical sample interval, so a loop's seam looks
        # like any other step between samples.
        self.period = (t_end - self.t0) + (sorted(gaps)[len(gaps) // 2] if gaps else 1.0)
        self._growth = self._counter_growth()
        self._devices = sorted({r.device for r in self.readings})
        self.start = clock()
        self._next = 0      # index of the next reading to emit within the current pass
        self._pass = 0

    def _counter_growth(self) -> dict[tuple[str, str], float]:
        """Per (device, counter): last minus first value over one pass (what each loop adds)."""
        first: dict[tuple[str, str], float] = {}
        last: dict[tuple[str, str], float] = {}
        for r in self.readings:
            for m in _COUNTER_NAMES:
                if m in r.values:
                    first.setdefault((r.device, m), r.values[m])
                    last[(r.device, m)] = r.values[m]
        return {k: last[k] - first[k] for k in first}

    @property
    def done(self) -> bool:
        return not self.loop and self._next >= len(self.readings)

    def devices(self) -> list[str]:
        return list(self._devices)

    def read(self) -> list[Reading]:
        trace_now = self.t0 + (self.clock() - self.start) * self.speed
        out: list[Reading] = []
        while not self.done:
            if self._next >= len(self.readings):  # loop: next pass
                self._pass += 1
                self._next = 0
            r = self.readings[self._next]
            t = r.t + self._pass * self.period
            if t > trace_now:
                break
            out.append(self._emit(r, t))
            self._next += 1
        return out

    def _emit(self, r: Reading, t: float) -> Reading:
        values = dict(r.values)
        if self._pass:
            for m in _COUNTER_NAMES:
                if m in values:
                    values[m] = values[m] + self._pass * self._growth.get((r.device, m), 0)
        if self.retime:
            t = t - self.t0 + self.start
        return Reading(device=r.device, kind=r.kind, t=t, values=values)

    def close(self) -> None:
        pass
