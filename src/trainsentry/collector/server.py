"""Run the collector under uvicorn (one worker: SQLite has one writer).

Programmatic use, e.g. from a test that SIGKILLs the server::

    proc = subprocess.Popen([sys.executable, "-m", "trainsentry.cli", "serve", "--db", db, "--port", "0"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()        # "trainsentry collector listening on http://127.0.0.1:PORT"
    url = line.rsplit(" ", 1)[1].strip() # ready: the socket is bound and the app started

The line is printed only after the database is migrated and the application has started, so a
client may send immediately after reading it.
"""

from __future__ import annotations

import socket
import sys
from http import HTTPStatus
from pathlib import Path

READY_PREFIX = "trainsentry collector listening on "


def wait_ready(proc) -> tuple[str, int]:
    """(host, port) from the first line a collector process started with ``--port 0`` prints;
    kills it and raises RuntimeError if that line is not the ready line."""
    line = proc.stdout.readline()
    if not line.startswith(READY_PREFIX):
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    host, port = line[len(READY_PREFIX):].strip().removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must say TCP: asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, and
    # without it every response waits ~40 ms for the client's delayed ACK (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


def run(db: str | Path, host: str = "127.0.0.1", port: int = 8470, synchronous: str = "normal",
        max_batch_bytes: int = 4 * 1024 * 1024, log_level: str = "warning") -> None:
    import asyncio

    import uvicorn

    from .app import create_app

    app = create_app(db, synchronous=synchronous, max_batch_bytes=max_batch_bytes)
    sock = bind(host, port)
    bound_host, bound_port = sock.getsockname()[:2]
    server = uvicorn.Server(uvicorn_config(app, log_level))

    async def main() -> None:
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started and not serving.done():
            await asyncio.sleep(0.01)
        if server.started:
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host
            print(f"{READY_PREFIX}http://{shown}:{bound_port}", flush=True)
        await serving

    loop_factory = _fast_loop_factory()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
    sys.stdout.flush()


def uvicorn_config(app, log_level: str = "warning"):
    """How the collector runs under uvicorn: no access log, lifespan on, the direct ingest path."""
    import uvicorn
    return uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on", timeout_keep_alive=30,
                          http=direct_ingest_protocol(app.collector) or "auto")


def direct_ingest_protocol(collector):
    """uvicorn's httptools protocol, answering plain ``POST /v1/batches`` requests itself.

    Through ASGI a request costs uvicorn a scope, a RequestResponseCycle with its asyncio.Event, a
    task and four message dicts before the application sees it, then Starlette's middlewares: the
    server's CPU for HTTP alone (store stubbed out) measured 0.6-0.75 µs per sample of a 120-sample
    batch, 0.42-0.46 µs on this path and 0.25-0.29 µs for a bare protocol that only parses and
    answers (docs/performance.md). A request that is *plainly* a batch (POST to exactly the ingest
    path, HTTP/1.1, a numeric Content-Length within the limit; no chunking, Expect, upgrade or
    forwarding headers; no earlier request of the connection still being answered) is collected by
    the parser's callbacks and handed whole to :meth:`Collector.handle_batch`, where the ASGI route
    ends too, and its answer is written at once: the ack still follows COMMIT, refusals are counted
    and audited alike. Every other request, ingest or not, takes uvicorn's own path unchanged (a
    limit hit before the body is read, chunked bodies, ``100-continue``, reads, anything pipelined
    behind a read). None when httptools is missing (uvicorn then uses h11, all through ASGI).
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        return None
    from .app import INGEST_PATH, ingest_headers

    status_lines = {status: f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n".encode()
                    for status in (200, 400, 401, 409, 413, 500, 503)}

    path = INGEST_PATH.encode()
    limit = collector.max_batch_bytes
    # Headers that change what uvicorn would do with the request (or, for the forwarded ones, the
    # remote address the rejection audit records): such a request takes uvicorn's path.
    not_plain = frozenset((b"transfer-encoding", b"expect", b"upgrade", b"x-forwarded-for",
                           b"x-forwarded-proto", b"forwarded"))

    class DirectIngestProtocol(HttpToolsProtocol):
        _direct: list[bytes] | None = None  # body chunks of the request answered here

        def on_headers_complete(self) -> None:
            if self._plain_batch():
                self._direct = []
            else:
                super().on_headers_complete()

        def _plain_batch(self) -> bool:
            if self.url != path or self.root_path or (self.cycle is not None and not self.cycle.response_complete):
                return False
            parser = self.parser
            if parser.get_method() != b"POST" or parser.get_http_version() != "1.1":
                return False
            length = None
            for name, value in self.headers:  # names are lower-cased by on_header
                if name == b"content-length":
                    if length is not None:
                        return False
                    length = value
                elif name in not_plain:
                    return False
            return length is not None and length.isdigit() and int(length) <= limit

        def on_body(self, body: bytes) -> None:
            if self._direct is None:
                return super().on_body(body)
            self._direct.append(body)

        def on_message_complete(self) -> None:
            chunks = self._direct
            if chunks is None:
                return super().on_message_complete()
            self._direct = None
            body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            keep_alive = self.parser.should_keep_alive()
            node, signature = ingest_headers(dict(self.headers))
            try:
                status, answer = collector.handle_batch(node, signature, body,
                                                        self.client[0] if self.client else None)
                content_type = b"application/json"
            except Exception as exc:  # as uvicorn does for an application error
                self.logger.error("Exception in ingest", exc_info=exc)
                status, answer, content_type, keep_alive = 500, b"Internal Server Error", b"text/plain; charset=utf-8", False
            head = [status_lines.get(status) or f"HTTP/1.1 {status} \r\n".encode()]
            for name, value in self.server_state.default_headers:  # date, server
                head += (name, b": ", value, b"\r\n")
            head += (b"content-type: ", content_type, b"\r\ncontent-length: ", str(len(answer)).encode(), b"\r\n")
            if not keep_alive:
                head.append(b"connection: close\r\n")
            head += (b"\r\n", answer)
            self.transport.write(b"".join(head))
            self.server_state.total_requests += 1
            if not keep_alive:
                self.transport.close()
            elif not self.transport.is_closing():
                self.timeout_keep_alive_task = self.loop.call_later(self.timeout_keep_alive,
                                                                    self.timeout_keep_alive_handler)

    return DirectIngestProtocol


def _fast_loop_factory():
    """uvloop's event loop when it is installed (``uvicorn[standard]``), else asyncio's.

    uvicorn picks ``httptools`` for HTTP parsing by itself when it is importable, but the loop is
    ours (we hand uvicorn a bound socket inside our own ``asyncio`` run), so uvloop is chosen here.
    With both, a 120-sample batch costs ~0.3 ms less of the server's core (docs/performance.md).
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def main(argv: list[str] | None = None) -> None:
    """``python -m trainsentry.collector.server``: the same as ``trainsentry serve``, without the CLI's
    discovery of every other package (starts a little faster; used by tests and the benchmark)."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m trainsentry.collector.server")
    ap.add_argument("--db", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8470)
    ap.add_argument("--sync", default="normal", choices=("normal", "full"))
    ap.add_argument("--max-batch-bytes", type=int, default=4 * 1024 * 1024)
    ap.add_argument("--log-level", default="warning")
    a = ap.parse_args(argv)
    run(a.db, a.host, a.port, synchronous=a.sync, max_batch_bytes=a.max_batch_bytes, log_level=a.log_level)


if __name__ == "__main__":
    main()
