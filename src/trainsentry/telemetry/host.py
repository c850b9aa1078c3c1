"""The host beside the GPUs: CPU time, CPU package energy and memory in use, from procfs and sysfs.

Why: a GPU's PCIe traffic alone does not tell an optimizer step run on the host (ZeRO-Offload:
gradients out, AdamW on the CPU, weights back) from a KV cache kept in host memory or a streaming
service (docs/lab.md, results/offload-gate.json). An optimizer on the host spends CPU time and
package energy in proportion to the parameters it updates; a DMA copy spends neither. This source
reports what an inspector can read on the node without looking inside any process.

One device, ``host`` (kind ``host``), with:

* ``cpu_user_ms``, ``cpu_system_ms``, ``cpu_idle_ms``: the first line of ``<proc>/stat``, summed over
  all CPUs, in milliseconds (user = user + nice; system = system + irq + softirq; idle = idle +
  iowait; steal and guest time are left out, guest being inside user already). The kernel counts in
  ``USER_HZ`` ticks (``os.sysconf("SC_CLK_TCK")``, 100 on Linux); the conversion is from the
  cumulative tick count, so it never accumulates rounding. Their rates are busy *cores*
  (seconds per second), so user + system + idle is the number of online CPUs less their steal time.
* ``cpu_energy_uj``: RAPL package energy, summed over the ``package-N`` zones under
  ``<sys>/class/powercap`` (``intel-rapl:N``; AMD's driver uses the same names; the ``psys``
  platform zone, which contains the packages, is left out). RAPL counters wrap at each zone's
  ``max_energy_range_uj``, not at a power of two, so the source unwraps them itself: the value is
  the energy counted *since the source opened* (0 at the first reading), which after an agent
  restart reads as a counter reset and is handled as one (:mod:`trainsentry.traces.rates`). A
  decrease from above half the range is a wrap (counted to within one RAPL energy unit, at most
  61 uJ), one from below it a reset of the zone (its new value is the increment), the rule
  :mod:`trainsentry.traces.rates` uses. A wrap is seen as long as readings come more often than a
  full range (hundreds of seconds at any package power). A tick in which a package zone cannot be
  read reports no energy (a sum over some packages would read as a fall in power), and the energy
  of the ticks until that zone reads again is not counted: the rate across such a gap under-reads. ``energy_uj`` is readable only by root on kernels since 5.10 (CVE-2020-8694):
  an agent without the right reports no CPU energy, never zero.
* ``host_mem_used_bytes``: ``MemTotal - MemAvailable`` from ``<proc>/meminfo``.

The proc and sys roots are constructor arguments (``--path.procfs`` / ``--path.sysfs`` of
node_exporter) so tests read fixture trees. Files are opened once and re-read with ``pread`` at
offset 0 (procfs and sysfs regenerate the text on each read from the start); a file that fails is
dropped until ``rescan_s`` later, when it is opened afresh. The host clock at the read is the time.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .base import Reading, open_readonly

DEFAULT_RESCAN_S = 30.0
_STAT_BYTES = 512         # the aggregate "cpu" line comes first and is far shorter than this
_MEMINFO_BYTES = 4096     # MemTotal and MemAvailable are among the first lines
_ZONE_RE = re.compile(r"^intel-rapl:\d+$")


@dataclass(slots=True)
class _Zone:
    name: str
    path: str
    fd: int | None
    range_uj: int | None      # max_energy_range_uj; None: unknown (a decrease is then a reset)
    last: int | None = None   # last raw reading


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def parse_stat_cpu(text: str, ticks_per_s: int) -> dict[str, int]:
    """The aggregate ``cpu`` line of /proc/stat as cumulative milliseconds (user, system, idle)."""
    line = text.split("\n", 1)[0].split()
    if not line or line[0] != "cpu" or len(line) < 5:
        raise ValueError(f"/proc/stat does not start with the aggregate cpu line: {text[:60]!r}")
    v = [int(x) for x in line[1:9]] + [0] * (8 - len(line[1:9]))
    user, nice, system, idle, iowait, irq, softirq, _steal = v
    ms = lambda ticks: ticks * 1000 // ticks_per_s  # noqa: E731
    return {"cpu_user_ms": ms(user + nice), "cpu_system_ms": ms(system + irq + softirq),
            "cpu_idle_ms": ms(idle + iowait)}


def parse_meminfo(text: str) -> int:
    """``MemTotal - MemAvailable`` in bytes from /proc/meminfo's text."""
    kib: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            fields = rest.split()
            if not fields:
                raise ValueError(f"/proc/meminfo: no value in {line!r}")
            kib[key] = int(fields[0])
    if len(kib) < 2:
        raise ValueError("/proc/meminfo has no MemTotal or MemAvailable")
    return (kib["MemTotal"] - kib["MemAvailable"]) * 1024


class HostSource:
    """Readings of the host (kind ``host``, device ``host``): CPU time, RAPL package energy, memory."""

    name = "host"

    def __init__(self, proc_root: str | Path = "/proc", sysfs_root: str | Path = "/sys",
                 clock: Callable[[], float] = time.time, rescan_s: float = DEFAULT_RESCAN_S,
                 ticks_per_s: int | None = None):
        if not rescan_s >= 0:
            raise ValueError(f"rescan_s must be >= 0, got {rescan_s}")
        self.proc = Path(proc_root)
        self.sys = Path(sysfs_root)
        self.clock = clock
        self.rescan_s = float(rescan_s)
        self.ticks_per_s = int(ticks_per_s or os.sysconf("SC_CLK_TCK"))
        if self.ticks_per_s <= 0:
            raise ValueError(f"ticks_per_s must be positive, got {self.ticks_per_s}")
        self._stat: int | None = None
        self._meminfo: int | None = None
        self._zones: list[_Zone] = []
        self._energy_uj = 0          # unwrapped package energy since the first reading
        self._energy_started = False
        self._scanned_at: float | None = None

    # ---- opening (at the first read and every rescan_s) --------------------------------------
    def _zones_present(self) -> list[tuple[str, str]]:
        root = self.sys / "class" / "powercap"
        try:
            names = sorted((p.name for p in root.iterdir() if _ZONE_RE.match(p.name)),
                           key=lambda s: int(s.rsplit(":", 1)[1]))
        except OSError:
            return []
        out = []
        for n in names:
            try:
                label = (root / n / "name").read_text().strip()
            except (OSError, ValueError):   # unreadable, or not text
                continue
            if label.startswith("package"):
                out.append((n, str(root / n)))
        return out

    def _rescan(self, now: float) -> None:
        if self._stat is None:
            self._stat = open_readonly(str(self.proc / "stat"))
        if self._meminfo is None:
            self._meminfo = open_readonly(str(self.proc / "meminfo"))
        old = {z.name: z for z in self._zones}
        zones = []
        for name, folder in self._zones_present():
            z = old.pop(name, None)
            if z is None:
                z = _Zone(name, os.path.join(folder, "energy_uj"), None,
                          _read_int(os.path.join(folder, "max_energy_range_uj")))
            if z.fd is None:
                z.fd = open_readonly(z.path)
            zones.append(z)
        for z in old.values():
            if z.fd is not None:
                os.close(z.fd)
        self._zones = zones
        self._scanned_at = now

    def _pread(self, fd: int, n: int) -> str:
        return os.pread(fd, n, 0).decode("ascii", "replace")

    # ---- Source protocol ---------------------------------------------------------------------
    def devices(self) -> list[str]:
        return ["host"]

    def read(self) -> list[Reading]:
        now = self.clock()
        if self._scanned_at is None or not 0 <= now - self._scanned_at < self.rescan_s:
            self._rescan(now)
        t = self.clock()
        values: dict[str, float | int] = {}
        if self._stat is not None:
            try:
                values.update(parse_stat_cpu(self._pread(self._stat, _STAT_BYTES), self.ticks_per_s))
            except (OSError, ValueError):
                os.close(self._stat)
                self._stat = None
        if self._meminfo is not None:
            try:
                values["host_mem_used_bytes"] = parse_meminfo(self._pread(self._meminfo, _MEMINFO_BYTES))
            except (OSError, ValueError):
                os.close(self._meminfo)
                self._meminfo = None
        energy = self._read_energy()
        if energy is not None:
            values["cpu_energy_uj"] = energy
        # nothing readable (no procfs here): no reading, rather than a row of nothing every tick
        return [Reading(device="host", kind="host", t=t, values=values)] if values else []

    def _read_energy(self) -> int | None:
        """The unwrapped package energy, or None when a package zone could not be read this tick (or
        none is known); a zone that failed restarts from its next reading, the others' increments
        of that tick are not counted either, so the sum never covers only some packages."""
        if not self._zones:
            return None
        raws: list[int | None] = []
        for z in self._zones:
            raw = None
            if z.fd is not None:
                try:
                    raw = int(self._pread(z.fd, 32))
                except (OSError, ValueError):
                    os.close(z.fd)
                    z.fd = None
            raws.append(raw)
        read_all = all(r is not None for r in raws)
        complete = read_all and all(z.last is not None for z in self._zones)
        first = read_all and not self._energy_started     # the counter's 0, at the first full reading
        if complete:
            for z, raw in zip(self._zones, raws):
                d = raw - z.last
                if d < 0:
                    # from above half the range: wrapped at it; else the zone was reset and restarted at 0
                    wrapped = z.range_uj is not None and z.last > z.range_uj // 2
                    d = d + z.range_uj if wrapped else raw
                self._energy_uj += d
        for z, raw in zip(self._zones, raws):
            z.last = raw
        self._energy_started |= read_all
        return self._energy_uj if complete or first else None

    def close(self) -> None:
        for fd in (self._stat, self._meminfo, *(z.fd for z in self._zones)):
            if fd is not None:
                os.close(fd)
        self._stat = self._meminfo = None
        for z in self._zones:
            z.fd = None
        self._zones = []
        self._scanned_at = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
