"""A collector restart must not reset what the live processor knows about a running job.

Otherwise whoever can make the collector restart (or waits for a routine one) resets the alert
clock: the job takes a new name dated from the restart, its k-of-n votes start over and a pause
after the restart is no longer linked (the GPUs' idle memory floor is forgotten).

The stream is the recorded 2-GPU DDP run on the H200s (data/redteam-r1, 90 s of training at 10 Hz;
see test_live_jobs.py) with an 8 s pause, memory held, spliced in 42 s into training, posted in 1 s
signed batches to the real server (``python -m trainsentry.collector.server``). A restart is a
SIGKILL once the verdicts have caught up with the batches sent, then a new server on the same
database; the agent carries on with its chain. Every verdict (evidence included), alert and job
must then be what a collector that never restarted says about the same stream.
"""

from __future__ import annotations

import math
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import Agent, RealCollector
from fastapi.testclient import TestClient

from test_live import DDP, GIB, IDLE_MEM_BYTES, T0, enroll, no_models, send_all  # noqa: F401  (no_models: a fixture)
from test_live import batches as live_batches
from test_live_jobs import CUT_S, RUN, stream
from trainsentry.collector.app import create_app
from trainsentry.collector.auth import enroll_inspector_in
from trainsentry.collector.store import Store
from trainsentry.telemetry.replay import read_trace_readings

PAUSE = [(8.0, True)]


@pytest.fixture(scope="module")
def batches() -> list[list[dict]]:
    readings = stream(read_trace_readings(RUN), PAUSE)
    per_s: dict[int, list[dict]] = {}
    for r in sorted(readings, key=lambda r: (r.t, r.device)):
        per_s.setdefault(int((r.t - T0) // 1.0), []).append(r.to_wire())
    return [per_s[k] for k in sorted(per_s)]


def last_window_end(sent: list[list[dict]]) -> float:
    return math.floor(max(s["t"] for s in sent[-1]) / 2.0 + 1e-9) * 2.0


def feed(col: RealCollector, agent: Agent, sent: list[list[dict]], token: str) -> None:
    """Post the batches, then wait until the live processor has judged the window they complete."""
    for b in sent:
        r = agent.send(b)
        assert r.status_code == 200, r.text
    want, deadline = last_window_end(sent), time.monotonic() + 120
    while (col.get("/v1/nodes/node-a/verdict", token).get("window") or {}).get("end") != want:
        assert time.monotonic() < deadline, "the live processor did not catch up"
        time.sleep(0.1)


def observe(col: RealCollector, token: str) -> dict:
    tl = col.get("/v1/nodes/node-a/verdicts", token, start=T0 - 10, end=T0 + 1000)["verdicts"]
    jobs = col.get("/v1/jobs", token)["jobs"]
    return {"timeline": [(v["t_end"], v["state"], v["p_training"], v["job"], v["evidence"]) for v in tl],
            "alerts": [(a["id"], a["raised_t"], a["cleared_t"], a["p_max"])
                       for a in col.get("/v1/nodes/node-a/alerts", token)["alerts"]],
            "jobs": [(j["job"], j["nodes"], j["start_t"]) for j in jobs],
            "job_alerts": {j["job"]: [(a["raised_t"], a["cleared_t"], a["p_max"])
                                      for a in col.get(f"/v1/jobs/{j['job']}", token)["alerts"]] for j in jobs}}


def run(tmp: Path, batches: list[list[dict]], restart_after: int | None, models: Path) -> tuple[dict, dict]:
    """(what the API says just before the restart, what it says at the end). Untrained comm-rules,
    as in test_live: the models folder (named in every verdict's evidence) is one that does not exist."""
    db = tmp / "collector.db"
    store = Store(db)
    key = store.enroll("node-a")
    store.close()
    token = enroll_inspector_in(db, "inspector-1")
    env = {"TRAINSENTRY_MODELS": str(models)}
    k = len(batches) if restart_after is None else restart_after
    col = RealCollector(db, env)
    try:
        agent = Agent(col.http, "node-a", key)
        feed(col, agent, batches[:k], token)
        before = observe(col, token)
        if k < len(batches):
            col.kill()
            col = RealCollector(db, env)
            agent.client = col.http
            feed(col, agent, batches[k:], token)
        return before, observe(col, token)
    finally:
        col.kill()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    return tmp_path_factory.getbasetemp() / "no-models"


@pytest.fixture(scope="module")
def never_restarted(tmp_path_factory, batches, models) -> dict:
    return run(tmp_path_factory.mktemp("reference"), batches, None, models)[1]


def first_batch_reaching(batches: list[list[dict]], t: float) -> int:
    """How many batches to send for the last one's samples to reach ``t``."""
    return next(i for i, b in enumerate(batches, start=1) if max(s["t"] for s in b) >= t)


def test_reference_run_alerts_and_keeps_one_job_across_the_pause(never_restarted):
    ref = never_restarted
    assert len(ref["jobs"]) == 1, ref["jobs"]
    assert ref["jobs"][0][2] == pytest.approx(T0 + 2.5, abs=1.0)       # dated from training's true start
    # the node's alert clears in the pause (5 idle windows) and a second one follows; the job is
    # judged only while it runs, so its one alert stays open through the pause
    assert [a[2] is None for a in ref["alerts"]] == [False, True]
    assert [a[1] is None for a in ref["job_alerts"][ref["jobs"][0][0]]] == [True]
    assert "across 1 pause(s), the latest 8 s" in " ".join(ref["timeline"][-1][4])


def test_restart_after_the_alert_keeps_job_alert_and_time_to_alert(tmp_path, batches, never_restarted, models):
    # 38 s into training: the job's start and the GPUs' idle memory lie outside the 30 s the
    # restarted processor re-reads, and the pause comes after the restart
    k = first_batch_reaching(batches, T0 + 40.0)
    before, after = run(tmp_path, batches, k, models)
    assert len(before["alerts"]) == 1 and before["alerts"][0][2] is None   # open when the collector died
    (job, _, start_t), = before["jobs"]
    assert max(t for t, *_ in before["timeline"]) < T0 + CUT_S               # the pause is still ahead
    # the same job (name and start), the same single alert, the same time to alert ...
    assert [j[:2] for j in after["jobs"]] == [(job, ["node-a"])] and after["jobs"][0][2] == start_t
    assert after["alerts"][0][:2] == before["alerts"][0][:2]
    time_to_alert = after["alerts"][0][1] - start_t
    assert time_to_alert == never_restarted["alerts"][0][1] - never_restarted["jobs"][0][2]
    assert {v[3] for v in after["timeline"] if v[1] != "idle"} == {job}
    assert "across 1 pause(s)" in " ".join(after["timeline"][-1][4])      # the pause is linked
    # ... and every verdict, alert and job is what the collector that never restarted says
    assert after == never_restarted


def test_restart_between_the_first_vote_and_the_alert_does_not_reset_the_alert_clock(tmp_path, batches,
                                                                                       never_restarted, models):
    ref = never_restarted
    voted = [t for t, state, p, *_ in ref["timeline"] if state != "idle" and p is not None and p >= 0.75]
    raised = ref["alerts"][0][1]
    assert voted[0] < raised
    k = first_batch_reaching(batches, voted[0])   # the first vote is cast, the alert not yet raised
    before, after = run(tmp_path, batches, k, models)
    assert before["alerts"] == [] and any(t == voted[0] for t, *_ in before["timeline"])
    assert after["alerts"][0][1] == raised and after == ref


def _two_node_job(db: Path, token: str, rounds: list[dict[str, list[dict]]], restart_after: int | None) -> dict:
    """Post rounds of batches (one per node each) to the app; restart it (a new app on the same
    database, the agents carrying on) after ``restart_after`` rounds; what the API says at the end."""
    keys = enroll(db, "node-a", "node-b")

    def app():
        return TestClient(create_app(db), headers={"Authorization": f"Bearer {token}"})
    client = app().__enter__()
    agents = {n: Agent(client, n, k) for n, k in keys.items()}
    try:
        for i, batch in enumerate(rounds):
            if i == restart_after:
                assert client.app.state.bus.drain(60.0)
                client.__exit__(None, None, None)
                client = app().__enter__()
                assert client.get("/v1/live").json()["restored"] == {"states": 2, "unusable": {}}
                for a in agents.values():
                    a.client = client
            for n, b in batch.items():
                assert agents[n].send(b).status_code == 200
        assert client.app.state.bus.drain(60.0)
        jobs = client.get("/v1/jobs").json()["jobs"]
        out = {"jobs": [(j["job"], j["nodes"], j["start_t"]) for j in jobs]}
        for j in jobs:
            body = client.get(f"/v1/jobs/{j['job']}", params={"start": T0 - 10}).json()
            out[j["job"]] = {"verdicts": [(v["t_end"], v["state"], v["p_training"], v["evidence"])
                                          for v in body["verdicts"]],
                             "alerts": [(a["raised_t"], a["cleared_t"], a["p_max"]) for a in body["alerts"]]}
        for n in agents:
            out[n] = [(v["t_end"], v["state"], v["job"]) for v in
                      client.get(f"/v1/nodes/{n}/verdicts", params={"start": T0 - 10, "end": T0 + 200}).json()["verdicts"]]
        return out
    finally:
        client.__exit__(None, None, None)


def test_a_job_of_two_nodes_survives_a_restart(tmp_path_factory, no_models):
    plan = [("idle", 12.0, IDLE_MEM_BYTES), ("ddp", 50.0, 20 * GIB)]
    per_node = {n: live_batches(plan, network=True) for n in ("node-a", "node-b")}
    rounds = [{n: bs[i] for n, bs in per_node.items() if i < len(bs)} for i in range(len(per_node["node-a"]))]

    def fresh() -> tuple[Path, str]:
        db = tmp_path_factory.mktemp("two") / "collector.db"
        return db, enroll_inspector_in(db, "inspector-1")
    ref = _two_node_job(*fresh(), rounds, None)
    (job, nodes, start_t), = [j for j in ref["jobs"] if len(j[1]) == 2]
    assert ref[job]["alerts"] and ref[job]["verdicts"][-1][1] == "training"
    # 40 s into the job: its start, 12 s in, is outside the 30 s the restarted processor re-reads
    after = _two_node_job(*fresh(), rounds, 52)
    assert (job, nodes, start_t) in after["jobs"] and {v[2] for v in after["node-b"][-10:]} == {job}
    assert after == ref


def test_a_snapshot_this_version_cannot_read_is_said_and_that_node_starts_afresh(db, client, agent, inspector_token):
    send_all(client, {"node-a": agent}, {"node-a": DDP})
    job = client.get("/v1/nodes/node-a/verdict").json()["job"]
    client.close()
    c = sqlite3.connect(db)
    (raw,) = c.execute("SELECT state FROM live_node_state WHERE node = 'node-a'").fetchone()
    assert '"v": 1' in raw and job.startswith("job-")
    c.execute("UPDATE live_node_state SET state = ? WHERE node = 'node-a'", (raw.replace('"v": 1', '"v": 99'),))
    c.commit()
    c.close()
    with TestClient(create_app(db), headers={"Authorization": f"Bearer {inspector_token}"}) as c2:
        live = c2.get("/v1/live").json()
        assert live["restored"]["states"] == 0 and "version-1" in live["restored"]["unusable"]["node-a"]
        assert live["warmed"]["nodes"] == 1   # its buffer still comes back from the samples
