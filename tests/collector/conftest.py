"""Fixtures for the collector: a fresh database, the app under TestClient, and a signing test agent."""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from trainsentry.collector.app import create_app
from trainsentry.collector.auth import enroll_inspector_in
from trainsentry.collector.store import Store
from trainsentry.wire.batch import GENESIS_PREV, NODE_HEADER, SIGNATURE_HEADER, digest, encode_batch, sign


class Agent:
    """Builds and sends correctly signed, chained batches, like a node agent; tests then break them."""

    def __init__(self, client: TestClient, node: str, key: str, interval_s: float = 1.0):
        self.client, self.node, self.key, self.interval_s = client, node, key, interval_s
        self.seq, self.prev = 0, GENESIS_PREV

    def body(self, samples: list[dict], seq: int | None = None, prev: str | None = None,
             gap_from: int | None = None) -> bytes:
        return encode_batch(self.node, self.seq if seq is None else seq, self.prev if prev is None else prev,
                            samples, 1_790_000_000.0, self.interval_s, gap_from)

    def post(self, body: bytes, key: str | None = None, node: str | None = None, signature: str | None = None):
        headers = {NODE_HEADER: node or self.node,
                   SIGNATURE_HEADER: signature if signature is not None else sign(key or self.key, body)}
        return self.client.post("/v1/batches", content=body, headers=headers)

    def send(self, samples: list[dict], **kw):
        """Send the next batch in the chain; advance the chain when it is accepted."""
        body = self.body(samples, **kw)
        r = self.post(body)
        if r.status_code == 200 and not r.json().get("duplicate"):
            self.seq = r.json()["seq"] + 1
            self.prev = digest(body)
        return r


def gpu_samples(t0: float, n: int = 10, dt: float = 0.1, dev: str = "gpu0", kib0: int = 0, kib_step: int = 100,
                mj0: int = 0, mj_step: int = 30_000, power_mw: int = 300_000) -> list[dict]:
    """n samples every dt s: NVLink TX grows kib_step KiB and energy mj_step mJ per sample."""
    return [{"dev": dev, "kind": "gpu", "t": round(t0 + i * dt, 6),
             "m": {"nvlink_tx_kib": kib0 + i * kib_step, "energy_mj": mj0 + i * mj_step, "power_mw": power_mw}}
            for i in range(n)]


def per_second(readings: Iterable, t0: float) -> list[list[dict]]:
    """Readings as wire samples in consecutive 1 s batches from ``t0`` (all devices together), as an
    agent sealing a batch every second sends them."""
    out: dict[int, list[dict]] = {}
    for r in sorted(readings, key=lambda r: (r.t, r.device)):
        out.setdefault(int((r.t - t0) // 1.0), []).append(r.to_wire())
    return [out[k] for k in sorted(out)]


def last_window_end(sent: list[list[dict]]) -> float:
    """The end of the last window the batches complete (window ends fall on multiples of the 2 s stride)."""
    return math.floor(max(s["t"] for s in sent[-1]) / 2.0 + 1e-9) * 2.0


def wait_judged(verdict_of: Callable[[str], dict], want: dict[str, float], timeout_s: float = 120.0) -> None:
    """Wait until the live processor (its own thread) has judged, for every node, the window ending at
    ``want[node]``; ``verdict_of(node)`` is the node's ``/v1/nodes/{node}/verdict``."""
    deadline = time.monotonic() + timeout_s
    while any((verdict_of(n).get("window") or {}).get("end") != e for n, e in want.items()):
        assert time.monotonic() < deadline, "the live processor did not catch up"
        time.sleep(0.1)


def counts(db: Path) -> dict:
    """What the store holds, to assert that a rejection stored nothing."""
    c = sqlite3.connect(db)
    try:
        return {t: c.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("batches", "samples", "unmonitored", "devices")}
    finally:
        c.close()


def rejections(db: Path) -> list[tuple]:
    c = sqlite3.connect(db)
    try:
        return c.execute("SELECT status, code, node FROM rejections ORDER BY rowid").fetchall()
    finally:
        c.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "collector.db"


@pytest.fixture
def key(db: Path) -> str:
    store = Store(db)
    try:
        return store.enroll("node-a")
    finally:
        store.close()


@pytest.fixture
def inspector_token(db: Path) -> str:
    return enroll_inspector_in(db, "inspector-1")


@pytest.fixture
def client(db: Path, key: str, inspector_token: str):
    """The app; reads carry an inspector token (ingest ignores it: it checks the node's HMAC)."""
    with TestClient(create_app(db, max_batch_bytes=64 * 1024),
                    headers={"Authorization": f"Bearer {inspector_token}"}) as c:
        yield c


@pytest.fixture
def agent(client: TestClient, key: str) -> Agent:
    return Agent(client, "node-a", key)


class RealCollector:
    """The collector as it runs in production: ``python -m trainsentry.collector.server`` in a
    subprocess (uvicorn, the direct ingest path, the live processor), on ``db``; stop it with
    :meth:`kill` (SIGKILL: nothing is flushed or closed in order) and start it again on the same file."""

    def __init__(self, db: Path, env: dict[str, str] | None = None):
        import os
        import subprocess
        import sys

        import httpx

        from trainsentry.collector.server import READY_PREFIX
        src = str(Path(__file__).resolve().parents[2] / "src")
        full_env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {}))
        self.proc = subprocess.Popen([sys.executable, "-m", "trainsentry.collector.server", "--db", str(db),
                                      "--port", "0"], stdout=subprocess.PIPE, text=True, env=full_env)
        line = self.proc.stdout.readline()
        if not line.startswith(READY_PREFIX):
            self.kill()
            raise RuntimeError(f"collector did not start: {line!r}")
        self.url = line[len(READY_PREFIX):].strip()
        self.http = httpx.Client(base_url=self.url, timeout=30)

    def get(self, path: str, token: str, **params) -> dict:
        r = self.http.get(path, params=params, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        return r.json()

    def kill(self) -> None:
        import signal
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.proc.stdout.close()
        if hasattr(self, "http"):
            self.http.close()
