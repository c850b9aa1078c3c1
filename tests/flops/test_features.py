"""Feature extraction on a trace built from the real H200 probe readings, checked by hand."""

import csv

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from flops.fixtures.probe_traces import PROBE, GPM_RATIO
from trainsentry.flops.features import IDLE_W_CONTEXT_DEFAULT, interval_features
from trainsentry.traces.io import read_trace


def _raw(gpu):
    rows = [r for r in csv.DictReader((PROBE / "samples.csv").open()) if int(r["gpu"]) == gpu]
    t = np.array([float(r["t"]) for r in rows])
    return t, np.array([float(r["power_mW"]) for r in rows]) / 1000, np.array([float(r["util"]) for r in rows])


def _trapz_clipped(t, y, lo, hi):
    """Trapezoid integral of linearly interpolated y over [lo, hi] (an independent hand computation)."""
    grid = np.concatenate([[lo], t[(t > lo) & (t < hi)], [hi]])
    v = np.interp(grid, t, y)
    return float(np.sum((v[1:] + v[:-1]) / 2 * np.diff(grid)))


def test_energy_integral_matches_recorded_power(probe_run):
    table, m = read_trace(probe_run)
    f = interval_features(table, m["start"], m["end"])
    hand = sum(_trapz_clipped(*_raw(g)[:2], m["start"], m["end"]) for g in (0, 1))
    assert f.energy_J == pytest.approx(hand, rel=2e-3)
    assert f.duration_s == pytest.approx(m["end"] - m["start"])
    assert f.mean_power_W == pytest.approx(hand / f.duration_s, rel=2e-3)
    assert f.coverage == pytest.approx(1.0)
    assert f.gpus == 2 and f.energy_source == "energy_counter"


def test_idle_baseline_is_the_context_idle_before_start(probe_run):
    table, m = read_trace(probe_run)
    f = interval_features(table, m["start"], m["end"])
    idle = 0.0
    for g in (0, 1):
        t, p, _ = _raw(g)
        idle += float(np.median(p[(t <= m["start"]) & (t > m["start"] - 3.0)]))
    assert f.idle_source == "pre-start"
    assert f.idle_W == pytest.approx(idle, rel=5e-3)
    assert 2 * 120 < f.idle_W < 2 * 125  # a GPU holding a CUDA context idles near 122 W
    assert f.net_energy_J == pytest.approx(f.energy_J - f.idle_W * f.duration_s)


def test_nvlink_and_tensor_integrals(probe_run):
    table, m = read_trace(probe_run)
    f = interval_features(table, m["start"], m["end"])
    nvl = tensor = 0.0
    for g in (0, 1):
        rows = pc.equal(table.column("device"), f"gpu{g}")
        sub = table.filter(rows)
        t = sub.column("t").to_numpy()
        for c in ("nvlink_tx_kib", "nvlink_rx_kib"):
            kib = sub.column(c).to_numpy().astype(float)
            nvl += (np.interp(m["end"], t, kib) - np.interp(m["start"], t, kib)) * 1024
        tr, _, util = _raw(g)
        # GPM value at sample i covers (t[i-1], t[i]]
        w = np.clip(np.minimum(tr[1:], m["end"]) - np.maximum(tr[:-1], m["start"]), 0, None)
        tensor += float(np.sum(GPM_RATIO["gpm_tensor_util_pct"] * util[1:] / 100 * w))
    assert f.nvlink_bytes == pytest.approx(nvl, rel=1e-6)
    # 100.8M-parameter DDP, 50 steps: gradient all-reduce traffic of tens of GB per GPU
    assert 2e10 < f.nvlink_bytes < 2e11
    assert f.tensor_active_s == pytest.approx(tensor, rel=1e-9)
    assert f.tensor_cycles_s == pytest.approx(f.tensor_active_s)  # no clock recorded: ratio 1
    assert f.dram_bytes == pytest.approx(f.tensor_active_s * 0.14 / 0.74 * 4.8e12, rel=1e-9)


def test_power_gauge_and_default_idle_fallbacks(probe_run):
    table, m = read_trace(probe_run)
    no_energy = table.set_column(table.schema.get_field_index("energy_W"), "energy_W",
                                 pa.nulls(table.num_rows, pa.float64()))
    f = interval_features(no_energy, m["start"], m["end"])
    ref = interval_features(table, m["start"], m["end"])
    assert f.energy_source == "power_gauge"
    assert f.energy_J == pytest.approx(ref.energy_J, rel=0.05)
    late = table.filter(pc.greater(table.column("t"), m["start"]))
    g = interval_features(late, m["start"], m["end"])
    assert g.idle_source == "default" and g.idle_W == pytest.approx(2 * IDLE_W_CONTEXT_DEFAULT)


def test_partial_interval_and_bad_input(probe_run):
    table, m = read_trace(probe_run)
    half = interval_features(table, m["start"], (m["start"] + m["end"]) / 2)
    full = interval_features(table, m["start"], m["end"])
    assert 0 < half.energy_J < full.energy_J
    beyond = interval_features(table, m["start"], m["end"] + 10)
    assert beyond.coverage < 0.5  # the recording stops shortly after the run: seconds nobody measured
    with pytest.raises(ValueError):
        interval_features(table, m["end"], m["start"])
    with pytest.raises(ValueError, match="no GPU samples"):
        interval_features(table.slice(0, 0), m["start"], m["end"])


def test_recorded_h200_energy_and_clock_weighted_tensor_activity(recorded_runs):
    """The richer recording, read through NvmlSource: energy = counter difference; throttled tensor cycles."""
    table, m = read_trace(recorded_runs["ddp_100M_40steps"])
    f = interval_features(table, m["start"], m["end"])
    hand = 0.0
    for g in (0, 1):
        sub = table.filter(pc.equal(table.column("device"), f"gpu{g}"))
        t, e = sub.column("t").to_numpy(), sub.column("energy_mj").to_numpy().astype(float)
        t, e = t[np.isfinite(e)], e[np.isfinite(e)]      # the agent reads energy once a second
        hand += (np.interp(m["end"], t, e) - np.interp(m["start"], t, e)) / 1000
    assert f.energy_J == pytest.approx(hand, rel=1e-6)
    assert 110 * 2 < f.idle_W < 130 * 2 and f.net_energy_J > 0.5 * f.energy_J
    assert 0 < f.tensor_active_s < 0.1 * f.sm_active_s  # FP32 DDP: SMs busy, tensor pipes nearly idle
    table, m = read_trace(recorded_runs["matmul_bf16_8192_4s"])
    mm = interval_features(table, m["start"], m["end"])
    # bf16 matmuls at the 700 W limit: tensor pipes ~93 % busy while the SM clock sags to ~1500 MHz
    assert mm.tensor_active_s > 0.8 * 2 * mm.duration_s
    assert 0.65 < mm.tensor_cycles_s / mm.tensor_active_s < 0.85
    assert mm.nvlink_bytes == 0.0


@pytest.mark.slow
def test_ddp_ground_truth_constant_is_what_flop_counter_mode_counts():
    from flops.fixtures.probe_traces import DDP_STEP_FLOPS_PER_RANK, count_ddp_step_flops
    assert count_ddp_step_flops() == DDP_STEP_FLOPS_PER_RANK


def test_slow_clock_readings_are_held_between_samples(recorded_runs):
    """The agent reads the SM clock at 1 Hz (one row in ten): rows between readings take the last one."""
    from trainsentry.flops.features import _hold
    held = _hold(np.array([np.nan, 1500.0, np.nan, np.nan, 1980.0, np.nan]))
    np.testing.assert_array_equal(held, [1500, 1500, 1500, 1500, 1980, 1980])
    assert np.isnan(_hold(np.array([np.nan, np.nan]))).all()
    table, m = read_trace(recorded_runs["matmul_bf16_8192_4s"])
    i = table.schema.get_field_index("sm_clock_mhz")
    assert 0 < table.column(i).null_count < table.num_rows  # the recording's clock is sparse
    with_clock = interval_features(table, m["start"], m["end"])
    no_clock = interval_features(table.set_column(i, "sm_clock_mhz", pa.nulls(table.num_rows, pa.float64())),
                                 m["start"], m["end"])
    assert no_clock.tensor_cycles_s == pytest.approx(no_clock.tensor_active_s)  # unknown clock: ratio 1
    assert with_clock.tensor_cycles_s < 0.85 * with_clock.tensor_active_s


def test_busy_gpu_seconds_count_each_gpu_at_work(probe_run):
    """The energy models' overhead time base: seconds each GPU's utilisation is >= 5 %, summed over
    GPUs. By hand from the table's rows (a reading covers the time since the previous one), then with
    one GPU made idle (half a node at work counts its own seconds), then without utilisation at all
    (each GPU counts as busy throughout)."""
    table, m = read_trace(probe_run)
    lo, hi = m["start"], m["end"]

    def by_hand(tab):
        total = 0.0
        for g in (0, 1):
            sub = tab.filter(pc.equal(tab.column("device"), f"gpu{g}"))
            t = sub.column("t").to_numpy()
            u = np.asarray(sub.column("gpu_util_pct").to_pylist(), dtype=float)
            ok = ~np.isnan(u)
            t, u = t[ok], u[ok]
            for i in range(1, t.size):
                overlap = max(0.0, min(t[i], hi) - max(t[i - 1], lo))
                total += overlap * (u[i] >= 5.0)
        return total

    f = interval_features(table, lo, hi)
    assert f.busy_gpu_s == pytest.approx(by_hand(table), rel=1e-9)
    assert 0.5 * 2 * f.duration_s < f.busy_gpu_s <= 2 * f.duration_s + 1e-9   # both GPUs work in the probe's run
    i = table.schema.get_field_index("gpu_util_pct")
    util = np.asarray(table.column(i).to_pylist(), dtype=float)
    gpu1 = np.asarray(table.column("device").to_pylist()) == "gpu1"
    one_idle = table.set_column(i, "gpu_util_pct", pa.array(np.where(gpu1 & ~np.isnan(util), 0.0, util)))
    half = interval_features(one_idle, lo, hi)
    assert half.busy_gpu_s == pytest.approx(by_hand(one_idle), rel=1e-9) and half.busy_gpu_s < 0.6 * f.busy_gpu_s
    unread = table.set_column(i, "gpu_util_pct", pa.nulls(table.num_rows, pa.float64()))
    assert interval_features(unread, lo, hi).busy_gpu_s == pytest.approx(2 * f.duration_s)
    # readings missing for the first half of the interval: that half counts as busy, as no readings would
    t = table.column("t").to_numpy()
    mid = lo + 0.5 * (hi - lo)
    gap = table.set_column(i, "gpu_util_pct", pa.array(np.where(t < mid, np.nan, util)))
    dev = np.asarray(table.column("device").to_pylist())
    gap_util = np.where(t < mid, np.nan, util)
    first = [t[(dev == g) & ~np.isnan(gap_util)].min() for g in ("gpu0", "gpu1")]   # the first reading after the gap
    uncovered = sum(min(f_, hi) - lo for f_ in first)
    assert uncovered >= 2 * (mid - lo)
    assert interval_features(gap, lo, hi).busy_gpu_s == pytest.approx(by_hand(gap) + uncovered, rel=1e-9)
