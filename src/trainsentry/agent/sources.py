"""``--source`` specs -> source objects: ``nvml``, ``net``, ``net:SYSFS_ROOT``, ``replay:RUN_DIR``.

Defers to :func:`trainsentry.telemetry.open_sources` when the telemetry package offers it, so the
spec syntax lives in one place; the fallback below maps the same names to the source classes.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..telemetry.base import SourceError

DEFAULT_SPECS = ("nvml", "net")


def open_sources(specs: Sequence[str], replay_speed: float = 1.0) -> list:
    specs = list(specs) or list(DEFAULT_SPECS)
    try:
        from ..telemetry import open_sources as telemetry_open
    except ImportError:
        telemetry_open = None
    if telemetry_open is not None and not any(s.startswith("replay:") for s in specs):
        return list(telemetry_open(specs))
    opened: list = []
    try:
        for spec in specs:
            opened.append(_open_one(spec, replay_speed))
    except BaseException:
        for s in opened:
            s.close()
        raise
    return opened


def _open_one(spec: str, replay_speed: float):
    name, _, arg = spec.partition(":")
    if name == "nvml":
        from ..telemetry.nvml import NvmlSource
        return NvmlSource()
    if name == "net":
        from ..telemetry.net import NetSource
        return NetSource(arg) if arg else NetSource()
    if name == "replay":
        if not arg:
            raise SourceError("replay needs a run directory: --source replay:RUN_DIR")
        from ..telemetry.replay import ReplaySource
        return ReplaySource(arg, speed=replay_speed, retime=True)
    raise SourceError(f"unknown source {spec!r}; use nvml, net[:SYSFS_ROOT] or replay:RUN_DIR")
