"""The single-device path end to end: one-GPU runs recorded on the H200 (data/h200x1) are replayed,
as an agent would send them (1 s signed batches), into a real collector app that loads the committed
artifacts (models/fused.joblib, models/single-device.joblib). On a single-GPU training run the
exchange gate stays closed, so fused's P stays low; the single-device check reads the busy GPU like
training, and its P becomes the verdict's: state training, an alert, the path named in the evidence.
With ``TRAINSENTRY_LEAD_VERDICT=0`` the check is a line in the evidence only. On single-user decode
nothing says training. The check is fitted on these recordings: this tests the live path, not the
check's accuracy (docs/one-gpu.md, docs/detector.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Agent, last_window_end, per_second, wait_judged
from fastapi.testclient import TestClient

from test_live import T0
from test_live_jobs import splice
from trainsentry.collector.app import create_app
from trainsentry.telemetry.replay import read_trace_readings

REPO = Path(__file__).resolve().parents[2]
RUNS = REPO / "data" / "h200x1"
TRAINING = RUNS / "train.single.w1024-l16-base-r0"
DECODE = RUNS / "infer.generate.m350m_b4_light-base-r0"
LIKE_TRAINING = "P(training) = "


@pytest.fixture
def committed_client(db, key, inspector_token, monkeypatch):
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(REPO / "models"))
    with TestClient(create_app(db, max_batch_bytes=1024 * 1024),
                    headers={"Authorization": f"Bearer {inspector_token}"}) as c:
        yield c


@pytest.fixture
def node(committed_client, key) -> Agent:
    """node-a's agent posting to the app that loaded the committed artifacts."""
    return Agent(committed_client, "node-a", key)


IDLE_PIECE_S = 2.5   # the recordings start 3 s before their workload: that much of them is idle


def replay(client: TestClient, agent: Agent, run: Path, idle_after_s: float = 0.0) -> None:
    """Send the run's readings, retimed to start at T0, in 1 s batches (then ``idle_after_s`` of its own
    idle start, repeated); wait until it is judged."""
    rec = read_trace_readings(run)
    t0 = min(r.t for r in rec)
    idle = [r for r in rec if r.t < t0 + IDLE_PIECE_S]
    sent = per_second(splice([rec] + [idle] * round(idle_after_s / IDLE_PIECE_S)), T0)
    for batch in sent:
        resp = agent.send(batch)
        assert resp.status_code == 200, resp.text
    wait_judged(lambda n: client.get(f"/v1/nodes/{n}/verdict").json(), {"node-a": last_window_end(sent)})


def verdicts(client: TestClient) -> list[dict]:
    r = client.get("/v1/nodes/node-a/verdicts", params={"start": T0 - 10, "end": T0 + 100})
    assert r.status_code == 200, r.text
    return r.json()["verdicts"]


def single_device_lines(v: dict) -> list[str]:
    return [e for e in v["evidence"] if e.startswith("single-device check")]


def lead_lines(v: dict) -> list[str]:
    """The check's lines that give a P (not the bound it gives below its busy floor)."""
    return [e for e in single_device_lines(v) if LIKE_TRAINING in e]


def test_single_gpu_training_is_called_training_by_the_single_device_path(committed_client, node):
    live = committed_client.get("/v1/live").json()
    assert "single-device" in live["evidence_checks"], live   # the app judging is the one posted to
    assert live["single_device_path"] is True, live
    replay(committed_client, node, TRAINING, idle_after_s=20.0)
    vs = verdicts(committed_client)
    # once the workload has ended the windows are idle, though the first of them still hold its busy
    # tail: no lead is counted there (it would add a "like training" window after every burst); a tail
    # under the busy floor gets the bound on its work, and a window with no tail left gets nothing
    idle_after = [v for v in vs if v["state"] == "idle" and v["t_end"] > T0 + 30]
    assert idle_after and all(v["lead_p"] is None for v in idle_after), idle_after
    assert all("under the 5 % floor" in line for v in idle_after for line in single_device_lines(v)), idle_after
    assert not single_device_lines(idle_after[-1]), idle_after[-1]
    busy = [v for v in vs if lead_lines(v)]
    # the run is 38 s of a 44 s trace: most of its 8 s windows are busy, and the check speaks on them
    assert len(vs) >= 15 and len(busy) >= len(vs) // 2, [(v["state"], v["evidence"]) for v in vs]
    like = [v for v in busy if ": like training" in lead_lines(v)[0]]
    assert len(like) >= 0.8 * len(busy), [lead_lines(v) for v in busy]
    # the check's P is the verdict's where it reads more training than fused, whose exchange gate is
    # closed on one device: those windows are training, by the path the detector name and the "why" say
    for v in vs:
        if v["lead_p"] is not None and v["lead_p"] >= 0.5:
            assert v["state"] == "training" and v["p_training"] == pytest.approx(v["lead_p"]), v
            # (fused, or comm-rules where a window lacks a sensor fused always had: the evidence says which)
            assert v["detector"].endswith("+single-device") and "the single-device path" in v["evidence"][0], v
        elif v["state"] != "idle":
            assert v["state"] != "training" and "+" not in v["detector"], v
    alerts = committed_client.get("/v1/nodes/node-a/alerts").json()["alerts"]
    assert alerts and alerts[0]["detector"].endswith("+single-device"), alerts
    # each window stores the lead's P beside its line (None where it did not speak) ...
    for v in vs:
        lines = lead_lines(v)
        assert (v["lead_p"] is None) == (not lines), v
        if lines:
            assert f"P(training) = {v['lead_p']:.2f}" in lines[0]
    # ... and the node's verdict sums it up over the last hour, so an inspector sees it without
    # reading every window
    node_view = committed_client.get("/v1/nodes/node-a/verdict").json()
    lead = node_view["single_device_lead"]
    assert lead["windows_spoken"] == len(busy) and lead["like_training"] == len(like), lead
    assert lead["threshold"] == 0.75 and lead["p_max"] == max(v["lead_p"] for v in busy)
    assert lead["last"]["t_end"] == max(v["t_end"] for v in busy)
    assert lead["check_loaded"] is True
    # the seconds those windows cover, each once: the union of their spans, far below the windows' sum
    spans = sorted((v["t_start"], v["t_end"]) for v in like)
    union, reach = 0.0, float("-inf")
    for t0, t1 in spans:
        union, reach = union + max(0.0, t1 - max(t0, reach)), max(reach, t1)
    assert lead["seconds_like_training"] == pytest.approx(union)
    assert lead["seconds_like_training"] < sum(t1 - t0 for t0, t1 in spans), lead
    # the fleet overview carries the latest window's lead beside the verdict
    over = {n["node"]: n for n in committed_client.get("/v1/overview").json()["nodes"]}["node-a"]
    assert over["lead_p"] == node_view["lead_p"]
    assert over["lead_like_training"] == (over["lead_p"] is not None and over["lead_p"] >= 0.75)
    # the latest window is one of the idle tail: it carries no lead, so the overview shows none
    assert node_view["state"] == "idle" and over["lead_p"] is None and over["lead_like_training"] is False
    # the job the run formed: its own windows' lead, summed up over the job's life
    job = committed_client.get(f"/v1/jobs/{next(v['job'] for v in busy if v['job'])}").json()
    job_leads = [v["lead_p"] for v in job["verdicts"] if v["lead_p"] is not None]
    assert job_leads and job["single_device_lead"]["windows_spoken"] == len(job_leads)
    assert job["single_device_lead"]["like_training"] == sum(p >= 0.75 for p in job_leads) > 0


def test_with_the_lead_verdict_off_the_check_is_evidence_only(db, key, inspector_token, monkeypatch):
    """``TRAINSENTRY_LEAD_VERDICT=0``: the same training run gets the check's lines and stored P, but
    the verdict is fused's alone (not training, no alert), as before the single-device path."""
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(REPO / "models"))
    monkeypatch.setenv("TRAINSENTRY_LEAD_VERDICT", "0")
    with TestClient(create_app(db, max_batch_bytes=1024 * 1024),
                    headers={"Authorization": f"Bearer {inspector_token}"}) as c:
        assert c.get("/v1/live").json()["single_device_path"] is False
        replay(c, Agent(c, "node-a", key), TRAINING)
        vs = verdicts(c)
        like = [v for v in vs if v["lead_p"] is not None and v["lead_p"] >= 0.75]
        assert len(like) >= 5, [(v["state"], v["lead_p"]) for v in vs]
        assert all(v["state"] != "training" and "+" not in v["detector"] for v in vs), [v["state"] for v in vs]
        assert not c.get("/v1/nodes/node-a/alerts").json()["alerts"]


def test_single_user_decode_is_not_called_training_by_the_lead(committed_client, node):
    replay(committed_client, node, DECODE)
    vs = verdicts(committed_client)
    assert len(vs) >= 15
    lines = [line for v in vs for line in lead_lines(v)]
    assert len(lines) >= 5, [v["evidence"] for v in vs]   # it speaks on the busy windows ...
    assert not [line for line in lines if ": like training" in line], lines   # ... and says no
    assert all(v["state"] != "training" for v in vs)
    node_view = committed_client.get("/v1/nodes/node-a/verdict").json()
    lead = node_view["single_device_lead"]
    assert lead["windows_spoken"] == len(lines) and lead["like_training"] == 0 and lead["p_max"] < 0.75, lead
    # the overview carries the latest window's lead as judged, and never says "like training" here
    over = {n["node"]: n for n in committed_client.get("/v1/overview").json()["nodes"]}["node-a"]
    assert over["lead_p"] == node_view["lead_p"] and over["lead_like_training"] is False, over
    # "like training" is decided at the loaded artifact's threshold, the one the summaries count with
    proc = committed_client.app.state.live
    assert proc.lead_threshold == proc.checks["single-device"].threshold == lead["threshold"]
    assert proc._lead_fields({"lead_p": lead["threshold"]}) == {"lead_p": lead["threshold"], "lead_like_training": True,
                                                                 "floor_flop": None}
    assert proc._lead_fields({"lead_p": lead["p_max"]})["lead_like_training"] is False


LOW_DUTY = REPO / "data" / "redteam-x1" / "adv.throttle.dit-b-lowutil-5022a8-r0"   # DiT trainer, 2.8 % busy


def test_a_trainer_under_the_busy_floor_gets_a_bound_not_silence(committed_client, node):
    """The red team's DiT-B/2 trainer held to a 10 % duty cycle (2.8 % busy) is never judged: the check
    gives no P below its floor. Each of its windows' evidence bounds the work instead, in idle windows
    between its bursts too, and nothing counts it as a lead."""
    replay(committed_client, node, LOW_DUTY)
    vs = verdicts(committed_client)
    assert len(vs) >= 15 and all(v["state"] != "training" and v["lead_p"] is None for v in vs)
    floor = [v for v in vs if any("under the 5 % floor" in line for line in single_device_lines(v))]
    assert len(floor) >= len(vs) // 2, [(v["state"], single_device_lines(v)) for v in vs]
    assert {v["state"] for v in floor} >= {"idle"}, [v["state"] for v in floor]
    tflop = [float(line.split("at most ")[1].split(" TFLOP")[0]) for v in floor for line in single_device_lines(v)]
    assert max(tflop) > 10, tflop   # batch-16 DiT steps: tens of TFLOP per 8 s window
    node_view = committed_client.get("/v1/nodes/node-a/verdict").json()
    lead = node_view["single_device_lead"]
    assert lead["windows_spoken"] == 0 and lead["like_training"] == 0, lead
    # the bounds are stored beside the verdicts and summed over the hour, each second once: the
    # windows overlap four-fold, so the sum lies near a quarter of the lines' total, never above it
    assert all(v["floor_flop"] is not None for v in floor)
    below = node_view["below_floor"]
    assert below["windows"] == len(floor) and 0 < below["seconds"] <= 8 * len(floor), below
    assert 0.2 * sum(tflop) < below["tensor_flop_max"] / 1e12 < 0.5 * sum(tflop), (below, sum(tflop))
    # the node view and the fleet overview carry the latest window's own bound (None if it had none)
    assert node_view["floor_flop"] == vs[-1]["floor_flop"], (node_view["floor_flop"], vs[-1])
    over = {n["node"]: n for n in committed_client.get("/v1/overview").json()["nodes"]}["node-a"]
    assert over["floor_flop"] == node_view["floor_flop"] and over["lead_p"] is None, over


def test_the_gpus_a_window_is_judged_over_are_counted_from_its_samples():
    """The bound below the floor is summed over the GPUs the buffer (or a job's union) holds samples of."""
    import pyarrow as pa

    from trainsentry.collector.live import _gpu_count
    t = pa.table({"kind": ["gpu", "gpu", "gpu", "net"], "device": ["gpu0", "gpu1", "gpu0", "eth0"]})
    assert _gpu_count(t) == 2
    union = pa.table({"kind": ["gpu", "gpu"], "device": ["a/gpu0", "b/gpu0"]})   # a job: node/device
    assert _gpu_count(union) == 2
    assert _gpu_count(None) is None and _gpu_count(t.slice(3)) is None and _gpu_count(t.slice(0, 0)) is None
