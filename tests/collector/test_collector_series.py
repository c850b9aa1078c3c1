"""GET /v1/nodes/{node}/series: buckets at the requested step, rates from counters, checked by hand."""

from __future__ import annotations

import pytest
from conftest import gpu_samples


def _series(client, **params):
    r = client.get("/v1/nodes/node-a/series", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_rates_and_gauges_per_bucket(agent, client):
    # 100 KiB and 30 J per 0.1 s: NVLink TX = 1,024,000 B/s, energy = 300 W, from 1000.0 to 1002.9
    for k in range(3):
        agent.send(gpu_samples(1000.0 + k, kib0=1000 * k, mj0=300_000 * k, power_mw=300_000 + 1000 * k))
    out = _series(client, start=1000.0, end=1003.0, step=1.0, device="gpu0")
    gpu = out["devices"]["gpu0"]
    assert gpu["kind"] == "gpu" and gpu["t"] == [1000.0, 1001.0, 1002.0] and gpu["n"] == [10, 10, 10]
    cols = gpu["columns"]
    assert cols["nvlink_tx_Bps"] == pytest.approx([1_024_000.0] * 3, rel=1e-6)
    assert cols["energy_W"] == pytest.approx([300.0] * 3, rel=1e-6)
    assert cols["power_mw"] == [300_000.0, 301_000.0, 302_000.0]
    assert cols["nvlink_tx_kib_last"] == [900.0, 1900.0, 2900.0]
    assert cols["energy_mj_last"] == [270_000.0, 570_000.0, 870_000.0]
    assert "nvlink_rx_Bps" not in cols  # a metric the device never reported is absent, not zero


def test_first_bucket_rate_uses_the_sample_before_start(agent, client):
    for k in range(3):
        agent.send(gpu_samples(1000.0 + k, kib0=1000 * k))
    out = _series(client, start=1001.0, end=1002.0, step=1.0)
    gpu = out["devices"]["gpu0"]
    assert gpu["n"] == [10]  # only samples inside the range are counted ...
    assert gpu["columns"]["nvlink_tx_Bps"] == pytest.approx([1_024_000.0], rel=1e-6)  # ... 10 increments used


def test_coarse_step_is_time_weighted_and_reset_is_not_negative(agent, client):
    agent.send(gpu_samples(1000.0, kib0=0, kib_step=100))          # 1,024,000 B/s
    agent.send(gpu_samples(1001.0, kib0=5000, kib_step=300))       # jump at the boundary, then 3,072,000 B/s
    agent.send(gpu_samples(1002.0, kib0=0, kib_step=100))          # counter reset (driver reload) to 0
    out = _series(client, start=1000.0, end=1003.0, step=3.0)
    (rate,) = out["devices"]["gpu0"]["columns"]["nvlink_tx_Bps"]
    # Σ increments / Σ Δt: 900 + (5000-900) + 2700 + [reset: the new value 0 counts] 0 + 900 KiB over 2.9 s
    assert rate == pytest.approx((900 + 4100 + 2700 + 0 + 900) * 1024 / 2.9, rel=1e-6)


def test_all_devices_and_net_rates(agent, client):
    net = [{"dev": "eth0", "kind": "net", "t": 1000.0 + i * 0.5, "m": {"net_rx_bytes": 10**12 + i * 5_000_000}}
           for i in range(4)]
    agent.send(gpu_samples(1000.0) + net)
    out = _series(client, start=1000.0, end=1002.0, step=2.0)
    assert sorted(out["devices"]) == ["eth0", "gpu0"]
    assert out["devices"]["eth0"]["columns"]["net_rx_Bps"] == pytest.approx([10_000_000.0])
    assert out["devices"]["eth0"]["kind"] == "net"


@pytest.mark.parametrize("params, status, code", [
    ({"start": 10, "end": 5}, 400, "bad_range"),
    ({"start": 0, "end": 10, "step": 0}, 400, "bad_step"),
    ({"start": 0, "end": 1e9, "step": 1}, 400, "too_many_buckets"),
    ({"start": "yesterday"}, 400, "bad_query"),
    ({"start": 0, "end": 10, "device": "gpu9"}, 404, "unknown_device"),
])
def test_bad_series_requests(agent, client, params, status, code):
    agent.send(gpu_samples(1000.0))
    r = client.get("/v1/nodes/node-a/series", params=params)
    assert r.status_code == status and r.json()["error"] == code


def test_series_of_unknown_node_is_404(client):
    assert client.get("/v1/nodes/ghost/series").status_code == 404


def test_a_range_over_the_row_limit_is_refused(agent, client, monkeypatch):
    """50 samples in range: refused under a limit of 25 (read up to one row past it, not all of them:
    query.series), served under 50."""
    from trainsentry.collector import query
    for k in range(5):
        agent.send(gpu_samples(1000.0 + k, n=10))
    monkeypatch.setattr(query, "MAX_ROWS", 25)
    r = client.get("/v1/nodes/node-a/series", params={"start": 1000.0, "end": 1006.0})
    assert r.status_code == 400 and r.json()["error"] == "too_many_rows"
    monkeypatch.setattr(query, "MAX_ROWS", 50)
    assert client.get("/v1/nodes/node-a/series", params={"start": 1000.0, "end": 1006.0}).status_code == 200
