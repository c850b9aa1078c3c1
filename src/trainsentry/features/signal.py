"""Small, NaN-tolerant time-series statistics shared by the feature modules."""

from __future__ import annotations

import numpy as np


def finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x[np.isfinite(x)]


def fill(x: np.ndarray) -> np.ndarray:
    """Gaps filled by holding the previous value (leading gaps take the first value)."""
    x = np.asarray(x, dtype=np.float64).copy()
    ok = np.isfinite(x)
    if not ok.any():
        return x
    idx = np.where(ok, np.arange(x.size), 0)
    np.maximum.accumulate(idx, out=idx)
    x = x[idx]
    x[: np.argmax(ok)] = x[np.argmax(ok)]
    return x


def mean(x) -> float:
    f = finite(x)
    return float(f.mean()) if f.size else float("nan")


def acf(x: np.ndarray, max_lag: int) -> np.ndarray:
    """Autocorrelation at lags 0..max_lag (NaN where undefined: constant or too short)."""
    x = fill(x)
    out = np.full(max_lag + 1, np.nan)
    if not np.isfinite(x).all() or x.size < 3:
        return out
    x = x - x.mean()
    var = float(np.dot(x, x))
    if var <= 1e-12 * max(1.0, x.size):
        return out
    for k in range(min(max_lag, x.size - 2) + 1):
        out[k] = float(np.dot(x[: x.size - k], x[k:])) / var
    return out


def acf_peak(x: np.ndarray, dt_s: float, min_lag: int = 2) -> tuple[float, float]:
    """Highest autocorrelation after the first dip below zero (a repeating pattern), and its lag in s.

    Searching only past the first zero crossing skips the trivial peak at small lags that any
    smooth signal has.
    """
    n = np.asarray(x).size
    a = acf(x, max(min_lag, n // 2))
    if not np.isfinite(a[1:]).any():
        return float("nan"), float("nan")
    below = np.flatnonzero(a[1:] < 0)
    start = max(min_lag, int(below[0]) + 1 if below.size else n)
    if start >= a.size:
        return 0.0, float("nan")
    seg = a[start:]
    if not np.isfinite(seg).any():
        return 0.0, float("nan")
    k = int(np.nanargmax(seg))
    return float(max(seg[k], 0.0)), float((start + k) * dt_s)


def spectral_peak(x: np.ndarray, dt_s: float) -> tuple[float, float]:
    """Share of the non-DC spectral power in the strongest frequency (±1 bin), and that frequency."""
    x = fill(x)
    if x.size < 8 or not np.isfinite(x).all():
        return float("nan"), float("nan")
    x = (x - x.mean()) * np.hanning(x.size)
    p = np.abs(np.fft.rfft(x)) ** 2
    p[0] = 0.0
    total = float(p.sum())
    if total <= 0:
        return float("nan"), float("nan")
    k = int(np.argmax(p))
    share = float(p[max(k - 1, 0): k + 2].sum()) / total
    return share, float(k / (x.size * dt_s))


def corr(a: np.ndarray, b: np.ndarray) -> float:
    a, b = fill(a), fill(b)
    if a.size < 3 or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return float("nan")
    sa, sb = a.std(), b.std()
    if sa <= 1e-12 * max(1.0, abs(a.mean())) or sb <= 1e-12 * max(1.0, abs(b.mean())):
        return float("nan")
    return float(np.mean((a - a.mean()) * (b - b.mean())) / (sa * sb))


def max_lagged_corr(a: np.ndarray, b: np.ndarray, max_lag: int) -> float:
    """Largest |correlation| between a and b shifted by up to ±max_lag bins."""
    best = float("nan")
    for k in range(-max_lag, max_lag + 1):
        if k >= 0:
            c = corr(a[k:], b[: b.size - k] if k else b)
        else:
            c = corr(a[:k], b[-k:])
        if np.isfinite(c) and not (best >= abs(c)):
            best = abs(c)
    return best


def runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Start/stop index pairs (stop exclusive) of consecutive True runs."""
    m = np.concatenate([[False], np.asarray(mask, dtype=bool), [False]])
    d = np.diff(m.astype(np.int8))
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1)))
