"""``--source`` specs -> source objects via :func:`trainsentry.telemetry.open_sources`.

Specs: ``nvml``, ``nvml:KEY=SECONDS[,KEY=SECONDS]`` (how often the costlier NVML groups are read:
``nvlink_period_s`` (0: every tick, the default), ``energy_period_s`` (1), ``gpm_period_s`` (1),
``slow_period_s`` (1); docs/telemetry.md says what each costs), ``net``, ``net+lo`` (also the
loopback interface, which ``net`` leaves out), ``net:SYSFS_ROOT`` (node_exporter's
``--path.sysfs``: a container that mounts the host's /sys elsewhere), ``host`` (CPU time, CPU
package energy and memory in use, from /proc and /sys), ``host:ROOT`` (the same from ROOT/proc and
ROOT/sys: a container that mounts the host's under /host), ``replay:RUN_DIR``. The ``net:ROOT``,
``host:ROOT`` and ``nvml:...`` forms are translated into the telemetry package's options;
everything else is passed through.
"""

from __future__ import annotations

from collections.abc import Sequence

DEFAULT_SPECS = ("nvml", "net", "host")
NVML_PERIODS = ("nvlink_period_s", "energy_period_s", "gpm_period_s", "slow_period_s")


def nvml_periods(arg: str) -> dict[str, float]:
    out = {}
    for item in filter(None, arg.split(",")):
        key, sep, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            sep = ""
        if not sep or key not in NVML_PERIODS or not seconds >= 0:
            raise ValueError(f"bad NVML option {item!r} in 'nvml:{arg}': use KEY=SECONDS (>= 0) with KEY one of "
                             f"{', '.join(NVML_PERIODS)}")
        out[f"nvml_{key}"] = seconds
    return out


def open_sources(specs: Sequence[str], replay_speed: float = 1.0) -> list:
    from ..telemetry import open_sources as telemetry_open
    specs = list(specs) or list(DEFAULT_SPECS)
    opts: dict = {}
    plain: list[str] = []
    for spec in specs:
        if spec.startswith("nvml:"):
            opts.update(nvml_periods(spec[5:]))
            plain.append("nvml")
        elif spec.startswith("net:"):
            opts["net_sysfs_root"] = spec[4:]
            plain.append("net")
        elif spec.startswith("host:"):
            opts["host_proc_root"] = f"{spec[5:].rstrip('/')}/proc"
            opts["host_sysfs_root"] = f"{spec[5:].rstrip('/')}/sys"
            plain.append("host")
        elif spec == "net+lo":
            opts["net_exclude"] = ()  # the loopback interface too (ranks on one machine talk over it)
            plain.append("net")
        else:
            plain.append(spec)
    if any(s.startswith("replay:") for s in plain):
        opts["replay_speed"] = replay_speed
    return telemetry_open(plain, **opts)
