"""Inspector auth, the overview aggregation and the dashboard pages, through the real app."""

from __future__ import annotations

import sqlite3
from pathlib import Path
import subprocess
import sys
import time

import pytest
from fastapi.testclient import TestClient

from trainsentry.collector import auth
from trainsentry.collector.app import create_app
from trainsentry.collector.overview import aggregate, node_rows
from trainsentry.collector.schema import open_db

from conftest import gpu_samples  # tests/collector/conftest.py (rootdir-relative import, as the others do)

READS = ["/v1/nodes", "/v1/overview", "/v1/nodes/node-a/series", "/v1/nodes/node-a/unmonitored"]


@pytest.fixture
def anon(db, key):
    with TestClient(create_app(db)) as c:
        yield c


def now_samples(n=10, dev="gpu0"):
    return gpu_samples(time.time() - n * 0.1, n=n, dev=dev)


@pytest.mark.parametrize("path", READS + ["/dashboard", "/dashboard/nodes/node-a"])
def test_reads_without_a_credential_are_refused(anon, path):
    r = anon.get(path, follow_redirects=False)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("path", READS)
def test_a_node_key_never_authorises_a_read(anon, key, path):
    for header in (f"Bearer {key}", f"Bearer {auth.TOKEN_PREFIX}{key}", key):
        r = anon.get(path, headers={"Authorization": header})
        assert r.status_code == 401, (path, header)


@pytest.mark.parametrize("path", READS)
def test_an_inspector_token_authorises_reads(anon, inspector_token, path):
    r = anon.get(path, headers={"Authorization": f"Bearer {inspector_token}"})
    assert r.status_code == 200, r.text


def test_ingest_still_needs_the_node_hmac_and_nothing_else(anon, agent, key, inspector_token):
    # an inspector token does not let anyone post batches ...
    body = agent.body(now_samples())
    r = anon.post("/v1/batches", content=body, headers={"Authorization": f"Bearer {inspector_token}"})
    assert r.status_code == 401 and r.json()["error"] == "missing_node"
    # ... and a signed batch goes through without any inspector credential
    assert agent.send(now_samples()).status_code == 200


def test_only_digests_are_stored_and_a_rotated_token_stops_working(db, anon, inspector_token):
    conn = sqlite3.connect(db)
    stored = [r[0] for r in conn.execute("SELECT token_sha256 FROM inspectors")]
    conn.close()
    assert inspector_token not in stored and len(stored) == 1 and len(stored[0]) == 64
    new = auth.enroll_inspector_in(db, "inspector-1", rotate=True)
    assert anon.get("/v1/nodes", headers={"Authorization": f"Bearer {inspector_token}"}).status_code == 401
    assert anon.get("/v1/nodes", headers={"Authorization": f"Bearer {new}"}).status_code == 200
    with pytest.raises(auth.AuthError, match="already exists"):
        auth.enroll_inspector_in(db, "inspector-1")
    with pytest.raises(auth.AuthError, match="invalid inspector name"):
        auth.enroll_inspector_in(db, "bad name; drop")


def test_login_sets_a_strict_httponly_cookie_that_opens_the_dashboard(anon, inspector_token):
    page = anon.get("/dashboard", headers={"Accept": "text/html"}, follow_redirects=False)
    assert page.status_code == 303 and page.headers["location"].startswith("/login?next=%2Fdashboard")
    bad = anon.post("/login", data={"token": "tsi_wrong", "next": "/dashboard"}, follow_redirects=False)
    assert bad.status_code == 303 and "failed=1" in bad.headers["location"] and "set-cookie" not in bad.headers
    r = anon.post("/login", data={"token": inspector_token, "next": "https://evil.example/"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/dashboard"  # no open redirect
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and inspector_token not in cookie
    html = anon.get("/dashboard")  # the client keeps the cookie
    assert html.status_code == 200 and "overview.js" in html.text
    assert "script-src 'self'" in html.headers["content-security-policy"]
    assert anon.get("/v1/overview").status_code == 200
    anon.post("/logout", follow_redirects=False)
    anon.cookies.clear()
    assert anon.get("/v1/overview").status_code == 401


def test_a_forged_or_expired_session_is_refused(db, anon, inspector_token):
    anon.cookies.set(auth.SESSION_COOKIE, "made-up")
    assert anon.get("/v1/overview").status_code == 401
    conn = open_db(db)
    session = auth.open_session(conn, inspector_token, ttl_s=-1.0)
    conn.close()
    anon.cookies.set(auth.SESSION_COOKIE, session)
    assert anon.get("/v1/overview").status_code == 401


def test_node_names_are_escaped_in_pages(client):
    r = client.get("/dashboard/nodes/%3Cimg%20src%3Dx%20onerror%3D%22alert(1)%22%3E")
    assert r.status_code == 200 and "<img" not in r.text and "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in r.text


def test_overview_reports_every_node_with_devices_last_seen_and_unmonitored(db, client, agent):
    from trainsentry.collector.store import Store
    store = Store(db)
    store.enroll("node-b")   # enrolled a minute ago, never reported
    store.conn.execute("UPDATE nodes SET enrolled_at = enrolled_at - 60 WHERE name = 'node-b'")
    store.close()
    assert agent.send(now_samples() + now_samples(dev="gpu1")).status_code == 200
    doc = client.get("/v1/overview").json()
    by = {n["node"]: n for n in doc["nodes"]}
    assert doc["n_nodes"] == 2 and set(by) == {"node-a", "node-b"}
    assert by["node-a"]["devices"] == {"gpu": 2} and by["node-a"]["unmonitored"] is None
    assert by["node-a"]["last_seen"] == pytest.approx(time.time(), abs=10)
    # with no live engine attached there is no verdict: state stays empty, not invented
    assert by["node-a"]["state"] is None and doc["counts"]["pending"] == 1
    assert by["node-b"]["state"] == "unmonitored" and by["node-b"]["unmonitored"] == "never_reported"
    assert by["node-a"]["silent_devices"] == [] and by["node-b"]["silent_devices"] == []


def test_overview_names_a_gpu_the_node_stopped_reporting(db, client, agent):
    """The node goes on, one GPU does not: the overview names it, by query.silent_devices' rule."""
    from trainsentry.collector import query
    t0 = time.time() - 30
    assert agent.send(gpu_samples(t0) + gpu_samples(t0, dev="gpu1")).status_code == 200
    assert agent.send(gpu_samples(t0 + 12.0)).status_code == 200      # gpu1 silent for 12 s
    (n,) = client.get("/v1/overview").json()["nodes"]
    assert n["silent_devices"] == ["gpu1"] and n["unmonitored"] is None
    c = __import__("sqlite3").connect(db)
    try:
        assert [d["device"] for d in query.silent_devices(c, 1, *c.execute(
            "SELECT last_t, interval_s FROM nodes").fetchone())] == n["silent_devices"]
    finally:
        c.close()


def test_overview_marks_a_silent_node_unmonitored_and_keeps_its_last_verdict(db, agent, client):
    assert agent.send(now_samples()).status_code == 200
    conn = open_db(db)
    rows = node_rows(conn, time.time() + 60)   # a minute later, nothing more arrived (interval 1 s)
    conn.close()
    verdicts = {"node-a": {"state": "training", "p_training": 0.97, "job": "j1", "alerts": 2}}
    doc = aggregate(rows, verdicts, [{"job": "j1", "nodes": ["node-a"], "state": "training"}], time.time())
    n = doc["nodes"][0]
    assert n["state"] == "unmonitored" and n["unmonitored"] == "silence" and n["last_verdict"] == "training"
    assert n["p_training"] == 0.97 and n["alerts"] == 2 and doc["counts"]["unmonitored"] == 1
    live = aggregate(node_rows(open_db(db), time.time()), verdicts, [], time.time())
    assert live["nodes"][0]["state"] == "training" and live["counts"]["training"] == 1


def test_overview_counts_recorded_unmonitored_time_and_groups_jobs():
    rows = [{"node": f"n{i}", "unmonitored": None, "devices": {}, "last_seen": 1.0} for i in range(4)]
    verdicts = {"n0": {"state": "training", "job": "big"}, "n1": {"state": "training", "job": "big"},
                "n2": {"state": "inference", "job": "serve"}, "n3": {"state": "bogus", "floor_flop": 3.5e13}}
    jobs = [{"job": "serve", "nodes": ["n2"]}, {"job": "big", "nodes": ["n0", "n1"]}]
    doc = aggregate(rows, verdicts, jobs, 2.0)
    assert [j["job"] for j in doc["jobs"]] == ["big", "serve"]   # multi-node jobs first
    assert doc["counts"] == {"idle": 0, "inference": 1, "training": 2, "other": 0, "unmonitored": 0, "pending": 1}
    # the single-device check's bound below its busy floor passes through, absent as None
    assert [n["floor_flop"] for n in doc["nodes"]] == [None, None, None, 3.5e13]


def test_overview_is_cached_for_a_second_and_gzipped_for_browsers(db, client, agent):
    assert client.app.state.overview.ttl_s == 1.0
    # held for the test: the three requests and the ingest below need not fit in one second on a
    # loaded machine for the cache to be what is tested
    client.app.state.overview.ttl_s = 3600.0
    first_r = client.get("/v1/overview", headers={"Accept-Encoding": "gzip"})
    assert first_r.headers["content-encoding"] == "gzip"
    first = first_r.json()
    plain = client.get("/v1/overview", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.json() == first
    assert agent.send(now_samples()).status_code == 200
    assert client.get("/v1/overview").json()["now"] == first["now"]
    client.app.state.overview.ttl_s = 0.0
    assert client.get("/v1/overview").json()["nodes"][0]["last_seen"] is not None


def test_enroll_inspector_command_writes_a_private_token_file(tmp_path):
    db, out = tmp_path / "c.db", tmp_path / "tok"
    r = subprocess.run([sys.executable, "-m", "trainsentry.cli", "enroll-inspector", "alice", "--db", str(db),
                        "--token-out", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    token = out.read_text().strip()
    assert token.startswith(auth.TOKEN_PREFIX) and (out.stat().st_mode & 0o777) == 0o600
    again = subprocess.run([sys.executable, "-m", "trainsentry.cli", "enroll-inspector", "alice", "--db", str(db)],
                           capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in again.stderr


# ---- job FLOPs -----------------------------------------------------------------------------------
def _ingest_probe_trace(agent, plan, t_start):
    """Send a probe trace (recorded H200 readings, tests/detect/probe_traces.py) in 1-s batches."""
    import detect.probe_traces as pt
    readings = sorted(pt.readings(plan, t_start), key=lambda r: (r.t, r.device))
    t_edge, chunk = readings[0].t + 1.0, []
    for r in readings + [None]:
        if r is None or r.t >= t_edge:
            assert agent.send(chunk).status_code == 200
            t_edge, chunk = t_edge + 1.0, []
        if r is not None:
            chunk.append(r.to_wire())
    return readings


def _write_job(db, nodes, start_t, last_t):
    from trainsentry.collector.verdicts import VerdictWriter
    conn = open_db(db)
    VerdictWriter(conn).write([], [], [], [{"job": "j1", "nodes": nodes, "start_t": start_t, "last_t": last_t}])
    conn.close()


def test_job_flops_says_why_when_there_is_no_saved_model(db, client, monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(tmp_path / "empty"))
    _write_job(db, ["node-a"], 1.8e9, 1.8e9 + 10)
    r = client.get("/v1/jobs/j1/flops").json()
    assert r["available"] is False and "no saved FLOP model" in r["reason"]
    assert client.get("/v1/jobs/nope/flops").status_code == 404


def test_job_flops_is_the_saved_estimator_over_the_stored_samples(db, client, agent, monkeypatch, tmp_path):
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import detect.probe_traces as pt
    from trainsentry.flops.estimators import make
    from trainsentry.flops.features import interval_features, stack
    from trainsentry.flops.live import estimate_so_far, save_model
    from trainsentry.traces.io import columns_to_table, readings_to_columns

    t0 = round(time.time()) - 60.0   # the job ran in the last minute
    plan = [("idle", 8.0, pt.IDLE_MEM_BYTES), ("ddp", 20.0, 20 * pt.GIB)]
    readings = _ingest_probe_trace(agent, plan, t0)
    table = columns_to_table(readings_to_columns("node-a", readings))
    # an estimator fitted on this trace's own intervals (targets: 400 J of net energy per TFLOP);
    # the test is about the plumbing: the route must give exactly what estimate_so_far gives directly
    feats = [interval_features(table, t0 + 8.0, t0 + 8.0 + s) for s in (6.0, 12.0, 19.0)]
    est = make("power_only").fit(stack(feats), [f.net_energy_J / 400.0 * 1e12 for f in feats])
    models = tmp_path / "models"
    save_model(est, models / "flops.json", {"command": "test"})
    monkeypatch.setenv("TRAINSENTRY_MODELS", str(models))
    _write_job(db, ["node-a"], t0 + 8.0, t0 + 28.0)
    r = client.get("/v1/jobs/j1/flops").json()
    assert r["available"] is True, r.get("reason")
    want = estimate_so_far(table, t0 + 8.0, time.time(), model=est)
    assert (r["flops"], r["lo"], r["hi"]) == pytest.approx((want["flops"], want["lo"], want["hi"]), rel=1e-9)
    assert r["lo"] <= r["flops"] <= r["hi"] and r["per_node"]["node-a"]["flops"] == pytest.approx(want["flops"])
    # beside it the tensor-core ceiling (tests/flops/test_ceiling.py): these probe readings carry no GPM
    # tensor activity, so there is none, and the route says so rather than a ceiling of zero
    assert want["tensor_flop_max"] is None and r["tensor_flop_max"] is None
    assert r["per_node"]["node-a"]["tensor_flop_max"] is None
