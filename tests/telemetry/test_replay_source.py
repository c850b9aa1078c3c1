"""ReplaySource over a trace recorded from the fake H200 NVML (traces/io.py format)."""

from __future__ import annotations

import pytest

from fakes.fake_pynvml import FakeNvml, ManualClock
from trainsentry.telemetry import open_sources
from trainsentry.telemetry.base import SourceError
from trainsentry.telemetry.nvml import NvmlSource
from trainsentry.telemetry.replay import ReplaySource, read_trace_readings
from trainsentry.traces.io import readings_to_columns, write_trace

HZ = 10.0
N_POLLS = 40


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """4 s of both recorded GPUs (the DDP phase) polled at 10 Hz, written as a trace."""
    clock = ManualClock(1_700_000_000.0)
    src = NvmlSource(nvml=FakeNvml(clock=clock, start=clock() - 32.5), clock=clock, gpm=False)
    readings = []
    for _ in range(N_POLLS):
        readings += src.read()
        clock.advance(1 / HZ)
    run = tmp_path_factory.mktemp("run") / "r1"
    manifest = {"run_id": "r1", "node": "n1", "start": readings[0].t, "end": readings[-1].t,
                "sample_hz": HZ, "labels": {"workload": "ddp", "class": "training", "family": "ddp", "config": {}}}
    write_trace(run, readings_to_columns("n1", readings), manifest)
    return run, readings


def test_trace_rows_come_back_as_the_same_readings(trace):
    run, readings = trace
    back = read_trace_readings(run)
    key = lambda r: (r.t, r.device)  # noqa: E731
    assert [(r.device, r.kind, r.t, r.values) for r in sorted(back, key=key)] == \
        [(r.device, r.kind, r.t, r.values) for r in sorted(readings, key=key)]


def test_real_speed_with_retime(trace):
    run, readings = trace
    clock = ManualClock(1_800_000_000.0)
    src = ReplaySource(run, clock=clock)
    assert src.devices() == ["gpu0", "gpu1"]
    first = src.read()
    assert [r.device for r in first] == ["gpu0", "gpu1"] and first[0].t == clock()  # t0 -> now
    clock.advance(1.0)
    got = src.read()
    assert len(got) == 2 * 10  # one more second of 10 Hz from two GPUs
    assert all(r.t <= clock() + 1e-6 for r in got)
    ordered = sorted(readings, key=lambda r: (r.t, r.device))
    assert [r.values for r in got] == [r.values for r in ordered[2:22]]
    clock.advance(10.0)
    rest = src.read()
    assert len(first) + len(got) + len(rest) == len(readings) and src.done and src.read() == []


def test_faster_keeps_intervals_so_rates_stay(trace):
    run, readings = trace
    clock = ManualClock(1_800_000_000.0)
    src = ReplaySource(run, speed=8.0, retime=False, clock=clock)
    clock.advance(0.25)  # 2 s of trace
    got = src.read()
    assert len(got) == 2 * 21 and got[0].t == readings[0].t  # original timestamps kept
    assert not src.done
    clock.advance(0.3)
    got += src.read()
    assert src.done
    assert [r.t for r in got] == sorted(r.t for r in readings)


def test_loop_continues_counters(trace):
    run, _ = trace
    clock = ManualClock(1_800_000_000.0)
    src = ReplaySource(run, speed=4.0, loop=True, clock=clock)
    out = []
    for _ in range(30):
        out += src.read()
        clock.advance(0.1)  # 12 s of trace: three passes
    assert not src.done
    gpu0 = [r for r in out if r.device == "gpu0"]
    assert len(gpu0) > 2 * N_POLLS
    for a, b in zip(gpu0, gpu0[1:]):
        assert b.t > a.t and b.values["nvlink_tx_kib"] >= a.values["nvlink_tx_kib"]
    energy = [r.values["energy_mj"] for r in gpu0 if "energy_mj" in r.values]   # read once a second
    assert len(energy) >= 9 and energy == sorted(energy)


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(SourceError, match="cannot replay"):
        ReplaySource(tmp_path / "missing")
    with pytest.raises(ValueError):
        ReplaySource(tmp_path, speed=0)


def test_open_sources(trace, tmp_path):
    run, _ = trace
    clock = ManualClock()
    fake = FakeNvml(clock=clock, gpu_count=4)
    srcs = open_sources(["nvml", "net", f"replay:{run}"], clock=clock, nvml_module=fake,
                        net_sysfs_root=tmp_path, replay_speed=2.0)
    assert [s.name for s in srcs] == ["nvml", "net", "replay"]
    assert srcs[0].devices() == [f"gpu{i}" for i in range(4)] and srcs[2].speed == 2.0
    for s in srcs:
        s.close()
    assert fake.initialized == 0
    with pytest.raises(ValueError, match="unknown source"):
        open_sources(["dcgm"])
    with pytest.raises(ValueError, match="unknown source"):
        open_sources(["replay"])
    with pytest.raises(ValueError, match="unknown source option"):
        open_sources(["net"], colour="red")
    fake2 = FakeNvml(clock=clock)
    with pytest.raises(SourceError):  # the second source fails: the first is closed again
        open_sources(["nvml", "replay:/nonexistent"], nvml_module=fake2)
    assert fake2.initialized == 0


def test_a_trace_from_before_the_pipe_metrics_reads_them_as_not_reported(trace, tmp_path):
    """The committed datasets were recorded before the GPM pipe metrics and the host source (schema
    ``late``): their samples lack those columns (and the host counters' rate columns), which read back
    as nulls; any other missing column is an error."""
    import shutil

    import pyarrow.parquet as pq

    from trainsentry.traces.io import SAMPLES_FILE, read_samples
    from trainsentry.traces.schema import METRICS

    late = [m.name for m in METRICS if m.late]
    assert late == ["gpm_fp32_util_pct", "gpm_fp16_util_pct", "gpm_integer_util_pct", "cpu_user_ms",
                    "cpu_system_ms", "cpu_idle_ms", "cpu_energy_uj", "host_mem_used_bytes"]
    late += [m.rate_name for m in METRICS if m.late and m.rate_name]
    run, readings = trace
    old = tmp_path / "old"
    shutil.copytree(run, old)
    full = pq.read_table(old / SAMPLES_FILE)
    pq.write_table(full.drop_columns(late), old / SAMPLES_FILE)
    back = read_samples(old)
    assert back.schema == full.schema and back.drop_columns(late).equals(full.drop_columns(late))
    assert all(back.column(n).null_count == len(back) for n in late)
    assert read_trace_readings(old) == read_trace_readings(run)
    pq.write_table(full.drop_columns(["power_mw"]), old / SAMPLES_FILE)
    with pytest.raises(ValueError, match="power_mw"):
        read_samples(old)
