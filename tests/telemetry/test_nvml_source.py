"""NvmlSource on the fake NVML that plays readings recorded on 2 x H200 (tests/fixtures/h200/)."""

from __future__ import annotations

import json

import numpy as np
import pynvml
import pytest

from fakes.fake_pynvml import FakeNvml, ManualClock, calls_named
from fakes.h200_recording import FIXTURE_FILE, PROBE_DIR, SCOPE_ALL_LINKS, load_recording
from trainsentry.telemetry.base import SourceError
from trainsentry.telemetry.nvml import NvmlSource
from trainsentry.traces.io import readings_to_columns
from trainsentry.traces.schema import GPU_METRICS

REC = load_recording(FIXTURE_FILE)
LOAD = json.loads((PROBE_DIR / "h200x2_load_log.json").read_text())
GPU_NAMES = {m.name for m in GPU_METRICS}


def at(phase: str, frac: float = 0.5) -> float:
    """Seconds after the recording's start that fall `frac` into a phase of the recorded load."""
    a, b = LOAD[phase]
    return a + frac * (b - a) - REC.t0


def make(offset_s: float = 0.0, energy_period_s: float = 1.0, **kw) -> tuple[FakeNvml, NvmlSource, ManualClock]:
    clock = ManualClock()
    fake = FakeNvml(REC, clock=clock, start=clock() - offset_s, **kw)
    src = NvmlSource(nvml=fake, clock=clock, energy_period_s=energy_period_s)
    return fake, src, clock


def recorded(gpu: int, key: object, offset_s: float) -> object:
    return REC.gpus[gpu].at(key, REC.t0 + offset_s)


def test_values_are_the_recorded_ones_and_named_by_the_schema():
    off = at("ddp_100M_40steps", 0.7)
    fake, src, clock = make(off)
    readings = src.read()
    assert [r.device for r in readings] == ["gpu0", "gpu1"] == src.devices()
    for g, r in enumerate(readings):
        assert r.kind == "gpu" and set(r.values) <= GPU_NAMES
        assert r.values["nvlink_tx_kib"] == recorded(g, ("field", 138, SCOPE_ALL_LINKS), off)
        assert r.values["nvlink_rx_kib"] == recorded(g, ("field", 139, SCOPE_ALL_LINKS), off)
        assert r.values["energy_mj"] == recorded(g, "energy_mj", off)
        assert r.values["temp_c"] == recorded(g, "temp", off)
        assert r.values["sm_clock_mhz"] == 1980  # recorded under load
        assert r.values["mem_used_bytes"] > 1 << 30
    # DDP moves NVLink bytes in both directions; link 0 alone would be ~1/18 of the total.
    link0 = recorded(0, ("field", 138, 0), off)
    assert readings[0].values["nvlink_tx_kib"] > 15 * link0 > 0


@pytest.mark.parametrize("phase, rel", [("matmul_bf16_8192_4s", 0.0), ("ddp_100M_40steps", 0.01)])
def test_per_link_fallback_sums_every_link_to_the_same_total(phase, rel):
    # Recorded: the driver reads each field of one call at its own instant (~12 ms spread over 38
    # fields), so while bytes flow the per-link sum and the all-links value differ slightly; when
    # NVLink is quiet (the matmul phase, after the all-reduce and send) they are equal.
    off = at(phase, 0.5)
    _, whole, _ = make(off)
    fake, per_link, _ = make(off, sum_scope=False)
    a, b = whole.read(), per_link.read()
    for ra, rb in zip(a, b):
        for m in ("nvlink_tx_kib", "nvlink_rx_kib"):
            assert rb.values[m] == pytest.approx(ra.values[m], rel=rel) and rb.values[m] > 10 * 2**20
    req = calls_named(fake, "nvmlDeviceGetFieldValues")[-1][2][0]
    assert sorted({s for f, s in req if f == 138}) == list(range(18))


def test_never_link0_alone():
    off = at("ddp_100M_40steps", 0.5)
    fake, src, clock = make(off, link0_only=True)
    for _ in range(3):
        for r in src.read():
            assert "nvlink_tx_kib" not in r.values and "nvlink_rx_kib" not in r.values
            assert r.values["power_mw"] > 0  # the rest still reads
        clock.advance(0.1)
    # and in every mode, no request ever asked for the NVLink counters at link 0 only
    for mode in ({}, {"sum_scope": False}, {"link0_only": True}):
        fake, src, _ = make(off, **mode)
        src.read()
        for _, _, (req,) in calls_named(fake, "nvmlDeviceGetFieldValues"):
            scopes = {s for f, s in req if f in (138, 139)}
            assert scopes != {0}
    assert not calls_named(fake, "nvmlDeviceGetNvLinkUtilizationCounter")


@pytest.mark.parametrize("gate, metrics", [
    ("power_mw", {"power_mw"}), ("energy_mj", {"energy_mj"}), ("util", {"gpu_util_pct", "mem_util_pct"}),
    ("mem_used", {"mem_used_bytes"}), ("sm_clock", {"sm_clock_mhz"}), ("temp", {"temp_c"}),
    ("nvlink", {"nvlink_tx_kib", "nvlink_rx_kib"}), ("gpm", {"gpm_sm_util_pct", "gpm_tensor_util_pct"}),
])
def test_unsupported_metric_is_missing_and_not_asked_again(gate, metrics):
    fake, src, clock = make(at("matmul_bf16_8192_4s", 0.3), unsupported={gate})
    seen: dict[str, set] = {"gpu0": set(), "gpu1": set()}
    for _ in range(12):
        readings = src.read()
        for r in readings:
            seen[r.device] |= set(r.values)
        clock.advance(0.2)
    for r in readings:
        assert not metrics & seen[r.device]
        assert {"power_mw"} - metrics <= set(r.values)                                    # every read
        assert {"temp_c", "sm_clock_mhz", "mem_used_bytes", "gpm_sm_util_pct", "energy_mj"} - metrics <= seen[r.device]
    if gate == "energy_mj":  # asked once as field 83, once through the energy call, per GPU
        assert len(calls_named(fake, gate)) == 4 and src._by_call == {(0, gate), (1, gate)}
    elif gate not in ("nvlink", "gpm"):
        assert len(calls_named(fake, gate)) == 2  # once per GPU, then cached as unsupported


def test_transient_error_loses_one_read_only():
    fake, src, clock = make(10.0, fail={"power_mw": pynvml.NVML_ERROR_TIMEOUT})
    assert all("power_mw" not in r.values for r in src.read())
    del fake.fail["power_mw"]
    assert all(r.values["power_mw"] > 0 for r in src.read())
    fake.fail["temp"] = pynvml.NVML_ERROR_NO_PERMISSION
    clock.advance(2.0)                     # temperature is read once a second (GPUs staggered)
    src.read()
    del fake.fail["temp"]
    clock.advance(2.0)
    assert all("temp_c" not in r.values for r in src.read())  # permission: cached
    assert src.unsupported() == {"gpu0": ["temp_c"], "gpu1": ["temp_c"]}


def test_reading_time_is_the_counters_own_timestamp_when_sane():
    _, src, clock = make(5.0, timestamp_offset_s=0.02)
    assert all(r.t == pytest.approx(clock() + 0.02, abs=1e-6) for r in src.read())
    _, src, clock = make(5.0, timestamp_offset_s=3600.0)  # a driver clock an hour off: use ours
    assert all(r.t == clock() for r in src.read())
    _, src, clock = make(5.0, unsupported={"nvlink"})      # no field values at all: ours
    assert all(r.t == clock() for r in src.read())


def test_recorded_field_timestamps_are_epoch_microseconds_close_to_host_time():
    import gzip
    doc = json.loads(gzip.decompress(FIXTURE_FILE.read_bytes()))
    lags = [f[4] / 1e6 - s["t"] for s in doc["samples"] for f in s["fields"] if f[2] == 0]
    assert 0 <= min(lags) and max(lags) < 1.0  # so the 5 s sanity window keeps real stamps


def test_gpm_alternates_two_buffers_and_waits_100ms():
    off = at("matmul_bf16_8192_4s", 0.3)
    fake, default, clock = make(off, gpu_count=1)
    default.close()
    src = NvmlSource(nvml=fake, clock=clock, gpm_period_s=0.0)    # as often as NVML allows
    assert "gpm_sm_util_pct" not in src.read()[0].values   # first sample: nothing to compare yet
    clock.advance(0.05)
    assert "gpm_sm_util_pct" not in src.read()[0].values   # too soon: no sample taken
    for _ in range(4):
        clock.advance(0.12)
        v = src.read()[0].values
        assert v["gpm_sm_util_pct"] > 90 and v["gpm_tensor_util_pct"] > 85  # bf16 matmul, recorded
    buffers = [c[2][0] for c in calls_named(fake, "nvmlGpmSampleGet")]
    assert len(buffers) == 5 and len(set(buffers)) == 2
    assert all(a != b for a, b in zip(buffers, buffers[1:]))
    src.close()
    assert fake.initialized == 0 and not fake._gpm_samples


def test_eight_gpus_replicate_recorded_ones():
    fake, src, _ = make(at("ddp_100M_40steps"), gpu_count=8)
    readings = src.read()
    assert [r.device for r in readings] == [f"gpu{i}" for i in range(8)]
    assert readings[6].values["nvlink_tx_kib"] == readings[0].values["nvlink_tx_kib"]
    assert readings[7].values["nvlink_rx_kib"] == readings[1].values["nvlink_rx_kib"]
    some = NvmlSource(nvml=fake, gpus=[2, 5])
    assert some.devices() == ["gpu2", "gpu5"]
    with pytest.raises(SourceError):
        NvmlSource(nvml=fake, gpus=[9])


def test_nvml_that_cannot_start_is_a_source_error():
    class NoDriver(FakeNvml):
        def nvmlInit(self):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(SourceError, match="NVML cannot start"):
        NvmlSource(nvml=NoDriver(REC))


def poll(phase: str, fa: float, fb: float, hz: float = 10.0) -> dict[str, np.ndarray]:
    """Columns (raw + derived rates) of gpu0 polled at hz through a fraction of a recorded phase."""
    a, b = at(phase, fa), at(phase, fb)
    _, src, clock = make(a, gpu_count=1)
    readings = []
    for _ in range(int((b - a) * hz)):
        readings += src.read()
        clock.advance(1.0 / hz)
    cols = readings_to_columns("n1", readings)
    return {k: np.array([np.nan if v is None else v for v in cols[k]], dtype=float) for k in cols
            if k not in ("node", "device", "kind")}


def test_nvlink_counter_rate_agrees_with_gpm_bandwidth():
    """Counter rates (traces.rates) against NVML's independent GPM NVLink bandwidth, DDP phase."""
    c = poll("ddp_100M_40steps", 0.1, 0.9)
    assert np.nanmean(c["nvlink_tx_Bps"]) > 1e9  # DDP gradient all-reduce: GB/s over NVLink
    assert np.nanmean(c["nvlink_tx_Bps"]) == pytest.approx(np.nanmean(c["gpm_nvlink_tx_mibps"]) * 2**20, rel=0.1)
    assert np.nanmin(c["nvlink_tx_Bps"]) >= 0


def test_energy_counter_rate_agrees_with_power_when_steady():
    # Steady bf16 matmul: the ~1 s averaged power gauge and the energy counter's slope agree; at a
    # phase's start they do not (the gauge lags), so the window starts 30 % into the phase.
    c = poll("matmul_bf16_8192_4s", 0.3, 0.95)
    assert np.nanmean(c["energy_W"]) == pytest.approx(np.nanmean(c["power_mw"]) / 1e3, rel=0.05)
    assert np.nanmean(c["energy_W"]) > 500


def test_slow_gauges_once_a_second_staggered_over_the_gpus():
    fake, src, clock = make(at("ddp_100M_40steps", 0.2), gpu_count=8)
    per_tick, energy_per_tick = [], []
    temps = {f"gpu{i}": 0 for i in range(8)}
    energies = dict(temps)
    for _ in range(30):                        # 3 s at 10 Hz
        readings = src.read()
        for r in readings:
            assert {"nvlink_tx_kib", "nvlink_rx_kib", "power_mw", "gpu_util_pct"} <= set(r.values)
            temps[r.device] += "temp_c" in r.values
            energies[r.device] += "energy_mj" in r.values
            assert ("temp_c" in r.values) == ("sm_clock_mhz" in r.values) == ("mem_used_bytes" in r.values)
        per_tick.append(sum("temp_c" in r.values for r in readings))
        energy_per_tick.append(sum("energy_mj" in r.values for r in readings))
        clock.advance(0.1)
    assert per_tick[0] == energy_per_tick[0] == 8          # the first read has everything
    assert max(per_tick[1:]) <= 2 and sum(per_tick[1:]) == 8 * 2   # then 8 GPUs spread over each second
    assert max(energy_per_tick[1:]) <= 2 and sum(energy_per_tick[1:]) == 8 * 2   # energy too (1 s)
    assert set(temps.values()) == set(energies.values()) == {3}
    # the energy field is asked only in the calls where it is due
    reqs = [req for _, _, (req,) in calls_named(fake, "nvmlDeviceGetFieldValues") if len(req) > 1]
    assert sum((83, 0) in req for req in reqs) == 8 * 3
    assert len(calls_named(fake, "temp")) == 24 and len(calls_named(fake, "power_mw")) == 240


def test_energy_comes_as_field_83_in_the_nvlink_call():
    off = at("matmul_bf16_8192_4s", 0.5)
    fake, src, clock = make(off)
    readings = src.read()
    req = calls_named(fake, "nvmlDeviceGetFieldValues")[-1][2][0]
    assert req == ((138, SCOPE_ALL_LINKS), (139, SCOPE_ALL_LINKS), (83, 0))
    assert len(calls_named(fake, "nvmlDeviceGetFieldValues")) == 4   # 2 GPUs: the scope probe, then one call each
    for g, r in enumerate(readings):
        assert r.values["energy_mj"] == recorded(g, "energy_mj", off)


@pytest.mark.parametrize("metric, knob, field", [("energy_mj", "energy_field", 83)])
def test_a_metric_falls_back_to_its_call_where_its_field_is_missing_and_not_for_a_transient_error(metric, knob, field):
    off = at("matmul_bf16_8192_4s", 0.5)
    fake, src, clock = make(off, energy_period_s=0.0, unsupported={knob})
    for k in range(3):
        assert all(r.values[metric] == recorded(g, metric, off + 0.1 * k) for g, r in enumerate(src.read()))
        clock.advance(0.1)
    assert src._by_call == {(0, metric), (1, metric)}
    req = calls_named(fake, "nvmlDeviceGetFieldValues")[-1][2][0]
    assert (field, 0) not in req and len(req) == 2           # not asked again; NVLink still is
    fake, src, clock = make(off, energy_period_s=0.0, fail={knob: pynvml.NVML_ERROR_TIMEOUT})
    assert all(metric not in r.values and r.values["nvlink_tx_kib"] > 0 for r in src.read())
    del fake.fail[knob]
    clock.advance(0.1)
    assert all(metric in r.values for r in src.read()) and not src._by_call


def test_uuids_are_asked_once_and_look_like_the_drivers():
    fake, src, _ = make(5.0, gpu_count=8)
    u = src.uuids()
    assert list(u) == src.devices() and len(set(u.values())) == 8
    import re
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", x) for x in u.values())
    assert src.uuids() == u == make(9.0, gpu_count=8)[1].uuids()      # deterministic
    assert len(calls_named(fake, "nvmlDeviceGetUUID")) == 8
    assert make(5.0, unsupported={"uuid"})[1].uuids() == {}


def test_gpm_at_a_lower_rate_averages_over_the_longer_interval():
    fake, _, clock = make(at("matmul_bf16_8192_4s", 0.2), gpu_count=1)
    src = NvmlSource(nvml=fake, clock=clock, gpm_period_s=0.5)
    got = []
    for _ in range(20):
        got.append("gpm_sm_util_pct" in src.read()[0].values)
        clock.advance(0.1)
    assert sum(got) == 3 and got[5] and got[10] and got[15]    # samples at 0, 0.5, 1.0, 1.5 s
    assert len(calls_named(fake, "nvmlGpmSampleGet")) == 4
    with pytest.raises(ValueError):
        NvmlSource(nvml=FakeNvml(REC), slow_period_s=-1)


def test_field_values_unpacked_from_bytes_equal_the_bindings_attributes():
    from trainsentry.telemetry.nvml_structs import field_layout as _field_layout
    vals = (pynvml.c_nvmlFieldValue_t * 3)()
    for k, (ret, v, ts) in enumerate([(0, 2**64 - 1, 1796007431823081), (pynvml.NVML_ERROR_NOT_SUPPORTED, 0, 0),
                                      (0, 18, -5)]):
        vals[k].fieldId, vals[k].scopeId, vals[k].latencyUsec = 138, SCOPE_ALL_LINKS, 7
        vals[k].nvmlReturn, vals[k].value.ullVal, vals[k].timestamp = ret, v, ts
    layout = _field_layout(pynvml.c_nvmlFieldValue_t)
    assert [(r, v, ts) for ts, r, v in layout.iter_unpack(bytes(vals))] == \
        [(int(x.nvmlReturn), int(x.value.ullVal), int(x.timestamp)) for x in vals]
    assert _field_layout(int) is None


def test_read_periods_pass_through_open_sources():
    from trainsentry.telemetry import open_sources
    nvml, net = open_sources(["nvml", "net"], nvml_module=FakeNvml(REC), nvml_slow_period_s=2.0,
                             nvml_gpm_period_s=0.1, net_rescan_s=1.0, net_sysfs_root="/nonexistent")
    assert (nvml.slow_period_s, nvml.gpm_period_s, net.rescan_s) == (2.0, 0.1, 1.0)
    assert NvmlSource(nvml=FakeNvml(REC), gpm_period_s=0.01).gpm_period_s == 0.1   # never under NVML's 100 ms


def test_nvlink_read_less_often_when_asked_and_no_call_when_nothing_is_due():
    clock = ManualClock()
    fake = FakeNvml(REC, clock=clock, start=clock() - at("ddp_100M_40steps", 0.2), gpu_count=4)
    src = NvmlSource(nvml=fake, clock=clock, nvlink_period_s=1.0, energy_period_s=1.0)
    per_tick, after_first = [], None
    for _ in range(30):                        # 3 s at 10 Hz
        readings = src.read()
        after_first = after_first if after_first is not None else len(calls_named(fake, "nvmlDeviceGetFieldValues"))
        per_tick.append(sum("nvlink_tx_kib" in r.values for r in readings))
        assert all("power_mw" in r.values for r in readings)
        clock.advance(0.1)
    assert per_tick[0] == 4 and max(per_tick[1:]) <= 1 and sum(per_tick[1:]) == 4 * 2   # staggered, 1 Hz
    # after the first read: one field call per GPU and second (NVLink and energy fall due together
    # and share it), none on the other ticks
    later = calls_named(fake, "nvmlDeviceGetFieldValues")[after_first:]
    assert len(later) == 4 * 2 and all(set(req) >= {(83, 0)} for _, _, (req,) in later)
    assert src.nvlink_period_s == 1.0
    with pytest.raises(ValueError, match="nvlink"):
        NvmlSource(nvml=FakeNvml(REC), nvlink_period_s=-1)


def test_utilization_and_gpm_unpacked_from_bytes_equal_the_bindings_attributes():
    from trainsentry.telemetry.nvml_structs import gpm_layout, util_layout
    u = pynvml.c_nvmlUtilization_t()
    u.gpu, u.memory = 97, 2**32 - 1
    assert util_layout(pynvml.c_nvmlUtilization_t).unpack_from(u) == (u.gpu, u.memory)
    mg = pynvml.c_nvmlGpmMetricsGet_t()
    answers = [(0, 12.5), (pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0), (0, float("nan")), (0, -1e-300)]
    for j, (ret, value) in enumerate(answers):
        mg.metrics[j].metricId, mg.metrics[j].nvmlReturn, mg.metrics[j].value = 60 + j, ret, value
    layout, offset = gpm_layout(pynvml.c_nvmlGpmMetricsGet_t, len(answers))
    got = layout.unpack_from(mg, offset)
    assert list(zip(got[0::2], got[1::2]))[:2] == [(m.nvmlReturn, m.value) for m in mg.metrics[:2]] == answers[:2]
    assert got[4] == 0 and got[5] != got[5] and got[6:] == (0, -1e-300)
    assert util_layout(int) is None and gpm_layout(int, 8) is None and util_layout(pynvml.c_nvmlMemory_t) is None


def read_for(src, clock, ticks=25):
    out = []
    for _ in range(ticks):
        out.append([(r.device, r.t, r.values) for r in src.read()])
        clock.advance(0.1)
    return out


def test_readings_are_the_same_where_the_structures_cannot_be_unpacked(monkeypatch):
    """The attribute-by-attribute fallback (a binding with another layout, or one answering field
    values with a plain list) reads exactly what unpacking the bytes reads."""
    import trainsentry.telemetry.nvml as nvml_mod
    off = at("ddp_100M_40steps", 0.3)
    reference = read_for(*make(off)[1:])
    assert any("gpm_sm_util_pct" in v for tick in reference for _, _, v in tick)   # GPM read in there too

    fake, src, clock = make(off)
    as_arrays = fake.nvmlDeviceGetFieldValues
    monkeypatch.setattr(fake, "nvmlDeviceGetFieldValues", lambda h, req: list(as_arrays(h, req)))
    assert read_for(src, clock) == reference
    monkeypatch.undo()

    for name in ("fields_layout", "util_layout", "gpm_layout"):
        monkeypatch.setattr(nvml_mod, name, lambda *a: None)
    assert read_for(*make(off)[1:]) == reference


def test_the_read_loop_reads_no_structure_through_the_bindings_python_attributes(monkeypatch):
    """Field values, utilization and GPM answers are unpacked from the structures' bytes, and the GPM
    requests are filled once: none of their fields is read through the binding's Python-level
    __getattribute__ or set through its __setattr__ once the GPUs are set up (every GPU, ten times a
    second, otherwise). Memory info, a slow gauge read once a second, still reads ``used`` by name."""
    import sys
    clock = ManualClock()
    fake = FakeNvml(REC, clock=clock, start=clock() - at("ddp_100M_40steps", 0.3), gpu_count=4)
    src = NvmlSource(nvml=fake, clock=clock, gpm_period_s=0.1)
    read_for(src, clock, 3)                       # setup: GPM support, buffers and requests, field plans
    seen = []
    cls = pynvml._PrintableStructure
    get, put = cls.__getattribute__, cls.__setattr__

    def from_source(kind, obj, name):
        if sys._getframe(2).f_code.co_filename.endswith(("telemetry/nvml.py", "telemetry\\nvml.py")):
            seen.append((kind, type(obj).__name__, name))

    def counted_get(self, name):
        from_source("get", self, name)
        return get(self, name)

    def counted_set(self, name, value):
        from_source("set", self, name)
        put(self, name, value)
    monkeypatch.setattr(cls, "__getattribute__", counted_get)
    monkeypatch.setattr(cls, "__setattr__", counted_set)
    readings = read_for(src, clock, 20)
    monkeypatch.undo()
    assert sum("gpm_sm_util_pct" in v for tick in readings for _, _, v in tick) >= 4 * 8
    assert sum("gpu_util_pct" in v and "nvlink_tx_kib" in v for tick in readings for _, _, v in tick) == 4 * 20
    assert {s for s in seen if s[1] != "c_nvmlMemory_t"} == set()
    assert set(seen) <= {("get", "c_nvmlMemory_t", "used")}


@pytest.mark.parametrize("flat, expect", [
    # (timestamp µs, nvmlReturn, value) for TX then RX: both answered, the later stamp is the time
    ((1_800_000_000_100_000, 0, 11, 1_800_000_000_200_000, 0, 22), (11, 22, 1_800_000_000.2)),
    ((1_800_000_000_200_000, 0, 11, 1_800_000_000_100_000, 0, 22), (11, 22, 1_800_000_000.2)),
    ((0, 0, 11, 0, 0, 22), (11, 22, None)),                                   # no stamp: host time
    ((1_800_000_006_000_000, 0, 11, 1_800_000_000_000_000, 0, 22), (11, 22, None)),   # 6 s off: host time
    ((1_800_000_004_900_000, 0, 11, 1_800_000_000_000_000, 0, 22), (11, 22, 1_800_000_004.9)),
    ((1_800_000_000_300_000, 15, 0, 1_800_000_000_100_000, 0, 22), ("MISSING", 22, 1_800_000_000.1)),
    ((1_800_000_000_300_000, 0, 11, 1_800_000_000_100_000, 3, 0), (11, "MISSING", 1_800_000_000.3)),
    ((1_800_000_000_300_000, 3, 0, 1_800_000_000_100_000, 3, 0), ("MISSING", "MISSING", None)),
])
def test_the_all_links_read_totals_and_times_like_the_per_link_one(flat, expect, monkeypatch):
    """One TX and one RX element (the all-links scope, written out in _fields) read as the general
    path reads them: a total only from an answered element, the later answered stamp as the time
    when within 5 s of the host's."""
    import trainsentry.telemetry.nvml as nvml_mod
    from trainsentry.telemetry.nvml import MISSING
    fake, src, clock = make(5.0)
    clock.t = 1_800_000_000.0
    src._field_plan(0, False, True)
    answers = []    # what the call returns (not an array: the flat tuple comes from _flat below)
    monkeypatch.setattr(fake, "nvmlDeviceGetFieldValues", lambda h, req: answers)
    monkeypatch.setattr(nvml_mod, "_flat", lambda vals, layouts: flat)
    tx, rx, _, t = src._fields(0, clock(), with_scalars=False)
    got = ["MISSING" if v is MISSING else v for v in (tx, rx)]
    assert (*got, t) == expect
    # the same through the general path: the answers as two links of a per-link scope
    src._plans[0][1][False, True] = ([(138, 0), (139, 0)] * 2, 2, [])
    two = (flat[0], flat[1], flat[2], flat[0], flat[1], 0, flat[3], flat[4], flat[5], flat[3], flat[4], 0)
    monkeypatch.setattr(nvml_mod, "_flat", lambda vals, layouts: two)
    tx2, rx2, _, t2 = src._fields(0, clock(), with_scalars=False)
    assert (["MISSING" if v is MISSING else v for v in (tx2, rx2)], t2) == (got, t)
