"""Telemetry sources: nvml (GPUs), net (sysfs network counters), replay (recorded traces)."""

from .base import Reading, Source, SourceError

__all__ = ["Reading", "Source", "SourceError"]
