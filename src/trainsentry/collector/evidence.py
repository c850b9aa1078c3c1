"""The detector's evidence, passed through; what this node could not measure, said by the collector.

One source for an explanation: a verdict's detector lines are the detector's own ``explain``
output, in its words and order. The collector neither parses nor rewords them (it knows no
detector's line formats). It changes one thing, the same for every detector and every line: a
quantity the window could not measure is NaN in the detector's numbers, and the token ``nan`` is
shown as ``n/a``, so no dashboard reads "nan".

Why a quantity is missing is something the detector cannot know and the collector can: whether the
node reports GPUs, NVLink, PCIe or energy counters and network interfaces at all, and whether the window
held enough traffic to measure. When a detector line has an ``n/a``, :func:`detector_lines` adds
one line of the collector's own, from the node's samples in the window (:func:`unmeasured`).
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..features.comm import ACTIVE_FLOOR_BPS
from ..features.host import BUSY_SHARE, host_activity, witness_cores
from ..features.windows import MIB

NA = "n/a"
_NAN = re.compile(r"\bnan\b")


def _values(table: pa.Table, column: str) -> np.ndarray:
    """The finite values of ``column`` (empty when the column is absent or all null)."""
    if column not in table.column_names:
        return np.zeros(0)
    v = table.column(column).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)
    return v[np.isfinite(v)]


def _busiest(table: pa.Table, prefix: str) -> float | None:
    """The highest TX+RX rate (B/s) any sample of the table shows on ``prefix`` (nvlink, net); None
    when the table has no such rates."""
    tx, rx = _values(table, f"{prefix}_tx_Bps"), _values(table, f"{prefix}_rx_Bps")
    if tx.size == 0 and rx.size == 0:
        return None
    return float(max(tx.max(initial=0.0), rx.max(initial=0.0)))


def _busiest_pcie(table: pa.Table) -> float | None:
    """The highest PCIe TX or RX rate (B/s) of any sample, from the same sources the PCIe features
    read (GPM's interval averages, else the driver's 20 ms snapshot); None when the table has neither."""
    for unit, tx, rx in ((MIB, "gpm_pcie_tx_mibps", "gpm_pcie_rx_mibps"), (1000.0, "pcie_tx_kbps", "pcie_rx_kbps")):
        t, r = _values(table, tx), _values(table, rx)
        if t.size or r.size:
            return unit * float(max(t.max(initial=0.0), r.max(initial=0.0)))
    return None


def unmeasured(table: pa.Table | None, t0: float, t1: float) -> list[str]:
    """Why NVLink, PCIe, network and energy quantities may be missing from the window ``(t0, t1]`` of
    this node's samples (``table``: the node's buffer with derived rates); only what is missing."""
    if table is None or table.num_rows == 0:
        return ["no samples in this window"]
    kinds = set(table.column("kind").to_pylist())
    t = table.column("t")
    window = table.filter(pc.and_(pc.greater(t, t0), pc.less_equal(t, t1)))
    wkind = window.column("kind")
    out = []
    if "gpu" not in kinds:
        out += ["no NVLink data on this node (it reports no GPUs)", "no PCIe data on this node (it reports no GPUs)",
                "no energy counter on this node (it reports no GPUs)"]
    else:
        gpus = window.filter(pc.equal(wkind, "gpu"))
        nvlink = _busiest(gpus, "nvlink")
        if nvlink is None and _busiest(table, "nvlink") is None:
            out.append("no NVLink data on this node (its GPUs report no NVLink counters)")
        elif nvlink is None or nvlink < ACTIVE_FLOOR_BPS["nvlink"]:
            out.append("too little NVLink traffic in this window to measure it")
        pcie = _busiest_pcie(gpus)
        if pcie is None and _busiest_pcie(table) is None:
            out.append("no PCIe data on this node (its GPUs report no PCIe throughput)")
        elif pcie is None or pcie < ACTIVE_FLOOR_BPS["pcie"]:
            out.append("too little PCIe traffic in this window to measure it")
        if _values(gpus, "energy_W").size == 0:
            out.append("no energy counter on this node's GPUs" if _values(table, "energy_W").size == 0
                       else "no energy counted in this window")
    links = window.filter(pc.and_(pc.equal(wkind, "net"), pc.not_equal(window.column("device"), "lo")))
    if "net" not in kinds:
        out.append("no network interface data on this node")
    elif (_busiest(links, "net") or 0.0) < ACTIVE_FLOOR_BPS["net"]:
        out.append("too little network traffic in this window to measure it")
    return out or ["the window's samples do not give it"]


def detector_lines(lines: list[str], table: pa.Table | None, t0: float, t1: float) -> list[str]:
    """The detector's ``lines`` as it wrote them (``nan`` shown as ``n/a``), then, if one of them has
    an ``n/a``, the collector's line saying what this node could not measure in ``(t0, t1]``."""
    out = [_NAN.sub(NA, line) for line in lines]
    if out != list(lines):
        out.append(f"{NA} above: not measurable in this window: " + "; ".join(unmeasured(table, t0, t1)))
    return out


def host_lines(table: pa.Table | None, t0: float, t1: float) -> list[str]:
    """One line on the host's CPU in ``(t0, t1]`` when the node reports its host (the agent's host
    source): busy cores and whether the host witness (features.host) saw an update-sized load, with
    what that can and cannot mean. Nothing when the node sends no host readings."""
    if table is None or table.num_rows == 0 or "cpu_user_cores" not in table.column_names:
        return []
    t = table.column("t")
    rows = table.filter(pc.and_(pc.and_(pc.greater(t, t0), pc.less_equal(t, t1)),
                                pc.equal(table.column("kind"), "host")))
    if rows.num_rows == 0:
        return []
    f = lambda c: rows.column(c).to_numpy(zero_copy_only=False).astype(np.float64)  # noqa: E731  (nulls -> NaN)
    n_gpus = pc.count_distinct(table.filter(pc.equal(table.column("kind"), "gpu")).column("device")).as_py()
    busy_at = witness_cores(n_gpus)
    act = host_activity(f("cpu_user_cores"), f("cpu_system_cores"), busy_at)
    if act is None:
        return []
    line = (f"host CPU: {act['busy_cores_median']:.1f} cores busy (median), {act['busy_cores_p90']:.1f} at the 90th "
            f"percentile, {busy_at:g} or more in {act['busy_share']:.0%} of the window")
    watts = _values(rows, "cpu_energy_W")
    if watts.size:
        line += f"; CPU packages {float(np.median(watts)):.0f} W"
    if not n_gpus:
        return [line + " (this node reports no GPUs: its work, whatever it is, runs on the host)"]
    if act["witnessed"]:
        return [line + f" (at least {BUSY_SHARE:.0%}: work on the host beside its {n_gpus} GPU(s), as an optimizer run "
                "on the host does, and as a service that post-processes on the host does too)"]
    return [line + f" (under {BUSY_SHARE:.0%}: no host work seen beyond the core or so per GPU a GPU program's "
                   "launching thread keeps busy; an optimizer update on one or two host threads would not show either)"]
