"""The features that separate training's exchange from serving's and hand-offs' (docs/detector.md,
"Hardened features"): per-bin direction, steadiness, bytes per joule above the idle floor, work
balance across GPUs and arithmetic intensity."""

import numpy as np
import pytest

from detect.probe_traces import send_plan, write_probe_trace
from trainsentry.features.comm import ACTIVE_FLOOR_BPS, link_features
from trainsentry.features.windows import sliding_windows
from trainsentry.traces.io import read_trace

DT = 0.1
N = 80  # an 8 s window at 10 Hz


def _features(tx, rx, link="nvlink", energy_j=None):
    return link_features(np.asarray(tx, float), np.asarray(rx, float), DT, link, energy_j=energy_j)


def test_a_collective_is_two_way_in_every_bin():
    x = np.full(N, 2e9)
    f = _features(x, x)
    assert f["oneway_bins"] == pytest.approx(0.0)
    assert f["sym"] == pytest.approx(1.0)


def test_a_fixed_hand_off_is_one_way_and_never_reverses():
    tx = np.where(np.arange(N) % 20 < 4, 5e9, 0.0)   # KV bursts GPU0 -> GPU1 every 2 s
    f = _features(tx, np.zeros(N))
    assert f["oneway_bins"] == pytest.approx(1.0)
    assert f["dir_flips"] == 0.0
    assert f["sym"] == pytest.approx(0.0)


def test_alternating_directions_are_one_way_per_bin_yet_symmetric_over_the_window():
    # pipeline training: activations forward in one bin, gradients back in the next
    fwd = np.arange(N) % 2 == 0
    f = _features(np.where(fwd, 3e9, 0.0), np.where(fwd, 0.0, 3e9))
    assert f["oneway_bins"] == pytest.approx(1.0)
    assert f["dir_flips"] == pytest.approx(1.0)
    assert f["sym"] == pytest.approx(1.0)


def test_identical_steps_are_steady_and_a_servers_request_mix_is_not():
    rng = np.random.default_rng(0)
    steps = np.full(N, 4.8e9) * (1 + 0.02 * rng.standard_normal(N))
    server = 2e9 * rng.lognormal(0.0, 0.6, N)
    assert _features(steps, steps)["steady"] > 0.9
    assert _features(server, server)["steady"] < 0.6


def test_shape_features_of_an_idle_link_are_absent():
    chatter = np.full(N, 0.4 * ACTIVE_FLOOR_BPS["pcie"])
    f = _features(chatter, 0.5 * chatter, link="pcie", energy_j=100.0 * N * DT)
    assert np.isnan(f["oneway_bins"]) and np.isnan(f["steady"])
    # bytes per joule counts only what the link moves above its floor: chatter alone is none
    assert f["log_bytes_per_J"] == 0.0


def test_bytes_per_joule_counts_the_bytes_above_the_floor():
    x = np.full(N, 1e9)
    energy = 500.0 * N * DT
    f = _features(x, x, energy_j=energy)
    above = 2 * (1e9 - ACTIVE_FLOOR_BPS["nvlink"]) * N * DT
    assert 10 ** f["log_bytes_per_J"] - 1 == pytest.approx(above / energy)


@pytest.fixture(scope="module")
def send_window(tmp_path_factory):
    root = tmp_path_factory.mktemp("probe-hardened")
    table, _ = read_trace(write_probe_trace(root, "send", send_plan(30.0), "inference", "disagg", "send"))
    rows = sliding_windows(table, 8, 2)
    return rows[len(rows) // 2]


def test_a_recorded_one_way_send_reads_one_way_per_bin(send_window):
    assert send_window["comm.nvlink.oneway_bins.min"] > 0.9
    assert send_window["comm.nvlink.dir_flips.max"] == 0.0


def test_work_balance_is_reported_for_the_gpus_of_one_exchange(send_window):
    assert 0.0 < send_window["act.power_balance"] <= 1.0
    assert 0.0 < send_window["act.sm_balance"] <= 1.0


def test_arithmetic_intensity_from_gpm():
    from trainsentry.features.activity import gpu_activity
    dense = gpu_activity({"gpm_tensor_util_pct": np.full(N, 50.0), "gpm_dram_bw_util_pct": np.full(N, 30.0)}, DT)
    decode = gpu_activity({"gpm_tensor_util_pct": np.full(N, 6.0), "gpm_dram_bw_util_pct": np.full(N, 15.0)}, DT)
    assert dense["tensor_per_dram"] > 1.0 > decode["tensor_per_dram"]


def _grid(power_w, tx, rx):
    from trainsentry.features.grid import NodeGrid
    t = 1.8e9 + DT * np.arange(1, N + 1)
    gpus = {f"gpu{i}": {"power_mw": np.full(N, p * 1000.0), "gpu_util_pct": np.full(N, 90.0),
                        "nvlink_tx_Bps": np.full(N, a), "nvlink_rx_Bps": np.full(N, b)}
            for i, (p, a, b) in enumerate(zip(power_w, tx, rx))}
    return NodeGrid("node0", t, DT, gpus)


def test_replicas_do_equal_work_and_disaggregated_roles_do_not():
    from trainsentry.features.windows import grid_features
    ddp = grid_features(_grid((690.0, 688.0), (5e9, 5e9), (5e9, 5e9)))
    disagg = grid_features(_grid((200.0, 630.0), (1e9, 0.0), (0.0, 1e9)))
    assert ddp["act.power_balance"] > 0.95
    assert disagg["act.power_balance"] < 0.4


def test_steadiness_ignores_a_ramp_of_identical_steps():
    # a run warming up: the rate climbs through the window, each bin still the same steps
    ramp = np.linspace(1e9, 3e9, N)
    assert _features(ramp, ramp)["steady"] > 0.95


def test_tensor_share_of_sm_activity_separates_dense_steps_from_decode():
    """Training's matmuls keep the tensor cores busy through most of the SMs' busy time; memory-bound
    decode keeps the SMs busy with little tensor work. The low percentile asks that it last: a short
    dense burst inside decode lifts the window's mean share, not its 5th percentile; idle gaps scale
    neither; idle SMs give no share."""
    from trainsentry.features.activity import gpu_activity
    dense = gpu_activity({"gpm_tensor_util_pct": np.full(N, 45.0), "gpm_sm_util_pct": np.full(N, 90.0)}, DT)
    decode = gpu_activity({"gpm_tensor_util_pct": np.full(N, 12.0), "gpm_sm_util_pct": np.full(N, 85.0)}, DT)
    assert dense["tensor_per_sm"] == pytest.approx(0.5) and dense["tensor_per_sm.p05"] == pytest.approx(0.5)
    assert decode["tensor_per_sm"] < 0.2 and decode["tensor_per_sm.p05"] < 0.2
    burst_te, burst_sm = np.full(N, 12.0), np.full(N, 85.0)
    burst_te[: N // 10], burst_sm[: N // 10] = 80.0, 95.0                     # a prefill in a tenth of the window
    burst = gpu_activity({"gpm_tensor_util_pct": burst_te, "gpm_sm_util_pct": burst_sm}, DT)
    assert burst["tensor_per_sm"] > 0.2 and burst["tensor_per_sm.p05"] == pytest.approx(decode["tensor_per_sm.p05"])
    gapped_te, gapped_sm = np.full(N, 45.0), np.full(N, 90.0)
    gapped_te[::2], gapped_sm[::2] = 0.0, 0.0                                 # idle half the time
    gapped = gpu_activity({"gpm_tensor_util_pct": gapped_te, "gpm_sm_util_pct": gapped_sm}, DT)
    assert gapped["tensor_per_sm"] == pytest.approx(0.5) and gapped["tensor_per_sm.p05"] == pytest.approx(0.5)
    idle = gpu_activity({"gpm_tensor_util_pct": np.zeros(N), "gpm_sm_util_pct": np.zeros(N)}, DT)
    assert "tensor_per_sm" not in idle and "tensor_per_sm.p05" not in idle
    assert "tensor_per_sm" not in gpu_activity({"gpm_tensor_util_pct": np.full(N, 45.0)}, DT)


def test_tensor_share_columns_are_named_under_any_prefix_and_statistic():
    """The detectors that leave the tensor share out (the single-device trees, `fused-no-tensor-share`)
    find its columns by name: both statistics, any aggregation over GPUs, nothing else."""
    from trainsentry.features.activity import is_tensor_share_column
    assert is_tensor_share_column("act.tensor_per_sm.max") and is_tensor_share_column("act.tensor_per_sm.p05.mean")
    assert not is_tensor_share_column("act.tensor_per_dram.max") and not is_tensor_share_column("act.tensor_per_kW.max")
    assert not is_tensor_share_column("act.gpm_tensor_util_pct.mean.max") and not is_tensor_share_column("tensor_per_sm")
