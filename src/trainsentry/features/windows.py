"""The one entry to window features, shared by offline evaluation and the collector's live path.

``sliding_windows(table, window_s, stride_s)`` → one feature dict per node per window;
``window_features(table, start, end)`` → the same for one window. Per-GPU features are computed
first and then summarised over the node's GPUs as ``.max``, ``.mean`` and ``.min`` (a node is as
suspicious as its most training-like GPU, and "every GPU symmetric" is the ``.min``). Feature names
start with ``comm.`` (bytes moved: NVLink, PCIe, network) or ``act.`` (power, utilisation, memory,
GPM), so a detector declares its inputs by prefix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from . import signal as S
from .activity import gpu_activity
from .comm import ACTIVE_FLOOR_BPS, cross_device_features, link_features
from .grid import NodeGrid, to_grids

FEATURE_VERSION = 4
DEFAULT_HZ = 10.0
DEFAULT_WINDOW_S = 8.0
DEFAULT_STRIDE_S = 2.0
MIB = float(2 ** 20)
META_KEYS = ("node", "t_start", "t_end")


def _pcie(series: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """PCIe bytes/s: GPM's interval averages where present, else the driver's 20 ms snapshot."""
    g_tx, g_rx = series.get("gpm_pcie_tx_mibps"), series.get("gpm_pcie_rx_mibps")
    if g_tx is not None and g_rx is not None:
        return g_tx * MIB, g_rx * MIB
    s_tx, s_rx = series.get("pcie_tx_kbps"), series.get("pcie_rx_kbps")
    if s_tx is not None and s_rx is not None:
        return s_tx * 1000.0, s_rx * 1000.0
    return None


def _energy_j(series: dict[str, np.ndarray], dt_s: float) -> float | None:
    if "energy_W" in series and np.isfinite(series["energy_W"]).any():
        return float(np.nansum(series["energy_W"]) * dt_s)
    if "power_mw" in series and np.isfinite(series["power_mw"]).any():
        return S.mean(series["power_mw"]) / 1000.0 * series["power_mw"].size * dt_s
    return None


def _summarise(per_dev: dict[str, dict[str, float]], prefix: str, out: dict[str, float]) -> None:
    keys = sorted({k for f in per_dev.values() for k in f})
    for k in keys:
        vals = np.array([f.get(k, math.nan) for f in per_dev.values()], dtype=np.float64)
        v = vals[np.isfinite(vals)]
        if v.size:
            out[f"{prefix}.{k}.max"] = float(v.max())
            out[f"{prefix}.{k}.mean"] = float(v.mean())
            out[f"{prefix}.{k}.min"] = float(v.min())


def grid_features(grid: NodeGrid) -> dict[str, float]:
    """All features of one node over the whole of ``grid`` (one window)."""
    dt = grid.dt_s
    out: dict[str, float] = {}
    per_link: dict[str, dict[str, dict[str, float]]] = {"nvlink": {}, "pcie": {}}
    link_series: dict[str, dict[str, np.ndarray]] = {"nvlink": {}, "pcie": {}}
    act: dict[str, dict[str, float]] = {}
    for dev, series in grid.gpus.items():
        power = series["power_mw"] / 1000.0 if "power_mw" in series else None
        sm = series.get("gpm_sm_util_pct", series.get("gpu_util_pct"))
        energy = _energy_j(series, dt)
        if "nvlink_tx_Bps" in series and "nvlink_rx_Bps" in series:
            tx, rx = series["nvlink_tx_Bps"], series["nvlink_rx_Bps"]
            per_link["nvlink"][dev] = link_features(tx, rx, dt, "nvlink", power, sm, energy)
            link_series["nvlink"][dev] = S.fill(tx) + S.fill(rx)
        pcie = _pcie(series)
        if pcie is not None:
            per_link["pcie"][dev] = link_features(*pcie, dt, "pcie", power, sm, energy)
            link_series["pcie"][dev] = S.fill(pcie[0]) + S.fill(pcie[1])
        act[dev] = gpu_activity(series, dt)
    for link in ("nvlink", "pcie"):
        _summarise({d: f for d, f in per_link[link].items() if f}, f"comm.{link}", out)
        for k, v in cross_device_features(link_series[link], link).items():
            out[f"comm.{link}.{k}"] = v
    _summarise(act, "act", out)
    # a GPU whose power was not read in this window (all NaN) has no power to compare with idle
    powers = {d: s["power_mw"] for d, s in grid.gpus.items() if "power_mw" in s and S.finite(s["power_mw"]).size}
    if powers:
        idle_margin_w = 40.0
        busy = [S.mean(p) / 1000.0 > S.finite(p).min() / 1000.0 + idle_margin_w or
                S.mean(grid.gpus[d].get("gpu_util_pct", np.array([0.0]))) > 5.0 for d, p in powers.items()]
        out["act.n_gpus_busy"] = float(sum(busy))
        if len(powers) > 1:
            ps = list(powers.values())
            cs = [S.corr(ps[i], ps[j]) for i in range(len(ps)) for j in range(i + 1, len(ps))]
            cs = [c for c in cs if np.isfinite(c)]
            out["act.power_corr"] = float(np.mean(cs)) if cs else 0.0
        out.update(_work_balance(grid, powers, busy, link_series["nvlink"]))
    # Network: summarise the busiest interface (the one that would carry inter-node gradients).
    nets = {d: s for d, s in grid.nets.items() if "net_tx_Bps" in s and "net_rx_Bps" in s}
    if nets:
        busiest = max(nets, key=lambda d: float(np.nansum(nets[d]["net_tx_Bps"]) + np.nansum(nets[d]["net_rx_Bps"])))
        total_power = sum((S.fill(p) / 1000.0 for p in powers.values()), start=np.zeros(grid.t.size)) if powers else None
        energy = sum(e for e in (_energy_j(s, dt) for s in grid.gpus.values()) if e) or None
        for k, v in link_features(nets[busiest]["net_tx_Bps"], nets[busiest]["net_rx_Bps"], dt, "net",
                                  total_power, None, energy).items():
            out[f"comm.net.{k}"] = v
    return out


def _work_balance(grid: NodeGrid, powers: dict[str, np.ndarray], busy: list[bool],
                  nvlink: dict[str, np.ndarray]) -> dict[str, float]:
    """Whether the GPUs of one job do the same work: min / max of their mean power and SM activity.

    Data-parallel replicas (and tensor-parallel shards) run the same kernels on equal shares, so
    their power and SM activity match; disaggregated serving gives GPUs different roles (a prefill
    GPU idles between hand-offs while the decode GPU runs). The job's GPUs are those exchanging
    NVLink bytes above the idle floor; without two of those, the busy GPUs."""
    floor = ACTIVE_FLOOR_BPS["nvlink"]
    members = [d for d, x in nvlink.items() if d in powers and float(np.nanmean(x)) > floor]
    if len(members) < 2:
        members = [d for d, b in zip(powers, busy) if b]
    if len(members) < 2:
        return {}
    out = {}
    p = np.array([S.mean(powers[d]) for d in members])
    if np.all(np.isfinite(p)) and p.max() > 0:
        out["act.power_balance"] = float(p.min() / p.max())
    sm = [S.mean(grid.gpus[d].get("gpm_sm_util_pct", grid.gpus[d].get("gpu_util_pct", np.array([np.nan]))))
          for d in members]
    sm = np.array(sm)
    if np.all(np.isfinite(sm)) and sm.max() > 0:
        out["act.sm_balance"] = float(sm.min() / sm.max())
    return out


def _with_meta(grid: NodeGrid, t_start: float, t_end: float) -> dict[str, float | str]:
    return {"node": grid.node, "t_start": float(t_start), "t_end": float(t_end), **grid_features(grid)}


def window_features(table: pa.Table, start: float, end: float, hz: float = DEFAULT_HZ) -> list[dict]:
    """Features of every node in ``table`` over [start, end] (one dict per node)."""
    if not end > start:
        raise ValueError("window end must follow its start")
    return [_with_meta(g, start, end) for g in to_grids(table, hz, start, end).values() if g.t.size >= 2]


def sliding_windows(table: pa.Table, window_s: float = DEFAULT_WINDOW_S, stride_s: float = DEFAULT_STRIDE_S,
                    hz: float = DEFAULT_HZ, t0: float | None = None, t1: float | None = None) -> list[dict]:
    """Features of consecutive windows (``window_s`` long, every ``stride_s``) for every node."""
    if window_s <= 0 or stride_s <= 0:
        raise ValueError("window and stride must be positive")
    out: list[dict] = []
    for grid in to_grids(table, hz, t0, t1).values():
        out.extend(windows_of_grid(grid, window_s, stride_s))
    return out


def windows_of_grid(grid: NodeGrid, window_s: float, stride_s: float) -> Iterable[dict]:
    n_win, n_stride = int(round(window_s / grid.dt_s)), max(1, int(round(stride_s / grid.dt_s)))
    t_first = grid.t[0] - grid.dt_s if grid.t.size else 0.0
    for i0 in range(0, grid.t.size - n_win + 1, n_stride):
        yield _with_meta(grid.slice(i0, i0 + n_win), t_first + i0 * grid.dt_s, grid.t[i0 + n_win - 1])


def feature_names(rows: list[dict]) -> list[str]:
    return sorted({k for r in rows for k in r if k not in META_KEYS})
