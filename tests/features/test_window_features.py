"""Window features on traces replayed from the real H200 probe readings."""

import math

import numpy as np
import pytest

from detect.probe_traces import GIB, IDLE_MEM_BYTES, ddp_plan, send_plan, write_probe_trace
from trainsentry.features import sliding_windows, window_features
from trainsentry.features.grid import to_grids
from trainsentry.traces.io import read_trace


def _mid(rows):
    return rows[len(rows) // 2]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe")
    plans = {
        "allreduce": [("idle", 3.0, IDLE_MEM_BYTES), ("allreduce", 30.0, GIB), ("idle", 2.0, IDLE_MEM_BYTES)],
        "send": send_plan(30.0),
        "ddp": ddp_plan(30.0),
        "idle": [("idle", 20.0, IDLE_MEM_BYTES)],
    }
    return {k: read_trace(write_probe_trace(root, k, p, "training" if k != "idle" else "other", k, k))
            for k, p in plans.items()}


def test_allreduce_is_symmetric_and_simultaneous(traces):
    w = _mid(sliding_windows(traces["allreduce"][0], 8, 2))
    assert w["comm.nvlink.sym.min"] > 0.95          # every GPU receives what it sends
    assert w["comm.nvlink.sym_bins.min"] > 0.9
    assert w["comm.nvlink.coactive"] > 0.9          # bursts on both GPUs at once
    assert w["comm.nvlink.simult_corr"] > 0.9
    assert abs(w["comm.nvlink.period_s.min"] - 1.0) < 0.25   # the replayed cycle is 1 s long


def test_one_way_send_is_asymmetric(traces):
    w = _mid(sliding_windows(traces["send"][0], 8, 2))
    assert w["comm.nvlink.sym.max"] < 0.05          # GPU0 only sends, GPU1 only receives
    assert w["comm.nvlink.sym_bins.max"] < 0.05
    assert w["comm.nvlink.Bps.min"] > 1e9           # yet volume alone is as large as training's


def test_ddp_volume_power_and_symmetry(traces):
    w = _mid(sliding_windows(traces["ddp"][0], 8, 2))
    assert w["act.power_W.mean.min"] > 400          # both GPUs near 600 W in the recording
    assert w["comm.nvlink.sym.min"] > 0.9
    assert 1e9 < w["comm.nvlink.Bps.min"] < 5e10
    assert w["act.mem_GiB.mean.min"] == pytest.approx(20.0)


def test_idle_has_no_traffic_and_no_symmetry(traces):
    w = _mid(sliding_windows(traces["idle"][0], 8, 2))
    assert w["comm.nvlink.Bps.max"] == 0.0
    assert "comm.nvlink.sym.max" not in w           # undefined without traffic, not a fake 0 or 1
    assert w["comm.nvlink.acf_peak.max"] == 0.0
    assert w["act.power_W.mean.max"] < 100


def test_grid_conserves_bytes(traces):
    table, manifest = traces["ddp"]
    grid = to_grids(table, hz=10.0)["node0"]
    t = np.asarray(table.column("t").to_pylist())
    dev = np.asarray(table.column("device").to_pylist())
    tx = np.asarray(table.column("nvlink_tx_kib").to_pylist(), dtype=float)
    sel = dev == "gpu0"
    inside = sel & (t <= grid.t[-1])
    counted = (tx[inside].max() - tx[sel].min()) * 1024
    gridded = np.nansum(grid.gpus["gpu0"]["nvlink_tx_Bps"]) * grid.dt_s
    assert gridded == pytest.approx(counted, rel=0.01)


def test_window_features_matches_sliding_window(traces):
    table = traces["ddp"][0]
    rows = sliding_windows(table, 8, 2)
    w = rows[5]
    again = window_features(table, w["t_start"], w["t_end"])[0]
    for k in ("comm.nvlink.Bps.mean", "comm.nvlink.sym.min", "act.power_W.mean.max"):
        assert again[k] == pytest.approx(w[k], rel=0.02)


def test_missing_metrics_are_absent_not_zero(traces):
    table = traces["ddp"][0]
    keep = [c for c in table.column_names if not c.startswith("nvlink")]
    import pyarrow as pa
    stripped = table.select(keep)
    for c in ("nvlink_tx_kib", "nvlink_rx_kib", "nvlink_tx_Bps", "nvlink_rx_Bps"):
        stripped = stripped.append_column(c, pa.nulls(table.num_rows, pa.float64()))
    w = _mid(sliding_windows(stripped, 8, 2))
    assert not any(k.startswith("comm.nvlink") for k in w)
    assert w["act.power_W.mean.min"] > 400


def test_bad_window_is_refused(traces):
    with pytest.raises(ValueError):
        window_features(traces["ddp"][0], 10.0, 10.0)
    with pytest.raises(ValueError):
        sliding_windows(traces["ddp"][0], 0, 2)
    assert math.isfinite(sliding_windows(traces["ddp"][0], 8, 2)[0]["t_end"])
