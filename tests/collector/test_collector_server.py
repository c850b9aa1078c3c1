"""The real server (uvicorn in a subprocess): acknowledged batches survive SIGKILL; bad input leaves it up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
from conftest import gpu_samples

from trainsentry.collector.server import READY_PREFIX
from trainsentry.collector.store import Store
from trainsentry.wire.batch import GENESIS_PREV, NODE_HEADER, SIGNATURE_HEADER, digest, encode_batch, sign

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _start(db: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "trainsentry.collector.server", "--db", str(db), "--port", "0"],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line.startswith(READY_PREFIX), line
    return proc, line[len(READY_PREFIX):].strip()


def test_acknowledged_batches_survive_sigkill(tmp_path):
    db = tmp_path / "c.db"
    store = Store(db)
    key = store.enroll("node-k")
    store.close()
    proc, url = _start(db)
    try:
        prev = GENESIS_PREV
        with httpx.Client(base_url=url, timeout=10) as http:
            for seq in range(5):
                body = encode_batch("node-k", seq, prev, gpu_samples(1000.0 + seq), 1000.0 + seq, 1.0)
                r = http.post("/v1/batches", content=body,
                              headers={NODE_HEADER: "node-k", SIGNATURE_HEADER: sign(key, body)})
                assert r.status_code == 200, r.text
                prev = digest(body)
            junk = http.post("/v1/batches", content=b"\x00\xff garbage", headers={NODE_HEADER: "node-k",
                                                                                   SIGNATURE_HEADER: "00"})
            assert junk.status_code == 401 and junk.json()["error"] == "bad_signature"
            assert http.get("/healthz").json()["ok"] is True
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        proc.stdout.close()
    # every acknowledged batch is in the database after the kill, and the chain resumes there
    store = Store(db)
    try:
        assert store.conn.execute("SELECT COUNT(*), MAX(seq) FROM batches").fetchone() == (5, 4)
        assert store.conn.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 50
        assert store.conn.execute("SELECT last_digest FROM nodes").fetchone()[0] == prev
    finally:
        store.close()
