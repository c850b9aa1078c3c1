"""``--source`` specs -> source objects via :func:`trainsentry.telemetry.open_sources`.

Specs: ``nvml``, ``net``, ``net+lo`` (also the loopback interface, which ``net`` leaves out),
``net:SYSFS_ROOT`` (node_exporter's ``--path.sysfs``: a container that
mounts the host's /sys elsewhere), ``replay:RUN_DIR``. The ``net:ROOT`` form is translated into
the telemetry package's ``net_sysfs_root`` option; everything else is passed through.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_SPECS = ("nvml", "net")


def open_sources(specs: Sequence[str], replay_speed: float = 1.0) -> list:
    from ..telemetry import open_sources as telemetry_open
    specs = list(specs) or list(DEFAULT_SPECS)
    opts: dict = {}
    plain: list[str] = []
    for spec in specs:
        if spec.startswith("net:"):
            opts["net_sysfs_root"] = spec[4:]
            plain.append("net")
        elif spec == "net+lo":
            opts["net_exclude"] = ()  # the loopback interface too (ranks on one machine talk over it)
            plain.append("net")
        else:
            plain.append(spec)
    if any(s.startswith("replay:") for s in plain):
        opts["replay_speed"] = replay_speed
    return telemetry_open(plain, **opts)
