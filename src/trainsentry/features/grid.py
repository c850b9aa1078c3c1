"""Put one node's samples on a uniform time grid, per device, so windows can be cut by index.

Byte and energy rates are re-binned by *integrating* them: the derived rate columns (already
wrap- and reset-corrected by :mod:`trainsentry.traces.rates`) are turned back into a clean
cumulative curve, interpolated at the bin edges and differenced, so every byte lands in exactly
one bin whatever the recording rate. Gauges (power, utilisation, memory, clocks, GPM averages)
are sample-and-hold: each bin takes the last reading at or before its end, which is what a
poller running at the grid rate would have read; a negative reading of a gauge that cannot be
negative (all but temperature) is held as missing. A metric a device never reported stays all-NaN
(absent, never zero).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..traces.schema import GPU_METRICS, HOST_METRICS, NET_METRICS

RATE_COLUMNS = ("nvlink_tx_Bps", "nvlink_rx_Bps", "energy_W", "net_tx_Bps", "net_rx_Bps")
# The host source (kind ``host``): busy cores by mode and CPU package power, re-binned like byte rates;
# host memory in use, held like a gauge.
HOST_RATE_COLUMNS = tuple(m.rate_name for m in HOST_METRICS if m.rate_name)
HOST_GAUGE_COLUMNS = tuple(m.name for m in HOST_METRICS if m.kind != "counter")
GAUGE_COLUMNS = tuple(m.name for m in GPU_METRICS if m.kind != "counter")
# Gauges that cannot be negative (power, utilisation, memory, clocks, byte rates): a negative reading is
# no reading, and is held as missing. The wire takes any |v| < 2**64, so a node can send one; before,
# one negative PCIe rate made every window around it unjudgeable (log of a negative byte rate).
NON_NEGATIVE_GAUGES = tuple(c for c in GAUGE_COLUMNS if c != "temp_c")
# Interfaces that never carry workload traffic between nodes.
IGNORED_NET_DEVICES = ("lo",)


@dataclass
class NodeGrid:
    """One node's devices on a common grid; ``t`` holds bin END times (epoch s)."""

    node: str
    t: np.ndarray
    dt_s: float
    gpus: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    nets: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    host: dict[str, np.ndarray] = field(default_factory=dict)   # the host source's series, if recorded

    def slice(self, i0: int, i1: int) -> "NodeGrid":
        cut = lambda devs: {d: {k: v[i0:i1] for k, v in m.items()} for d, m in devs.items()}  # noqa: E731
        return NodeGrid(self.node, self.t[i0:i1], self.dt_s, cut(self.gpus), cut(self.nets),
                        {k: v[i0:i1] for k, v in self.host.items()})

    def gpu_metric(self, name: str) -> dict[str, np.ndarray]:
        """Per GPU, the metric's series where the GPU reports it at all."""
        return {d: m[name] for d, m in self.gpus.items() if name in m and np.isfinite(m[name]).any()}


def _column(table: pa.Table, name: str) -> np.ndarray:
    col = table.column(name).to_numpy(zero_copy_only=False)
    return np.asarray([np.nan if v is None else v for v in col], dtype=np.float64) if col.dtype == object \
        else col.astype(np.float64)


def _rebin_rate(t: np.ndarray, rate: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean rate per bin from per-sample rates (each rate covers (t[i-1], t[i]])."""
    ok = np.isfinite(rate)
    if not ok.any():
        return np.full(edges.size - 1, np.nan)
    inc = np.zeros_like(rate)
    inc[1:] = np.where(ok[1:], rate[1:] * np.diff(t), 0.0)
    cum = np.cumsum(inc)
    j = int(np.argmax(ok))
    first, last = t[max(j - 1, 0)], t[np.flatnonzero(ok)[-1]]
    c = np.interp(edges, t, cum)
    out = np.diff(c) / np.diff(edges)
    covered = (edges[1:] > first) & (edges[:-1] < last)
    return np.where(covered, out, np.nan)


def _hold(t: np.ndarray, v: np.ndarray, ends: np.ndarray, max_hold_s: float) -> np.ndarray:
    ok = np.isfinite(v)
    if not ok.any():
        return np.full(ends.size, np.nan)
    tt, vv = t[ok], v[ok]
    idx = np.searchsorted(tt, ends, side="right") - 1
    out = np.where(idx >= 0, vv[np.clip(idx, 0, None)], np.nan)
    stale = (idx < 0) | (ends - tt[np.clip(idx, 0, None)] > max_hold_s)
    return np.where(stale, np.nan, out)


def to_grids(table: pa.Table, hz: float = 10.0, t0: float | None = None, t1: float | None = None,
             max_hold_s: float = 2.0) -> dict[str, NodeGrid]:
    """Every node in ``table`` on a grid of ``hz`` bins from t0 (default: first sample) to t1."""
    if table.num_rows == 0:
        return {}
    if hz <= 0:
        raise ValueError("grid rate must be positive")
    nodes = np.asarray(table.column("node").to_pylist())
    devices = np.asarray(table.column("device").to_pylist())
    kinds = np.asarray(table.column("kind").to_pylist())
    t_all = _column(table, "t")
    cols = {c: _column(table, c) for c in RATE_COLUMNS + GAUGE_COLUMNS + HOST_RATE_COLUMNS + HOST_GAUGE_COLUMNS
            if c in table.column_names}
    for c in NON_NEGATIVE_GAUGES + HOST_GAUGE_COLUMNS:
        if c in cols:
            cols[c] = np.where(cols[c] < 0, np.nan, cols[c])
    dt = 1.0 / hz
    grids: dict[str, NodeGrid] = {}
    for node in sorted(set(nodes)):
        on = nodes == node
        lo = float(t_all[on].min()) if t0 is None else float(t0)
        hi = float(t_all[on].max()) if t1 is None else float(t1)
        n_bins = int(np.floor((hi - lo) / dt + 1e-9))
        edges = lo + dt * np.arange(n_bins + 1)
        grid = NodeGrid(node, edges[1:], dt)
        for dev in sorted(set(devices[on])):
            sel = on & (devices == dev)
            order = np.argsort(t_all[sel], kind="stable")
            t = t_all[sel][order]
            kind = kinds[sel][0]
            if kind == "gpu":
                series = {}
                for c in ("nvlink_tx_Bps", "nvlink_rx_Bps", "energy_W"):
                    if c in cols:
                        series[c] = _rebin_rate(t, cols[c][sel][order], edges)
                for c in GAUGE_COLUMNS:
                    if c in cols:
                        series[c] = _hold(t, cols[c][sel][order], edges[1:], max_hold_s)
                grid.gpus[dev] = {k: v for k, v in series.items() if np.isfinite(v).any()}
            elif kind == "host" and dev == "host":      # the wire accepts no other host device
                series = {c: _rebin_rate(t, cols[c][sel][order], edges) for c in HOST_RATE_COLUMNS if c in cols}
                series.update({c: _hold(t, cols[c][sel][order], edges[1:], max_hold_s)
                               for c in HOST_GAUGE_COLUMNS if c in cols})
                grid.host = {k: v for k, v in series.items() if np.isfinite(v).any()}
            elif kind in ("net", "ib") and dev not in IGNORED_NET_DEVICES:
                series = {c: _rebin_rate(t, cols[c][sel][order], edges) for c in ("net_tx_Bps", "net_rx_Bps")
                          if c in cols}
                grid.nets[dev] = {k: v for k, v in series.items() if np.isfinite(v).any()}
        grids[node] = grid
    return grids


__all__ = ["NodeGrid", "to_grids", "RATE_COLUMNS", "GAUGE_COLUMNS", "NON_NEGATIVE_GAUGES", "NET_METRICS",
           "HOST_RATE_COLUMNS", "HOST_GAUGE_COLUMNS"]
