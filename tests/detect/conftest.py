"""A tiny labeled dataset replayed from the H200 probe: DDP training, one-way sends (a
prefill → decode hand-off shape) as inference, idle as other; three configurations per class
(different lengths), two repeats each at different times."""

import pytest

from detect.probe_traces import GIB, IDLE_MEM_BYTES, write_probe_trace

PHASE = {"training": ("ddp", 20 * GIB), "inference": ("send", 30 * GIB), "other": ("idle", IDLE_MEM_BYTES)}
FAMILY = {"training": "ddp", "inference": "disagg", "other": "idle"}


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("h200")
    t = 1.8e9
    for cls, (phase, mem) in PHASE.items():
        for seconds in (36.0, 42.0, 48.0):
            for rep in range(2):
                plan = [("idle", 3.0, IDLE_MEM_BYTES), (phase, seconds, mem), ("idle", 2.0, IDLE_MEM_BYTES)]
                write_probe_trace(root, f"{FAMILY[cls]}-{int(seconds)}-r{rep}", plan, cls, FAMILY[cls],
                                  f"{FAMILY[cls]}-{int(seconds)}", t_start=t)
                t += seconds + 60.0
    return root


@pytest.fixture(scope="session")
def feature_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("feature-cache")
