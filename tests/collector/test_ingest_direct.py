"""The server's direct ingest path (server.direct_ingest_protocol) against uvicorn's ASGI path.

The real server answers a plain ``POST /v1/batches`` in its HTTP protocol, without ASGI; everything
else goes through uvicorn and the app. These tests run that server in-process (uvicorn in a thread,
on a real socket) and count which requests reached the app's ASGI ingest route, so they can check
both that plain batches take the direct path and that it answers, counts and audits exactly as
the ASGI route does.
"""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from types import SimpleNamespace

import orjson
import pytest
import uvicorn
from conftest import counts, gpu_samples

from trainsentry.collector.app import create_app
from trainsentry.collector.server import bind, uvicorn_config
from trainsentry.wire.batch import GENESIS_PREV, NODE_HEADER, SIGNATURE_HEADER, digest, encode_batch, sign

LIMIT = 64 * 1024


@contextmanager
def serving(db):
    app = create_app(db, max_batch_bytes=LIMIT)
    col = app.collector
    asgi_calls: list[str] = []
    asgi_ingest = col.ingest

    async def counted(scope, receive, send):
        asgi_calls.append(scope["path"])
        return await asgi_ingest(scope, receive, send)

    col.ingest = counted
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn_config(app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield SimpleNamespace(port=sock.getsockname()[1], asgi_calls=asgi_calls, collector=col)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _request(body: bytes, node: str = "node-a", signature: str | None = None, key: str | None = None,
             extra: str = "", chunked: bool = False, path: str = "/v1/batches") -> bytes:
    sig = signature if signature is not None else sign(key, body)
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\n{NODE_HEADER}: {node}\r\n{SIGNATURE_HEADER}: {sig}\r\n{extra}"
    if chunked:  # two chunks: uvicorn's path, since there is no Content-Length
        half = len(body) // 2
        parts = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (body[:half], body[half:]) if p)
        return (head + "Transfer-Encoding: chunked\r\n\r\n").encode() + parts + b"0\r\n\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _responses(f, n: int) -> list[tuple[int, dict, bytes]]:
    """n HTTP responses read in order from a socket file: (status, headers, body)."""
    out = []
    for _ in range(n):
        status = int(f.readline().split()[1])
        headers = {}
        while (line := f.readline()) not in (b"\r\n", b""):
            name, value = line.decode().split(":", 1)
            headers[name.strip().lower()] = value.strip()
        out.append((status, headers, f.read(int(headers["content-length"]))))
    return out


def _exchange(port: int, raw: bytes, n: int = 1) -> list[tuple[int, dict, bytes]]:
    with _connect(port) as s, s.makefile("rb") as f:
        s.sendall(raw)
        return _responses(f, n)


def _batch(seq: int, prev: str, t0: float = 1000.0) -> bytes:
    return encode_batch("node-a", seq, prev, gpu_samples(t0 + seq), t0 + seq, 1.0)


def test_plain_batches_are_answered_without_asgi_and_acked_after_commit(db, key):
    with serving(db) as srv:
        prev = GENESIS_PREV
        with _connect(srv.port) as s, s.makefile("rb") as f:  # one keep-alive connection
            for seq in range(3):
                body = _batch(seq, prev)
                s.sendall(_request(body, key=key))
                ((status, headers, answer),) = _responses(f, 1)
                assert status == 200, answer
                ack = orjson.loads(answer)
                assert ack == {"accepted": True, "node": "node-a", "seq": seq, "digest": digest(body),
                               "n_samples": 10, "stored_seq": seq, "durable_seq": ack["durable_seq"]}
                assert headers["content-type"] == "application/json" and "date" in headers and "server" in headers
                assert counts(db)["batches"] == seq + 1  # committed before the answer was read
                prev = digest(body)
        assert srv.asgi_calls == []
        assert srv.collector.accepted_batches == 3 and srv.collector.accepted_samples == 30


REFUSALS = {
    "bad_signature": lambda key: (_batch(0, GENESIS_PREV), {"signature": "00" * 32}),
    # bytes that are not ASCII in the header once made hmac.compare_digest raise: a 500, not counted
    "bad_signature (not ASCII)": lambda key: (_batch(0, GENESIS_PREV), {"signature": "\u00e9" * 64}),
    "bad_signature (short)": lambda key: (_batch(0, GENESIS_PREV), {"signature": "00"}),
    "missing_signature": lambda key: (_batch(0, GENESIS_PREV), {"signature": ""}),
    "unknown_node": lambda key: (_batch(0, GENESIS_PREV), {"node": "node-z", "key": key}),
    "bad_json": lambda key: (b"{not json", {"key": key}),
    "node_mismatch": lambda key: (encode_batch("node-b", 0, GENESIS_PREV, gpu_samples(1000.0), 1000.0, 1.0),
                                  {"key": key}),
    "chain_broken": lambda key: (_batch(0, "ab" * 32), {"key": key}),
    "out_of_order": lambda key: (_batch(5, GENESIS_PREV), {"key": key}),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refusals_are_the_same_on_both_paths(db, key, case):
    body, how = REFUSALS[case](key)
    code = case.split(" ")[0]
    with serving(db) as srv:
        ((direct_status, _, direct),) = _exchange(srv.port, _request(body, **how))
        assert srv.asgi_calls == []
        ((asgi_status, _, via_asgi),) = _exchange(srv.port, _request(body, chunked=True, **how))
        assert srv.asgi_calls == ["/v1/batches"]
        assert direct_status == asgi_status and direct == via_asgi and orjson.loads(direct)["error"] == code
        assert srv.collector.rejected[code] == 2
    audit = __import__("sqlite3").connect(db).execute("SELECT code, remote FROM rejections").fetchall()
    assert audit == [(code, "127.0.0.1")] * 2
    assert counts(db)["batches"] == 0


def test_requests_that_are_not_plain_take_uvicorns_path(db, key):
    with serving(db) as srv:
        b0, b1, b2 = _batch(0, GENESIS_PREV), None, None
        ((status, _, _),) = _exchange(srv.port, _request(b0, key=key, chunked=True))
        assert status == 200 and srv.asgi_calls == ["/v1/batches"]
        b1 = _batch(1, digest(b0))
        ((status, _, _),) = _exchange(srv.port, _request(b1, key=key, extra="X-Forwarded-For: 10.1.2.3\r\n"))
        assert status == 200 and len(srv.asgi_calls) == 2
        b2 = _batch(2, digest(b1))
        ((status, _, _),) = _exchange(srv.port, _request(b2, key=key, path="/v1/batches?from=test"))
        assert status == 200 and len(srv.asgi_calls) == 3
        # Expect: 100-continue: uvicorn sends the interim answer only when the app reads the body
        b3 = _batch(3, digest(b2))
        raw = _request(b3, key=key, extra="Expect: 100-continue\r\n")
        head, body = raw.split(b"\r\n\r\n", 1)
        with _connect(srv.port) as s, s.makefile("rb") as f:
            s.sendall(head + b"\r\n\r\n")
            assert f.readline().startswith(b"HTTP/1.1 100") and f.readline() == b"\r\n"
            s.sendall(body)
            ((status, _, _),) = _responses(f, 1)
        assert status == 200 and len(srv.asgi_calls) == 4
        # over the limit by Content-Length: refused before a byte of the body is read
        raw = (f"POST /v1/batches HTTP/1.1\r\nHost: t\r\n{NODE_HEADER}: node-a\r\n{SIGNATURE_HEADER}: 00\r\n"
               f"Content-Length: {LIMIT + 1}\r\n\r\n").encode()
        ((status, _, answer),) = _exchange(srv.port, raw)
        assert status == 413 and orjson.loads(answer)["error"] == "too_large" and len(srv.asgi_calls) == 5
        ((status, _, answer),) = _exchange(srv.port, b"GET /v1/batches HTTP/1.1\r\nHost: t\r\n\r\n")
        assert status == 405 and orjson.loads(answer)["error"] == "method_not_allowed"
        assert srv.collector.accepted_batches == 4
    assert counts(db)["batches"] == 4


def test_pipelined_requests_are_answered_in_order(db, key):
    with serving(db) as srv:
        b0 = _batch(0, GENESIS_PREV)
        b1 = _batch(1, digest(b0))
        b2 = _batch(2, digest(b1))
        raw = (_request(b0, key=key) + _request(b1, key=key) + b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
               + _request(b2, key=key))  # b2 arrives while /healthz may still be answered by the app
        answers = _exchange(srv.port, raw, n=4)
        assert [a[0] for a in answers] == [200] * 4
        assert [orjson.loads(a[2]).get("seq") for a in answers] == [0, 1, None, 2]
        assert orjson.loads(answers[2][2])["ok"] is True
    assert counts(db)["batches"] == 3


def test_connection_close_is_honoured(db, key):
    with serving(db) as srv:
        with _connect(srv.port) as s, s.makefile("rb") as f:
            s.sendall(_request(_batch(0, GENESIS_PREV), key=key, extra="Connection: close\r\n"))
            ((status, headers, _),) = _responses(f, 1)
            assert status == 200 and headers["connection"] == "close"
            assert f.read() == b""  # the server closed the connection
        assert srv.asgi_calls == []


def test_an_unexpected_error_answers_500_closes_and_the_server_keeps_serving(db, key):
    with serving(db) as srv:
        store_ingest = srv.collector.store.ingest

        def broken(*a, **k):
            raise RuntimeError("disk on fire")

        srv.collector.store.ingest = broken
        with _connect(srv.port) as s, s.makefile("rb") as f:
            s.sendall(_request(_batch(0, GENESIS_PREV), key=key))
            ((status, headers, answer),) = _responses(f, 1)
            assert status == 500 and headers["connection"] == "close" and answer == b"Internal Server Error"
            assert f.read() == b""
        srv.collector.store.ingest = store_ingest
        ((status, _, _),) = _exchange(srv.port, _request(_batch(0, GENESIS_PREV), key=key))
        assert status == 200 and srv.asgi_calls == []
    assert counts(db)["batches"] == 1
