"""The fake NVML itself: its recordings hold together, and the recorder script round-trips through it."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

from fakes.fake_pynvml import FakeNvml, ManualClock
from fakes.h200_recording import FIXTURE_FILE, PROBE_DIR, SCOPE_ALL_LINKS, load_recording
from trainsentry.telemetry.nvml import NvmlSource

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "nvml_fixture.py"


def test_probe_energy_integral_matches_the_recorded_counter():
    """Energy the fake derives from the 20 Hz power record against NVML's own energy counter."""
    rec = load_recording(PROBE_DIR)
    after = json.loads((PROBE_DIR / "nvml_after.json").read_text())
    for g, gpu in enumerate(rec.gpus):
        derived_end = gpu.at("energy_mj", rec.t1)
        missing_s = after["t"] - rec.t1  # power record ended ~2.4 s before the last snapshot
        gap_mj = after["snap"][g]["energy_mJ"] - derived_end
        # what the recorded counter adds in that gap must be a power between idle (~77 W) and the
        # 700 W limit, else the derived series would not be the recorded trajectory
        assert 70 * missing_s * 1e3 < gap_mj < 700 * missing_s * 1e3


def test_probe_all_links_is_link0_times_the_measured_link_shares():
    rec = load_recording(PROBE_DIR)
    probe2 = json.loads((PROBE_DIR / "probe2.json").read_text())
    shares = sum(v for _, v in probe2["per_link_after"][0]) / probe2["per_link_after"][0][0][1]
    gpu = rec.gpus[0]
    total = gpu.at(("field", 138, SCOPE_ALL_LINKS), rec.t1)
    assert total == pytest.approx(gpu.at(("field", 138, 0), rec.t1) * shares, rel=1e-5)
    assert 17.5 < shares < 18.0  # NCCL striped evenly over 18 links


def test_fake_runs_on_the_probe_recording_too():
    clock = ManualClock()
    fake = FakeNvml(load_recording(PROBE_DIR), clock=clock, start=clock() - 24.0)
    r = NvmlSource(nvml=fake, clock=clock).read()
    assert r[0].values["nvlink_tx_kib"] > 10 * 2**20 and "temp_c" not in r[0].values  # temp unrecorded


def test_loop_keeps_counters_growing():
    rec = load_recording(FIXTURE_FILE)
    clock = ManualClock()
    fake = FakeNvml(rec, clock=clock, gpu_count=1)
    src = NvmlSource(nvml=fake, clock=clock, gpm=False)
    span = rec.t1 - rec.t0
    last = src.read()[0].values
    for _ in range(int(2.5 * span / 2.0)):
        clock.advance(2.0)
        now = src.read()[0].values
        for m in ("nvlink_tx_kib", "energy_mj"):
            assert now[m] >= last[m]
        last = now
    assert last["nvlink_tx_kib"] > 2 * rec.gpus[0].at(("field", 138, SCOPE_ALL_LINKS), rec.t1)


def test_unknown_calls_fail_loudly():
    fake = FakeNvml()
    with pytest.raises(AttributeError):
        fake.nvmlDeviceSetPowerManagementLimit
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


def test_recorder_script_round_trips_through_the_fake(tmp_path, monkeypatch):
    """scripts/gpu/nvml_fixture.py run against the fake writes a file the fake loads back."""
    fake = FakeNvml()  # real-time clock: the script sleeps for real
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    out = tmp_path / "rec.json"
    monkeypatch.setattr(sys, "argv", ["nvml_fixture.py", str(out), "--seconds", "0.35", "--hz", "10"])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    rec = load_recording(out)
    assert len(rec.gpus) == 2 and rec.gpus[0].link_count == 18
    clock = ManualClock()
    again = FakeNvml(rec, clock=clock, start=clock() - 0.3)
    readings = NvmlSource(nvml=again, clock=clock).read()
    assert {"nvlink_tx_kib", "power_mw", "energy_mj", "temp_c"} <= set(readings[0].values)


def test_field_values_fill_every_member_like_the_driver():
    import pynvml
    clock = ManualClock()
    fake = FakeNvml(clock=clock, start=clock() - 20.0, sum_scope=False)
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(1)
    got = fake.nvmlDeviceGetFieldValues(h, [(138, 3), 91, (139, SCOPE_ALL_LINKS), (83, 0)])
    assert [(v.fieldId, v.scopeId) for v in got] == [(138, 3), (91, 0), (139, SCOPE_ALL_LINKS), (83, 0)]
    assert all(v.timestamp == int(clock() * 1e6) for v in got)
    assert [v.nvmlReturn for v in got] == [0, 0, pynvml.NVML_ERROR_INVALID_ARGUMENT, 0]   # sum scope refused
    assert [v.valueType for v in got] == [pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, pynvml.NVML_VALUE_TYPE_UNSIGNED_INT,
                                          pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG]
    t = fake.rec_time()[0]
    gpu = fake.recording.gpus[1]
    assert got[0].value.ullVal == gpu.at(("field", 138, 3), t) > 0
    assert got[1].value.uiVal == 18 and got[2].value.ullVal == 0
    assert got[3].value.ullVal == gpu.at("energy_mj", t) == fake.nvmlDeviceGetTotalEnergyConsumption(h)


@pytest.mark.parametrize("offset_s", [-3.0, 0.0, 7.31, 20.0, 44.9, 46.0, 100.0, 300.5])
def test_every_answer_is_the_recording_at_the_fake_clock(offset_s):
    """The fake's answers are GpuRecording.at of the recorded GPU at the clock's recording time, counters
    grown by whole loops past the seam; structures read back through the binding's own attributes."""
    import pynvml
    rec = load_recording(FIXTURE_FILE)
    clock = ManualClock()
    fake = FakeNvml(rec, clock=clock, start=clock() - offset_s, gpu_count=3)
    fake.nvmlInit()
    t, loops = fake.rec_time()
    for index in range(3):
        h = fake.nvmlDeviceGetHandleByIndex(index)
        gpu = rec.gpus[index % len(rec.gpus)]

        def recorded(key):
            first, last = gpu.span(key)
            return gpu.at(key, t) + (loops * (last - first) if key == "energy_mj" or key[0] == "field" else 0)
        got = fake.nvmlDeviceGetFieldValues(h, [(138, SCOPE_ALL_LINKS), (139, SCOPE_ALL_LINKS), (138, 5), (83, 0)])
        assert [v.value.ullVal for v in got] == [recorded(("field", 138, SCOPE_ALL_LINKS)),
                                                 recorded(("field", 139, SCOPE_ALL_LINKS)),
                                                 recorded(("field", 138, 5)), recorded("energy_mj")]
        assert fake.nvmlDeviceGetPowerUsage(h) == gpu.at("power_mw", t)
        u = fake.nvmlDeviceGetUtilizationRates(h)
        assert (u.gpu, u.memory) == (gpu.at("gpu_util", t), gpu.at("mem_util", t))
        a, b = fake.nvmlGpmSampleAlloc(), fake.nvmlGpmSampleAlloc()
        fake.nvmlGpmSampleGet(h, a)
        clock.advance(0.5)
        fake.nvmlGpmSampleGet(h, b)
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version, mg.numMetrics, mg.sample1, mg.sample2 = pynvml.NVML_GPM_METRICS_GET_VERSION, 3, a, b
        for j, mid in enumerate((2, 60, 999)):
            mg.metrics[j].metricId = mid
        fake.nvmlGpmMetricsGet(mg)
        t_gpm = fake.rec_time()[0]
        assert [(m.nvmlReturn, m.value) for m in mg.metrics[:2]] == [(0, gpu.at(("gpm", 2), t_gpm)),
                                                                     (0, gpu.at(("gpm", 60), t_gpm))]
        assert mg.metrics[2].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED   # a metric never recorded
        clock.advance(-0.5)


def test_the_fake_carries_the_bindings_own_constants_structures_and_errors():
    import pynvml
    from fakes.fake_pynvml import FakeNvml as cls
    fake = FakeNvml()
    assert fake.NVMLError is pynvml.NVMLError and fake.c_nvmlFieldValue_t is pynvml.c_nvmlFieldValue_t
    assert fake.NVML_ERROR_NOT_SUPPORTED == pynvml.NVML_ERROR_NOT_SUPPORTED and fake.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM
    assert fake.nvmlExceptionClass(pynvml.NVML_ERROR_TIMEOUT) is pynvml.nvmlExceptionClass(pynvml.NVML_ERROR_TIMEOUT)
    # as class attributes, not through a __getattr__ fallback: a class defining __getattr__ sends every
    # attribute read on its instances down CPython's slow path (the agent and the fake make ~400 a tick)
    assert "__getattr__" not in vars(cls)


def test_the_call_log_names_every_call_and_answer_as_made():
    """The log entries (made once per series and request and reused) read as the calls were made:
    (gate, GPU, (key,)) per answer, (name, GPU, (request,)) per field-values call, an answer logged
    before a test's error for its gate, a never-recorded key and an unhashable request logged too."""
    import pynvml
    clock = ManualClock()
    fake = FakeNvml(clock=clock, start=clock() - 5.0, gpu_count=3)
    fake.nvmlInit()
    h0, h2 = fake.nvmlDeviceGetHandleByIndex(0), fake.nvmlDeviceGetHandleByIndex(2)
    req = [(138, SCOPE_ALL_LINKS), (139, SCOPE_ALL_LINKS)]
    for _ in range(2):
        fake.calls.clear()
        fake.nvmlDeviceGetPowerUsage(h2)
        fake.nvmlDeviceGetFieldValues(h0, req)
        fake.nvmlDeviceGetUtilizationRates(h0)
        fake.fail["util"] = pynvml.NVML_ERROR_TIMEOUT
        with pytest.raises(pynvml.NVMLError):
            fake.nvmlDeviceGetUtilizationRates(h2)
        del fake.fail["util"]
        fake.nvmlDeviceGetFieldValues(h2, [[83, 0]])
        assert list(fake.calls) == [
            ("power_mw", 2, ("power_mw",)),
            ("nvmlDeviceGetFieldValues", 0, (tuple(req),)),
            ("nvlink", 0, (("field", 138, SCOPE_ALL_LINKS),)), ("nvlink", 0, (("field", 139, SCOPE_ALL_LINKS),)),
            ("util", 0, ("gpu_util",)), ("util", 0, ("mem_util",)),
            ("util", 2, ("gpu_util",)),
            ("nvmlDeviceGetFieldValues", 2, (([83, 0],),)), ("energy_mj", 2, ("energy_mj",))]
    fake.calls.clear()
    with pytest.raises(pynvml.NVMLError):
        fake._answer(1, "never-recorded", "power_mw", fake.rec_time())
    assert list(fake.calls) == [("power_mw", 1, ("never-recorded",))]
