"""Segmentation on probe-replayed streams: the seed study's rule is split by pauses, ours links them."""

import pytest

from detect.probe_traces import GIB, IDLE_MEM_BYTES, phase_bounds, write_probe_trace
from trainsentry.detect.segment import baseline_segments, segment_stream
from trainsentry.traces.io import read_trace

HELD = 20 * GIB


def _stream(tmp_path, pause_mem, second="ddp"):
    plan = [("idle", 3.0, IDLE_MEM_BYTES), ("ddp", 12.0, HELD), ("idle", 6.0, pause_mem),
            (second, 12.0, HELD), ("idle", 6.0, pause_mem), ("ddp", 12.0, HELD), ("idle", 4.0, IDLE_MEM_BYTES)]
    table, _ = read_trace(write_probe_trace(tmp_path, "s", plan, "training", "ddp", "c"))
    return table, [b for b in phase_bounds(plan) if b[0] != "idle"]


def test_baseline_is_fooled_by_pauses(tmp_path):
    table, bounds = _stream(tmp_path, HELD)
    segs = baseline_segments(table)["node0"]
    assert len(segs) == 3                           # one job reported as three workloads
    for seg, (_, lo, hi) in zip(segs, bounds):
        assert seg.start == pytest.approx(lo, abs=3.5)


def test_ours_links_segments_when_memory_is_held(tmp_path):
    table, bounds = _stream(tmp_path, HELD)
    out = segment_stream(table)["node0"]
    assert len(out["segments"]) == 3
    assert len(out["jobs"]) == 1
    job = out["jobs"][0]
    assert job["segments"] == [0, 1, 2]
    assert job["start"] == pytest.approx(bounds[0][1], abs=1.5)
    assert job["end"] == pytest.approx(bounds[-1][2], abs=2.5)
    assert set(out["segments"][0]["gpus"]) == {"gpu0", "gpu1"}


def test_ours_keeps_jobs_apart_when_memory_is_freed(tmp_path):
    table, _ = _stream(tmp_path, IDLE_MEM_BYTES)
    out = segment_stream(table)["node0"]
    assert len(out["segments"]) == 3 and len(out["jobs"]) == 3


def test_ours_keeps_jobs_apart_when_signature_changes(tmp_path):
    table, _ = _stream(tmp_path, HELD, second="allreduce")   # ~120 W bursts, not a 600 W DDP step loop
    out = segment_stream(table)["node0"]
    assert len(out["segments"]) == 3 and len(out["jobs"]) == 3


def test_nvlink_only_activity_is_a_segment(tmp_path):
    plan = [("idle", 4.0, IDLE_MEM_BYTES), ("send", 10.0, HELD), ("idle", 4.0, IDLE_MEM_BYTES)]
    table, _ = read_trace(write_probe_trace(tmp_path, "p", plan, "inference", "send", "c"))
    assert baseline_segments(table)["node0"] == []  # copy engines: utilisation stays at 0 %
    assert len(segment_stream(table)["node0"]["segments"]) == 1
