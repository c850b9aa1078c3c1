"""Network byte counters from sysfs: Ethernet-style interfaces and InfiniBand / RoCE ports.

* ``<root>/class/net/<if>/statistics/{tx,rx}_bytes``: bytes, 64-bit on current kernels.
* ``<root>/class/infiniband/<hca>/ports/<port>/counters/port_{xmit,rcv}_data``: the IB spec counts
  these in units of 4 octets (lanes), so bytes = value x 4. Some older HCAs keep them 32-bit and
  saturating; the extended (64-bit) counters are what modern mlx5 drivers expose under this name.

The sysfs root is a constructor argument (node_exporter's ``--path.sysfs``) so tests read fixture
trees. The host clock at the read is the reading's time (sysfs counters carry no timestamp).

Cost: at 10 Hz, opening, reading and closing every counter file on every tick (and listing the
directories) was most of this source's CPU. The counter files are therefore opened once and
re-read with ``os.pread(fd, 64, 0)``: a sysfs attribute regenerates its text on every read from
offset 0. The directories are listed again every ``rescan_s`` seconds, so an interface that
appears is reported from the next rescan on. One that disappears is dropped at its first failed
read (sysfs answers ENODEV once the device is gone; its folder is then checked) or at the next
rescan, and the directories are listed again at the next read. A file that is missing, unreadable
or holds garbage drops that one metric until the next rescan opens it afresh.
"""

from __future__ import annotations

import fnmatch
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .base import Reading, open_readonly

IB_DATA_UNIT_BYTES = 4
DEFAULT_RESCAN_S = 5.0

_NET_FILES = (("net_tx_bytes", "tx_bytes"), ("net_rx_bytes", "rx_bytes"))
_IB_FILES = (("net_tx_bytes", "port_xmit_data"), ("net_rx_bytes", "port_rcv_data"))


@dataclass(slots=True)
class _Counter:
    metric: str
    path: str
    fd: int | None            # None: could not be opened at the last scan; missing until the next


@dataclass(slots=True)
class _Device:
    device: str
    kind: str
    folder: str               # statistics/ or counters/ folder; its presence means the device exists
    scale: int
    counters: list[_Counter] = field(default_factory=list)


class NetSource:
    """Readings of network interfaces (kind ``net``, device ``eth0``) and IB ports (kind ``ib``,
    device ``mlx5_0:1``). ``include``/``exclude`` are shell patterns matched against device names."""

    name = "net"

    def __init__(self, sysfs_root: str | Path = "/sys", include: Sequence[str] | None = None,
                 exclude: Sequence[str] = ("lo",), clock: Callable[[], float] = time.time,
                 rescan_s: float = DEFAULT_RESCAN_S):
        if not rescan_s >= 0:
            raise ValueError(f"rescan_s must be >= 0, got {rescan_s}")
        self.root = Path(sysfs_root)
        self.include = list(include) if include is not None else None
        self.exclude = list(exclude)
        self.clock = clock
        self.rescan_s = float(rescan_s)
        self._devices: list[_Device] = []
        self._scanned_at: float | None = None    # None: scan on the next read

    def _wanted(self, device: str) -> bool:
        if any(fnmatch.fnmatchcase(device, p) for p in self.exclude):
            return False
        return self.include is None or any(fnmatch.fnmatchcase(device, p) for p in self.include)

    # ---- listing (every rescan_s, not every tick) ---------------------------------------------
    def _list(self) -> list[tuple[str, str, str, int, tuple[tuple[str, str], ...]]]:
        """(device, kind, folder, scale, (metric, file) pairs) of every wanted device present now."""
        out = []
        net = self.root / "class" / "net"
        try:
            names = sorted(p.name for p in net.iterdir())
        except OSError:
            names = []
        for n in names:
            if self._wanted(n):
                out.append((n, "net", str(net / n / "statistics"), 1, _NET_FILES))
        ib = self.root / "class" / "infiniband"
        try:
            hcas = sorted(p.name for p in ib.iterdir())
        except OSError:
            hcas = []
        for hca in hcas:
            try:
                ports = sorted((p.name for p in (ib / hca / "ports").iterdir()), key=lambda s: (len(s), s))
            except OSError:
                continue
            for port in ports:
                dev = f"{hca}:{port}"
                if self._wanted(dev):
                    out.append((dev, "ib", str(ib / hca / "ports" / port / "counters"), IB_DATA_UNIT_BYTES, _IB_FILES))
        return out

    def _rescan(self, now: float) -> None:
        """List the devices again; keep the open files of those still there, open the new ones."""
        old = {c.path: c for d in self._devices for c in d.counters if c.fd is not None}
        devices = []
        for dev, kind, folder, scale, files in self._list():
            d = _Device(dev, kind, folder, scale)
            for metric, fname in files:
                path = os.path.join(folder, fname)
                kept = old.pop(path, None)
                if kept is not None:
                    d.counters.append(kept)
                elif os.path.exists(path):
                    d.counters.append(_Counter(metric, path, open_readonly(path)))
            devices.append(d)
        for c in old.values():     # files of devices that are gone
            os.close(c.fd)
        self._devices = devices
        self._scanned_at = now

    # ---- Source protocol -----------------------------------------------------------------
    def devices(self) -> list[str]:
        self._rescan(self.clock())
        return [d.device for d in self._devices]

    def read(self) -> list[Reading]:
        now = self.clock()
        if self._scanned_at is None or not 0 <= now - self._scanned_at < self.rescan_s:
            self._rescan(now)
        readings = []
        gone = False
        for d in self._devices:
            t = self.clock()
            values = {}
            for c in d.counters:
                if c.fd is None:
                    continue
                try:
                    values[c.metric] = int(os.pread(c.fd, 64, 0)) * d.scale
                except (OSError, ValueError):
                    # Unreadable or garbage: missing until the next rescan opens the file afresh.
                    os.close(c.fd)
                    c.fd = None
                    if not os.path.isdir(d.folder):
                        gone = True
            if values or not d.counters or os.path.isdir(d.folder):
                readings.append(Reading(device=d.device, kind=d.kind, t=t, values=values))
            else:
                gone = True   # the device went away between two scans: not there now
        if gone:
            self._scanned_at = None   # list again at the next read: something else may have come
        return readings

    def close(self) -> None:
        for d in self._devices:
            for c in d.counters:
                if c.fd is not None:
                    os.close(c.fd)
                    c.fd = None
        self._devices = []
        self._scanned_at = None

    def __del__(self) -> None:  # files left open only if close() was never called
        try:
            self.close()
        except Exception:
            pass
