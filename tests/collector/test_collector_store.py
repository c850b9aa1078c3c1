"""Schema migrations, enrolment, key rotation, the commit hook."""

from __future__ import annotations

import os
import sqlite3
import threading

import pytest
import typer
from conftest import Agent, gpu_samples
from typer.testing import CliRunner

from trainsentry.collector import commands, schema
from trainsentry.collector.hooks import CommittedBatch
from trainsentry.collector.store import EnrollError, Store


def test_migrations_create_every_table_on_an_empty_file_and_reopen_keeps_data(tmp_path):
    path = tmp_path / "sub" / "c.db"
    conn = schema.open_db(path)
    assert schema.current_version(conn) == schema.SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"schema_version", "nodes", "batches", "samples", "devices", "unmonitored", "rejections"} <= tables
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.execute("INSERT INTO nodes (name, key, enrolled_at) VALUES ('n', '00', 1)")
    conn.close()
    assert os.stat(path).st_mode & 0o777 == 0o600  # it holds node keys
    again = schema.open_db(path)
    assert again.execute("SELECT name FROM nodes").fetchall() == [("n",)]
    assert again.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == len(schema.MIGRATIONS)
    again.close()


def test_migration_8_lets_unmonitored_hold_time_regressions_and_keeps_every_row(tmp_path, monkeypatch):
    path = tmp_path / "c.db"
    with monkeypatch.context() as m:      # a database as version 7 left it
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:7])
        m.setattr(schema, "SCHEMA_VERSION", 7)
        old = schema.open_db(path)
        old.execute("INSERT INTO nodes (name, key, enrolled_at) VALUES ('n', '00', 1)")
        rows = [(5, 1, 10.0, 20.0, "silence", None, None, 21.0), (9, 1, 30.0, 31.0, "declared_loss", 3, 4, 32.0)]
        old.executemany("INSERT INTO unmonitored (rowid, node_id, start_t, end_t, reason, seq_from, seq_to, "
                        "recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
            old.execute("INSERT INTO unmonitored VALUES (1, 5.0, 6.0, 'time_regression', 7, 7, 8.0)")
        old.close()
    conn = schema.open_db(path)
    assert schema.current_version(conn) == schema.SCHEMA_VERSION
    # rowids kept: the live processor reads a batch's intervals back in rowid order
    assert conn.execute("SELECT rowid, * FROM unmonitored ORDER BY rowid").fetchall() == rows
    assert conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'unmonitored'"
                        ).fetchall() == [("unmonitored_by_node",)]
    # ... on the same columns, in the same order, as before (seqno, cid, name)
    assert [(seqno, name) for seqno, _, name in conn.execute("PRAGMA index_info(unmonitored_by_node)")] == \
        [(0, "node_id"), (1, "start_t")]
    conn.execute("INSERT INTO unmonitored VALUES (1, 5.0, 6.0, 'time_regression', 7, 7, 8.0)")
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("INSERT INTO unmonitored VALUES (1, 5.0, 6.0, 'whatever', 7, 7, 8.0)")
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        conn.execute("INSERT INTO unmonitored VALUES (99, 5.0, 6.0, 'silence', NULL, NULL, 8.0)")
    conn.close()


def test_migration_9_adds_the_pipe_columns_and_keeps_the_samples(tmp_path, monkeypatch):
    path = tmp_path / "c.db"
    late = ["gpm_fp32_util_pct", "gpm_fp16_util_pct", "gpm_integer_util_pct"]
    with monkeypatch.context() as m:      # a database as version 8 left it
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:8])
        m.setattr(schema, "SCHEMA_VERSION", 8)
        old = schema.open_db(path)
        cols = [r[1] for r in old.execute("PRAGMA table_info(samples)")]
        assert not set(late) & set(cols)
        old.execute("INSERT INTO nodes (name, key, enrolled_at) VALUES ('n', '00', 1)")
        old.execute("INSERT INTO samples (sample_id, node_id, device, kind, t, power_mw) VALUES (7, 1, 'gpu0', 'gpu', 5.0, 300000)")
        old.close()
    conn = schema.open_db(path)
    assert schema.current_version(conn) == schema.SCHEMA_VERSION
    assert sorted(r[1] for r in conn.execute("PRAGMA table_info(samples)")) == sorted(["sample_id", *schema.SAMPLE_COLUMNS])
    assert conn.execute(f"SELECT sample_id, power_mw, {', '.join(late)} FROM samples").fetchall() == \
        [(7, 300000, None, None, None)]
    conn.close()
    fresh = schema.open_db(tmp_path / "fresh.db")   # a new database reaches the same columns
    assert sorted(r[1] for r in fresh.execute("PRAGMA table_info(samples)")) == sorted(["sample_id", *schema.SAMPLE_COLUMNS])
    fresh.close()


def _upgraded_with_one_verdict(path, monkeypatch, version: int, state: str):
    """A database as migration ``version`` left it, holding one verdict of ``state``, opened (so
    migrated) by this version of trainsentry."""
    with monkeypatch.context() as m:
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:version])
        m.setattr(schema, "SCHEMA_VERSION", version)
        old = schema.open_db(path)
        old.execute("INSERT INTO verdicts (scope, subject, t_start, t_end, state, p_training, detector, artifact, "
                    "evidence, job, computed_at) VALUES ('node', 'n', 0, 8, ?, 0.1, 'fused', NULL, '[]', NULL, 9)",
                    (state,))
        old.close()
    return schema.open_db(path)


def test_migration_10_adds_the_lead_to_verdicts_and_keeps_them(tmp_path, monkeypatch):
    from trainsentry.collector import verdicts

    conn = _upgraded_with_one_verdict(tmp_path / "c.db", monkeypatch, 9, "inference")
    assert schema.current_version(conn) == schema.SCHEMA_VERSION
    v = verdicts.latest(conn, "node", "n")
    assert v["state"] == "inference" and v["lead_p"] is None
    # a summary over windows judged before the lead was stored: it spoke on none of them
    assert verdicts.lead_summary(conn, "node", "n", 0, 10, 0.75) == {
        "start": 0, "end": 10, "threshold": 0.75, "windows_spoken": 0, "like_training": 0, "seconds_like_training": 0.0,
        "p_max": None, "last": None}
    # windows the lead spoke on are summed from the partial index alone (migration 11), whatever the history
    conn.executemany("INSERT INTO verdicts (scope, subject, t_start, t_end, state, p_training, detector, artifact, "
                     "evidence, job, computed_at, lead_p) VALUES ('node', 'n', ?, ?, 'inference', 0.1, 'fused', NULL, "
                     "'[]', NULL, 9, ?)", [(t - 8, t, p) for t, p in ((10, 0.9), (12, None), (14, 0.2), (16, None))])
    assert verdicts.lead_summary(conn, "node", "n", 0, 20, 0.75) == {
        "start": 0, "end": 20, "threshold": 0.75, "windows_spoken": 2, "like_training": 1, "seconds_like_training": 8.0,
        "p_max": 0.9, "last": {"t_end": 14, "p": 0.2}}
    # overlapping windows that read like training cover their union once: [2, 10] and [4, 12] are 10 s, not 16
    conn.execute("UPDATE verdicts SET lead_p = 0.8 WHERE t_end = 12")
    assert verdicts.lead_summary(conn, "node", "n", 0, 20, 0.75)["seconds_like_training"] == 10.0
    # a gap between them is not covered: [2, 10] and [18, 26] are 16 s
    conn.execute("UPDATE verdicts SET lead_p = NULL WHERE t_end = 12")
    conn.execute("INSERT INTO verdicts (scope, subject, t_start, t_end, state, p_training, detector, artifact, evidence, "
                 "job, computed_at, lead_p) VALUES ('node', 'n', 18, 26, 'inference', 0.1, 'fused', NULL, '[]', NULL, 9, 0.95)")
    assert verdicts.lead_summary(conn, "node", "n", 0, 30, 0.75)["seconds_like_training"] == 16.0
    plan = " ".join(str(r) for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT count(*), coalesce(sum(lead_p >= 0.75), 0), max(lead_p), max(t_end) FROM verdicts "
        "WHERE scope = 'job' AND subject = 'j' AND t_end >= 0 AND t_end <= 1 AND lead_p IS NOT NULL").fetchall())
    assert "COVERING INDEX verdicts_lead" in plan, plan
    conn.close()


def test_migration_17_adds_the_floor_bound_to_verdicts_and_sums_it_once_per_second(tmp_path, monkeypatch):
    from trainsentry.collector import verdicts

    conn = _upgraded_with_one_verdict(tmp_path / "c.db", monkeypatch, 16, "idle")
    assert schema.current_version(conn) == schema.SCHEMA_VERSION == 17
    assert verdicts.latest(conn, "node", "n")["floor_flop"] is None
    assert verdicts.floor_summary(conn, "node", "n", 0, 10) == {"start": 0, "end": 10, "windows": 0, "seconds": 0.0,
                                                               "tensor_flop_max": 0.0}
    # windows of 8 s every 2 s, each bounding its own span: the sum counts each second once, so a steady
    # 1 TFLOP/s bound over [2, 16] sums to 14 TFLOP, not the windows' 32
    conn.executemany("INSERT INTO verdicts (scope, subject, t_start, t_end, state, p_training, detector, artifact, "
                     "evidence, job, computed_at, floor_flop) VALUES ('node', 'n', ?, ?, 'idle', 0.0, 'fused', NULL, "
                     "'[]', NULL, 9, ?)", [(t - 8, t, f) for t, f in ((10, 8e12), (12, 8e12), (14, None), (16, 8e12))])
    got = verdicts.floor_summary(conn, "node", "n", 0, 20)
    assert got["windows"] == 3 and got["seconds"] == 14.0 and got["tensor_flop_max"] == pytest.approx(14e12), got
    plan = " ".join(str(r) for r in conn.execute(
        "EXPLAIN QUERY PLAN SELECT t_start, t_end, floor_flop FROM verdicts WHERE scope = 'job' AND subject = 'j' "
        "AND t_end >= 0 AND t_end <= 1 AND floor_flop IS NOT NULL ORDER BY t_end").fetchall())
    assert "COVERING INDEX verdicts_floor" in plan, plan
    conn.close()


def test_a_database_from_a_newer_version_is_refused(tmp_path):
    path = tmp_path / "c.db"
    schema.open_db(path).close()
    c = sqlite3.connect(path)
    c.execute("INSERT INTO schema_version VALUES (?, 0)", (schema.SCHEMA_VERSION + 1,))
    c.commit()
    c.close()
    with pytest.raises(schema.SchemaError, match="newer"):
        schema.open_db(path)


def test_enroll_rotate_and_the_old_key_stops_working(db, client):
    store = Store(db)
    old = store.enroll("node-b")
    with pytest.raises(EnrollError, match="--rotate"):
        store.enroll("node-b")
    with pytest.raises(EnrollError, match="invalid node name"):
        store.enroll("bad name!")
    new = store.enroll("node-b", rotate=True)
    store.close()
    assert new != old
    # the running collector picks up the rotated key without a restart
    assert Agent(client, "node-b", old).send(gpu_samples(1.0)).json()["error"] == "bad_signature"
    assert Agent(client, "node-b", new).send(gpu_samples(1.0)).status_code == 200


def test_enroll_command_writes_a_private_key_file(tmp_path):
    app = typer.Typer()
    for cmd in commands.COMMANDS:
        app.command(cmd.__name__.removesuffix("_cmd"))(cmd)
    runner = CliRunner()
    db, out = tmp_path / "c.db", tmp_path / "keys" / "n1.key"
    r = runner.invoke(app, ["enroll", "n1", "--db", str(db), "--key-out", str(out)])
    assert r.exit_code == 0, r.output
    key = out.read_text().strip()
    assert len(bytes.fromhex(key)) == 32 and os.stat(out).st_mode & 0o777 == 0o600
    r = runner.invoke(app, ["enroll", "n1", "--db", str(db)])
    assert r.exit_code == 2 and "--rotate" in r.output
    r = runner.invoke(app, ["enroll", "n1", "--db", str(db), "--rotate"])
    assert r.exit_code == 0 and r.output.strip() != key


def test_subscribers_see_committed_batches_not_duplicates(client, agent):
    seen: list[CommittedBatch] = []
    done = threading.Event()

    def boom(event):
        raise RuntimeError("a broken subscriber")

    def collect(event):
        seen.append(event)
        done.set()

    bus = client.app.state.bus
    bus.subscribe(boom)
    bus.subscribe(collect)
    body = agent.body(gpu_samples(1000.0))
    assert agent.post(body).status_code == 200
    assert agent.post(body).json()["duplicate"] is True
    assert bus.drain(5.0)
    assert [(e.node, e.seq, len(e.samples)) for e in seen] == [("node-a", 0, 10)]
    # every subscriber but the broken one got the batch once (the app subscribes its live processor too)
    assert bus.stats()["errors"] == 1 and bus.stats()["delivered"] == bus.stats()["subscribers"] - 1


def test_migration_15_does_not_make_an_upgrade_look_like_hidden_gpus(tmp_path, monkeypatch):
    """Migration 14 started each device's last_t at its first_t; where it has not moved, 15 sets it to
    the node's latest sample, so the first batch after an upgrade from 13 records no GPU as unreported
    since its first sample. A device whose last_t moved keeps it (its open silence stays visible)."""
    path = tmp_path / "c.db"
    with monkeypatch.context() as m:      # a database as version 13 left it: two GPUs, samples to t = 500
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:13])
        m.setattr(schema, "SCHEMA_VERSION", 13)
        old = schema.open_db(path)
        old.execute("INSERT INTO nodes (name, key, enrolled_at, last_t) VALUES ('n', '00', 1, 500.0)")
        old.executemany("INSERT INTO devices (node_id, device, kind, first_t) VALUES (1, ?, 'gpu', 5.0)",
                        [("gpu0",), ("gpu1",)])
        old.close()
    with monkeypatch.context() as m:      # ... then 14, and gpu1 reported once more before the upgrade to 15
        m.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:14])
        m.setattr(schema, "SCHEMA_VERSION", 14)
        v14 = schema.open_db(path)
        assert v14.execute("SELECT device, last_t FROM devices ORDER BY device").fetchall() == [("gpu0", 5.0), ("gpu1", 5.0)]
        v14.execute("UPDATE devices SET last_t = 480.0 WHERE device = 'gpu1'")
        v14.close()
    conn = schema.open_db(path)
    assert conn.execute("SELECT device, last_t FROM devices ORDER BY device").fetchall() == [("gpu0", 500.0), ("gpu1", 480.0)]
    assert conn.execute("SELECT COUNT(*) FROM device_silences").fetchone()[0] == 0
    conn.close()
