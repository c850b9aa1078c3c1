"""Live verdicts: traces replayed from the real H200 probe readings into a real collector app.

Each node's readings are cut into 1 s signed batches and posted like an agent would; the live
processor judges them on the commit bus; the tests read the verdict API. DDP (symmetric,
simultaneous NVLink bursts) must go idle → training with an alert; a one-way 10 GiB send must go
idle → inference without one; verdicts and alerts must survive a restart; two nodes running one
DDP job (simultaneous bursts on their network too) must form one job, and a third running its own
DDP at the same moments, with no network traffic, must not join it.
"""

from __future__ import annotations

import json
import time
import re
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import Agent
from fastapi.testclient import TestClient

from trainsentry.collector.app import create_app
from trainsentry.collector.live import load_live_detector
from trainsentry.collector.store import Store
from trainsentry.detect.base import save_detector
from trainsentry.detect.rules import CommRules
from trainsentry.features import FEATURE_VERSION

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from detect.probe_traces import GIB, IDLE_MEM_BYTES, readings  # noqa: E402

# recent (the collector refuses samples stamped far ahead of its clock), on a whole minute so that
# window ends (multiples of the 2 s stride) fall where the assertions expect them
T0 = float(int(time.time() // 60) * 60 - 3600)
DDP = [("idle", 12.0, IDLE_MEM_BYTES), ("ddp", 22.0, 20 * GIB)]
SEND = [("idle", 12.0, IDLE_MEM_BYTES), ("send", 22.0, 30 * GIB)]
IDLE = [("idle", 34.0, IDLE_MEM_BYTES)]


def with_network(rs: list) -> list:
    """The readings plus an ``eth0`` whose bytes follow gpu0's NVLink bursts (a quarter of them):
    the inter-node part of a DDP job spanning nodes, which crosses the network in step with the
    intra-node all-reduce."""
    from trainsentry.telemetry.base import Reading
    out = list(rs)
    for r in rs:
        if r.device == "gpu0":
            b = int(r.values["nvlink_tx_kib"]) * 256
            out.append(Reading("eth0", "net", r.t, {"net_tx_bytes": b, "net_rx_bytes": b}))
    return out


def with_host(rs: list, cores) -> list:
    """The readings plus the host source's ``host`` device at gpu0's sample times, ``cores(t)`` cores
    busy in user mode of 16 over the interval that ends at t."""
    from trainsentry.telemetry.base import Reading
    out, user, idle, last = list(rs), 0, 0, None
    for r in sorted((r for r in rs if r.device == "gpu0"), key=lambda r: r.t):
        if last is not None:
            user += round(1000 * cores(r.t) * (r.t - last))
            idle += round(1000 * (16 - cores(r.t)) * (r.t - last))
        last = r.t
        out.append(Reading("host", "host", r.t, {"cpu_user_ms": user, "cpu_system_ms": 0, "cpu_idle_ms": idle}))
    return out


def batches(plan, t_start: float = T0, batch_s: float = 1.0, network: bool = False, host=None) -> list[list[dict]]:
    """The plan's readings as wire samples in consecutive ``batch_s`` batches (all GPUs together), with
    the host's when ``host`` (busy cores as a function of time) is given."""
    rs = readings(plan, t_start)
    rs = with_network(rs) if network else rs
    rs = sorted(with_host(rs, host) if host else rs, key=lambda r: r.t)
    out: dict[int, list[dict]] = {}
    for r in rs:
        out.setdefault(int((r.t - t_start) // batch_s), []).append(r.to_wire())
    return [out[k] for k in sorted(out)]


def send_all(client: TestClient, agents: dict[str, Agent], plans: dict[str, list], network=(), host=None) -> None:
    per_node = {n: batches(p, network=n in network, host=host) for n, p in plans.items()}
    for i in range(max(len(b) for b in per_node.values())):
        for n, bs in per_node.items():
            if i < len(bs):
                r = agents[n].send(bs[i])
                assert r.status_code == 200, r.text
    assert client.app.state.bus.drain(30.0)


def enroll(db: Path, *nodes: str) -> dict[str, str]:
    store = Store(db)
    try:
        return {n: store.enroll(n) for n in nodes}
    finally:
        store.close()


def get(client, path: str, **params):
    r = client.get(path, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def timeline(client, node: str) -> list[dict]:
    return get(client, f"/v1/nodes/{node}/verdicts", start=T0 - 10, end=T0 + 100)["verdicts"]


@pytest.fixture(autouse=True)
def no_models(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(tmp_path / "models"))  # untrained comm-rules unless a test saves one


def test_ddp_goes_idle_to_training_and_alerts_then_survives_restart(db, client, agent, inspector_token):
    send_all(client, {"node-a": agent}, {"node-a": DDP})
    states = [v["state"] for v in timeline(client, "node-a")]
    assert states[0] == "idle" and states[-1] == "training", states
    first_training = states.index("training")
    assert set(states[first_training:]) == {"training"}
    # windows straddling the start mix idle and DDP: whatever they say is flagged provisional
    tl = timeline(client, "node-a")
    for v in tl[:first_training]:
        assert v["state"] == "idle" or any(e.startswith("provisional") for e in v["evidence"]), v
    assert tl[first_training]["t_start"] >= T0 + 12.0 - 2.0  # training within a stride of a full window inside
    v = get(client, "/v1/nodes/node-a/verdict")
    assert v["state"] == "training" and v["p_training"] > 0.9 and v["artifact"] is None
    text = " ".join(v["evidence"])
    assert "untrained" in text and "symmetry" in text and "segment active since" in text and " UTC (" in text
    # the k-of-n rule (3 of 5 at 0.75) fired once, on the third training window
    alerts = get(client, "/v1/nodes/node-a/alerts")["alerts"]
    assert len(alerts) == 1 and alerts[0]["open"] and alerts[0]["raised_t"] == tl[first_training + 2]["t_end"]
    jobs = get(client, "/v1/jobs")["jobs"]
    assert [j["nodes"] for j in jobs] == [["node-a"]] and jobs[0]["state"] == "training"
    n_windows = len(tl)
    # idle windows have no traffic to measure symmetry on: the evidence says so in words, never "nan"
    assert not [e for v in tl for e in v["evidence"] if re.search(r"\bnan\b", e)]
    assert any("too little NVLink traffic in this window" in e for e in tl[0]["evidence"]), tl[0]["evidence"]
    # ... in a line of the collector's own: comm-rules' line is there in comm-rules' words
    assert "TX/RX symmetry (worst GPU) n/a vs 0.7: score 0.00" in tl[0]["evidence"], tl[0]["evidence"]

    # restart: a new app over the same database serves the same verdicts and alert ...
    client.close()
    with TestClient(create_app(db, max_batch_bytes=64 * 1024),
                    headers={"Authorization": f"Bearer {inspector_token}"}) as c2:
        assert get(c2, "/v1/nodes/node-a/verdict")["state"] == "training"
        assert len(timeline(c2, "node-a")) == n_windows
        assert get(c2, "/v1/nodes/node-a/alerts")["alerts"] == alerts
        # ... and training that goes on after the restart continues the open alert, not a second one
        a2 = Agent(c2, "node-a", agent.key)
        a2.seq, a2.prev = agent.seq, agent.prev
        # the buffer was warmed from the store: the first new window end (T0+36, reached by the
        # third 1-s batch) gets its verdict at once, not after 8 s of new samples (T0+42)
        assert get(c2, "/v1/live")["warmed"]["nodes"] == 1
        # (the same recording continued, so the counters carry on from the warmed samples)
        more = batches(DDP[:-1] + [("ddp", 34.0, 20 * GIB)])[len(batches(DDP)):]
        assert more[0][0]["t"] >= T0 + 34.0
        for b in more[:3]:
            assert a2.send(b).status_code == 200
        assert c2.app.state.bus.drain(30.0)
        first = timeline(c2, "node-a")
        assert len(first) == n_windows + 1 and first[-1]["t_end"] == T0 + 36.0, first[-1]
        assert first[-1]["state"] == "training", first[-1]["evidence"]
        for b in more[3:]:
            assert a2.send(b).status_code == 200
        assert c2.app.state.bus.drain(30.0)
        assert len(timeline(c2, "node-a")) > n_windows
        after = get(c2, "/v1/nodes/node-a/alerts")["alerts"]
        assert len(after) == 1 and after[0]["id"] == alerts[0]["id"] and after[0]["open"]


def test_a_silence_is_unmonitored_in_the_verdict_api_and_in_the_evidence_of_the_windows_it_touches(client, agent):
    stream = batches(DDP)
    for i, b in enumerate(stream):
        if not 20 <= i < 25:                     # 5 s of batches never sent: the node fell silent
            assert agent.send(b).status_code == 200
    assert client.app.state.bus.drain(30.0)
    (gap,) = [g for g in get(client, "/v1/nodes/node-a/unmonitored", start=T0 - 10, end=T0 + 100)["intervals"]
              if not g["open"]]
    assert gap["reason"] == "silence" and gap["start"] == max(s["t"] for s in stream[19])
    assert gap["end"] == min(s["t"] for s in stream[25])
    body = get(client, "/v1/nodes/node-a/verdicts", start=T0 - 10, end=T0 + 100)
    assert [(g["start"], g["end"]) for g in body["unmonitored"] if not g["open"]] == [(gap["start"], gap["end"])]
    line = (f"window overlaps an unmonitored interval: {gap['start']:.1f}-{gap['end']:.1f} "
            "(the verdict rests on the samples that arrived)")
    for v in body["verdicts"]:
        touches = v["t_start"] < gap["end"] and v["t_end"] > gap["start"]
        assert (line in v["evidence"]) == touches, (v["t_start"], v["t_end"], v["evidence"])
    assert any(line in v["evidence"] for v in body["verdicts"])
    # the node has now been silent for more than 3 batch intervals (server clock): an open interval
    time.sleep(3.2)
    now = get(client, "/v1/nodes/node-a/verdict")
    assert [(g["reason"], g["start"], g["end"]) for g in now["unmonitored"] if g["open"]] == \
        [("silence", max(s["t"] for s in stream[-1]), None)]


def test_a_batch_stamped_back_in_time_is_a_time_regression_in_the_verdict_and_job_apis_and_the_evidence(client, agent):
    stream = batches(DDP)
    for b in stream[:20]:
        assert agent.send(b).status_code == 200
    assert client.app.state.bus.drain(30.0)
    judged = [v["t_end"] for v in timeline(client, "node-a")]
    latest = max(s["t"] for s in stream[19])
    # chain-valid, but its samples are stamped ~10 s back: second 10 of the stream again, a little later
    back = [{**s, "t": round(s["t"] + 0.05, 6)} for s in stream[10]]
    r = agent.send(back)
    assert r.status_code == 200, r.text
    start = min(s["t"] for s in back)
    assert r.json()["unmonitored"] == [{"start": start, "end": latest, "reason": "time_regression",
                                        "seq_from": 20, "seq_to": 20}]
    for b in stream[20:]:
        assert agent.send(b).status_code == 200
    assert client.app.state.bus.drain(30.0)
    body = get(client, "/v1/nodes/node-a/verdicts", start=T0 - 10, end=T0 + 100)
    want = [("time_regression", start, latest, 20, 20)]
    assert [(g["reason"], g["start"], g["end"], g["seq_from"], g["seq_to"]) for g in body["unmonitored"]
            if not g["open"]] == want
    (job,) = get(client, "/v1/jobs")["jobs"]
    per_node = get(client, f"/v1/jobs/{job['job']}")["unmonitored"]["node-a"]
    assert [(g["reason"], g["start"], g["end"], g["seq_from"], g["seq_to"]) for g in per_node if not g["open"]] == want
    line = (f"window overlaps an unmonitored interval, time regression: {start:.1f}-{latest:.1f} (samples stamped "
            "before ones already received: history rewritten or clock stepped back; windows judged before they "
            "came did not see them)")
    # the windows judged before the batch came keep their verdicts; those judged after it that overlap
    # the span say so (a window is not judged twice)
    tl = body["verdicts"]
    assert [v["t_end"] for v in tl[:len(judged)]] == judged
    for v in tl:
        after = v["t_end"] > judged[-1]
        assert (line in v["evidence"]) == (after and v["t_start"] < latest), (v["t_start"], v["t_end"], v["evidence"])
    assert any(line in v["evidence"] for v in tl)
    assert not any("window overlaps an unmonitored interval:" in e for v in tl for e in v["evidence"])


def test_a_node_sending_its_host_gets_a_host_line_beside_the_same_verdicts(client, agent):
    """Through the collector's live path: a node whose agent also reads the host gets one line on the
    host's CPU in each judged window's evidence; the line is evidence, not a vote (the DDP run still goes
    idle to training and alerts as without it). Here the host is busy beyond the launching thread from
    the DDP segment on (an optimizer on the host would look so), and the idle windows say it was not."""
    start = T0 + 12.0
    send_all(client, {"node-a": agent}, {"node-a": DDP}, host=lambda t: 9.0 if t > start else 1.0)
    tl = timeline(client, "node-a")
    states = [v["state"] for v in tl]
    assert states[0] == "idle" and states[-1] == "training", states
    assert len(get(client, "/v1/nodes/node-a/alerts")["alerts"]) == 1
    hosts = [[e for e in v["evidence"] if e.startswith("host CPU: ")] for v in tl]
    assert all(len(h) == 1 for h in hosts), hosts
    assert "no host work seen" in hosts[0][0] and "1.0 cores busy (median)" in hosts[0][0]
    assert "work on the host beside its 2 GPU(s)" in hosts[-1][0] and "9.0 cores busy" in hosts[-1][0]
    assert "4 or more in 100% of the window" in hosts[-1][0]       # two GPUs: two launching threads + 2


def test_one_way_send_goes_idle_to_inference_without_alert(client, agent):
    send_all(client, {"node-a": agent}, {"node-a": SEND})
    tl = timeline(client, "node-a")
    states = [v["state"] for v in tl]
    assert states[0] == "idle" and states[-1] == "inference", states
    assert "training" not in states
    last = tl[-1]
    assert last["p_training"] < 0.1
    assert any("symmetry (worst GPU) 0.0" in e for e in last["evidence"])  # says why: one-way
    assert get(client, "/v1/nodes/node-a/alerts")["alerts"] == []


def test_two_nodes_with_simultaneous_ddp_form_one_job(db, client, agent):
    keys = enroll(db, "node-b", "node-c", "node-d")
    agents = {"node-a": agent, **{n: Agent(client, n, k) for n, k in keys.items()}}
    send_all(client, agents, {"node-a": DDP, "node-b": DDP, "node-c": IDLE, "node-d": DDP},
             network=("node-a", "node-b"))
    jobs = get(client, "/v1/jobs")["jobs"]
    both = [j for j in jobs if j["nodes"] == ["node-a", "node-b"]]
    assert len(both) == 1 and both[0]["state"] == "training", jobs
    assert sorted(j["nodes"] for j in jobs) == [["node-a", "node-b"], ["node-d"]], jobs   # nothing left behind
    assert not any("node-c" in j["nodes"] for j in jobs)  # idle all along: in no job
    # same start, same NVLink bursts, but nothing on its network: its own job, not theirs
    assert [j["nodes"] for j in jobs if "node-d" in j["nodes"]] == [["node-d"]], jobs
    job = get(client, f"/v1/jobs/{both[0]['job']}")
    ev = " ".join(job["verdict"]["evidence"])
    assert "job of 2 nodes" in ev and "co-activity" in ev
    assert get(client, "/v1/nodes/node-a/verdict")["job"] == both[0]["job"]
    assert get(client, "/v1/nodes/node-c/verdict")["state"] == "idle"
    assert client.get("/v1/jobs/nope").status_code == 404


@pytest.mark.parametrize("batch_s", [1.0, 4.0, 6.0])
def test_a_job_is_judged_at_every_window_of_its_nodes_whatever_the_batch_length(db, client, batch_s):
    """A batch that completes several windows judges the job at each (it was judged at the last one
    only: 10 s batches gave a job one verdict per five windows, and its 3-of-5 alert needed three
    batches); here a job of two nodes judged on their union, in 1 s and 4 s batches."""
    keys = enroll(db, "node-b", "node-c")
    agents = {n: Agent(client, n, k, interval_s=batch_s) for n, k in keys.items()}
    # both nodes: the same DDP job, starting between two window ends (13.3 s: a batch holds windows
    # ending before it, which belong to no job)
    plan = [("idle", 13.3, IDLE_MEM_BYTES), ("ddp", 22.0, 20 * GIB)]
    stream = batches(plan, batch_s=batch_s, network=True)
    for b in stream:
        for n in ("node-b", "node-c"):
            assert agents[n].send(b).status_code == 200
    assert client.app.state.bus.drain(30.0)
    jobs = get(client, "/v1/jobs")["jobs"]
    (job,) = [j for j in jobs if j["nodes"] == ["node-b", "node-c"]]
    busy = [v["t_end"] for v in timeline(client, "node-b") if v["job"] == job["job"]]
    got = get(client, f"/v1/jobs/{job['job']}")
    ends = [v["t_end"] for v in got["verdicts"]]
    assert len(busy) >= 5 and set(busy) <= set(ends), (sorted(set(busy) - set(ends)), batch_s)
    assert ends == sorted(set(ends))                     # each window once, in order
    assert min(ends) > job["start_t"], (min(ends) - T0, job["start_t"] - T0)   # none before the job began
    assert not any(got["unjudged"].values()) and get(client, "/v1/live")["caught_up"]["judge_errors"] == 0


@pytest.mark.parametrize("b_idle_s, b_lag", [(12.0, 3), (11.0, 0), (11.0, 2)],
                         ids=["peer-3-batches-behind", "peer-started-1s-earlier", "earlier-and-behind"])
def test_a_node_judged_before_its_peer_leaves_no_job_behind(db, client, agent, b_idle_s, b_lag):
    """node-a's windows are judged before node-b's: at the start of their DDP job node-a is a job
    of its own (node-b not judged there yet, or their traffic not yet simultaneous); node-b's
    windows then join it under the group's name (a different one when node-b started first). The
    early job is merged into the group's: one job, every verdict and alert under its name (before,
    a job of node-a or node-b alone stayed in /v1/jobs for good)."""
    keys = enroll(db, "node-b")
    agents = {"node-a": agent, "node-b": Agent(client, "node-b", keys["node-b"])}
    per_node = {"node-a": batches(DDP, network=True),
                "node-b": batches([("idle", b_idle_s, IDLE_MEM_BYTES), ("ddp", 34.0 - b_idle_s, 20 * GIB)],
                                  network=True)}
    for i in range(len(per_node["node-a"]) + b_lag):
        for n, lag in (("node-a", 0), ("node-b", b_lag)):
            if 0 <= i - lag < len(per_node[n]):
                assert agents[n].send(per_node[n][i - lag]).status_code == 200
    assert client.app.state.bus.drain(60.0)
    (job,) = get(client, "/v1/jobs")["jobs"]
    assert job["nodes"] == ["node-a", "node-b"] and job["state"] == "training"
    assert job["start_t"] == pytest.approx(T0 + b_idle_s - 0.5, abs=1.0)     # the earlier node's start
    for n in ("node-a", "node-b"):
        assert {v["job"] for v in timeline(client, n) if v["state"] != "idle"} == {job["job"]}
    body = get(client, f"/v1/jobs/{job['job']}", start=T0 - 10)
    ends = [v["t_end"] for v in body["verdicts"]]
    assert ends == sorted(set(ends)) and ends[0] <= T0 + 14.0 and ends[-1] == T0 + 34.0
    assert len(body["alerts"]) == 1 and body["alerts"][0]["open"] and job["alerts_open"] == 1
    conn = client.app.state.live.conn
    assert conn.execute("SELECT DISTINCT subject FROM verdicts WHERE scope = 'job'").fetchall() == [(job["job"],)]
    assert conn.execute("SELECT DISTINCT subject FROM alerts WHERE scope = 'job'").fetchall() == [(job["job"],)]


def test_unknown_node_and_bad_range(client):
    assert client.get("/v1/nodes/ghost/verdict").json()["error"] == "unknown_node"
    assert client.get("/v1/nodes/node-a/verdicts", params={"start": 10, "end": 5}).status_code == 400
    v = get(client, "/v1/nodes/node-a/verdict")
    assert v["state"] is None and "no window judged yet" in v["evidence"][0]


def test_live_path_loads_a_trained_artifact_and_falls_back_on_a_bad_one(tmp_path):
    models = tmp_path / "models"
    det, artifact, note = load_live_detector(models)
    assert isinstance(det, CommRules) and artifact is None and "untrained" in note
    save_detector(CommRules(volume_Bps=5e8), models / "comm-rules.joblib", "trainsentry eval --train-final comm-rules")
    det, artifact, note = load_live_detector(models)
    assert det.volume_Bps == 5e8 and artifact.endswith("comm-rules.joblib")
    assert "trainsentry eval --train-final comm-rules" in note
    assert f"on window features version {FEATURE_VERSION}" in note        # save_detector records the version
    (models / "fused.joblib").write_bytes(b"not a model")  # preferred, but broken: said, then skipped
    det, artifact, note = load_live_detector(models)
    assert artifact.endswith("comm-rules.joblib") and "fused.joblib" in note


def test_live_path_refuses_a_model_fitted_on_another_feature_version(tmp_path):
    """A model fitted on other window features would read missing columns as NaN (or a changed column
    as the old one) without a word: the collector says so and falls back."""
    models = tmp_path / "models"
    save_detector(CommRules(volume_Bps=5e8), models / "comm-rules.joblib", "trainsentry eval --train-final comm-rules")
    meta = json.loads((models / "comm-rules.json").read_text())
    (models / "comm-rules.json").write_text(json.dumps(dict(meta, feature_version=FEATURE_VERSION + 1)))
    det, artifact, note = load_live_detector(models)
    assert artifact is None and "untrained" in note
    assert f"fitted on window features version {FEATURE_VERSION + 1}" in note
    del meta["feature_version"]                                      # artifacts from before the field
    (models / "comm-rules.json").write_text(json.dumps(meta))
    det, artifact, note = load_live_detector(models)
    assert det.volume_Bps == 5e8 and "window feature version is not recorded" in note


def test_detector_evidence_is_passed_through_and_the_collector_says_what_the_node_cannot_measure():
    from trainsentry.collector.evidence import NA, detector_lines
    from trainsentry.telemetry.base import Reading
    from trainsentry.traces.io import columns_to_table, readings_to_columns
    net_only = columns_to_table(readings_to_columns("vm", [
        Reading("eth0", "net", T0 + i * 0.1, {"net_tx_bytes": 1000 * i, "net_rx_bytes": 1000 * i}) for i in range(20)]))
    lines = CommRules().explain({"comm.net.Bps": 2e4, "comm.net.sym": 1.0})  # no NVLink, no energy features
    assert any(re.search(r"\bnan\b", e) for e in lines)  # what the detector says on its own
    out = detector_lines(lines, net_only, T0, T0 + 2.0)
    # one source: the detector's lines, in its order and words; a NaN is shown as n/a, nothing else changes
    assert out[:-1] == [re.sub(r"\bnan\b", NA, e) for e in lines]
    assert [a for a in lines if "nan" not in a] == [b for a, b in zip(lines, out) if "nan" not in a]
    assert not [e for e in out if re.search(r"\bnan\b", e)], out
    # the collector's own line: why, on this node, from its samples (10 kB/s on its one interface)
    assert out[-1] == ("n/a above: not measurable in this window: no NVLink data on this node (it reports no GPUs); "
                       "no PCIe data on this node (it reports no GPUs); no energy counter on this node (it reports "
                       "no GPUs); too little network traffic in this window to measure it")
    # it knows no detector's wording: any line of any detector is treated alike
    assert detector_lines(["x = nan raises P", "y = 2"], net_only, T0, T0 + 2.0)[:2] == ["x = n/a raises P", "y = 2"]
    assert detector_lines(["y = 2"], net_only, T0, T0 + 2.0) == ["y = 2"]   # nothing missing: nothing added


def test_the_collector_names_each_channel_it_could_not_measure():
    """PCIe is a channel of its own (comm-rules reads host-staged exchanges there): below its floor
    (driver chatter, 20 MB/s here) the reason names PCIe, and busy NVLink is not blamed."""
    from trainsentry.collector.evidence import unmeasured
    from trainsentry.telemetry.base import Reading
    from trainsentry.traces.io import columns_to_table, readings_to_columns
    gpu = [Reading(f"gpu{g}", "gpu", T0 + i * 0.1, {"nvlink_tx_kib": 10**6 * i, "nvlink_rx_kib": 10**6 * i,
                                                     "energy_mj": 60_000 * i, "gpm_pcie_tx_mibps": 20.0,
                                                     "gpm_pcie_rx_mibps": 19.0})
           for g in (0, 1) for i in range(30)]
    why = unmeasured(columns_to_table(readings_to_columns("n", gpu)), T0, T0 + 2.5)
    assert "too little PCIe traffic in this window to measure it" in why
    assert not [w for w in why if "NVLink" in w or "energy" in w], why
    no_pcie = [Reading(r.device, r.kind, r.t, {k: v for k, v in r.values.items() if "pcie" not in k}) for r in gpu]
    why = unmeasured(columns_to_table(readings_to_columns("n", no_pcie)), T0, T0 + 2.5)
    assert "no PCIe data on this node (its GPUs report no PCIe throughput)" in why


def test_the_collector_says_what_the_host_cpu_did_beside_the_gpus():
    """A node with the host source gets one evidence line on its host's CPU per window: busy cores and
    whether the host witness (features.host) saw work beyond the launching thread, hedged both ways;
    a node without it gets none."""
    from trainsentry.collector.evidence import host_lines
    from trainsentry.telemetry.base import Reading
    from trainsentry.traces.io import columns_to_table, readings_to_columns

    def host(cores):   # `cores(i)` busy in user mode during sample i's 0.1 s, of 16, and 40 W
        user = idle = 0
        out = []
        for i in range(40):
            user += round(100 * cores(i)) if i else 0
            idle += round(100 * (16 - cores(i))) if i else 0
            out.append(Reading("host", "host", T0 + i * 0.1, {"cpu_user_ms": user, "cpu_system_ms": 0,
                                                               "cpu_idle_ms": idle, "cpu_energy_uj": 4_000_000 * i}))
        return columns_to_table(readings_to_columns("n", out))

    gpu = columns_to_table(readings_to_columns("n", [Reading("gpu0", "gpu", T0 + i * 0.1, {"power_mw": 1})
                                                      for i in range(40)]))
    beside = lambda cores: pa.concat_tables([host(cores), gpu])  # noqa: E731  (the node reports a GPU too)
    (line,) = host_lines(host(lambda i: 12.0), T0, T0 + 4.0)
    assert line.endswith("(this node reports no GPUs: its work, whatever it is, runs on the host)")
    (line,) = host_lines(beside(lambda i: 12.0 if i % 10 < 3 else 1.0), T0, T0 + 4.0)   # an update every second: 11 of 39 rates
    assert line.startswith("host CPU: 1.0 cores busy (median), 12.0 at the 90th percentile, 3 or more in 28% "
                           "of the window; CPU packages 40 W (at least 10%: work on the host")
    assert "post-processes on the host does too" in line
    (line,) = host_lines(beside(lambda i: 1.0), T0, T0 + 4.0)
    assert "1.0 cores busy" in line and "0% of the window" in line and "no host work seen" in line
    assert host_lines(gpu, T0, T0 + 2.0) == [] and host_lines(None, T0, T0 + 2.0) == []
    # one launching thread per GPU: on four GPUs five busy cores are what four GPU programs and a little
    # else keep busy, and the witness asks for six
    four = pa.concat_tables([host(lambda i: 5.0)] + [columns_to_table(readings_to_columns("n", [
        Reading(f"gpu{g}", "gpu", T0 + i * 0.1, {"power_mw": 1}) for i in range(40)])) for g in range(4)])
    (line,) = host_lines(four, T0, T0 + 4.0)
    assert "6 or more in 0% of the window" in line and "no host work seen" in line
    assert host_lines(host(lambda i: 1.0), T0 + 10, T0 + 12) == []      # no host samples in the window


def test_jobs_with_latest_is_each_jobs_newest_verdict(db, client):
    from trainsentry.collector import verdicts as V
    from trainsentry.collector.schema import connect
    conn = connect(db)
    w = V.VerdictWriter(conn)
    base = {"scope": "job", "detector": "comm-rules", "artifact": None, "evidence": []}
    w.write([{**base, "subject": j, "t_start": t - 8, "t_end": t, "state": s, "p_training": p}
             for j, t, s, p in (("j1", 10, "idle", 0.0), ("j1", 12, "training", 0.9), ("j2", 4, "inference", 0.1))],
            [], [], [{"job": j, "nodes": ["n"], "start_t": 0.0, "last_t": 12.0} for j in ("j1", "j2", "j3")])
    got = {j["job"]: (j["state"], j["p_training"]) for j in V.jobs_with_latest(conn)}
    assert got == {"j1": ("training", 0.9), "j2": ("inference", 0.1), "j3": (None, None)}
    assert got == {j["job"]: ((v := V.latest(conn, "job", j["job"])) and v["state"], v and v["p_training"])
                   for j in V.jobs(conn)}
    conn.close()


@pytest.mark.parametrize("tensor, sm, exchange, state, because", [
    (50.0, 95.0, True, "inference", "neural-network compute"),   # context-parallel prefill: K/V all-gathered
    (8.0, 55.0, True, "inference", "neural-network compute"),    # tensor-parallel decode: activations all-reduced
    (0.0, 12.0, True, "other", "without neural-network"),        # an NCCL sweep
    (2.3, 96.0, True, "other", "without neural-network"),        # the FP32 stencil's halo exchange
    (0.0, 0.0, False, "other", "no tensor-core work"),           # peer copies: copy engines, no kernels
    (0.025, 0.86, True, "inference", "light decode"),            # batch-1 TP decode: little SM work, some tensor
    (93.0, 95.0, False, "other", "matmul burn"),                 # GEMMs and nothing else
    (10.0, 70.0, False, "inference", "neural-network compute"),  # batched decode on one GPU
])
def test_inference_or_other_is_read_from_the_tensor_core_share_of_sm_activity(tensor, sm, exchange, state, because):
    from trainsentry.collector.live import SM_KEY, TENSOR_KEY, classify
    row = {"comm.nvlink.Bps.min": 2e9 if exchange else 0.0, "comm.nvlink.sym.min": 1.0 if exchange else float("nan"),
           TENSOR_KEY: tensor, SM_KEY: sm}
    got, why = classify(True, 0.1, row, 0.5)
    assert got == state and because in why, why
    # without GPM (older GPUs, a node without GPUs) the exchange rule decides, as before
    bare = {k: v for k, v in row.items() if k not in (TENSOR_KEY, SM_KEY)}
    assert classify(True, 0.1, bare, 0.5)[0] == ("other" if exchange else "inference")
    assert classify(True, 0.9, row, 0.5)[0] == "training"      # the detector's answer comes first


@pytest.mark.parametrize("wild", [2 ** 63, 1e19, -2 ** 63 - 1])
def test_a_wild_counter_value_neither_stops_the_live_verdicts_nor_goes_unsaid(db, client, agent, wild):
    """The wire takes any |v| < 2**64 in any metric and the store keeps it; the live tables hold
    integer metrics as int64. One such value per batch once stopped every verdict of the node from
    that batch on, silently (the window clock had moved, the table build raised on the bus): the
    tables now read it as missing, and whatever else fails in judging is recorded as unjudged."""
    stream = batches(DDP)
    for i, b in enumerate(stream):
        if i >= 20:
            b = [dict(s, m=dict(s["m"])) for s in b]
            b[0]["m"]["energy_mj"] = wild
        assert agent.send(b).status_code == 200
    assert client.app.state.bus.drain(30.0)
    last_end = max(v["t_end"] for v in timeline(client, "node-a"))
    assert last_end >= max(s["t"] for s in stream[-1]) - 2.0, last_end - T0   # judged to the end
    live = get(client, "/v1/live")
    assert live["caught_up"]["judge_errors"] == 0 and get(client, "/v1/stats")["bus"]["errors"] == 0
    assert get(client, "/v1/nodes/node-a/verdict")["state"] == "training"


def test_an_error_while_judging_is_recorded_as_unjudged_and_the_next_windows_are_judged(client, agent, monkeypatch):
    """Defence in depth: an exception inside judging (here a detector that raises once) leaves an
    unjudged span with the error, not a silent hole, and the node's later windows are judged."""
    live = client.app.state.live
    real, calls = live.judge_node, {"n": 0}

    def flaky(node, st, ends):
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("boom in the detector")
        return real(node, st, ends)
    monkeypatch.setattr(live, "judge_node", flaky)
    for b in batches(DDP):
        assert agent.send(b).status_code == 200
    assert client.app.state.bus.drain(30.0)
    body = get(client, "/v1/nodes/node-a/verdict")
    (u,) = [u for u in body["unjudged"] if "boom in the detector" in u["reason"]]
    assert "could not be judged: RuntimeError" in u["reason"]
    assert get(client, "/v1/live")["caught_up"]["judge_errors"] == 1
    ends = [v["t_end"] for v in timeline(client, "node-a")]
    assert max(ends) > u["end"]                                  # later windows judged as usual
    assert not any(u["start"] + 8.0 <= e <= u["end"] for e in ends)  # the failed ones were not


def test_a_failed_write_leaves_no_alert_that_exists_only_in_memory(client, agent, monkeypatch):
    """The write of a batch's verdicts fails (the database locked, say) after the alert rule voted on
    them: the votes and any alert they opened are forgotten with them and read back from the store,
    so no alert is open in memory without a row, blocking the real one."""
    live = client.app.state.live
    real, calls = live.writer.write, {"n": 0}

    def flaky(*a, **kw):
        calls["n"] += 1
        if calls["n"] == 8:   # the write of the window whose votes open the alert in this DDP stream
            raise __import__("sqlite3").OperationalError("database is locked")
        return real(*a, **kw)
    monkeypatch.setattr(live.writer, "write", flaky)
    for b in batches(DDP):
        assert agent.send(b).status_code == 200
    assert client.app.state.bus.drain(30.0)
    for (scope, subject), tr in live.tracks.items():
        assert tr.open is None or tr.open.get("id") is not None, (scope, subject, tr.open)
    stored = get(client, "/v1/nodes/node-a/alerts")["alerts"]
    assert [a for a in stored if a["cleared_t"] is None], stored       # the alert was raised after all
    assert get(client, "/v1/live")["caught_up"]["judge_errors"] == 1
