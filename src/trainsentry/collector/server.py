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
from pathlib import Path

READY_PREFIX = "trainsentry collector listening on "


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
    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="on",
                            timeout_keep_alive=30)
    server = uvicorn.Server(config)

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
