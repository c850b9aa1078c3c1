"""The sender against a real collector (``trainsentry serve`` subprocess on loopback)."""

import time

import pytest
from agent_testkit import CollectorProcess, FakeClock, free_port

from trainsentry.agent import sender as sender_module
from trainsentry.agent.sender import Sender, post
from trainsentry.agent.spool import Spool
from trainsentry.wire.batch import parse_batch


# recent timestamps: the collector refuses samples stamped more than 300 s ahead of its clock
BASE_T = float(int(time.time()) - 3600)


def samples(n, t0, dev="eth0"):
    return [{"dev": dev, "kind": "net", "t": t0 + i * 0.1, "m": {"net_tx_bytes": 1000 + i}} for i in range(n)]


@pytest.fixture
def collector(tmp_path):
    c = CollectorProcess(tmp_path / "collector.db")
    c.key = c.enroll("node-a")
    yield c
    c.stop()


def wait_for(cond, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def fill(spool, n_batches, per_batch=5, t0=BASE_T):
    for b in range(n_batches):
        spool.append(samples(per_batch, t0 + b), 1.0)


def test_everything_arrives_once_even_across_a_collector_outage(tmp_path, collector):
    spool = Spool(tmp_path / "spool.db", "node-a", collector.key)
    fill(spool, 4)
    # a long client timeout: a reply that outlived a short one would make the resend a duplicate
    sender = Sender(spool, collector.url, "node-a", timeout_s=30, backoff_min_s=0.05, backoff_max_s=0.2)
    sender.start()
    assert wait_for(lambda: sender.stats.failures >= 1)   # collector not running yet: nothing may be lost
    assert spool.pending_stats()[0] == 4
    collector.start()
    assert sender.drain(15)
    fill(spool, 3, t0=BASE_T + 10)
    sender.notify()
    assert sender.drain(15)
    sender.stop()
    got = collector.samples("node-a")
    assert len(got) == 35 and len(set(got)) == 35
    assert sender.stats.sent == 7 and sender.stats.samples_sent == 35


def test_a_resent_batch_is_byte_identical_and_acknowledged_as_duplicate(tmp_path, collector):
    collector.start()
    spool = Spool(tmp_path / "spool.db", "node-a", collector.key)
    fill(spool, 2)
    first = spool.oldest()
    assert post(collector.url + "/v1/batches", "node-a", first, 5).status == 200  # stored, ack "lost"
    sender = Sender(spool, collector.url, "node-a")
    assert sender.send_one(sender.next_batch())                     # the same bytes again
    assert sender.send_one(sender.next_batch())
    assert (sender.stats.duplicates, sender.stats.sent) == (1, 1)
    assert len(collector.samples("node-a")) == 10


def test_batches_the_collector_lost_are_declared_with_gap_from(tmp_path, collector):
    collector.start()
    spool = Spool(tmp_path / "spool.db", "node-a", collector.key)
    fill(spool, 6)
    sender = Sender(spool, collector.url, "node-a")
    for _ in range(2):
        assert sender.send_one(sender.next_batch())
    spool.ack_below(4)        # batches 2 and 3 are gone from the agent without the collector having them
    assert sender.send_one(sender.next_batch())   # 409 out_of_order -> rechain with gap_from=2
    assert parse_batch(spool.oldest().body).gap_from == 2
    assert sender.send_one(sender.next_batch()) and sender.send_one(sender.next_batch())
    assert sender.next_batch() is None              # all stored; they leave the spool once durable
    sender.start()
    assert sender.drain(15)
    sender.stop()
    assert sender.stats.declared_lost == 2
    assert collector.gaps("node-a") == [("declared_loss", 2, 3)]
    assert len(collector.samples("node-a")) == 4 * 5


def test_a_wrong_key_keeps_every_batch_and_backs_off(tmp_path, collector):
    collector.start()
    spool = Spool(tmp_path / "spool.db", "node-a", "22" * 32)
    fill(spool, 2)
    sender = Sender(spool, collector.url, "node-a", backoff_min_s=0.2, backoff_max_s=1.0)
    t0 = time.monotonic()
    sender.start()
    assert wait_for(lambda: sender.stats.failures >= 3, timeout_s=30)
    elapsed = time.monotonic() - t0
    sender.stop()
    sender.join(5)
    assert spool.pending_stats()[0] == 2
    # no hot loop: the third refusal comes after the first two backoffs (0.2 and 0.4 s, each waited at
    # least 75 % of: the jitter), however slow the machine
    assert elapsed >= 0.75 * (0.2 + 0.4)
    assert sender.stats.last_error.startswith("401 bad_signature")
    assert collector.samples("node-a") == []


def test_a_spool_that_forks_the_chain_is_held_not_dropped(tmp_path, collector):
    collector.start()
    a = Spool(tmp_path / "a.db", "node-a", collector.key)
    fill(a, 2)
    sa = Sender(a, collector.url, "node-a")
    assert sa.send_one(sa.next_batch()) and sa.send_one(sa.next_batch())
    b = Spool(tmp_path / "b.db", "node-a", collector.key)     # a wiped spool restarts the chain at 0
    fill(b, 1, t0=BASE_T + 100)
    sb = Sender(b, collector.url, "node-a")
    assert not sb.send_one(b.oldest())
    assert sb.stats.last_error.startswith("409 replay")
    assert b.pending_stats()[0] == 1
    assert len(collector.samples("node-a")) == 10


def test_unreachable_collector_is_reported_not_raised():
    from trainsentry.agent.spool import SpooledBatch
    r = post(f"http://127.0.0.1:{free_port()}/v1/batches", "n", SpooledBatch(0, b"{}", "00", 0), 1)
    assert r.status == 0 and r.body["error"] == "unreachable"


def test_batches_share_one_connection_and_a_restarted_collector_is_reconnected(tmp_path, collector, monkeypatch):
    import http.client
    for var in ("http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(var, raising=False)
    connects = []
    real_connect = http.client.HTTPConnection.connect
    monkeypatch.setattr(http.client.HTTPConnection, "connect",
                        lambda self: connects.append(1) or real_connect(self))
    collector.start()
    spool = Spool(tmp_path / "spool.db", "node-a", collector.key)
    fill(spool, 5)
    sender = Sender(spool, collector.url, "node-a", timeout_s=5)
    for _ in range(5):
        assert sender.send_one(sender.next_batch())
    assert len(connects) == 1                      # kept open: one TCP connection for 5 batches
    collector.stop()
    collector.start()                              # the kept connection is now dead
    fill(spool, 2, t0=BASE_T + 100)
    assert sender.send_one(sender.next_batch()) and sender.send_one(sender.next_batch())
    assert len(connects) == 2 and sender.stats.failures == 0   # reopened at once, nothing failed
    assert len(collector.samples("node-a")) == 35


def test_a_proxied_collector_goes_through_urllib(tmp_path, collector, monkeypatch):
    from trainsentry.agent.sender import Connection
    monkeypatch.setenv("http_proxy", "http://proxy.invalid:3128")
    monkeypatch.setenv("no_proxy", "")
    assert Connection("http://collector.example:8470/v1/batches", 1).via_urllib
    monkeypatch.setenv("no_proxy", "collector.example")
    assert not Connection("http://collector.example:8470/v1/batches", 1).via_urllib
    with pytest.raises(ValueError, match="collector URL"):
        Connection("ftp://x/v1/batches", 1)


def test_a_200_that_is_not_the_collectors_receipt_keeps_the_batch(tmp_path):
    """A wrong URL, a proxy or a captive portal answering 200 must not empty the spool."""
    import http.server
    import threading

    from trainsentry.agent.sender import Sender
    from trainsentry.agent.spool import Spool

    class Portal(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"<html>welcome</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Portal)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        spool = Spool(tmp_path / "spool.db", node="n1", key="11" * 32)
        spool.append([{"dev": "eth0", "kind": "net", "t": 1.0, "m": {"net_tx_bytes": 1}}], 1.0)
        sender = Sender(spool, f"http://127.0.0.1:{srv.server_address[1]}", "n1")
        batch = spool.oldest()
        assert sender.send_one(batch) is False
        assert spool.pending_stats()[0] == 1
        assert "without a receipt" in sender.stats.last_error
    finally:
        srv.shutdown()


class InProcessCollector:
    """The sender's connection, answered by the collector app in this process (TestClient), so a test
    decides when the collector's disk syncs and when its power fails."""

    def __init__(self, db):
        self.db = db
        self.client = None

    def start(self) -> "InProcessCollector":
        from fastapi.testclient import TestClient

        from trainsentry.collector.app import create_app
        self.client = TestClient(create_app(self.db))
        self.client.__enter__()
        return self

    @property
    def store(self):
        return self.client.app.collector.store

    def stop(self) -> None:
        self.client.__exit__(None, None, None)

    def post(self, node, batch):
        from trainsentry.agent.sender import Response
        from trainsentry.wire.batch import NODE_HEADER, SIGNATURE_HEADER
        r = self.client.post("/v1/batches", content=batch.body,
                             headers={NODE_HEADER: node, SIGNATURE_HEADER: batch.signature})
        return Response(r.status_code, r.json())

    def close(self) -> None:
        pass

    def rows(self, sql: str) -> list[tuple]:
        import sqlite3
        db = sqlite3.connect(self.db)
        try:
            return db.execute(sql).fetchall()
        finally:
            db.close()


def _disk_takes_no_sync(self):
    raise OSError("simulated: the disk does not complete the fsync")


@pytest.fixture
def in_process(tmp_path, monkeypatch):
    from trainsentry.collector.store import Store
    monkeypatch.setenv("TRAINSENTRY_LIVE", "0")
    store = Store(tmp_path / "collector.db")
    key = store.enroll("node-a")
    store.close()
    col = InProcessCollector(tmp_path / "collector.db").start()
    col.key = key
    yield col
    col.stop()


def send_until_spool_empty(sender, spool, timeout_s=10.0, clock=None):
    """Send what is due until the spool is empty; the waits also move ``clock`` (a FakeClock the
    sender reads) where there is one."""
    deadline = time.monotonic() + timeout_s
    while spool.pending_seqs() and time.monotonic() < deadline:
        batch = sender.next_batch()
        if batch is None:
            time.sleep(0.02)
            if clock is not None:
                clock.sleep(0.02)
        else:
            assert sender.send_one(batch), sender.stats.last_error
    return not spool.pending_seqs()


def unsynced(tmp_path, in_process, monkeypatch, n_batches, poll_s):
    """A spool of ``n_batches`` and its sender on the in-process collector, whose disk does not sync
    until the returned function is called."""
    from trainsentry.collector.checkpoint import Checkpointer
    real_sync = Checkpointer._sync_wal
    monkeypatch.setattr(Checkpointer, "_sync_wal", _disk_takes_no_sync)
    spool = Spool(tmp_path / "spool.db", "node-a", in_process.key)
    fill(spool, n_batches)
    sender = Sender(spool, "http://collector.invalid", "node-a", durable_poll_s=poll_s)
    sender.connection = in_process
    return spool, sender, lambda: monkeypatch.setattr(Checkpointer, "_sync_wal", real_sync)


def test_a_stored_batch_stays_spooled_until_the_collector_has_it_on_disk(tmp_path, in_process, monkeypatch):
    spool, sender, disk_syncs_again = unsynced(tmp_path, in_process, monkeypatch, 3, 0.2)
    clock = FakeClock(1000.0)         # the sender's poll timing on a clock that moves only when told to
    monkeypatch.setattr(sender_module, "time", clock.as_time_module())
    for seq in range(3):
        assert sender.next_batch().seq == seq and sender.send_one(sender.next_batch())
    assert sender.stats.sent == 3 and in_process.store.durable_seq(1) is None
    assert spool.pending_seqs() == [0, 1, 2]          # stored and acknowledged, not on disk: kept
    assert spool.pending_stats(sender.stored_through)[3] == 3 and sender.stats.durable_seq == -1   # what the agent reports
    assert sender.next_batch() is None                # ... and not sent again
    clock.sleep(0.25)
    assert sender.next_batch().seq == 2               # until the poll: the newest stored, to ask again
    assert sender.send_one(sender.next_batch())
    assert sender.stats.durable_polls == 1 and spool.pending_seqs() == [0, 1, 2]
    disk_syncs_again()
    assert send_until_spool_empty(sender, spool, clock=clock)
    assert in_process.store.durable_seq(1) == 2
    assert spool.pending_stats(sender.stored_through)[3] == 0 and sender.stats.durable_seq == 2
    assert sender.stats.sent == 3 and sender.stats.duplicates == 0
    assert in_process.rows("SELECT COUNT(*), COUNT(DISTINCT t) FROM samples") == [(15, 15)]


def test_one_poll_frees_every_stored_batch_once_they_are_on_disk(tmp_path, in_process, monkeypatch):
    """A backlog stored while the disk did not sync (a burst, a replay) leaves the spool on the first
    poll after the sync, not one batch per poll (a clean stop's drain would time out)."""
    spool, sender, disk_syncs_again = unsynced(tmp_path, in_process, monkeypatch, 20, 0.1)
    clock = FakeClock(1000.0)         # no poll falls due while the backlog is sent, however slow the machine
    monkeypatch.setattr(sender_module, "time", clock.as_time_module())
    while (batch := sender.next_batch()) is not None:
        assert sender.send_one(batch)
    assert sender.stats.sent == 20 and len(spool.pending_seqs()) == 20
    disk_syncs_again()
    assert wait_for(lambda: in_process.store.durable_seq(1) == 19)
    clock.sleep(0.15)
    assert sender.send_one(sender.next_batch())
    assert sender.stats.durable_polls == 1 and spool.pending_seqs() == []


def test_an_out_of_order_naming_the_batch_just_sent_backs_off_instead_of_looping(tmp_path):
    """No honest collector answers 409 out_of_order with the seq it was sent; a proxy or a hostile
    peer that does must not get the same batch resent at full speed (nor anything dropped)."""
    from trainsentry.agent.sender import Response
    spool = Spool(tmp_path / "spool.db", "node-a", "11" * 32)
    fill(spool, 3)

    class Liar:
        posts = 0

        def post(self, node, batch):
            Liar.posts += 1
            return Response(409, {"error": "out_of_order", "expected_seq": batch.seq})

        def close(self):
            pass

    sender = Sender(spool, "http://collector.invalid", "node-a")
    sender.connection = Liar()
    assert sender.send_one(sender.next_batch()) is False     # False: the run loop backs off
    assert spool.pending_seqs() == [0, 1, 2] and sender.stats.declared_lost == 0


@pytest.mark.parametrize("carry_on", [True, False], ids=["new-batches", "idle-agent"])
def test_a_power_loss_loses_nothing_the_agent_sent(tmp_path, in_process, monkeypatch, carry_on):
    """The collector's disk keeps what was durable and loses the rest: the database is replaced by
    its image at the last durable point. The agent still holds every batch above it and resends
    them (told by the 409 for its next new batch, or by its poll when it has none); the store ends
    with every batch once, no gap, no replay."""
    import os
    import sqlite3

    from trainsentry.collector.checkpoint import Checkpointer
    db = in_process.db
    spool = Spool(tmp_path / "spool.db", "node-a", in_process.key)
    sender = Sender(spool, "http://collector.invalid", "node-a", durable_poll_s=0.1)
    sender.connection = in_process
    fill(spool, 5)
    assert send_until_spool_empty(sender, spool)      # 0..4 durable, gone from the spool
    image = tmp_path / "on-disk.db"                   # what the disk holds now: everything committed
    with sqlite3.connect(db) as live, sqlite3.connect(image) as disk:
        live.backup(disk)
    real_sync = Checkpointer._sync_wal
    monkeypatch.setattr(Checkpointer, "_sync_wal", _disk_takes_no_sync)   # from here nothing is synced
    fill(spool, 5, t0=BASE_T + 5)
    for _ in range(5):
        assert sender.send_one(sender.next_batch())
    assert sender.stats.sent == 10 and spool.pending_seqs() == [5, 6, 7, 8, 9]   # acked, not durable
    in_process.stop()                                 # power loss: the process and the page cache go,
    monkeypatch.setattr(Checkpointer, "_sync_wal", real_sync)
    for leftover in (f"{db}-wal", f"{db}-shm"):       # the disk has the image
        if os.path.exists(leftover):
            os.remove(leftover)
    os.replace(image, db)
    in_process.start()
    n = 10
    if carry_on:
        fill(spool, 2, t0=BASE_T + 10)                # the agent carries on meanwhile
        n = 12
    assert send_until_spool_empty(sender, spool)
    assert in_process.rows("SELECT seq FROM batches ORDER BY seq") == [(s,) for s in range(n)]
    assert in_process.rows("SELECT COUNT(*), COUNT(DISTINCT t) FROM samples") == [(5 * n, 5 * n)]
    assert in_process.rows("SELECT reason, seq_from, seq_to FROM unmonitored") == []      # no gap
    assert sender.stats.declared_lost == 0
    codes = {c for (c,) in in_process.rows("SELECT code FROM rejections")}
    assert codes <= {"out_of_order"}                  # "resume from 5"; no replay, no broken chain


def test_the_reported_watermark_is_the_collectors_last_word_even_when_it_falls(tmp_path):
    """A collector that lost batches it had reported durable reports a lower durable_seq: the agent's
    gauge shows that fall (it is what the metric is for), and frees nothing past the batch sent."""
    from trainsentry.agent.spool import SpooledBatch
    spool = Spool(tmp_path / "spool.db", "node-a", "00" * 32)
    sender = Sender(spool, "http://collector.invalid", "node-a")
    assert sender._durable_through({"durable_seq": 9}, SpooledBatch(7, b"{}", "00", 1)) == 7
    assert sender.stats.durable_seq == 9
    assert sender._durable_through({"durable_seq": 3}, SpooledBatch(8, b"{}", "00", 1)) == 3
    assert sender.stats.durable_seq == 3
    assert sender._durable_through({"durable_seq": None}, SpooledBatch(8, b"{}", "00", 1)) is None
    assert sender.stats.durable_seq == -1 and spool.pending_stats(sender.stored_through)[3] == 0   # null: nothing on disk
