"""Rahman & Tajdari window features on known series and on a probe-replayed DDP run."""

import numpy as np
import pytest

from detect.probe_traces import ddp_plan, write_probe_trace
from trainsentry.features.rt import RT_FEATURE_NAMES, rt_features, rt_sliding_windows
from trainsentry.traces.io import read_trace


def test_known_series():
    util = np.tile([0.0] * 5 + [90.0] * 5, 3)              # 30 s, busy half the time, 6 switches
    mem = np.minimum(np.arange(30.0), 10.0) * 2 ** 30       # ramps 1 GiB/s for 10 s then holds
    power = 100_000 + 50_000 * (util > 0)
    f = rt_features({"gpu_util_pct": util, "mem_used_bytes": mem, "power_mw": power})
    assert len(f) == 166 and tuple(f) == RT_FEATURE_NAMES
    assert f["rt.duty_cycle"] == pytest.approx(0.5)
    assert f["rt.util_transitions_per_min"] == pytest.approx(5 / 30 * 60)
    assert f["rt.mem_plateau_s"] == pytest.approx(10.0)
    assert f["rt.mem_change_30s"] == pytest.approx(10 * 1024)
    assert f["rt.power_w.mean"] == pytest.approx(125.0)
    assert f["rt.power_fft_freq"] == pytest.approx(0.1, abs=0.02)   # 10 s cycle
    assert np.isnan(f["rt.temp_c.mean"])                           # absent signal: NaN, not 0


def test_windows_on_probe_ddp(tmp_path):
    table, _ = read_trace(write_probe_trace(tmp_path, "d", ddp_plan(60.0), "training", "ddp", "c"))
    rows = rt_sliding_windows(table)
    assert len(rows) == 3                                          # 65 s: windows at 0, 15, 30 s
    assert all(r["t_end"] - r["t_start"] == pytest.approx(30.0) for r in rows)
    assert rows[1]["rt.power_w.mean"] > 500 and rows[1]["rt.util.p50"] == 99
