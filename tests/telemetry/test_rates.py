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


def test_thin_counters_is_what_a_slower_agent_would_have_recorded():
    from trainsentry.telemetry.base import Reading
    from trainsentry.traces.io import columns_to_table, readings_to_columns, thin_counters
    t0 = 1_800_000_000.0
    rs = [Reading(f"gpu{g}", "gpu", t0 + 0.1 * i + 0.01 * g,
                  {"nvlink_tx_kib": 1000 * i * i, "nvlink_rx_kib": 500 * i, "energy_mj": 70_000 * i, "power_mw": 70_000 + i})
          for g in (0, 1) for i in range(50)]
    full = columns_to_table(readings_to_columns("n", rs))
    thin = thin_counters(full, {"nvlink": 1.0})
    for g in ("gpu0", "gpu1"):
        rows = [r for r in thin.to_pylist() if r["device"] == g]
        kept = [r for r in rows if r["nvlink_tx_kib"] is not None]
        assert len(kept) == 5 and [round(r["t"] - rows[0]["t"], 6) for r in kept] == [0.0, 1.0, 2.0, 3.0, 4.0]
        assert all(r["energy_mj"] is not None and r["power_mw"] is not None for r in rows)   # untouched
        # the rates still add up to exactly the bytes between the first and the last read
        dt = np.diff([r["t"] for r in rows])
        bps = np.array([r["nvlink_tx_Bps"] if r["nvlink_tx_Bps"] is not None else 0.0 for r in rows[1:]])
        assert np.sum(bps * dt) == pytest.approx((kept[-1]["nvlink_tx_kib"] - kept[0]["nvlink_tx_kib"]) * 1024)
        # and differ from the 10 Hz trace's rates inside a second (the square law is smoothed out)
        assert rows[5]["nvlink_tx_Bps"] != [r for r in full.to_pylist() if r["device"] == g][5]["nvlink_tx_Bps"]
    with pytest.raises(ValueError, match="unknown counter groups"):
        thin_counters(full, {"pcie": 1.0})
    with pytest.raises(ValueError, match="> 0"):
        thin_counters(full, {"nvlink": 0.0})
