"""A tiny labeled dataset replayed from the H200 probe: DDP training, one-way sends (a
prefill → decode hand-off shape) as inference, idle as other; three configurations per class
(different lengths), two repeats each at different times."""

import pytest

from detect.probe_traces import GIB, IDLE_MEM_BYTES, write_probe_trace

PHASE = {"training": ("ddp", 20 * GIB), "inference": ("send", 30 * GIB), "other": ("idle", IDLE_MEM_BYTES)}
FAMILY = {"training": "ddp", "inference": "disagg", "other": "idle"}


def write_probe_dataset(root, lengths=(36.0, 42.0, 48.0), prefix: str = "", t: float = 1.8e9):
    """One configuration per class and length (``prefix`` + family + length), two repeats each."""
    for cls, (phase, mem) in PHASE.items():
        for seconds in lengths:
            for rep in range(2):
                plan = [("idle", 3.0, IDLE_MEM_BYTES), (phase, seconds, mem), ("idle", 2.0, IDLE_MEM_BYTES)]
                write_probe_trace(root, f"{prefix}{FAMILY[cls]}-{int(seconds)}-r{rep}", plan, cls, FAMILY[cls],
                                  f"{prefix}{FAMILY[cls]}-{int(seconds)}", t_start=t)
                t += seconds + 60.0
    return root


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    return write_probe_dataset(tmp_path_factory.mktemp("h200"))


@pytest.fixture(scope="session")
def feature_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("feature-cache")
