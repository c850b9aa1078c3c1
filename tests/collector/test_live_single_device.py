"""The single-device lead end to end: one-GPU runs recorded on the H200 (data/h200x1) are replayed,
as an agent would send them (1 s signed batches), into a real collector app that loads the committed
artifacts (models/fused.joblib, models/single-device.joblib). On a single-GPU training run the
exchange gate stays closed, so the verdict is not training, and the evidence carries the check's
line that the busy GPU reads like training; on single-user decode no line says so. The check is
fitted on these recordings: this tests the live path, not the check's accuracy (docs/one-gpu.md).
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from conftest import Agent
from fastapi.testclient import TestClient

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


def replay(client: TestClient, agent: Agent, run: Path) -> tuple[float, float]:
    """Send the run's readings, moved to end a minute ago, in 1 s batches; returns (t0, t1)."""
    rs = sorted(read_trace_readings(run), key=lambda r: (r.t, r.device))
    shift = time.time() - 60.0 - rs[-1].t
    t0 = rs[0].t + shift
    per_batch: dict[int, list[dict]] = {}
    for r in rs:
        r.t += shift
        per_batch.setdefault(int(r.t - t0), []).append(r.to_wire())
    for k in sorted(per_batch):
        resp = agent.send(per_batch[k])
        assert resp.status_code == 200, resp.text
    # the live processor judges on its own thread: wait for the window the last sample completes
    want, deadline = math.floor(rs[-1].t / 2.0 + 1e-9) * 2.0, time.monotonic() + 120
    while (client.get("/v1/nodes/node-a/verdict").json().get("window") or {}).get("end") != want:
        assert time.monotonic() < deadline, "the live processor did not catch up"
        time.sleep(0.1)
    return t0, rs[-1].t


def verdicts(client: TestClient, t0: float, t1: float) -> list[dict]:
    r = client.get("/v1/nodes/node-a/verdicts", params={"start": t0 - 10, "end": t1 + 10})
    assert r.status_code == 200, r.text
    return r.json()["verdicts"]


def single_device_lines(v: dict) -> list[str]:
    return [e for e in v["evidence"] if e.startswith("single-device check")]


def test_single_gpu_training_gets_the_lead_but_not_the_verdict(committed_client, node):
    live = committed_client.get("/v1/live").json()
    assert "single-device" in live["evidence_checks"], live   # the app judging is the one posted to
    t0, t1 = replay(committed_client, node, TRAINING)
    vs = verdicts(committed_client, t0, t1)
    busy = [v for v in vs if single_device_lines(v)]
    # the run is 38 s of a 44 s trace: most of its 8 s windows are busy, and the check speaks on them
    assert len(vs) >= 15 and len(busy) >= len(vs) // 2, [(v["state"], v["evidence"]) for v in vs]
    like = [v for v in busy if ": like training" in single_device_lines(v)[0]]
    assert len(like) >= 0.8 * len(busy), [single_device_lines(v) for v in busy]
    # a lead, never a verdict: the exchange gate is closed on one device
    assert all(v["state"] != "training" for v in vs), [v["state"] for v in vs]
    assert LIKE_TRAINING in single_device_lines(like[0])[0]


def test_single_user_decode_is_not_called_training_by_the_lead(committed_client, node):
    t0, t1 = replay(committed_client, node, DECODE)
    vs = verdicts(committed_client, t0, t1)
    assert len(vs) >= 15
    lines = [line for v in vs for line in single_device_lines(v)]
    assert len(lines) >= 5, [v["evidence"] for v in vs]   # it speaks on the busy windows ...
    assert not [line for line in lines if ": like training" in line], lines   # ... and says no
    assert all(v["state"] != "training" for v in vs)
