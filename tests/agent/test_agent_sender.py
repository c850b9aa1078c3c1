"""The sender against a real collector (``trainsentry serve`` subprocess on loopback)."""

import time

import pytest
from agent_testkit import CollectorProcess, free_port

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
    sender = Sender(spool, collector.url, "node-a", timeout_s=2, backoff_min_s=0.05, backoff_max_s=0.2)
    sender.start()
    time.sleep(0.5)                               # collector not running yet: nothing may be lost
    assert spool.pending_stats()[0] == 4 and sender.stats.failures >= 1
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
    assert sender.send_one(spool.oldest())                     # the same bytes again
    assert sender.send_one(spool.oldest())
    assert (sender.stats.duplicates, sender.stats.sent) == (1, 1)
    assert len(collector.samples("node-a")) == 10


def test_batches_the_collector_lost_are_declared_with_gap_from(tmp_path, collector):
    collector.start()
    spool = Spool(tmp_path / "spool.db", "node-a", collector.key)
    fill(spool, 6)
    sender = Sender(spool, collector.url, "node-a")
    for _ in range(2):
        assert sender.send_one(spool.oldest())
    spool.ack_below(4)        # batches 2 and 3 are gone from the agent without the collector having them
    assert sender.send_one(spool.oldest())   # 409 out_of_order -> rechain with gap_from=2
    assert parse_batch(spool.oldest().body).gap_from == 2
    assert sender.send_one(spool.oldest()) and sender.send_one(spool.oldest())
    assert spool.pending_stats()[0] == 0
    assert sender.stats.declared_lost == 2
    assert collector.gaps("node-a") == [("declared_loss", 2, 3)]
    assert len(collector.samples("node-a")) == 4 * 5


def test_a_wrong_key_keeps_every_batch_and_backs_off(tmp_path, collector):
    collector.start()
    spool = Spool(tmp_path / "spool.db", "node-a", "22" * 32)
    fill(spool, 2)
    sender = Sender(spool, collector.url, "node-a", backoff_min_s=0.2, backoff_max_s=1.0)
    sender.start()
    time.sleep(1.2)
    sender.stop()
    sender.join(5)
    assert spool.pending_stats()[0] == 2
    assert 2 <= sender.stats.failures <= 6          # 0.2, 0.4, 0.8 s backoff: no hot loop
    assert sender.stats.last_error.startswith("401 bad_signature")
    assert collector.samples("node-a") == []


def test_a_spool_that_forks_the_chain_is_held_not_dropped(tmp_path, collector):
    collector.start()
    a = Spool(tmp_path / "a.db", "node-a", collector.key)
    fill(a, 2)
    sa = Sender(a, collector.url, "node-a")
    assert sa.send_one(a.oldest()) and sa.send_one(a.oldest())
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
        assert sender.send_one(spool.oldest())
    assert len(connects) == 1                      # kept open: one TCP connection for 5 batches
    collector.stop()
    collector.start()                              # the kept connection is now dead
    fill(spool, 2, t0=BASE_T + 100)
    assert sender.send_one(spool.oldest()) and sender.send_one(spool.oldest())
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
