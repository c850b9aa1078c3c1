"""Unmonitored intervals: silence between batches, declared loss, a node stuck on a hole, a silent node now,
and batches stamped back into history already received (time regression)."""

from __future__ import annotations

import itertools
import json
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import Agent, gpu_samples, per_second

from trainsentry.collector import query
from trainsentry.collector.store import TIME_REGRESSION_TOLERANCE_S, Store
from trainsentry.wire.batch import NODE_HEADER, SIGNATURE_HEADER

SYSFS = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "node1"   # two NICs and two IB ports


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
                      "device": None, "open": True}]
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


def test_a_hole_inside_one_batch_is_a_silence(agent, client):
    """An agent that stalled mid-batch, or a node bridging a dark stretch with one sample: the hole
    between consecutive samples of one batch is recorded like one between batches."""
    agent.send(gpu_samples(1000.0))                                   # .. 1000.9
    r = agent.send(gpu_samples(1001.0, n=1) + gpu_samples(1047.0))    # one sample, then 46 s of nothing
    assert r.json()["unmonitored"] == [{"start": 1001.0, "end": 1047.0, "reason": "silence",
                                        "seq_from": None, "seq_to": None}]
    # a batch spread evenly over its span has no hole, however long it is
    r = agent.send(gpu_samples(1048.0, n=40, dt=0.5))
    assert r.status_code == 200 and "unmonitored" not in r.json()
    assert _closed(client) == [(1001.0, 1047.0, "silence", None, None)]


def test_a_long_declared_interval_does_not_postpone_a_silent_node(db, key, client):
    """The 10 s cap on the node's stated interval holds for a node silent now too: declaring an hour
    once left it 'not silent' for three hours."""
    a = Agent(client, "node-a", key, interval_s=3600.0)
    now = time.time()
    a.send(gpu_samples(now - 1.0, n=2))
    c = sqlite3.connect(db)
    try:
        later = now + 60.0
        (got,) = query.unmonitored(c, "node-a", 0, 2e9, now=later)
        assert got["open"] and got["reason"] == "silence"
        assert query.list_nodes(c, now=later)[0]["silent"] is True
        assert query.list_nodes(c, now=now + 1.0)[0]["silent"] is False
    finally:
        c.close()


def test_empty_batches_are_no_evidence_that_a_node_is_monitored(db, key, client):
    """A node that keeps its chain going with batches of no samples is silent: its open interval
    starts at its last sample, as if it had sent nothing."""
    a = Agent(client, "node-a", key, interval_s=1.0)
    now = time.time()
    a.send(gpu_samples(now - 20.0, n=2))
    c = sqlite3.connect(db)
    try:
        c.execute("UPDATE nodes SET last_data_seen = ?", (now - 19.0,))   # as if sent then; empty batches since
        c.commit()
        for _ in range(3):
            assert a.send([]).status_code == 200
        (got,) = query.unmonitored(c, "node-a", 0, 2e9)
        assert got["open"] and got["reason"] == "silence" and got["start"] == round(now - 20.0 + 0.1, 6)
        assert query.list_nodes(c)[0]["silent"] is True
    finally:
        c.close()


def test_a_sample_stamped_ahead_cannot_push_a_silence_out_of_sight(db, key, client):
    """A node that stamps one sample minutes ahead and goes dark: its open silence starts no later than
    the clock tolerance after the collector received that sample, not at the stamp in the future."""
    a = Agent(client, "node-a", key, interval_s=1.0)
    now = time.time()
    a.send(gpu_samples(now - 1.0, n=2) + gpu_samples(now + 290.0, n=1))
    c = sqlite3.connect(db)
    try:
        (data_seen,) = c.execute("SELECT last_data_seen FROM nodes").fetchone()
        intervals = query.unmonitored(c, "node-a", 0, now + 30.0, now=now + 30.0)
        (got,) = [i for i in intervals if i["open"]]
        assert got["start"] <= data_seen + TIME_REGRESSION_TOLERANCE_S < now + 30.0
        # and the stretch the sample bridged is a silence of its own (a hole inside the batch)
        assert [(i["reason"], i["end"]) for i in intervals if not i["open"]] == [("silence", round(now + 290.0, 6))]
    finally:
        c.close()


def test_a_device_that_stops_reporting_while_its_node_goes_on_is_served_as_silent(agent, client):
    """A node that leaves one GPU out of its batches (a failing NVML source, or an agent patched to
    hide a GPU that trains) is not silent, but that GPU is: /v1/nodes and the node's verdict name it."""
    veth = lambda t: [{"dev": "veth1", "kind": "net", "t": t, "m": {"net_tx_bytes": 1}}]  # noqa: E731
    for k in range(5):                              # both GPUs, 1000 .. 1004.9, and a container's veth
        agent.send(gpu_samples(1000.0 + k) + gpu_samples(1000.0 + k, dev="gpu1") + veth(1000.0 + k))
    for k in range(5, 12):                          # gpu1 no more: 7 s is not yet a silence (3 s + 5 s of
        agent.send(gpu_samples(1000.0 + k))         # clock tolerance) ...
    assert client.get("/v1/nodes").json()["nodes"][0]["silent_devices"] == []
    for k in range(12, 15):                         # ... 10 s is
        agent.send(gpu_samples(1000.0 + k))
    (node,) = client.get("/v1/nodes").json()["nodes"]
    # (the veth is gone too, but interfaces come and go with containers: not listed)
    assert node["silent_devices"] == [{"device": "gpu1", "kind": "gpu", "last_t": 1004.9}], node
    verdict = client.get("/v1/nodes/node-a/verdict").json()
    assert verdict["silent_devices"] == node["silent_devices"]
    # and the windows judged while it was silent say so in their evidence (the live processor)
    assert client.app.state.bus.drain(30.0)
    body = client.get("/v1/nodes/node-a/verdicts", params={"start": 990, "end": 1020}).json()
    named = [v["t_end"] for v in body["verdicts"] if any(l.startswith("devices silent in this window") and
                                                         "gpu1 (last at 1004.9)" in l for l in v["evidence"])]
    assert named and min(named) > 1004.9 + 8.0, named          # only past the silence cutoff
    assert all(not any("devices silent" in l for l in v["evidence"]) for v in body["verdicts"] if v["t_end"] <= 1012.9)
    # while silent, the unmonitored intervals list it open, from its latest sample
    assert [(i["start"], i["end"], i["reason"], i["device"]) for i in _intervals(client) if i["device"]] == [
        (1004.9, None, "device_silence", "gpu1")]
    # it reports again: no longer silent, and the span it missed is kept (the ack says so too)
    r = agent.send(gpu_samples(1015.0) + gpu_samples(1015.0, dev="gpu1"))
    assert r.json()["devices_unmonitored"] == [{"device": "gpu1", "start": 1004.9, "end": 1015.0}]
    assert "unmonitored" not in r.json()                      # the node itself was watched throughout
    assert client.get("/v1/nodes").json()["nodes"][0]["silent_devices"] == []
    assert [(i["start"], i["end"], i["reason"], i["device"], i["open"]) for i in _intervals(client) if i["device"]] == [
        (1004.9, 1015.0, "device_silence", "gpu1", False)]
    assert _intervals(client, start=1016.0) == []                    # the time filter applies to it too


def test_device_silences_are_kept_only_where_the_node_itself_was_watched(agent, client, db):
    """A node silence, or declared losses, are the node's own intervals: its GPUs are not listed again
    for them. A GPU silent inside one batch is kept; a network interface is not watched; and a
    restarted collector still knows each GPU's latest sample."""
    nic = lambda t, n=10: [{"dev": "eth0", "kind": "net", "t": round(t + i * 0.1, 6),  # noqa: E731
                            "m": {"net_tx_bytes": i}} for i in range(n)]
    agent.send(gpu_samples(1000.0) + gpu_samples(1000.0, dev="gpu1") + nic(1000.0))
    r = agent.send(gpu_samples(1030.0) + gpu_samples(1030.0, dev="gpu1"))   # the whole node dark 29 s
    assert [g["reason"] for g in r.json()["unmonitored"]] == ["silence"] and "devices_unmonitored" not in r.json()
    # gpu1 reports at the start and the end of one long batch, gpu0 throughout: a hole of gpu1's own
    body = gpu_samples(1031.0, n=200) + gpu_samples(1031.0, n=1, dev="gpu1") + gpu_samples(1050.0, n=1, dev="gpu1")
    r = agent.send(body)
    assert r.json()["devices_unmonitored"] == [{"device": "gpu1", "start": 1031.0, "end": 1050.0}]
    # the NIC went quiet for 50 s while the GPUs went on: not watched, not kept
    r = agent.send(gpu_samples(1051.0) + gpu_samples(1051.0, dev="gpu1") + nic(1051.0))
    assert "devices_unmonitored" not in r.json()
    # a restart: a new process (here a second store on the same database) reads each GPU's latest sample back
    store = Store(db)
    try:
        from trainsentry.wire.batch import encode_batch, sign
        # gpu0 throughout (the node itself has no hole), gpu1 back after 18 s
        body = encode_batch("node-a", agent.seq, agent.prev, gpu_samples(1052.0, n=190) +
                            gpu_samples(1070.0, dev="gpu1"), 1_790_000_000.0, 1.0, None)
        acc = store.ingest("node-a", sign(agent.key, body), body)
        assert acc.body()["devices_unmonitored"] == [{"device": "gpu1", "start": 1051.9, "end": 1070.0}]
        got = [(i["start"], i["end"], i["device"]) for i in query.unmonitored(store.conn, "node-a", 0, 2e9, now=1071.0)
               if i["reason"] == "device_silence"]
        assert got == [(1031.0, 1050.0, "gpu1"), (1051.9, 1070.0, "gpu1")]
    finally:
        store.close()


def test_device_silences_resist_what_the_node_controls(agent, client):
    """A node controls its batches: a GPU back one batch after the node's own silence is not charged with
    it; two short pieces either side of a node silence are not one long one; a later sample that calls
    the GPU a network interface does not stop it being watched; and the batch that ends a GPU's silence
    cannot widen the threshold by declaring a longer interval."""
    both = lambda t, n=10: gpu_samples(t, n=n) + gpu_samples(t, n=n, dev="gpu1")  # noqa: E731
    agent.send(both(1000.0))
    r = agent.send(gpu_samples(1030.0))                    # the node dark 29 s: its own silence ...
    assert [g["reason"] for g in r.json()["unmonitored"]] == ["silence"]
    r = agent.send(gpu_samples(1031.0) + gpu_samples(1031.0, dev="gpu1"))    # ... gpu1 back one batch later
    assert "devices_unmonitored" not in r.json(), r.json()
    # gpu1 last at 1031.9; the node goes on to 1037.9, is dark to 1050, then gpu1 is back at 1056:
    # 6 s before the node's silence and 6 s after it, each shorter than a silence plus the tolerance
    agent.send(gpu_samples(1032.0, n=60))
    r = agent.send(gpu_samples(1050.0, n=60) + gpu_samples(1056.0, dev="gpu1"))
    assert [g["reason"] for g in r.json()["unmonitored"]] == ["silence"] and "devices_unmonitored" not in r.json()
    # gpu1 silent 12 s, back as a "net" device in the batch's samples: still a GPU to the collector
    agent.send(gpu_samples(1057.0, n=120))
    r = agent.send(gpu_samples(1069.0) + [{"dev": "gpu1", "kind": "net", "t": 1069.0, "m": {"net_tx_bytes": 1}}])
    assert r.json()["devices_unmonitored"] == [{"device": "gpu1", "start": 1056.9, "end": 1069.0}]
    # 12 s again, in a batch declaring a 10 s interval (a 15 s threshold by its own rule): the stored 1 s
    # interval's 8 s still holds
    agent.send(gpu_samples(1070.0, n=110))
    agent.interval_s = 10.0
    r = agent.send(gpu_samples(1081.0) + gpu_samples(1081.0, dev="gpu1"))
    agent.interval_s = 1.0
    assert r.json()["devices_unmonitored"] == [{"device": "gpu1", "start": 1069.0, "end": 1081.0}]


def test_a_batch_built_to_make_device_silences_costly_is_stored_and_read_right(db, key):
    """The most samples a batch may carry (wire.batch.MAX_SAMPLES), arranged so that 63 GPU spans each
    cross some 9,900 separate node holes: the batch is stored, the node's holes are recorded, and
    nothing of the GPUs' spans is left uncovered (each piece between holes lasts 1 s). The work is
    linear in spans plus the holes each crosses, inside the writer's transaction."""
    from trainsentry.wire.batch import GENESIS_PREV, MAX_SAMPLES, digest, encode_batch, sign

    devs = [f"gpu{i}" for i in range(64)]
    store = Store(db)
    try:
        first = encode_batch("node-a", 0, GENESIS_PREV, [s for d in devs for s in gpu_samples(1000.0, n=1, dev=d)],
                             1_790_000_000.0, 1.0, None)
        store.ingest("node-a", sign(key, first), first)
        pairs = (MAX_SAMPLES - 63) // 2          # gpu0 twice a second apart, then 9 s of nothing, ...
        body = [s for k in range(1, pairs + 1) for s in gpu_samples(1000.0 + 10.0 * k, n=2, dt=1.0)]
        t_end = 1000.0 + 10.0 * (pairs + 1)
        body += [s for d in devs[1:] for s in gpu_samples(t_end, n=1, dev=d)]   # ... the others once, at the end
        second = encode_batch("node-a", 1, digest(first), body, 1_790_000_000.0, 1.0, None)
        acc = store.ingest("node-a", sign(key, second), second)
        assert acc.n_samples == len(body) <= MAX_SAMPLES
        assert len(acc.gaps) == pairs + 1 and acc.device_gaps == []   # the holes, and the silence before the batch
        assert store.conn.execute("SELECT COUNT(*) FROM device_silences").fetchone()[0] == 0
    finally:
        store.close()


def test_enrolled_node_that_never_reported_is_silent_since_enrolment(db, key):
    store = Store(db)
    try:
        enrolled_at = store.conn.execute("SELECT enrolled_at FROM nodes").fetchone()[0]
        got = query.unmonitored(store.conn, "node-a", 0, 2e9, now=enrolled_at + 10)
        assert got == [{"start": enrolled_at, "end": None, "reason": "silence", "seq_from": None, "seq_to": None,
                        "device": None, "open": True}]
        assert query.unmonitored(store.conn, "node-a", 0, 2e9, now=enrolled_at + 1) == []
    finally:
        store.close()


def test_unknown_node_is_404(client):
    r = client.get("/v1/nodes/nobody/unmonitored")
    assert r.status_code == 404 and r.json()["error"] == "unknown_node"


# -- time regression: a chain-valid batch stamped before samples already received -----------------

def _closed(client, **params) -> list[tuple]:
    return [(i["start"], i["end"], i["reason"], i["seq_from"], i["seq_to"]) for i in _intervals(client, **params)
            if not i["open"]]


def test_a_batch_stamped_back_in_time_is_accepted_stored_and_recorded_as_time_regression(agent, client, db):
    agent.send(gpu_samples(1000.0))                 # 1000.0 .. 1000.9
    agent.send(gpu_samples(1001.0))                 # .. 1001.9: the node's latest sample
    back = gpu_samples(990.0, n=5, kib0=7)          # 990.0 .. 990.4: into history already received
    r = agent.send(back)
    assert r.status_code == 200, r.text             # accepted: an honest clock stepped back must not stall
    assert r.json()["seq"] == 2 and r.json()["stored_seq"] == 2
    assert r.json()["unmonitored"] == [{"start": 990.0, "end": 1001.9, "reason": "time_regression",
                                        "seq_from": 2, "seq_to": 2}]
    c = sqlite3.connect(db)
    try:
        stored = c.execute("SELECT t, nvlink_tx_kib FROM samples WHERE t < 991 ORDER BY t").fetchall()
        assert stored == [(990.0, 7), (990.1, 107), (990.2, 207), (990.3, 307), (990.4, 407)]
        assert c.execute("SELECT last_t FROM nodes").fetchone() == (1001.9,)  # the latest sample stays the latest
        assert c.execute("SELECT t_first, t_last FROM batches WHERE seq = 2").fetchone() == (990.0, 990.4)
    finally:
        c.close()
    # served with the other intervals: per node, and in the totals; no bogus silence beside it
    assert _closed(client) == [(990.0, 1001.9, "time_regression", 2, 2)]
    assert _closed(client, start=995.0, end=996.0) == [(990.0, 1001.9, "time_regression", 2, 2)]
    assert client.get("/v1/stats").json()["total"]["unmonitored"] == {"time_regression": 1}
    (node,) = client.get("/v1/nodes").json()["nodes"]
    assert node["backdated"]["batches"] == 1 and node["backdated"]["max_s"] == pytest.approx(11.9)
    # the next batch continues after the latest sample (1001.9), not after the back-dated one: no silence
    r = agent.send(gpu_samples(1002.0))
    assert r.status_code == 200 and "unmonitored" not in r.json()
    # silence is still measured from the latest sample
    r = agent.send(gpu_samples(1010.0))
    assert r.json()["unmonitored"] == [{"start": 1002.9, "end": 1010.0, "reason": "silence",
                                        "seq_from": None, "seq_to": None}]
    assert _closed(client) == [(990.0, 1001.9, "time_regression", 2, 2), (1002.9, 1010.0, "silence", None, None)]


def test_a_declared_loss_stamped_back_in_time_is_both_and_neither_interval_runs_backwards(agent, client):
    agent.send(gpu_samples(1000.0))                 # latest sample 1000.9
    r = agent.send(gpu_samples(980.0), seq=3, gap_from=1)
    assert r.status_code == 200, r.text
    # where the lost batches lay in time is unknown: the loss is pinned at the batch's first sample
    assert _closed(client) == [(980.0, 980.0, "declared_loss", 1, 2), (980.0, 1000.9, "time_regression", 3, 3)]


def test_a_batch_slightly_behind_the_latest_sample_is_not_a_time_regression(agent, client):
    tol = TIME_REGRESSION_TOLERANCE_S
    agent.send(gpu_samples(1000.0))                                    # latest sample 1000.9
    for t0 in (1000.9, 1000.9 - 0.04, 1000.9 - tol + 0.01):            # level, NVML-size jitter, just within
        r = agent.send(gpu_samples(t0, n=1))
        assert r.status_code == 200 and "unmonitored" not in r.json(), (t0, r.json())
    assert _closed(client) == []
    # not unmonitored, but counted on the node: two of the three began before the latest sample
    (node,) = client.get("/v1/nodes").json()["nodes"]
    assert node["backdated"]["batches"] == 2 and node["backdated"]["max_s"] == pytest.approx(tol - 0.01)
    r = agent.send(gpu_samples(1000.9 - tol - 0.01, n=1))              # just beyond: recorded
    (gap,) = r.json()["unmonitored"]
    assert gap["reason"] == "time_regression" and gap["end"] == 1000.9 and gap["seq_from"] == gap["seq_to"] == 4
    assert abs(gap["start"] - (1000.9 - tol - 0.01)) < 1e-6
    (node,) = client.get("/v1/nodes").json()["nodes"]
    assert node["backdated"]["batches"] == 3 and node["backdated"]["max_s"] == pytest.approx(tol + 0.01)


def test_a_recorded_trace_in_agent_batches_has_no_time_regression(agent, client):
    from test_live_jobs import RUN
    from trainsentry.telemetry.replay import read_trace_readings
    readings = read_trace_readings(RUN)
    t0 = float(int(time.time()) - 3600)
    shift = t0 - readings[0].t
    for r in readings:
        r.t += shift
    sent = per_second(readings, t0)
    assert len(sent) > 90
    for b in sent:
        r = agent.send(b)
        assert r.status_code == 200 and "unmonitored" not in r.json(), r.text
    assert _closed(client, start=0, end=2e9) == []


@pytest.mark.parametrize("sources", ["replay", "nvml+net", "nvml+net, stamps 4.5 s behind",
                                     "nvml+net, stamps 4.5 s ahead"])
def test_the_real_agents_batches_never_trip_the_time_regression(tmp_path, client, key, sources):
    """The shipped sampler and spool cut and sign the batches; the collector gets their exact bytes.
    A driver whose NVML stamps are off (as far as the agent accepts) puts GPU readings seconds before
    or after the host-stamped network readings beside them: still within the tolerance."""
    from fakes.fake_pynvml import FakeNvml
    from trainsentry.agent.node import Agent as NodeAgent, AgentConfig
    from trainsentry.agent.spool import Spool
    from trainsentry.telemetry.net import NetSource
    from trainsentry.telemetry.nvml import NvmlSource
    from trainsentry.telemetry.replay import ReplaySource
    if sources == "replay":
        from test_live_jobs import RUN
        # The recording (95 s) at 40x, in batches of 4 s of it (the test app takes 64 KiB at most). The
        # replay reads its own clock, stepped 0.05 s (2 s of trace) per read: on the wall clock a
        # loaded machine's missed ticks or a slow start put more trace into one batch than the app
        # takes (413), which is not what this test is about.
        steps = itertools.count()
        base = time.time()
        srcs, duration, batch_s = [ReplaySource(RUN, speed=40.0, clock=lambda: base + 0.05 * next(steps))], None, 0.1
    else:
        offset = {"nvml+net": 0.0, "nvml+net, stamps 4.5 s behind": -4.5,
                  "nvml+net, stamps 4.5 s ahead": 4.5}[sources]
        srcs = [NvmlSource(nvml=FakeNvml(gpu_count=2, timestamp_offset_s=offset)), NetSource(SYSFS)]
        # half-second batches: the collector's silence rule (3 intervals without samples) then needs a
        # 1.5 s stall of the sampler, which a loaded test machine does not reach, where 0.75 s it could
        duration, batch_s = 3.5, 0.5
    cfg = AgentConfig(collector_url="http://127.0.0.1:9", node="node-a", key=key, spool_path=tmp_path / "spool.db",
                      hz=20, batch_s=batch_s, duration_s=duration, drain_s=0)
    node = NodeAgent(cfg, srcs)
    node.sender.start = lambda: None                 # not sent by the agent: posted below, byte for byte
    node.sender.join = lambda timeout=None: None
    node.run()
    spool = Spool(cfg.spool_path, "node-a", key)
    try:
        bodies, seq = [], -1
        while (b := spool.oldest(seq)) is not None:
            bodies.append(b)
            seq = b.seq
    finally:
        spool.close()
    assert len(bodies) >= 6
    spans = []
    for b in bodies:
        r = client.post("/v1/batches", content=b.body, headers={NODE_HEADER: "node-a", SIGNATURE_HEADER: b.signature})
        assert r.status_code == 200, r.text
        assert "unmonitored" not in r.json(), (sources, r.json())
        ts = [s["t"] for s in json.loads(b.body)["samples"]]
        spans.append((min(ts), max(ts)))
    assert _closed(client, start=0, end=2e9) == []
    # how far a batch began before the latest sample so far: what the tolerance has to cover
    latest, back = spans[0][1], 0.0
    for lo, hi in spans[1:]:
        back = max(back, latest - lo)
        latest = max(latest, hi)
    if "4.5 s" in sources:
        assert 4.0 < back < TIME_REGRESSION_TOLERANCE_S, back    # the case the tolerance is there for
    else:
        assert back <= 0.0, back                                  # on one clock: never back at all
    # the node's counters say the same: none back-dated on one clock; the offset driver's, seen and bounded
    (row,) = client.get("/v1/nodes").json()["nodes"]
    assert row["silent_devices"] == []    # every device reports throughout, offset stamps or not
    if back > 0:
        assert row["backdated"]["batches"] >= 1 and row["backdated"]["max_s"] == pytest.approx(back)
    else:
        assert row["backdated"] == {"batches": 0, "max_s": None}
