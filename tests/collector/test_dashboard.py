"""Inspector auth, the overview aggregation and the dashboard pages, through the real app."""

from __future__ import annotations

import sqlite3
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
                "n2": {"state": "inference", "job": "serve"}, "n3": {"state": "bogus"}}
    jobs = [{"job": "serve", "nodes": ["n2"]}, {"job": "big", "nodes": ["n0", "n1"]}]
    doc = aggregate(rows, verdicts, jobs, 2.0)
    assert [j["job"] for j in doc["jobs"]] == ["big", "serve"]   # multi-node jobs first
    assert doc["counts"] == {"idle": 0, "inference": 1, "training": 2, "other": 0, "unmonitored": 0, "pending": 1}


def test_overview_is_cached_for_a_second(db, client, agent):
    first = client.get("/v1/overview").json()
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
