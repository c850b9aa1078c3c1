"""Rates from cumulative counters, with wrap and reset handled in one place.

``Δcounter / Δt`` uses the timestamps the samples carry (the counters' own where the source has
them), never the poll loop's clock. A counter that goes down has either wrapped (its declared width
is known and the old value was near the top) or been reset (driver reload, interface re-created);
after a reset the counter restarted from zero, so the new value itself is the increment.
"""

from __future__ import annotations

import numpy as np

from .schema import COUNTERS, Metric


def counter_increments(values: np.ndarray, wrap_bits: int | None = None) -> np.ndarray:
    """Increments between consecutive raw counter values (len n-1), NaN where either side is missing."""
    v = np.asarray(values, dtype=np.float64)
    d = np.diff(v)
    down = d < 0
    if down.any():
        fixed = v[1:].copy()  # reset: the counter restarted at zero
        if wrap_bits is not None:
            top = float(2 ** wrap_bits)
            wrapped = down & (v[:-1] > 0.5 * top)
            fixed = np.where(wrapped, d + top, fixed)
        d = np.where(down, fixed, d)
    return d


def counter_rate(t: np.ndarray, values: np.ndarray, metric: Metric) -> np.ndarray:
    """Per-sample rate in the metric's base unit per second (bytes/s, watts).

    The rate at sample i is the mean over (t[i-1], t[i]]. A counter need not be read on every sample
    (the agent reads the costly ones, energy above all, less often than the 10 Hz tick): every
    sample between two readings of the counter gets the mean rate between those readings, so
    integrating the rate over the samples gives back exactly the counter's increments, and a
    reading missed in between loses nothing (the next reading's difference spans the gap). Samples
    before the first and after the last reading are NaN; non-increasing timestamps give NaN.
    """
    t = np.asarray(t, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    out = np.full(t.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(v))
    if idx.size < 2:
        return out
    inc = counter_increments(v[idx], metric.wrap_bits) * metric.scale
    dt = np.diff(t[idx])
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(dt > 0, inc / dt, np.nan)
    out[idx[0] + 1: idx[-1] + 1] = np.repeat(r, np.diff(idx))
    return out


def derive_rates(t: np.ndarray, columns: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """All derived rate columns for one device's samples sorted by time."""
    rates: dict[str, np.ndarray] = {}
    for m in COUNTERS:
        if m.name in columns and m.rate_name:
            rates[m.rate_name] = counter_rate(t, columns[m.name], m)
    return rates
