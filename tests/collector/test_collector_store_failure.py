"""A batch the store could not commit is never acknowledged: the real server answers 503 with a JSON
error the agent retries on, counts and audits it, stores nothing and keeps serving; the resent
batch is then accepted. The failure is a trigger that aborts every insert into ``batches``, added
and dropped by another connection while the server runs (what a full disk or an I/O error does to
the write transaction, without filling a disk)."""

from __future__ import annotations

import sqlite3

from conftest import Agent, RealCollector, counts, gpu_samples, rejections

from trainsentry.collector.auth import enroll_inspector_in
from trainsentry.collector.store import Store


def test_a_batch_the_store_cannot_commit_is_refused_with_503_and_resent(tmp_path):
    db = tmp_path / "collector.db"
    store = Store(db)
    key = store.enroll("node-a")
    store.close()
    token = enroll_inspector_in(db, "inspector-1")
    col = RealCollector(db, {"TRAINSENTRY_LIVE": "0"})
    try:
        agent = Agent(col.http, "node-a", key)
        assert agent.send(gpu_samples(1000.0)).status_code == 200
        before = counts(db)
        other = sqlite3.connect(db)
        other.execute("CREATE TRIGGER fail BEFORE INSERT ON batches BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END")
        other.commit()
        body = agent.body(gpu_samples(1001.0))
        r = agent.post(body)
        assert r.status_code == 503 and r.headers["content-type"] == "application/json", r.text
        assert r.json()["error"] == "store_unavailable" and "not stored" in r.json()["detail"]
        assert counts(db) == before                          # the samples inserted before the abort rolled back
        assert rejections(db)[-1] == (503, "store_unavailable", "node-a")
        stats = col.get("/v1/stats", token)
        assert stats["since_start"]["rejected"] == {"store_unavailable": 1}
        assert stats["since_start"]["accepted_batches"] == 1
        other.execute("DROP TRIGGER fail")
        other.commit()
        other.close()
        r = agent.post(body)                                 # the agent resends the same bytes
        assert r.status_code == 200 and r.json()["seq"] == 1 and "duplicate" not in r.json()
        assert counts(db)["batches"] == 2 and counts(db)["samples"] == 20
    finally:
        col.kill()
