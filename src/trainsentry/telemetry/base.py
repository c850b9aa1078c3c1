"""One small interface for every telemetry source.

A source returns raw readings: cumulative counters and gauges exactly as the hardware reports them,
each with the timestamp the counter itself reports (or the host clock at the read where the
hardware gives none). Rates are derived later (:mod:`trainsentry.traces.rates`).
Metric names come from :mod:`trainsentry.traces.schema`; a metric the device cannot report is absent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


def open_readonly(path: str) -> int | None:
    """A procfs or sysfs file opened once for ``os.pread`` at offset 0 (the kernel regenerates its text
    on every read from the start); None when it cannot be opened."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


@dataclass(slots=True)
class Reading:
    device: str                     # "gpu0", "eth0", "mlx5_0:1", "host"
    kind: str                       # "gpu" | "net" | "ib" | "host"
    t: float                        # seconds since the epoch
    values: dict[str, float | int] = field(default_factory=dict)

    def to_wire(self) -> dict:
        return {"dev": self.device, "kind": self.kind, "t": self.t, "m": self.values}

    @classmethod
    def from_wire(cls, d: dict) -> "Reading":
        return cls(device=d["dev"], kind=d["kind"], t=float(d["t"]), values=dict(d["m"]))


class SourceError(RuntimeError):
    """A source could not be opened at all (a single missing metric is not an error)."""


@runtime_checkable
class Source(Protocol):
    name: str

    def devices(self) -> list[str]:
        """The devices this source reports, in a stable order."""
        ...

    def read(self) -> list[Reading]:
        """One reading per device; never raises for a metric that is unsupported."""
        ...

    def close(self) -> None:
        ...
