"""POST /v1/batches: good batches are committed; every kind of bad batch is refused, counted, not stored."""

from __future__ import annotations

import sqlite3

import orjson
import pytest
from conftest import counts, gpu_samples, rejections

from trainsentry.wire.batch import NODE_HEADER, SIGNATURE_HEADER, digest, new_key, sign, verify


def test_chain_of_batches_is_stored_and_listed(agent, client, db):
    for k in range(3):
        r = agent.send(gpu_samples(1000.0 + k))
        assert r.status_code == 200, r.text
        ack = r.json()
        assert ack == {"accepted": True, "node": "node-a", "seq": k, "digest": agent.prev, "n_samples": 10,
                       "stored_seq": k, "durable_seq": ack["durable_seq"]}
        assert ack["durable_seq"] is None or ack["durable_seq"] <= k   # the checkpoint thread syncs (test_durable.py)
    assert counts(db) == {"batches": 3, "samples": 30, "unmonitored": 0, "devices": 1}
    nodes = client.get("/v1/nodes").json()["nodes"]
    assert [(n["node"], n["last_seq"], n["devices"], n["last_sample_t"]) for n in nodes] == \
        [("node-a", 2, ["gpu0"], 1002.9)]
    assert nodes[0]["last_seen"] is not None
    stats = client.get("/v1/stats").json()
    assert stats["since_start"]["accepted_batches"] == 3 and stats["total"]["samples"] == 30


def _assert_refused(r, status: int, code: str, db, before: dict, n_rejections: int):
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"] == code and r.json()["detail"]
    assert counts(db) == before, "a refused batch must store nothing"
    assert len(rejections(db)) == n_rejections and rejections(db)[-1][:2] == (status, code)


def test_every_bad_batch_is_refused_counted_and_the_server_keeps_serving(agent, client, db):
    agent.send(gpu_samples(1000.0))
    before = counts(db)
    good = agent.body(gpu_samples(1001.0))
    cases = [
        # forged: signed with a key that is not the node's
        (lambda: agent.post(good, key=new_key()), 401, "bad_signature"),
        # altered after signing: one digit of a counter changed, signature of the original
        (lambda: agent.post(good.replace(b'"nvlink_tx_kib":100', b'"nvlink_tx_kib":900'),
                            signature=sign(agent.key, good)),
         401, "bad_signature"),
        # truncated in transit (signature of the whole)
        (lambda: agent.post(good[:-20], signature=sign(agent.key, good)), 401, "bad_signature"),
        (lambda: agent.post(good, node="node-unknown"), 401, "unknown_node"),
        (lambda: agent.client.post("/v1/batches", content=good), 401, "missing_node"),
        (lambda: agent.client.post("/v1/batches", content=good, headers={"X-TS-Node": "node-a"}),
         401, "missing_signature"),
        # a signature header that is not ASCII, or not 64 hex digits: refused like any wrong one
        (lambda: agent.client.post("/v1/batches", content=good, headers=[
            (NODE_HEADER.encode(), b"node-a"), (SIGNATURE_HEADER.encode(), b"\xe9" * 64)]), 401, "bad_signature"),
        (lambda: agent.post(good, signature="00"), 401, "bad_signature"),
        # signed by the node but broken: truncated before signing, not JSON, bad fields
        (lambda: agent.post(good[:-20]), 400, "bad_json"),
        (lambda: agent.post(b"this is not json"), 400, "bad_json"),
        (lambda: agent.post(b""), 400, "bad_json"),
        (lambda: agent.post(b"[1, 2, 3]"), 400, "bad_schema"),
        (lambda: agent.post(agent.body([{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"bogus_metric": 1}}])),
         400, "bad_field"),
        (lambda: agent.post(agent.body([{"dev": "gpu0", "kind": "tpu", "t": 1.0, "m": {}}])), 400, "bad_field"),
        (lambda: agent.post(agent.body([{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"power_mw": "high"}}])),
         400, "bad_field"),
        (lambda: agent.post(agent.body(gpu_samples(1001.0)).replace(b'"v":1', b'"v":2')), 400, "bad_version"),
        # a valid batch of another node, signed with this node's key
        (lambda: agent.post(agent.body(gpu_samples(1001.0)).replace(b'"node":"node-a"', b'"node":"node-b"')),
         400, "node_mismatch"),
        # oversized: the app's limit is 64 KiB; refused by Content-Length before reading
        (lambda: agent.post(agent.body(gpu_samples(1001.0, n=1000))), 413, "too_large"),
        # replayed: an old seq with different bytes
        (lambda: agent.post(agent.body(gpu_samples(999.0), seq=0)), 409, "replay"),
        # reordered: seq 5 while 1 is expected
        (lambda: agent.post(agent.body(gpu_samples(1005.0), seq=5)), 409, "out_of_order"),
        # chain broken: right seq, wrong prev
        (lambda: agent.post(agent.body(gpu_samples(1001.0), prev="ab" * 32)), 409, "chain_broken"),
    ]
    for i, (send, status, code) in enumerate(cases, start=1):
        _assert_refused(send(), status, code, db, before, i)
    rejected = client.get("/v1/stats").json()
    assert sum(rejected["since_start"]["rejected"].values()) == len(cases)
    assert rejected["total"]["rejected"]["bad_signature"] == 5
    # ... and the collector still accepts the genuine next batch
    r = agent.post(good)
    assert r.status_code == 200 and r.json()["seq"] == 1
    assert client.get("/healthz").json()["ok"] is True


def test_out_of_order_tells_the_agent_where_to_resume(agent):
    agent.send(gpu_samples(1000.0))
    r = agent.post(agent.body(gpu_samples(1003.0), seq=3))
    assert r.status_code == 409 and r.json()["expected_seq"] == 1
    assert agent.send(gpu_samples(1001.0)).status_code == 200


def test_resent_batch_is_acknowledged_once_and_stored_once(agent, client, db):
    body = agent.body(gpu_samples(1000.0))
    first = agent.post(body)
    again = agent.post(body)
    assert first.status_code == again.status_code == 200
    assert again.json()["duplicate"] is True and again.json()["digest"] == digest(body)
    assert counts(db)["samples"] == 10 and counts(db)["batches"] == 1
    assert client.get("/v1/stats").json()["since_start"]["duplicates"] == 1


def test_oversized_body_without_content_length_is_cut_off_while_streaming(client, agent, db):
    body = agent.body(gpu_samples(1000.0, n=1000))
    assert len(body) > 64 * 1024

    def chunks():
        for i in range(0, len(body), 8192):
            yield body[i:i + 8192]

    r = client.post("/v1/batches", content=chunks(), headers={"X-TS-Node": "node-a", "X-TS-Signature": "0" * 64})
    assert r.status_code == 413 and r.json()["error"] == "too_large"
    assert counts(db)["batches"] == 0


def test_counter_beyond_sqlite_int64_is_kept_not_refused(agent, db):
    big = 2 ** 64 - 5  # a 64-bit counter just before it wraps: valid on the wire
    r = agent.send([{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"nvlink_tx_kib": big}}])
    assert r.status_code == 200, r.text
    (v,) = sqlite3.connect(db).execute("SELECT nvlink_tx_kib FROM samples").fetchone()
    assert v == pytest.approx(float(big))


def test_signed_body_is_kept_for_reverification(agent, key, db):
    body = agent.body(gpu_samples(1000.0))
    agent.post(body)
    stored, sig_ok = sqlite3.connect(db).execute("SELECT body, digest FROM batches").fetchone()
    assert bytes(stored) == body and verify(key, bytes(stored), sign(key, body)) and sig_ok == digest(body)
    assert orjson.loads(stored)["seq"] == 0


@pytest.mark.parametrize("wild", [-(2 ** 63) - 1, 2 ** 63, 2 ** 64 - 5, -1e19])
def test_a_wild_metric_value_is_stored_and_every_read_still_answers(client, agent, db, wild):
    """The wire takes any |v| < 2**64 in a metric; SQLite's integers are 64-bit. A node that sends one
    (in every GPU metric of one sample, between ordinary samples) gets it stored, and every read of the
    node, its series, verdicts, jobs, overview and dashboard answers; the live verdicts judge the
    windows around it (on a real DDP trace with a wild energy counter: test_live.py's
    test_a_wild_counter_value_neither_stops_the_live_verdicts_nor_goes_unsaid)."""
    import time

    from trainsentry.collector.schema import SAMPLE_METRICS

    t0 = float(int(time.time()) - 30)
    names = [m for m in SAMPLE_METRICS if not m.startswith("net_")]   # every GPU metric
    sent = []
    for i in range(14):
        samples = gpu_samples(t0 + i, n=10, kib0=i * 1000, mj0=i * 300_000)
        if i == 3:
            samples[4] = dict(samples[4], m={n: wild for n in names})
        r = agent.send(samples)
        assert r.status_code == 200, r.text
        sent.append(samples)
    row = sqlite3.connect(db).execute("SELECT power_mw, energy_mj FROM samples WHERE power_mw NOT BETWEEN -1e12 AND 1e12").fetchall()
    assert row and all(v == pytest.approx(float(wild)) for v in row[0])
    assert client.app.state.bus.drain(30.0)
    for path in ["/v1/nodes", "/v1/nodes/node-a/series", f"/v1/nodes/node-a/series?start={t0 - 5}&end={t0 + 10}",
                 "/v1/nodes/node-a/unmonitored", "/v1/stats", "/v1/overview", "/v1/nodes/node-a/verdict",
                 f"/v1/nodes/node-a/verdicts?start={t0 - 5}&end={t0 + 20}", "/v1/nodes/node-a/alerts", "/v1/jobs",
                 "/v1/live", "/dashboard", "/dashboard/nodes/node-a"]:
        r = client.get(path)
        assert r.status_code == 200, (path, r.status_code, r.text[:300])
    # and the live processor judged the windows around it: a negative PCIe rate once made each of them
    # unjudgeable (the log of a negative byte rate), a value past int64 in a float column likewise
    live = client.get("/v1/live").json()
    assert live["windows_judged"] >= 3 and live["caught_up"]["judge_errors"] == live["caught_up"]["unjudged"] == 0
