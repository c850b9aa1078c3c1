"""A node's live job identity: one job for one workload however long it runs, and across pauses
by the offline job rule (detect.segment.links), through the real app.

The streams are the recorded 2-GPU DDP run on the H200s (data/redteam-r1, 90 s of training at
10 Hz), retimed to the recent past and posted in 1 s signed batches. Pauses are spliced in from the
same recording's idle stretch before its workload started (its first 2 s, repeated), with the
memory either still held at the job's level or released to the idle level; cumulative counters
continue across every seam.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import Agent
from fastapi.testclient import TestClient

from test_live import T0, get, no_models  # noqa: F401  (no_models: autouse, untrained comm-rules)
from trainsentry.telemetry.base import Reading
from trainsentry.telemetry.replay import read_trace_readings
from trainsentry.traces.schema import COUNTERS

RUN = Path(__file__).resolve().parents[2] / "data" / "redteam-r1" / "train.ddp.w1024-l16-bd4448-r0"
IDLE_S = 2.0       # the recording is idle before this (its segment starts at 2.5 s)
CUT_S = 45.0       # where a pause is spliced in: 42 s into training, longer than the 30 s buffer
_COUNTER_NAMES = tuple(m.name for m in COUNTERS)


@pytest.fixture(scope="module")
def recording() -> list[Reading]:
    return read_trace_readings(RUN)


def splice(pieces: list[list[Reading]], t_start: float = T0) -> list[Reading]:
    """The pieces one after another from ``t_start`` (each keeps its own sample intervals, the next
    begins 0.1 s after the last); counters continue from where the previous piece left them."""
    out: list[Reading] = []
    last: dict[tuple[str, str], float] = {}
    cursor = t_start
    for piece in pieces:
        t0 = piece[0].t
        first: dict[tuple[str, str], float] = {}
        for r in piece:
            for m in _COUNTER_NAMES:
                if m in r.values:
                    first.setdefault((r.device, m), r.values[m])
        offset = {k: last[k] - v for k, v in first.items() if k in last}
        for r in piece:
            values = {m: v + offset.get((r.device, m), 0) for m, v in r.values.items()}
            out.append(Reading(r.device, r.kind, cursor + (r.t - t0), values))
            for m in _COUNTER_NAMES:
                if m in values:
                    last[(r.device, m)] = values[m]
        cursor = out[-1].t + 0.1
    return out


def pause(recording: list[Reading], seconds: float, mem: dict[str, int] | None) -> list[list[Reading]]:
    """The recording's idle stretch, as pieces repeated for ``seconds``; GPU memory set to ``mem``
    (None: as recorded, the idle level)."""
    t0 = recording[0].t
    idle = [r for r in recording if r.t < t0 + IDLE_S]
    if mem is not None:
        idle = [replace(r, values={**r.values, "mem_used_bytes": mem[r.device]}) if r.device in mem else r
                for r in idle]
    return [idle] * round(seconds / IDLE_S)


def stream(recording: list[Reading], pauses: list[tuple[float, bool]]) -> list[Reading]:
    """The recording, with the pause phases (seconds, memory held) spliced in at CUT_S."""
    t0 = recording[0].t
    before = [r for r in recording if r.t < t0 + CUT_S]
    after = [r for r in recording if r.t >= t0 + CUT_S]
    held = {r.device: r.values["mem_used_bytes"] for r in before if "mem_used_bytes" in r.values}
    return splice([before, *(p for s, h in pauses for p in pause(recording, s, held if h else None)), after])


def post(client: TestClient, agent: Agent, readings: list[Reading]) -> None:
    per_s: dict[int, list[dict]] = {}
    for r in sorted(readings, key=lambda r: (r.t, r.device)):
        per_s.setdefault(int((r.t - T0) // 1.0), []).append(r.to_wire())
    for k in sorted(per_s):
        resp = agent.send(per_s[k])
        assert resp.status_code == 200, resp.text
    assert client.app.state.bus.drain(60.0)


def node_jobs(client) -> tuple[list[dict], list[str], list[dict]]:
    """(timeline, the distinct jobs of its non-idle windows in order, /v1/jobs)."""
    tl = get(client, "/v1/nodes/node-a/verdicts", start=T0 - 10, end=T0 + 1000)["verdicts"]
    jobs = []
    for v in tl:
        if v["state"] != "idle" and v["job"] not in jobs:
            jobs.append(v["job"])
    return tl, jobs, get(client, "/v1/jobs")["jobs"]


def test_a_job_longer_than_the_buffer_keeps_one_job(client, agent, recording):
    post(client, agent, splice([recording]))
    tl, jobs, listed = node_jobs(client)
    assert tl[-1]["t_end"] - tl[0]["t_end"] > 80 and {"training"} <= {v["state"] for v in tl}
    assert len(jobs) == 1 and None not in jobs, jobs       # was a new job every ~12 s
    assert [j["job"] for j in listed] == jobs
    assert listed[0]["start_t"] == pytest.approx(T0 + 2.5, abs=1.0)  # dated from its true start
    assert listed[0]["last_t"] >= tl[-1]["t_end"] - 2.0
    since = [e for e in tl[-1]["evidence"] if e.startswith("segment active since")]
    assert since and int(since[0].split("(")[1].split(" s")[0]) > 80, since
    assert len(get(client, "/v1/nodes/node-a/alerts")["alerts"]) == 1


@pytest.mark.parametrize("pauses, n_jobs", [
    ([(8.0, True)], 1),                  # a pause inside the buffer, memory held: the same job
    ([(40.0, True)], 1),                 # a pause longer than the buffer, memory held: the same job
    ([(8.0, False)], 2),                 # memory released: the job ended, the next is another
    ([(10.0, False), (34.0, True)], 2),  # released, then held again (a new process loading) for
                                         # longer than the buffer: the release is remembered
], ids=["held-8s", "held-40s", "released-8s", "released-then-held-44s"])
def test_pauses_link_by_the_offline_job_rule(client, agent, recording, pauses, n_jobs):
    post(client, agent, stream(recording, pauses))
    tl, jobs, listed = node_jobs(client)
    pause_s = sum(s for s, _ in pauses)
    paused = [v for v in tl if T0 + CUT_S + 4.0 <= v["t_end"] <= T0 + CUT_S + pause_s - 1.0]
    assert paused and {v["state"] for v in paused} == {"idle"}   # the pause itself is seen
    assert len(jobs) == n_jobs and None not in jobs, jobs
    assert [j["job"] for j in listed] == jobs
    assert listed[0]["start_t"] == pytest.approx(T0 + 2.5, abs=1.0)
    last = " ".join(tl[-1]["evidence"])
    node_alerts = get(client, "/v1/nodes/node-a/alerts")["alerts"]
    job_alerts = {j: get(client, f"/v1/jobs/{j}", start=T0 - 10)["alerts"] for j in jobs}
    job_tl = get(client, f"/v1/jobs/{jobs[0]}", start=T0 - 10)["verdicts"]
    job_paused = [v for v in job_tl if v["state"] == "idle"]
    if n_jobs == 1:
        assert listed[0]["last_t"] >= tl[-1]["t_end"] - 2.0
        assert f"across 1 pause(s), the latest {pause_s:.0f} s" in last, last
        # alerts and pauses: the pause may still resume the job, so its idle windows abstain, for
        # the node and the job alike: one alert each, open through the pause (before, the node's
        # cleared in a 40 s pause and a second one was raised; the job's never could)
        assert all(v["abstain"] and v["job"] == jobs[0] for v in paused)
        assert job_paused and all(v["abstain"] for v in job_paused)
        assert [a["open"] for a in node_alerts] == [True] and [a["open"] for a in job_alerts[jobs[0]]] == [True]
    else:
        assert listed[1]["start_t"] == pytest.approx(T0 + CUT_S + pause_s, abs=2.0)
        assert "pause(s)" not in last
        # memory released: the job ended; its idle windows vote no as the node's do, and its alert
        # clears after 5 of them (before, an ended job's alert stayed open for good); the next job
        # has its own
        assert not any(v["abstain"] or v["job"] for v in paused)
        ended = [v for v in job_paused if not v["abstain"]]
        assert len(ended) == 5 and "ended: no node of job" in " ".join(ended[0]["evidence"])
        (first,) = job_alerts[jobs[0]]
        assert first["cleared_t"] == ended[-1]["t_end"] and [a["open"] for a in job_alerts[jobs[1]]] == [True]
