"""Unmonitored intervals: silence between batches, declared loss, a node stuck on a hole, a silent node now."""

from __future__ import annotations

import time

from conftest import Agent, gpu_samples

from trainsentry.collector import query
from trainsentry.collector.store import Store


def _intervals(client, node="node-a", **params):
    r = client.get(f"/v1/nodes/{node}/unmonitored", params=params)
    assert r.status_code == 200, r.text
    return r.json()["intervals"]


def test_silence_between_batches_is_recorded(agent, client):
    agent.send(gpu_samples(1000.0))                 # samples 1000.0 .. 1000.9, interval 1 s
    agent.send(gpu_samples(1002.5))                 # 1.6 s later: within 3 x interval, not a gap
    r = agent.send(gpu_samples(1010.0))             # 6.6 s after 1003.4: unmonitored
    assert r.json()["unmonitored"] == [{"start": 1003.4, "end": 1010.0, "reason": "silence",
                                        "seq_from": None, "seq_to": None}]
    closed = [i for i in _intervals(client) if not i["open"]]
    assert [(i["start"], i["end"], i["reason"]) for i in closed] == [(1003.4, 1010.0, "silence")]
    # the time filter: an interval entirely before `start` is not returned
    assert [i for i in _intervals(client, start=1011.0) if not i["open"]] == []


def test_declared_loss_is_accepted_and_recorded(agent, client, db):
    agent.send(gpu_samples(1000.0))
    r = agent.send(gpu_samples(1003.0), seq=3, gap_from=1)   # the agent lost batches 1 and 2
    assert r.status_code == 200, r.text
    closed = [i for i in _intervals(client) if not i["open"]]
    assert [(i["start"], i["end"], i["reason"], i["seq_from"], i["seq_to"]) for i in closed] == \
        [(1000.9, 1003.0, "declared_loss", 1, 2)]
    assert agent.send(gpu_samples(1004.0)).json()["seq"] == 4  # the chain continues from 3


def test_declared_loss_must_cover_the_whole_hole(agent):
    agent.send(gpu_samples(1000.0))
    r = agent.send(gpu_samples(1004.0), seq=4, gap_from=2)   # batch 1 is missing and undeclared
    assert r.status_code == 409 and r.json()["error"] == "out_of_order" and r.json()["expected_seq"] == 1


def test_first_batch_may_declare_its_predecessors_lost(client, key):
    a = Agent(client, "node-a", key)
    r = a.send(gpu_samples(1000.0), seq=2, gap_from=0)
    assert r.status_code == 200
    (gap,) = r.json()["unmonitored"]
    assert gap["reason"] == "declared_loss" and (gap["seq_from"], gap["seq_to"]) == (0, 1)
    assert gap["start"] <= gap["end"] == 1000.0


def test_node_stuck_behind_a_hole_is_reported_open(agent, client):
    agent.send(gpu_samples(1000.0))
    assert agent.post(agent.body(gpu_samples(1002.0), seq=2)).status_code == 409
    open_ = [i for i in _intervals(client) if i["open"]]
    assert open_ == [{"start": 1000.9, "end": None, "reason": "seq_hole", "seq_from": 1, "seq_to": None,
                      "open": True}]
    agent.send(gpu_samples(1001.0))   # the agent resends batch 1: the hole is repaired
    assert [i for i in _intervals(client) if i["open"] and i["reason"] == "seq_hole"] == []


def test_silent_node_is_reported_open_ended(client, key, db):
    a = Agent(client, "node-a", key, interval_s=0.02)
    now = time.time()
    a.send(gpu_samples(now, n=2, dt=0.01))
    time.sleep(0.1)                   # more than 3 x 0.02 s without a batch
    open_ = [i for i in _intervals(client) if i["open"]]
    assert len(open_) == 1 and open_[0]["reason"] == "silence" and open_[0]["start"] == round(now + 0.01, 6)
    assert client.get("/v1/nodes").json()["nodes"][0]["silent"] is True


def test_enrolled_node_that_never_reported_is_silent_since_enrolment(db, key):
    store = Store(db)
    try:
        enrolled_at = store.conn.execute("SELECT enrolled_at FROM nodes").fetchone()[0]
        got = query.unmonitored(store.conn, "node-a", 0, 2e9, now=enrolled_at + 10)
        assert got == [{"start": enrolled_at, "end": None, "reason": "silence", "seq_from": None, "seq_to": None,
                        "open": True}]
        assert query.unmonitored(store.conn, "node-a", 0, 2e9, now=enrolled_at + 1) == []
    finally:
        store.close()


def test_unknown_node_is_404(client):
    r = client.get("/v1/nodes/nobody/unmonitored")
    assert r.status_code == 404 and r.json()["error"] == "unknown_node"
