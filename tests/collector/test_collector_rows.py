"""How samples become rows: one INSERT per metric set, every sample once, the batch's id range exact."""

from __future__ import annotations

import sqlite3

from conftest import counts

from trainsentry.collector.schema import SAMPLE_METRICS
from trainsentry.collector.store import _MAX_GROUPS, sample_rows
from trainsentry.wire.batch import sign


def _stored(db) -> list[dict]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    rows = conn.execute(f"SELECT sample_id, device, kind, t, {', '.join(SAMPLE_METRICS)} FROM samples "
                        "ORDER BY sample_id").fetchall()
    return [{k: r[k] for k in r.keys() if r[k] is not None} for r in rows]


def _mixed(t0: float, big: int = 7) -> list[dict]:
    out = []
    for k in range(3):
        t = t0 + k * 0.1
        out.append({"dev": "gpu0", "kind": "gpu", "t": t, "m": {"nvlink_tx_kib": 100 * k, "power_mw": 300_000}})
        out.append({"dev": "eth0", "kind": "net", "t": t, "m": {"net_tx_bytes": big + k, "net_rx_bytes": 5}})
        out.append({"dev": "mlx5_0:1", "kind": "ib", "t": t, "m": {"net_tx_bytes": 9}})
    return out


def test_mixed_metric_sets_store_every_sample_once_with_its_own_values(agent, db):
    samples = _mixed(1000.0)
    r = agent.send(samples)
    assert r.status_code == 200, r.text
    stored = _stored(db)
    assert len(stored) == len(samples)
    by_key = {(s["device"], s["t"]): s for s in stored}
    for s in samples:
        row = by_key[(s["dev"], s["t"])]
        assert row["kind"] == s["kind"] and {k: row[k] for k in s["m"]} == s["m"]
        assert not set(row) - {"sample_id", "device", "kind", "t"} - set(s["m"])  # nothing else filled in
    first, last, n = sqlite3.connect(db).execute("SELECT first_sample, last_sample, n_samples FROM batches").fetchone()
    assert (first, last, n) == (stored[0]["sample_id"], stored[-1]["sample_id"], 9) and last - first + 1 == 9


def test_counter_beyond_int64_in_a_later_metric_set_redoes_the_batch_once(agent, db):
    # eth0's third sample (2**63) is the first value SQLite cannot bind as an integer: the error comes
    # after rows of this batch were written, and must not leave them in twice.
    r = agent.send(_mixed(1000.0, big=2 ** 63 - 2))
    assert r.status_code == 200, r.text
    stored = _stored(db)
    assert len(stored) == 9 and counts(db)["samples"] == 9
    assert [s["sample_id"] for s in stored] == list(range(stored[0]["sample_id"], stored[0]["sample_id"] + 9))
    assert sorted(s["net_tx_bytes"] for s in stored if s["device"] == "eth0") == [2 ** 63 - 2, 2 ** 63 - 1, 2 ** 63]


def test_many_metric_sets_fall_back_to_full_rows():
    names = SAMPLE_METRICS[:_MAX_GROUPS + 2]
    samples = [{"dev": "gpu0", "kind": "gpu", "t": float(i), "m": {n: i}} for i, n in enumerate(names)]
    (pair,) = sample_rows(3, samples)
    sql, rows = pair
    assert len(rows) == len(samples) and all(len(r) == 4 + len(SAMPLE_METRICS) for r in rows)
    assert len(sample_rows(3, samples[:2])) == 2  # few sets: one statement each


def test_a_valid_body_sent_in_chunks_is_accepted(client, agent, db):
    body = agent.body(_mixed(1000.0))

    def chunks():
        for i in range(0, len(body), 100):
            yield body[i:i + 100]

    r = agent.client.post("/v1/batches", content=chunks(),
                          headers={"X-TS-Node": "node-a", "X-TS-Signature": sign(agent.key, body)})
    assert r.status_code == 200, r.text
    assert counts(db)["samples"] == 9


def test_only_post_is_allowed_on_the_ingest_path(client):
    r = client.get("/v1/batches")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
