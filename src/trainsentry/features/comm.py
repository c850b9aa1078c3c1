"""Communication features of one window: what the bytes each GPU (or interface) moves look like.

The physics they encode (see docs/detector.md):
* gradient exchange (all-reduce, reduce-scatter + all-gather) is symmetric — every GPU sends what
  it receives — and simultaneous on all GPUs, because a collective finishes only when all take part;
* it repeats at the optimizer-step rate, so the byte stream is periodic and locked to the
  compute cycle visible in power and SM activity;
* inference traffic is one-way (prefill → decode hand-off, pipeline forward), tiny and continuous
  (tensor-parallel decode) or absent (independent replicas).

What separates them at the 10 Hz grid, per device and window (docs/detector.md, "Hardened features"):
* ``oneway_bins`` — byte-weighted |TX − RX| / (TX + RX) of the active bins: 0 for a collective (every
  bin carries both directions), 1 for a hand-off. With the window's ``sym`` it tells a *fixed* one-way
  stream (disaggregated prefill → decode, pipeline forward: low ``sym``, high ``oneway_bins``) from
  one whose direction alternates (pipeline training: activations forward, gradients back: high
  ``sym``, high ``oneway_bins``); ``dir_flips`` counts those reversals between one-way bursts;
* ``steady`` — 1 − the coefficient of variation of the active bins' bytes around their linear
  trend over the window (clipped to [0, 1]):
  identical training steps shorter than a bin give near-identical bytes per bin, while a
  server's traffic follows its request mix (prefills, batch changes);
* ``log_bytes_per_J`` counts only the bytes above the link's idle floor, so a link that carries
  nothing but driver chatter (PCIe) does not turn into an inverse power reading.
"""

from __future__ import annotations

import math

import numpy as np

from . import signal as S

# Below these rates a link counts as idle (B/s): NVLink counters stay flat at idle; PCIe carries a
# few MiB/s of driver chatter; an interface carries ssh and monitoring.
ACTIVE_FLOOR_BPS = {"nvlink": 1e6, "pcie": 50e6, "net": 1e6}


def _bytes(tx: np.ndarray, rx: np.ndarray) -> np.ndarray:
    return S.fill(tx) + S.fill(rx)


def link_features(tx: np.ndarray, rx: np.ndarray, dt_s: float, link: str,
                  power_w: np.ndarray | None = None, sm_pct: np.ndarray | None = None,
                  energy_j: float | None = None) -> dict[str, float]:
    """Features of one device's TX/RX byte-rate series (B/s per bin) on one link type."""
    nan = float("nan")
    f: dict[str, float] = {}
    ftx, frx = S.fill(tx), S.fill(rx)
    tot = ftx + frx   # _bytes(tx, rx), with the filled series kept for the shape features below
    if not np.isfinite(tot).any():
        return f
    tx_b, rx_b = float(np.nansum(tx) * dt_s), float(np.nansum(rx) * dt_s)
    duration = tot.size * dt_s
    rate = (tx_b + rx_b) / 2 / duration
    floor = ACTIVE_FLOOR_BPS[link]
    f["Bps"] = rate
    f["log_Bps"] = math.log10(rate + 1.0)
    big = max(tx_b, rx_b)
    # Symmetry of the window's totals: 1 when each side sends what it receives, 0 one-way.
    f["sym"] = min(tx_b, rx_b) / big if big > floor * duration else nan
    thr = max(floor, 0.1 * float(np.nanpercentile(tot, 95)))
    active = tot > thr
    f["duty"] = float(active.mean())
    both = active & (ftx > 0.25 * thr) & (frx > 0.25 * thr)
    f["sym_bins"] = float(both.sum() / active.sum()) if active.any() else nan
    if active.any() and rate > floor:   # the shape of a link's traffic, not of its idle chatter
        d, s_ = (ftx - frx)[active], tot[active]
        f["oneway_bins"] = float(np.abs(d).sum() / s_.sum()) if s_.sum() > 0 else nan
        # direction of each clearly one-way active bin (|TX - RX| > half the bin's bytes), in time order
        sgn = np.sign(d[np.abs(d) > 0.5 * s_])
        f["dir_flips"] = float(np.count_nonzero(np.diff(sgn))) / max(1, sgn.size - 1) if sgn.size > 1 else 0.0
        # bin-to-bin variation around the window's trend (a workload ramping up or slowing down
        # drifts; identical steps do not jitter)
        a, ta = tot[active], np.flatnonzero(active).astype(np.float64)
        if a.size > 2 and a.mean() > 0:
            resid = a - np.polyval(np.polyfit(ta, a, 1), ta) if np.ptp(ta) > 0 else a - a.mean()
            f["steady"] = float(np.clip(1.0 - resid.std() / a.mean(), 0.0, 1.0))
        else:
            f["steady"] = nan
    else:
        f.update(oneway_bins=nan, dir_flips=0.0, steady=nan)
    bursts = S.runs(active)
    f["burst_rate_hz"] = len(bursts) / duration
    if bursts:
        sizes = np.array([tot[a:b].sum() * dt_s for a, b in bursts])
        f["burst_log_bytes_med"] = math.log10(float(np.median(sizes)) + 1.0)
        f["burst_cv"] = float(sizes.std() / sizes.mean()) if len(sizes) > 1 and sizes.mean() > 0 else 0.0
        f["burst_len_s_med"] = float(np.median([(b - a) * dt_s for a, b in bursts]))
    else:
        f.update(burst_log_bytes_med=0.0, burst_cv=nan, burst_len_s_med=0.0)
    m = tot.mean()
    f["cv"] = float(tot.std() / m) if m > floor else nan
    if rate > floor:
        f["acf_peak"], f["period_s"] = S.acf_peak(tot, dt_s)
        f["spec_peak"], f["spec_hz"] = S.spectral_peak(tot, dt_s)
        period = f["period_s"] if np.isfinite(f["period_s"]) else duration
        f["log_bytes_per_period"] = math.log10(2 * rate * period + 1.0)
        lag = max(1, int(round(1.0 / dt_s)))
        f["power_lock"] = S.max_lagged_corr(tot, power_w, lag) if power_w is not None else nan
        f["sm_lock"] = S.max_lagged_corr(tot, sm_pct, lag) if sm_pct is not None else nan
    else:
        # No traffic to be periodic: zero evidence rather than missing, so rules and trees agree.
        f.update(acf_peak=0.0, period_s=nan, spec_peak=0.0, spec_hz=nan, log_bytes_per_period=0.0,
                 power_lock=0.0, sm_lock=0.0)
    if energy_j is not None and energy_j > 0:
        # workload bytes only: what the link moves above its idle floor (2 directions)
        above = max(0.0, tx_b + rx_b - 2 * floor * duration)
        f["log_bytes_per_J"] = math.log10(above / energy_j + 1.0)
    return f


def cross_device_features(series: dict[str, np.ndarray], link: str) -> dict[str, float]:
    """How bursts line up across devices: correlation and co-activity of their byte series."""
    f: dict[str, float] = {}
    devs = sorted(series)
    if len(devs) < 2:
        return f
    floor = ACTIVE_FLOOR_BPS[link]
    xs = [S.fill(series[d]) for d in devs]
    cs = [S.corr(xs[i], xs[j]) for i in range(len(xs)) for j in range(i + 1, len(xs))]
    cs = [c for c in cs if np.isfinite(c)]
    f["simult_corr"] = float(np.mean(cs)) if cs else 0.0
    act = np.array([x > max(floor, 0.1 * float(np.nanpercentile(x, 95))) for x in xs])
    anyact = act.any(axis=0)
    f["coactive"] = float(act.all(axis=0).sum() / anyact.sum()) if anyact.any() else 0.0
    vols = np.array([np.nansum(x) for x in xs])
    f["balance"] = float(vols.min() / vols.max()) if vols.max() > 0 else float("nan")
    f["n_active"] = float(sum(v / x.size > floor for v, x in zip(vols, xs)))
    return f
