"""Network byte counters from sysfs: Ethernet-style interfaces and InfiniBand / RoCE ports.

* ``<root>/class/net/<if>/statistics/{tx,rx}_bytes``: bytes, 64-bit on current kernels.
* ``<root>/class/infiniband/<hca>/ports/<port>/counters/port_{xmit,rcv}_data``: the IB spec counts
  these in units of 4 octets (lanes), so bytes = value x 4. Some older HCAs keep them 32-bit and
  saturating; the extended (64-bit) counters are what modern mlx5 drivers expose under this name.

The sysfs root is a constructor argument (node_exporter's ``--path.sysfs``) so tests read fixture
trees. Devices are found again on every read: an interface that appears is reported from then on,
one that disappears is dropped; a file that is missing or unreadable drops that one metric.
The host clock at the read is the reading's time (sysfs counters carry no timestamp).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from .base import Reading

IB_DATA_UNIT_BYTES = 4


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class NetSource:
    """Readings of network interfaces (kind ``net``, device ``eth0``) and IB ports (kind ``ib``,
    device ``mlx5_0:1``). ``include``/``exclude`` are shell patterns matched against device names."""

    name = "net"

    def __init__(self, sysfs_root: str | Path = "/sys", include: Sequence[str] | None = None,
                 exclude: Sequence[str] = ("lo",), clock: Callable[[], float] = time.time):
        self.root = Path(sysfs_root)
        self.include = list(include) if include is not None else None
        self.exclude = list(exclude)
        self.clock = clock

    def _wanted(self, device: str) -> bool:
        if any(fnmatch.fnmatchcase(device, p) for p in self.exclude):
            return False
        return self.include is None or any(fnmatch.fnmatchcase(device, p) for p in self.include)

    def _netdevs(self) -> list[tuple[str, Path]]:
        base = self.root / "class" / "net"
        try:
            names = sorted(p.name for p in base.iterdir())
        except OSError:
            return []
        return [(n, base / n / "statistics") for n in names if self._wanted(n)]

    def _ibports(self) -> list[tuple[str, Path]]:
        base = self.root / "class" / "infiniband"
        out = []
        try:
            hcas = sorted(p.name for p in base.iterdir())
        except OSError:
            return []
        for hca in hcas:
            try:
                ports = sorted((p.name for p in (base / hca / "ports").iterdir()), key=lambda s: (len(s), s))
            except OSError:
                continue
            for port in ports:
                dev = f"{hca}:{port}"
                if self._wanted(dev):
                    out.append((dev, base / hca / "ports" / port / "counters"))
        return out

    def devices(self) -> list[str]:
        return [d for d, _ in self._netdevs()] + [d for d, _ in self._ibports()]

    def read(self) -> list[Reading]:
        readings = []
        for dev, stats in self._netdevs():
            t = self.clock()
            values = {}
            for metric, fname in (("net_tx_bytes", "tx_bytes"), ("net_rx_bytes", "rx_bytes")):
                v = _read_int(stats / fname)
                if v is not None:
                    values[metric] = v
            if values or stats.exists():  # gone between listing and reading: just not there now
                readings.append(Reading(device=dev, kind="net", t=t, values=values))
        for dev, counters in self._ibports():
            t = self.clock()
            values = {}
            for metric, fname in (("net_tx_bytes", "port_xmit_data"), ("net_rx_bytes", "port_rcv_data")):
                v = _read_int(counters / fname)
                if v is not None:
                    values[metric] = v * IB_DATA_UNIT_BYTES
            if values or counters.exists():
                readings.append(Reading(device=dev, kind="ib", t=t, values=values))
        return readings

    def close(self) -> None:
        pass
