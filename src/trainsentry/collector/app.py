"""The collector's HTTP API: ``create_app(db_path)`` returns a FastAPI application.

Ingest (``POST /v1/batches``) is answered ahead of FastAPI's routing and middlewares
(:class:`CollectorApp`), and by the real server mostly before ASGI altogether
(:func:`trainsentry.collector.server.direct_ingest_protocol`); every path ends in
:meth:`Collector.handle_batch`. It runs on the event loop thread, synchronously, with the one
writer connection: SQLite has a single writer anyway, so serialising batches there costs nothing
and saves a thread hop per request. With ``synchronous=NORMAL`` a commit does not fsync, so the
loop is not held for disk flushes: the checkpoint thread fsyncs the WAL and each ack says how far
the node's batches are on disk (``durable_seq``; see :mod:`trainsentry.collector.schema`). Reads run in FastAPI's thread pool on per-thread read connections, which WAL lets
proceed while a batch is being written.

Live processing subscribes with ``app.state.bus.subscribe(callback)``; see
:mod:`trainsentry.collector.hooks`.
"""

from __future__ import annotations

import gc
import logging
import sqlite3
import threading
import time
from collections import Counter
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from ..wire.batch import MAX_BATCH_BYTES, NODE_HEADER, SIGNATURE_HEADER
from . import query
from .dashboard import install as install_dashboard
from .hooks import CommitBus, CommittedBatch
from .live import install_live
from .schema import connect
from .store import IngestError, Store

log = logging.getLogger("trainsentry.collector.app")


def _json(obj, status: int = 200) -> Response:
    return Response(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY), status_code=status,
                    media_type="application/json")


_NODE_KEY = NODE_HEADER.lower().encode()
_SIGNATURE_KEY = SIGNATURE_HEADER.lower().encode()
INGEST_PATH = "/v1/batches"


async def _send_json(send, obj, status: int = 200) -> None:
    await _send_answer(send, status, orjson.dumps(obj))


async def _send_answer(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class CollectorApp(FastAPI):
    """FastAPI, with ``POST /v1/batches`` answered before any middleware.

    Ingest is the one hot path: FastAPI's routing, dependency solving and Request/Response objects
    cost ~0.1-0.2 ms per request, ~1 µs per sample of a 120-sample batch, for nothing ingest uses;
    Starlette's error and body-limit middlewares and the inspector gate cost a few µs more. Reads
    keep all of it (validation of query parameters, thread pool for blocking SQLite reads, the gate).
    The real server goes one step further and answers most ingest requests before ASGI
    (:mod:`trainsentry.collector.server`); both end in :meth:`Collector.handle_batch`.
    """

    collector: "Collector"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == INGEST_PATH:
            if scope["method"] == "POST":
                return await self.collector.ingest(scope, receive, send)
            return await _send_json(send, {"error": "method_not_allowed", "detail": "use POST"}, 405)
        await super().__call__(scope, receive, send)


def ingest_headers(headers: dict[bytes, bytes]) -> tuple[str | None, str | None]:
    """(node, signature) from lower-case header names to raw values, as sent (None when absent)."""
    raw_node, raw_sig = headers.get(_NODE_KEY), headers.get(_SIGNATURE_KEY)
    return (raw_node.decode("latin-1") if raw_node is not None else None,
            raw_sig.decode("latin-1") if raw_sig is not None else None)


class _Readers(threading.local):
    conn = None


class Collector:
    """State shared by the routes: the store, per-process counters, read connections, the bus."""

    def __init__(self, db_path: str | Path, synchronous: str = "normal", max_batch_bytes: int = MAX_BATCH_BYTES):
        self.store = Store(db_path, synchronous)
        self.db_path = Path(db_path)
        self.max_batch_bytes = max_batch_bytes
        self.bus = CommitBus()
        self.started_at = time.time()
        self.accepted_batches = 0
        self.accepted_samples = 0
        self.duplicates = 0
        self.rejected: Counter[str] = Counter()
        self._readers = _Readers()
        self._all_readers: list = []

    def reader(self):
        if self._readers.conn is None:
            self._readers.conn = connect(self.db_path, self.store.synchronous)
            self._all_readers.append(self._readers.conn)
        return self._readers.conn

    def close(self) -> None:
        self.bus.close()
        for c in self._all_readers:
            c.close()
        self.store.close()

    async def read_body(self, headers: dict[bytes, bytes], receive) -> bytes:
        """The body, refused with 413 as soon as it is known to exceed the limit (before parsing)."""
        limit = self.max_batch_bytes
        declared = headers.get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                raise IngestError(400, "bad_request", "Content-Length is not a number")
            if int(declared) > limit:
                raise IngestError(413, "too_large", f"batch of {declared.decode()} bytes exceeds the limit of {limit}")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # http.disconnect: the client is gone
                raise IngestError(400, "bad_request", "the client disconnected before sending the whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise IngestError(413, "too_large", f"batch exceeds the limit of {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def ingest(self, scope, receive, send) -> None:
        """``POST /v1/batches`` as a plain ASGI handler (see :class:`CollectorApp` for why)."""
        headers = dict(scope["headers"])  # ASGI gives lower-case names
        node, signature = ingest_headers(headers)
        client = scope.get("client")
        remote = client[0] if client else None
        try:
            body = await self.read_body(headers, receive)
        except IngestError as e:
            status, answer = self.refuse(e, node, remote)
        else:
            status, answer = self.handle_batch(node, signature, body, remote)
        await _send_answer(send, status, answer)

    def handle_batch(self, node: str | None, signature: str | None, body: bytes,
                     remote: str | None) -> tuple[int, bytes]:
        """Everything ingest decides about one whole body: the HTTP status and JSON answer to send.

        The one place that stores, counts, audits and publishes, whichever HTTP path the body came
        by (the ASGI route, or the server's direct path in :mod:`trainsentry.collector.server`). The
        answer says accepted only when ``Store.ingest`` returned, i.e. after COMMIT.
        """
        # No cyclic GC while a batch is ingested: the parsed body is a tree of dicts and lists and
        # the rows are tuples, so a collection finds nothing, yet every ~700 allocations it walks
        # the batch's live objects and, a few batches on, the whole heap (~100k objects). That was
        # ~1.4 µs per sample of 6,000-sample batches (gc callbacks in the server) and ~0.13 µs at
        # 120 samples. Anything cyclic made meanwhile is collected after, by the usual thresholds.
        collecting = gc.isenabled()
        if collecting:
            gc.disable()
        try:
            acc = self.store.ingest(node, signature, body, max_bytes=self.max_batch_bytes)
        except IngestError as e:
            return self.refuse(e, node, remote)
        except sqlite3.Error as e:
            # The store could not read or commit (disk full, I/O error, locked past the busy timeout):
            # the transaction rolled back, nothing is acknowledged, and the agent keeps the batch and
            # resends it on a 5xx. Said as JSON, counted and audited like any refusal.
            log.error("batch from %r not stored: %s", node, e)
            return self.refuse(IngestError(503, "store_unavailable", f"the batch was not stored ({e}); resend it"),
                               node, remote)
        finally:
            if collecting:
                gc.enable()
        if acc.duplicate:
            self.duplicates += 1
        else:
            self.accepted_batches += 1
            self.accepted_samples += acc.n_samples
            self.bus.publish(CommittedBatch(acc.node, acc.seq, acc.digest, acc.received_at,
                                            acc.batch.samples, acc.gaps))
        return 200, orjson.dumps(acc.body())

    def refuse(self, e: IngestError, node: str | None, remote: str | None) -> tuple[int, bytes]:
        """Count and audit a refused batch; its status and JSON answer."""
        self.rejected[e.code] += 1
        self.store.record_rejection(e, node, remote)
        return e.status, orjson.dumps(e.body())

    def stats(self) -> dict:
        return {"since_start": {"started_at": self.started_at, "accepted_batches": self.accepted_batches,
                                "accepted_samples": self.accepted_samples, "duplicates": self.duplicates,
                                "rejected": dict(sorted(self.rejected.items())),
                                "rejections_not_logged": self.store.rejections_not_logged,
                                "rejections_unrecorded": self.store.rejections_unrecorded},
                "total": query.totals(self.reader()), "bus": self.bus.stats()}


def _range(start: float | None, end: float | None, default_span_s: float = 3600.0) -> tuple[float, float]:
    end = time.time() if end is None else end
    start = end - default_span_s if start is None else start
    return start, end


def create_app(db_path: str | Path, synchronous: str = "normal", max_batch_bytes: int = MAX_BATCH_BYTES) -> FastAPI:
    """The collector application over the SQLite database at ``db_path`` (created and migrated)."""
    col = Collector(db_path, synchronous, max_batch_bytes)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        col.close()

    app = CollectorApp(title="trainsentry collector", version="1", lifespan=lifespan)
    app.collector = col
    app.state.collector = col

    @app.exception_handler(RequestValidationError)
    async def bad_query(request: Request, exc: RequestValidationError) -> Response:
        # One error shape for every 4xx the collector gives, instead of FastAPI's 422 default.
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return _json({"error": "bad_query", "detail": problems[:500]}, 400)
    app.state.bus = col.bus

    install_dashboard(app, col)  # inspector gate on every read, /login, /v1/overview, /dashboard
    install_live(app, col)  # live verdicts on the commit bus; /v1/nodes/{node}/verdict(s), /alerts, /v1/jobs

    @app.get("/v1/nodes")
    def get_nodes() -> Response:
        return _json({"nodes": query.list_nodes(col.reader())})

    @app.get("/v1/nodes/{node}/series")
    def get_series(node: str, device: str | None = None, start: float | None = None, end: float | None = None,
                   step: float = 1.0) -> Response:
        start, end = _range(start, end)
        try:
            return _json(query.series(col.reader(), node, start, end, step, device))
        except query.QueryError as e:
            return _json({"error": e.code, "detail": e.detail}, e.status)

    @app.get("/v1/nodes/{node}/unmonitored")
    def get_unmonitored(node: str, start: float | None = None, end: float | None = None) -> Response:
        end = time.time() if end is None else end
        start = 0.0 if start is None else start
        try:
            return _json({"node": node, "start": start, "end": end,
                          "intervals": query.unmonitored(col.reader(), node, start, end)})
        except query.QueryError as e:
            return _json({"error": e.code, "detail": e.detail}, e.status)

    @app.get("/v1/stats")
    def get_stats() -> Response:
        return _json(col.stats())

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"ok": True, "schema_version": query_version(col)})

    return app


def query_version(col: Collector) -> int:
    from .schema import current_version
    return current_version(col.reader())
