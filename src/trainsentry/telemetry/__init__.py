"""Telemetry sources: nvml (GPUs), net (sysfs network counters), host (CPU time and energy, host memory),
replay (recorded traces)."""

from __future__ import annotations

from typing import Any

from .base import Reading, Source, SourceError

__all__ = ["Reading", "Source", "SourceError", "open_sources", "SOURCE_KINDS"]

SOURCE_KINDS = ("nvml", "net", "host", "replay:PATH")


def open_sources(spec: list[str], **opts: Any) -> list[Source]:
    """Open sources by name: ``"nvml"``, ``"net"``, ``"host"``, ``"replay:PATH"``.

    ``opts`` go to the constructor of the source they belong to, by prefix: ``nvml_gpus=[0, 1]``,
    ``nvml_gpm=False``, ``nvml_module=fake_pynvml``, ``net_sysfs_root="/host/sys"``,
    ``host_proc_root="/host/proc"``, ``host_sysfs_root="/host/sys"``,
    ``replay_speed=10.0``, ``replay_loop=True``; ``clock=`` goes to every source. An unknown name or
    option is a ValueError naming it; a source that opens fails as a whole, after closing the ones
    already opened.
    """
    from .host import HostSource
    from .net import NetSource
    from .nvml import NvmlSource

    def replay_source(*args: Any, **kw: Any) -> Source:
        # Imported only when asked for: it needs pyarrow (and so numpy), which the agent on a bare node
        # has not got (``trainsentry agent`` with nvml and net failed to start there) and which an agent
        # reading live sources has no use for.
        from .replay import ReplaySource
        return ReplaySource(*args, **kw)

    classes = {"nvml": NvmlSource, "net": NetSource, "host": HostSource, "replay": replay_source}
    by_kind: dict[str, dict[str, Any]] = {k: {} for k in classes}
    common: dict[str, Any] = {}
    for key, value in opts.items():
        kind, _, name = key.partition("_")
        if key == "clock":
            common["clock"] = value
        elif kind in by_kind and name:
            by_kind[kind]["nvml" if (kind, name) == ("nvml", "module") else name] = value
        else:
            raise ValueError(f"unknown source option {key!r} (use nvml_*, net_*, host_*, replay_* or clock)")
    opened: list[Source] = []
    try:
        for item in spec:
            kind, sep, arg = item.partition(":")
            if kind not in classes or (kind == "replay") != bool(sep and arg):
                raise ValueError(f"unknown source {item!r}: expected one of {', '.join(SOURCE_KINDS)}")
            kw = {**common, **by_kind[kind]}
            try:
                src = classes[kind](arg, **kw) if kind == "replay" else classes[kind](**kw)
            except TypeError as e:
                raise ValueError(f"bad options for source {kind!r}: {e}") from e
            opened.append(src)
    except BaseException:
        for s in opened:
            s.close()
        raise
    return opened
