"""Per-node traffic predictions and visibility."""

import json

import pytest

from trainsentry.simulate import catalogue, traffic
from trainsentry.simulate.experiments import forward_row
from trainsentry.simulate.settings import Network, Settings


def traffic_of(node, n, mode, params, group=0, th=None):
    row = forward_row(node, n, mode, params, group)
    return traffic.node_traffic(row, catalogue.find_node_type(node), Network(), Settings(), th)


def test_paper_network_signature():
    # ~1.07 GB each way every ~189 s, ~45 Mbps per direction.
    t = traffic_of("16x GH200 FP8", 34, "hierarchical", 160e9, 8)
    w = t["wan"]
    assert w["burst_bytes"] == pytest.approx(1.07e9, rel=0.01)
    assert w["burst_period_s"] == pytest.approx(189, rel=0.01)
    assert 8 * w["mean_bytes_per_s"] / 1e6 == pytest.approx(45, rel=0.02)
    assert "network" in t["seen_by"]


def test_in_node_bytes_by_strategy():
    t = traffic_of("16x H100 SXM FP8", 2, "flat", 91e9)
    s = t["in_node"]
    assert s["shard_degree"] == 16 and s["replicas_in_node"] == 1
    # FSDP: 15 * 91e9 * (2*1 + 2) bytes per step.
    assert s["strategies"]["fsdp"]["bytes_per_step"] == pytest.approx(15 * 91e9 * 4)
    # Pipeline: 2 * 15 * B * h * 1 byte, h = 0.03 sqrt(P).
    h = 0.03 * 91e9 ** 0.5
    assert s["strategies"]["pipeline"]["bytes_per_step"] == pytest.approx(2 * 15 * 131072 * h)
    # Two 8-GPU boards: the pipeline crosses a NIC at one of its 15 boundaries.
    pp = s["strategies"]["pipeline"]
    assert pp["nic_bytes_per_step"] == pytest.approx(pp["bytes_per_step"] / 15)
    assert t["evasive_strategy"] == "pipeline"


def test_thresholds_change_the_verdict(tmp_path):
    t = traffic_of("16x H100 SXM FP8", 2880, "pipeline", 180e9)
    assert t["seen_by"] == ["network"]   # pipelined in-node traffic under 100 MB/s per chip
    quiet = traffic.VisibilityThresholds(network_min_burst_bytes=1e12,
                                         network_min_mean_bytes_per_s=1e12,
                                         interconnect_min_bytes_per_s_per_chip=1e6)
    assert traffic_of("16x H100 SXM FP8", 2880, "pipeline", 180e9, th=quiet)["seen_by"] == ["interconnect"]


def test_load_thresholds(tmp_path):
    assert traffic.load_thresholds(tmp_path / "missing.json") == traffic.VisibilityThresholds()
    p = tmp_path / "detector.json"
    p.write_text(json.dumps({"simulator_visibility": {"network_min_burst_bytes": 5e8}}))
    assert traffic.load_thresholds(p).network_min_burst_bytes == 5e8
    p.write_text(json.dumps({"simulator_visibility": {"nvlink_magic": 1}}))
    with pytest.raises(ValueError, match="unknown"):
        traffic.load_thresholds(p)
    p.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read"):
        traffic.load_thresholds(p)
