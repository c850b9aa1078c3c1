"""The run's groups (worker.run_groups): who creates which subgroup.

On GPUs torch splits every NCCL subgroup from the launch's communicator (ncclCommSplit), and a
rank outside a new subgroup still takes part in that split, even when the subgroup asked for is
gloo. So a gloo subgroup must be created by its members only (use_local_synchronization), and the
NCCL subgroup by every rank. The first H200 campaign calls hung on every single-GPU run because
rank 1 created the gloo group of rank 0 and waited in a split rank 0 never joined. gloo on CPU
cannot show that hang, so this checks the calls each rank makes."""

from __future__ import annotations

import pytest

from trainsentry.workloads import worker


class Calls:
    def __init__(self, rank):
        self.rank, self.made = rank, []

    def new_group(self, ranks=None, backend=None, timeout=None, use_local_synchronization=False):
        self.made.append({"ranks": ranks, "backend": backend, "local": use_local_synchronization})
        return f"group{len(self.made)}"


@pytest.mark.parametrize("rank", [0, 1, 5])
def test_a_non_member_never_creates_a_gloo_subgroup_and_every_rank_creates_the_nccl_one(monkeypatch, rank):
    calls = Calls(rank)
    monkeypatch.setattr(worker.dist, "new_group", calls.new_group)
    monkeypatch.setattr(worker.dist, "get_rank", lambda: rank)
    cache: dict = {}
    active, run = worker.run_groups((0,), 8, "cpu", cache)
    member = rank == 0
    assert calls.made[0] == {"ranks": [0], "backend": None, "local": False}       # every rank: the NCCL group
    gloo = [c for c in calls.made if c["backend"] == "gloo"]
    assert (gloo == [{"ranks": [0], "backend": "gloo", "local": True}]) if member else gloo == []
    assert (active is not None and run is not None) if member else (active is None and run is None)
    # the same rank set again: no new group (each new_group is a collective every rank must repeat)
    n = len(calls.made)
    assert worker.run_groups((0,), 8, "cpu", cache) == (active, run) and len(calls.made) == n


def test_a_run_on_the_whole_launch_uses_the_launch_groups(monkeypatch):
    calls = Calls(0)
    monkeypatch.setattr(worker.dist, "new_group", calls.new_group)
    assert worker.run_groups((), 2, "cpu", {}) == ("cpu", None)
    assert worker.run_groups((0, 1), 2, "cpu", {}) == ("cpu", None)
    assert worker.run_groups((0,), 1, None, {}) == (None, None)
    assert calls.made == []


def test_a_run_that_completed_no_step_is_a_failed_run():
    """Two expert-parallel runs on the H200s spent their whole 40 s drawing weights and were written
    as inference runs with an idle GPU; the worker now records such a run as failed."""
    from trainsentry.workloads.worker import run_errors
    assert run_errors([None, None], {"steps": 12}, 40.0) == []
    assert run_errors([None, None], {"steps": 0}, 51.0) == ["no step completed in 51 s (set-up outlasted the run)"]
    assert run_errors([None], {}, 3.0)                              # no ledger at all
    assert run_errors(["Traceback ...", None], {"steps": 0}, 1.0) == ["Traceback ..."]
