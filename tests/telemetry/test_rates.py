"""traces.rates on counters read less often than the samples (the agent reads energy once a second
at a 10 Hz tick): every byte or joule lands once, and a missed read loses nothing."""

from __future__ import annotations

import numpy as np
import pytest

from trainsentry.traces.rates import counter_rate
from trainsentry.traces.schema import METRICS


def _metric(name):
    return next(m for m in METRICS if m.name == name)


def test_a_counter_read_every_tenth_sample_integrates_to_its_increments():
    t = 100.0 + 0.1 * np.arange(41)
    joules = 650.0 * (t - t[0]) + 3.0 * np.sin(t)          # ~650 W with a wobble
    mj = np.full(t.size, np.nan)
    mj[::10] = np.round(joules[::10] * 1000)                # read at 1 Hz
    rate = counter_rate(t, mj, _metric("energy_mj"))
    assert np.isnan(rate[0]) and np.isfinite(rate[1:]).all()
    # the rate over (t[i-1], t[i]] times its length, summed, is the counter's whole increment
    assert np.sum(rate[1:] * np.diff(t)) == pytest.approx((mj[40] - mj[0]) / 1000, rel=1e-9)
    # each sample between two reads carries the mean rate between them
    assert rate[1:11] == pytest.approx(np.full(10, (mj[10] - mj[0]) / 1000 / 1.0), rel=1e-9)


def test_a_missed_read_loses_nothing_and_samples_after_the_last_read_are_nan():
    t = np.arange(8, dtype=float)
    kib = np.array([0, 10, np.nan, np.nan, 40, 50, np.nan, np.nan])
    rate = counter_rate(t, kib, _metric("nvlink_tx_kib"))
    np.testing.assert_allclose(rate[:6] / 1024, [np.nan, 10, 10, 10, 10, 10])
    assert np.isnan(rate[6:]).all()


def test_a_wrap_between_sparse_reads_is_still_a_wrap():
    import dataclasses
    m = dataclasses.replace(_metric("energy_mj"), wrap_bits=32)     # a 32-bit counter, for exact floats
    top = 2.0 ** m.wrap_bits
    t = np.array([0.0, 0.5, 1.0])
    v = np.array([top - 500.0, np.nan, 1500.0])
    rate = counter_rate(t, v, m)
    np.testing.assert_allclose(rate[1:], [2.0, 2.0])        # 2000 mJ over 1 s
