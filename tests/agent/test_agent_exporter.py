import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trainsentry.agent.exporter import GPU_MAP, AgentCollector, LatestReadings, make_registry
from trainsentry.telemetry.base import Reading
from trainsentry.traces.schema import GPU_METRICS


def scrape(latest, **kw):
    text = generate_latest(make_registry(AgentCollector(latest, "host-1", **kw))).decode()
    return text, {s.name: s for f in text_string_to_metric_families(text) for s in f.samples
                  if s.labels.get("gpu", "0") == "0"}


def test_dcgm_names_units_and_labels():
    latest = LatestReadings()
    latest.update([Reading("gpu0", "gpu", 1.0, {"power_mw": 612_500, "energy_mj": 3_081_301, "mem_used_bytes": 2 * 2**30,
                                                 "gpm_tensor_util_pct": 74.0, "gpm_nvlink_tx_mibps": 100.0,
                                                 "nvlink_tx_kib": 22_020_789, "sm_clock_mhz": 1980.0}),
                   Reading("gpu1", "gpu", 1.0, {"power_mw": 80_000}),
                   Reading("eth0", "net", 1.0, {"net_tx_bytes": 123, "net_rx_bytes": 456}),
                   Reading("mlx5_0:1", "ib", 1.0, {"net_tx_bytes": 7})])
    text, s = scrape(latest, uuids={"gpu0": "GPU-abc"})
    assert s["DCGM_FI_DEV_POWER_USAGE"].value == 612.5
    assert s["DCGM_FI_DEV_POWER_USAGE"].labels == {"gpu": "0", "UUID": "GPU-abc", "device": "nvidia0",
                                                   "Hostname": "host-1"}
    assert s["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].value == 3_081_301
    assert s["DCGM_FI_DEV_FB_USED"].value == 2048
    assert s["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"].value == 0.74
    assert s["DCGM_FI_PROF_NVLINK_TX_BYTES"].value == 100 * 2**20
    assert s["trainsentry_nvlink_tx_bytes_total"].value == 22_020_789 * 1024
    assert s["node_network_transmit_bytes_total"].labels["device"] == "eth0"
    assert s["node_network_receive_bytes_total"].value == 456
    assert s["node_infiniband_port_data_transmitted_bytes_total"].labels == {"device": "mlx5_0", "port": "1",
                                                                            "Hostname": "host-1"}
    assert 'DCGM_FI_DEV_POWER_USAGE{Hostname="host-1",UUID="",device="nvidia1",gpu="1"} 80.0' in text
    # A metric the GPU did not report is absent, never a zero.
    assert "DCGM_FI_DEV_GPU_TEMP" not in text


def test_every_gpu_metric_has_a_mapping():
    assert {m.name for m in GPU_METRICS} == set(GPU_MAP)


def test_latest_reading_wins_and_agent_stats_are_exposed():
    latest = LatestReadings()
    latest.update([Reading("gpu0", "gpu", 1.0, {"temp_c": 30.0})])
    latest.update([Reading("gpu0", "gpu", 2.0, {"temp_c": 41.0})])
    _, s = scrape(latest, agent_stats=lambda: {"trainsentry_agent_spool_pending_batches": 3,
                                               "trainsentry_agent_batches_acked_total": 9})
    assert s["DCGM_FI_DEV_GPU_TEMP"].value == 41.0
    assert s["trainsentry_agent_spool_pending_batches"].value == 3
    assert s["trainsentry_agent_batches_acked_total"].value == 9


def test_a_metric_read_once_a_second_stays_between_its_reads_and_goes_when_stale():
    """Energy, clocks and temperature come on one tick in ten: a scrape between two reads still
    serves their last value; one the GPU stopped giving for max_age_s is dropped."""
    latest = LatestReadings(max_age_s=30.0)
    latest.update([Reading("gpu0", "gpu", 1.0, {"power_mw": 600_000, "energy_mj": 5_000, "temp_c": 50.0})])
    latest.update([Reading("gpu0", "gpu", 1.1, {"power_mw": 610_000})])
    _, s = scrape(latest)
    assert s["DCGM_FI_DEV_POWER_USAGE"].value == 610.0                 # the newest
    assert s["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].value == 5_000    # kept from the tick that had it
    latest.update([Reading("gpu0", "gpu", 2.0, {"power_mw": 620_000, "energy_mj": 6_000})])
    latest.update([Reading("gpu0", "gpu", 40.0, {"power_mw": 630_000, "energy_mj": 9_000})])
    text, s = scrape(latest)
    assert s["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].value == 9_000
    assert "DCGM_FI_DEV_GPU_TEMP" not in text                           # last read 39 s ago: stale


class _PerValueLatest:
    """LatestReadings as it was before it kept readings per set of metric names (one entry per value):
    the reference the current one must agree with."""

    def __init__(self, max_age_s):
        self.max_age_s = max_age_s
        self._by_device = {}

    def update(self, readings):
        for r in readings:
            values = self._by_device.get(r.device, (None, {}))[1]
            for k, v in r.values.items():
                values[k] = (v, r.t)
            self._by_device[r.device] = (r, values)

    def snapshot(self):
        out = []
        for d in sorted(self._by_device):
            r, values = self._by_device[d]
            fresh = {k: v for k, (v, t) in values.items() if r.t - t <= self.max_age_s}
            out.append(Reading(r.device, r.kind, r.t, fresh))
        return out


@pytest.mark.parametrize("seed", range(6))
def test_latest_values_agree_with_one_entry_per_value(seed):
    """Random ticks (metric subsets coming and going, 40 names so the sets are compacted, clock jumps
    back and forth, devices appearing late): every snapshot equals the per-value bookkeeping's."""
    import random
    rnd = random.Random(seed)
    names = [f"m{i}" for i in range(40)]
    ref, latest = _PerValueLatest(5.0), LatestReadings(max_age_s=5.0)
    t = 100.0
    for tick in range(1500):
        t += rnd.choice([0.1, 0.1, 0.1, 0.7, -0.3, 6.0, -20.0])
        readings = []
        for dev in ("gpu0", "gpu1", "eth0")[:1 + min(tick // 50, 2)]:
            picked = rnd.sample(names, rnd.choice([1, 2, 3, 5, 12]))
            readings.append(Reading(dev, "gpu", t + rnd.choice([0.0, 0.01]), {k: rnd.randint(0, 9) for k in picked}))
        ref.update(readings)
        latest.update(readings if tick % 3 else iter(readings))   # any iterable, kept as a list
        if tick % 7 == 0:
            assert latest.snapshot() == ref.snapshot()
    assert all(len(e[1]) <= 2 * LatestReadings._COMPACT_AT for e in latest._by_device.values())
