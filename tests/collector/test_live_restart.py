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

The same reference holds when the live processor is not handed every batch: the store is the
source of truth, so batches the commit bus dropped (its queue forced down to one event) and a
backlog of more than the 30 s buffer left unjudged at a SIGKILL are read back from the store and
judged exactly as if they had been handed over.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import Agent, RealCollector, last_window_end, per_second, wait_judged
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
    return per_second(stream(read_trace_readings(RUN), PAUSE), T0)


def post(agent: Agent, sent: list[list[dict]]) -> None:
    for b in sent:
        r = agent.send(b)
        assert r.status_code == 200, r.text


def feed(col: RealCollector, agent: Agent, sent: list[list[dict]], token: str) -> None:
    """Post the batches, then wait until the live processor has judged the window they complete."""
    post(agent, sent)
    wait_judged(lambda n: col.get(f"/v1/nodes/{n}/verdict", token), {"node-a": last_window_end(sent)})


def observe(col: RealCollector, token: str) -> dict:
    tl = col.get("/v1/nodes/node-a/verdicts", token, start=T0 - 10, end=T0 + 1000)["verdicts"]
    jobs = col.get("/v1/jobs", token)["jobs"]
    return {"timeline": [(v["t_end"], v["state"], v["p_training"], v["job"], v["evidence"]) for v in tl],
            "alerts": [(a["id"], a["raised_t"], a["cleared_t"], a["p_max"])
                       for a in col.get("/v1/nodes/node-a/alerts", token)["alerts"]],
            "jobs": [(j["job"], j["nodes"], j["start_t"]) for j in jobs],
            "job_alerts": {j["job"]: [(a["raised_t"], a["cleared_t"], a["p_max"])
                                      for a in col.get(f"/v1/jobs/{j['job']}", token)["alerts"]] for j in jobs}}


def fresh_db(tmp: Path) -> tuple[Path, str, str]:
    """(database, node-a's key, an inspector token)."""
    db = tmp / "collector.db"
    store = Store(db)
    key = store.enroll("node-a")
    store.close()
    return db, key, enroll_inspector_in(db, "inspector-1")


def run(tmp: Path, batches: list[list[dict]], restart_after: int | None, models: Path) -> tuple[dict, dict]:
    """(what the API says just before the restart, what it says at the end). Untrained comm-rules,
    as in test_live: the models folder (named in every verdict's evidence) is one that does not exist."""
    db, key, token = fresh_db(tmp)
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
    # the pause is one the job rule links (memory held): the job goes on through it, so the idle
    # windows of the pause abstain and the node's alert, like the job's, stays open through it
    # (before, the node's cleared after 5 idle windows and a second one followed; the job's stayed)
    job = ref["jobs"][0][0]
    assert [a[2] is None for a in ref["alerts"]] == [True]
    assert [a[1] is None for a in ref["job_alerts"][job]] == [True]
    paused = [v for v in ref["timeline"] if v[1] == "idle" and v[0] > T0 + CUT_S]
    assert len(paused) >= 3 and all(v[3] == job and "neither votes for nor clears" in " ".join(v[4]) for v in paused)
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


def test_batches_the_bus_dropped_are_read_back_from_the_store(tmp_path, batches, never_restarted, models):
    # a queue of one event: while the processor judges a window, the batches posted meanwhile
    # overflow it (the bus drops them); the processor must read them back, not skip them
    db, key, token = fresh_db(tmp_path)
    col = RealCollector(db, {"TRAINSENTRY_MODELS": str(models), "TRAINSENTRY_BUS_QUEUE": "1"})
    try:
        feed(col, Agent(col.http, "node-a", key), batches, token)
        bus = col.get("/v1/stats", token)["bus"]
        live = col.get("/v1/live", token)
        got = observe(col, token)
        verdict = col.get("/v1/nodes/node-a/verdict", token)
    finally:
        col.kill()
    assert bus["maxsize"] == 1 and bus["dropped"] > 10 and bus["catch_up_notices"] >= 1, bus
    assert live["caught_up"]["batches"] >= bus["dropped"] and live["caught_up"]["unjudged"] == 0, live
    assert live["behind"] == {} and verdict["unjudged"] == []
    # every window judged, from every sample: what a processor handed every batch says
    assert got == never_restarted


@pytest.mark.parametrize("how", ["store-only", "sigkill-behind"])
def test_a_backlog_longer_than_the_buffer_is_judged_from_the_store_after_a_crash(tmp_path, batches, never_restarted,
                                                                                 models, how):
    """The processor has judged up to just before training's first vote; then 50 s of batches
    (longer than the 30 s buffer, the alert and the pause inside) are committed but not judged
    when the collector dies. "store-only": they are posted to a collector running without the
    live processor (TRAINSENTRY_LIVE=0), so the backlog is exactly them; "sigkill-behind": posted
    to one whose bus holds one event, SIGKILLed at once (the processor is somewhere behind).
    Before: the windows older than the 30 s re-read at the restart were judged without samples
    ("other"), the alert came late and the pause split the job."""
    ref = never_restarted
    voted = [t for t, state, p, *_ in ref["timeline"] if state != "idle" and p is not None and p >= 0.75]
    k = first_batch_reaching(batches, voted[0] - 4.0)
    m = first_batch_reaching(batches, T0 + CUT_S + 8.0 + 4.0)   # past the alert and the spliced pause
    assert max(s["t"] for s in batches[m - 1]) - max(s["t"] for s in batches[k - 1]) > 45.0
    db, key, token = fresh_db(tmp_path)
    env = {"TRAINSENTRY_MODELS": str(models)}
    col = RealCollector(db, env)
    agent = Agent(col.http, "node-a", key)
    try:
        feed(col, agent, batches[:k], token)
        judged = col.get("/v1/nodes/node-a/verdict", token)["window"]["end"]
        col.kill()
        col = RealCollector(db, {**env, "TRAINSENTRY_LIVE": "0"} if how == "store-only"
                            else {**env, "TRAINSENTRY_BUS_QUEUE": "1"})
        agent.client = col.http
        post(agent, batches[k:m])
        col.kill()
        c = sqlite3.connect(db)
        (t_end,) = c.execute("SELECT t_end FROM live_node_state WHERE node = 'node-a'").fetchone()
        (last_t,) = c.execute("SELECT last_t FROM nodes WHERE name = 'node-a'").fetchone()
        c.close()
        if how == "store-only":
            assert t_end == judged and last_t - t_end > 45.0   # the backlog: more than the buffer holds
        col = RealCollector(db, env)
        agent.client = col.http
        feed(col, agent, batches[m:], token)
        after = observe(col, token)
        live = col.get("/v1/live", token)
        verdict = col.get("/v1/nodes/node-a/verdict", token)
    finally:
        col.kill()
    assert live["caught_up"]["batches"] >= (m - k if how == "store-only" else 1) and live["behind"] == {}
    assert verdict["unjudged"] == []
    backlog = [(st, p) for t, st, p, *_ in after["timeline"] if judged < t <= last_t]
    assert len(backlog) >= 22 and "training" in {st for st, _ in backlog}
    assert all(p is not None for _, p in backlog), backlog   # every window judged from its samples
    assert after == ref


def test_what_cannot_be_caught_up_is_recorded_and_served_as_unjudged(tmp_path, monkeypatch):
    """A backlog reaching back more than the catch-up horizon (1 h; 20 s here) before the node's
    latest sample is judged from the horizon on, and the older part is an unjudged span with the
    reason; so are windows skipped when a node's samples jump ahead by more than 30 windows."""
    from trainsentry.collector import warm
    monkeypatch.setattr(warm, "CATCHUP_MAX_S", 20.0)
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(tmp_path / "no-models"))
    db, key, token = fresh_db(tmp_path)
    plan = [("idle", 12.0, IDLE_MEM_BYTES), ("ddp", 38.0, 20 * GIB)]
    sent = live_batches(plan)
    monkeypatch.setenv("TRAINSENTRY_LIVE", "0")   # stored, never judged: no snapshot, no verdict
    with TestClient(create_app(db)) as c:
        a = Agent(c, "node-a", key)
        for b in sent:
            assert a.send(b).status_code == 200
    monkeypatch.setenv("TRAINSENTRY_LIVE", "1")
    with TestClient(create_app(db), headers={"Authorization": f"Bearer {token}"}) as c:
        assert c.app.state.bus.drain(60.0)
        v = c.get("/v1/nodes/node-a/verdicts", params={"start": T0 - 10, "end": T0 + 1000}).json()
        latest = max(s["t"] for s in sent[-1])
        (u,) = v["unjudged"]
        assert u["start"] == min(s["t"] for s in sent[0]) and u["end"] == pytest.approx(latest - 20.0, abs=1.0)
        assert "more than 20 s before the node's latest sample" in u["reason"] and u["seq_from"] == 0
        assert min(x["t_end"] for x in v["verdicts"]) > u["end"]   # judged from the horizon on
        assert v["verdicts"][-1]["state"] == "training"
        # the node's samples jump 100 s ahead: 50 windows completed at once, the latest 30 judged
        a = Agent(c, "node-a", key)
        a.seq, a.prev = len(sent), c.app.state.live.conn.execute(
            "SELECT last_digest FROM nodes WHERE name = 'node-a'").fetchone()[0]
        later = live_batches(plan, t_start=T0 + 150.0)
        for b in later[:3]:
            assert a.send(b).status_code == 200
        assert c.app.state.bus.drain(60.0)
        v = c.get("/v1/nodes/node-a/verdict").json()
        jump = [x for x in v["unjudged"] if x["seq_from"] is None]
        assert len(jump) == 1 and "at most 30 (the latest) are judged at once" in jump[0]["reason"], v["unjudged"]
        assert c.get("/v1/live").json()["caught_up"]["unjudged"] == 2


def test_a_batch_that_cannot_be_read_back_is_retried_then_marked_unjudged(tmp_path, monkeypatch):
    import sqlite3 as sq

    from trainsentry.collector import warm
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(tmp_path / "no-models"))
    db, key, token = fresh_db(tmp_path)
    sent = live_batches([("ddp", 30.0, 20 * GIB)])
    with TestClient(create_app(db), headers={"Authorization": f"Bearer {token}"}) as c:
        proc, bus = c.app.state.live, c.app.state.bus
        a = Agent(c, "node-a", key)
        for b in sent[:12]:
            assert a.send(b).status_code == 200
        assert bus.drain(30.0)
        real = warm.batch_samples

        def broken(conn, node_id, first, last):
            raise sq.DatabaseError("database disk image is malformed")
        monkeypatch.setattr(warm, "batch_samples", broken)
        proc.nodes["node-a"].seq -= 3      # as if the bus had dropped the last three batches
        for i in range(3):                 # each event tries again; the third failure gives up on them
            bus.resync("node-a", 11)
            assert bus.drain(30.0)
            assert proc.nodes["node-a"].seq == (8 if i < 2 else 11)
        monkeypatch.setattr(warm, "batch_samples", real)
        for b in sent[12:]:
            assert a.send(b).status_code == 200
        assert bus.drain(30.0)
        v = c.get("/v1/nodes/node-a/verdict").json()
    (u,) = v["unjudged"]
    assert (u["seq_from"], u["seq_to"]) == (9, 11) and "could not be read back" in u["reason"]
    assert "malformed" in u["reason"] and v["state"] == "training"


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
    assert '"v": 2' in raw and job.startswith("job-")
    c.execute("UPDATE live_node_state SET state = ? WHERE node = 'node-a'", (raw.replace('"v": 2', '"v": 99'),))
    c.commit()
    c.close()
    with TestClient(create_app(db), headers={"Authorization": f"Bearer {inspector_token}"}) as c2:
        live = c2.get("/v1/live").json()
        assert live["restored"]["states"] == 0 and "version-2" in live["restored"]["unusable"]["node-a"]
        assert live["warmed"]["nodes"] == 1   # its buffer still comes back from the samples


def test_a_version_1_snapshot_is_still_restored(db, client, agent, inspector_token):
    # written before snapshots said which stored batch the buffer had read: that is derived from
    # the node's last verdict, and the job carries on under its name
    send_all(client, {"node-a": agent}, {"node-a": DDP})
    job = client.get("/v1/nodes/node-a/verdict").json()["job"]
    n = len(client.get("/v1/nodes/node-a/verdicts", params={"start": T0 - 10, "end": T0 + 1000}).json()["verdicts"])
    client.close()
    c = sqlite3.connect(db)
    (raw,) = c.execute("SELECT state FROM live_node_state WHERE node = 'node-a'").fetchone()
    old = {k: v for k, v in json.loads(raw).items() if k not in ("seq", "t_latest")}
    c.execute("UPDATE live_node_state SET state = ? WHERE node = 'node-a'", (json.dumps({**old, "v": 1}),))
    c.commit()
    c.close()
    with TestClient(create_app(db), headers={"Authorization": f"Bearer {inspector_token}"}) as c2:
        live = c2.get("/v1/live").json()
        assert live["restored"] == {"states": 1, "unusable": {}} and live["behind"] == {}
        a2 = Agent(c2, "node-a", agent.key)
        a2.seq, a2.prev = agent.seq, agent.prev
        more = live_batches(DDP[:-1] + [("ddp", 34.0, 20 * GIB)])[len(live_batches(DDP)):]
        for b in more:
            assert a2.send(b).status_code == 200
        assert c2.app.state.bus.drain(30.0)
        tl = c2.get("/v1/nodes/node-a/verdicts", params={"start": T0 - 10, "end": T0 + 1000}).json()["verdicts"]
    assert len(tl) == n + 6 and {v["job"] for v in tl[n:]} == {job} and tl[-1]["state"] == "training"


def test_a_shutdown_judges_nothing_more_and_the_next_start_reads_the_rest_back(tmp_path_factory, monkeypatch):
    # the processor stops at shutdown rather than draining its queue; nothing is lost: the next
    # start reads back from the store what was not judged, and the verdicts are a full run's
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(tmp_path_factory.getbasetemp() / "no-models"))
    sent = live_batches(DDP)

    def verdicts(c) -> list[tuple]:
        tl = c.get("/v1/nodes/node-a/verdicts", params={"start": T0 - 10, "end": T0 + 100}).json()["verdicts"]
        return [(v["t_end"], v["state"], v["p_training"], v["job"], v["evidence"]) for v in tl]
    out = []
    for stop_early in (False, True):
        db, key, token = fresh_db(tmp_path_factory.mktemp("stop"))
        app = create_app(db)
        with TestClient(app, headers={"Authorization": f"Bearer {token}"}) as c:
            a = Agent(c, "node-a", key)
            if stop_early:
                app.state.live.stop()     # as at shutdown: events still arriving are left to the store
            for b in sent:
                assert a.send(b).status_code == 200
            if not stop_early:
                assert c.app.state.bus.drain(30.0)
                out.append(verdicts(c))
            else:
                assert verdicts(c) == []
        if stop_early:
            with TestClient(create_app(db), headers={"Authorization": f"Bearer {token}"}) as c:
                assert c.app.state.bus.drain(30.0)
                assert c.get("/v1/live").json()["caught_up"]["batches"] == len(sent)
                out.append(verdicts(c))
    assert out[0] and out[1] == out[0]


def _time_regression_run(tmp: Path, restart_after: str | None) -> tuple[dict, list[tuple]]:
    """The DDP stream of test_live with, after its 20th batch, a chain-valid batch stamped ~10 s back
    (second 10 again, a little later): a time_regression interval. A restart (a new app on the same
    database, the agent carrying on) "after the regression": right after that batch, before any
    window after it is judged, so the processor reads it back from the store with its interval;
    "after a window": once the next batch has closed one window (the snapshot now covers the
    regression batch), so the interval comes back only with the warmed buffer (warm.restore).
    ({"line", "latest", "judged_before", "restarted_at", "caught_up"}, the node's timeline)."""
    db, key, token = fresh_db(tmp)
    stream = live_batches(DDP)
    back = [{**s, "t": round(s["t"] + 0.05, 6)} for s in stream[10]]
    start, latest = min(s["t"] for s in back), max(s["t"] for s in stream[19])
    order = stream[:20] + [back] + stream[20:]
    k = {None: len(order), "after the regression": 21, "after a window": 22}[restart_after]
    out = {"line": f"window overlaps an unmonitored interval, time regression: {start:.1f}-{latest:.1f} (samples "
                   "stamped before ones already received: history rewritten or clock stepped back; windows judged "
                   "before they came did not see them)", "latest": latest}

    def app():
        return TestClient(create_app(db), headers={"Authorization": f"Bearer {token}"})

    def judged_to(c) -> float:
        return c.get("/v1/nodes/node-a/verdict").json()["window"]["end"]
    c = app().__enter__()
    try:
        agent = Agent(c, "node-a", key)
        for i, b in enumerate(order[:k]):
            r = agent.send(b)
            assert r.status_code == 200, r.text
            if i == 19:
                assert c.app.state.bus.drain(30.0)
                out["judged_before"] = judged_to(c)
            if i == 20:
                assert r.json()["unmonitored"] == [{"start": start, "end": latest, "reason": "time_regression",
                                                    "seq_from": 20, "seq_to": 20}]
        assert c.app.state.bus.drain(30.0)
        if k < len(order):
            out["restarted_at"] = judged_to(c)
            c.__exit__(None, None, None)
            c = app().__enter__()
            agent.client = c
            assert c.app.state.bus.drain(30.0)
            out["caught_up"] = c.get("/v1/live").json()["caught_up"]["batches"]
            for b in order[k:]:
                assert agent.send(b).status_code == 200
            assert c.app.state.bus.drain(30.0)
        tl = c.get("/v1/nodes/node-a/verdicts", params={"start": T0 - 10, "end": T0 + 100}).json()["verdicts"]
        return out, [(v["t_start"], v["t_end"], v["state"], v["p_training"], v["job"], v["evidence"]) for v in tl]
    finally:
        c.__exit__(None, None, None)


@pytest.fixture(scope="module")
def time_regression_reference(tmp_path_factory, models) -> tuple[dict, list[tuple]]:
    with pytest.MonkeyPatch.context() as m:
        m.setenv("TRAINSENTRY_MODELS", str(models))
        return _time_regression_run(tmp_path_factory.mktemp("regression-reference"), None)


@pytest.mark.parametrize("restart_after", ["after the regression", "after a window"])
def test_a_time_regression_is_in_the_evidence_of_the_windows_judged_after_a_restart(
        tmp_path, monkeypatch, models, time_regression_reference, restart_after):
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(models))
    _, ref = time_regression_reference
    info, tl = _time_regression_run(tmp_path, restart_after)
    line, latest, judged_before, restarted_at = info["line"], info["latest"], info["judged_before"], info["restarted_at"]
    if restart_after == "after the regression":   # nothing judged since: the batch is read back from the store
        assert restarted_at == judged_before and info["caught_up"] >= 1
    else:                                          # a window judged since: nothing to read back, the buffer is warmed
        assert restarted_at > judged_before and info["caught_up"] == 0
    # the windows judged after the regression batch that overlap its span say so, those after the
    # restart too (with its span); none before it, none past it
    for t_start, t_end, *_, evidence in tl:
        assert (line in evidence) == (t_end > judged_before and t_start < latest), (t_start, t_end, evidence)
    assert [t_end for t_start, t_end, *_, evidence in tl if line in evidence and t_end > restarted_at]
    assert not any("window overlaps an unmonitored interval:" in e for *_, evidence in tl for e in evidence)
    # ... and every verdict is what a collector that never restarted says
    assert tl == ref
