"""The window features of Rahman & Tajdari (arXiv 2606.19262), for the ``rt-baseline`` detector.

Their input: 9 NVML signals of one GPU at 1 Hz (utilisation, memory utilisation, memory used,
power, temperature, SM clock, memory clock, PCIe TX, PCIe RX), 30 s windows every 15 s. No NVLink,
no network. The paper names the feature families and the total (166); where it does not spell out
every member we chose as follows (documented in docs/detector.md):

* 13 statistics (mean, std, min, max, p25, p50, p75, p95, IQR, range, CV, skew, kurtosis) of 11
  series: the 9 signals plus two derived series, PCIe total and power per utilisation point — 143;
* autocorrelation at lags 1, 2, 5, 10, 20 s of utilisation, power and memory used — 15;
* utilisation per SM clock — 1; memory slope — 1; FFT of power: dominant frequency and its share
  of spectral power — 2; memory change over the first 30 s — 1; time to memory plateau — 1;
  duty cycle (share of seconds with utilisation ≥ 5 %, i.e. 1 − idle fraction) — 1;
  utilisation transitions per minute — 1.  Total 166.

On a multi-GPU node their classifier (which reads one GPU) is applied to the busiest GPU of each
window (highest mean power).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from . import signal as S
from .grid import NodeGrid, to_grids

RT_HZ = 1.0
RT_WINDOW_S = 30.0
RT_STRIDE_S = 15.0
SIGNALS = {  # our column -> their signal name (and scale to their unit)
    "gpu_util_pct": ("util", 1.0), "mem_util_pct": ("mem_util", 1.0), "mem_used_bytes": ("mem_used_mib", 2.0 ** -20),
    "power_mw": ("power_w", 1e-3), "temp_c": ("temp_c", 1.0), "sm_clock_mhz": ("sm_clock", 1.0),
    "mem_clock_mhz": ("mem_clock", 1.0), "pcie_tx_kbps": ("pcie_tx", 1.0), "pcie_rx_kbps": ("pcie_rx", 1.0),
}
STATS = ("mean", "std", "min", "max", "p25", "p50", "p75", "p95", "iqr", "range", "cv", "skew", "kurt")
LEVEL_STATS = ("mean", "min", "max", "p25", "p50", "p75", "p95")   # absolute levels, dropped by stage 2
ACF_LAGS = (1, 2, 5, 10, 20)
SERIES = tuple(v[0] for v in SIGNALS.values()) + ("pcie_total", "power_per_util")


def _stats(x: np.ndarray) -> dict[str, float]:
    v = S.finite(x)
    if v.size == 0:
        return {s: math.nan for s in STATS}
    m, sd = float(v.mean()), float(v.std())
    q = np.percentile(v, [25, 50, 75, 95])
    z = (v - m) / sd if sd > 0 else np.zeros_like(v)
    return {"mean": m, "std": sd, "min": float(v.min()), "max": float(v.max()), "p25": float(q[0]),
            "p50": float(q[1]), "p75": float(q[2]), "p95": float(q[3]), "iqr": float(q[2] - q[0]),
            "range": float(v.max() - v.min()), "cv": sd / abs(m) if abs(m) > 1e-9 else 0.0,
            "skew": float((z ** 3).mean()) if sd > 0 else 0.0, "kurt": float((z ** 4).mean() - 3) if sd > 0 else 0.0}


def rt_features(series: dict[str, np.ndarray], dt_s: float = 1.0) -> dict[str, float]:
    """The 166 features of one GPU's 1 Hz window (absent signals give NaN features)."""
    n = next(iter(series.values())).size if series else 0
    nan_series = np.full(n, np.nan)
    sig = {name: series[col] * scale if col in series else nan_series for col, (name, scale) in SIGNALS.items()}
    sig["pcie_total"] = sig["pcie_tx"] + sig["pcie_rx"]
    sig["power_per_util"] = sig["power_w"] / np.maximum(sig["util"], 1.0)
    f: dict[str, float] = {}
    for name in SERIES:
        for stat, v in _stats(sig[name]).items():
            f[f"rt.{name}.{stat}"] = v
    for name in ("util", "power_w", "mem_used_mib"):
        a = S.acf(sig[name], max(ACF_LAGS))
        for lag in ACF_LAGS:
            f[f"rt.{name}.acf{lag}"] = float(a[lag]) if lag < a.size else math.nan
    sm = S.mean(sig["sm_clock"])
    f["rt.util_per_sm_clock"] = S.mean(sig["util"]) / sm if sm > 0 else math.nan
    mem = sig["mem_used_mib"]
    ok = np.isfinite(mem)
    t = np.arange(n) * dt_s
    f["rt.mem_slope"] = float(np.polyfit(t[ok], mem[ok], 1)[0]) if ok.sum() > 2 else math.nan
    share, freq = S.spectral_peak(sig["power_w"], dt_s)
    f["rt.power_fft_freq"], f["rt.power_fft_share"] = freq, share
    first = mem[: int(30 / dt_s)]
    ff = S.finite(first)
    f["rt.mem_change_30s"] = float(ff[-1] - ff[0]) if ff.size > 1 else math.nan
    if ok.any():
        top = float(np.nanmax(mem))
        f["rt.mem_plateau_s"] = float(np.argmax(ok & (mem >= top - 0.02 * abs(top))) * dt_s)
    else:
        f["rt.mem_plateau_s"] = math.nan
    u = sig["util"]
    if np.isfinite(u).any():
        busy = S.fill(u) >= 5.0
        f["rt.duty_cycle"] = float(busy.mean())
        f["rt.util_transitions_per_min"] = float(np.count_nonzero(np.diff(busy.astype(int)))) / (n * dt_s) * 60
    else:
        f["rt.duty_cycle"] = f["rt.util_transitions_per_min"] = math.nan
    return f


RT_FEATURE_NAMES = tuple(rt_features({"power_mw": np.arange(30.0)}).keys())


def rt_windows_of_grid(grid: NodeGrid, window_s: float = RT_WINDOW_S, stride_s: float = RT_STRIDE_S) -> list[dict]:
    n_win, n_stride = int(round(window_s / grid.dt_s)), max(1, int(round(stride_s / grid.dt_s)))
    out = []
    for i0 in range(0, grid.t.size - n_win + 1, n_stride):
        part = grid.slice(i0, i0 + n_win)
        if not part.gpus:
            continue
        busiest = max(part.gpus, key=lambda d: S.mean(part.gpus[d].get("power_mw", np.array([np.nan]))) if
                      np.isfinite(S.mean(part.gpus[d].get("power_mw", np.array([np.nan])))) else -1.0)
        out.append({"node": grid.node, "t_start": float(part.t[0] - grid.dt_s), "t_end": float(part.t[-1]),
                    "rt.gpu": busiest, **rt_features(part.gpus[busiest], grid.dt_s)})
    return out


def rt_sliding_windows(table: pa.Table, window_s: float = RT_WINDOW_S, stride_s: float = RT_STRIDE_S,
                       t0: float | None = None, t1: float | None = None) -> list[dict]:
    """Their windows over every node of ``table``, signals resampled to 1 Hz as their poller read them."""
    out: list[dict] = []
    for grid in to_grids(table, RT_HZ, t0, t1, max_hold_s=2.0).values():
        out.extend(rt_windows_of_grid(grid, window_s, stride_s))
    return out
