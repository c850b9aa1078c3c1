"""The dashboard's overview for a fleet: GET /v1/overview latency and size with 1,000 nodes.

    .venv/bin/python benchmarks/bench_dashboard.py              # writes results/dashboard.json

The fleet is built from recorded traces, never invented: the agent trace recorded on 2 x H200
(``data/gpu_check``: 2 GPUs + 3 interfaces at 10 Hz) and three traces replayed from the H200 probe
readings (``tests/detect/probe_traces.py``: DDP training, one-way sends = disaggregated inference,
idle). Node *i* replays source *i mod 4*, retimed so that its last sample lies a node-specific
offset (0-600 s) before the measurement starts, as signed, chained 1-s batches through the
collector's own ``Store.ingest`` (the ingest path minus HTTP).

Verdicts: the collector's live processor (``collector/live.py``, untrained comm-rules) judges each
source trace once as its own node; the nodes replaying that source receive copies of those verdict,
alert and job rows shifted by their offset (running the processor 1,000 times would give the same
rows at ~1,000 x the set-up time; what is measured here is reading them, not computing them).

Then the real server (``python -m trainsentry.collector.server``, which restores every node's
latest verdict from the database at start) answers ``GET /v1/overview`` with an inspector token over
one keep-alive connection: ``--requests`` times uncached (``TRAINSENTRY_OVERVIEW_TTL_S=0``, every
request aggregates) and as many times with the default 1-s cache, asking for gzip as browsers do.
Median, p95, and payload bytes (gzip on the wire, and the JSON).
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from trainsentry.collector.auth import enroll_inspector_in  # noqa: E402
from trainsentry.collector.server import wait_ready  # noqa: E402
from trainsentry.collector.store import Store  # noqa: E402
from trainsentry.telemetry.replay import read_trace_readings  # noqa: E402
from trainsentry.wire.batch import GENESIS_PREV, digest, encode_batch, sign  # noqa: E402

GPU_CHECK = ROOT / "data" / "gpu_check" / "nccl-known-bytes-2026-11-30"


def source_traces(tmp: Path) -> dict[str, list]:
    from detect.probe_traces import GIB, IDLE_MEM_BYTES, write_probe_trace
    plans = {"ddp": ([("idle", 3.0, IDLE_MEM_BYTES), ("ddp", 40.0, 20 * GIB)], "training", "ddp"),
             "send": ([("idle", 3.0, IDLE_MEM_BYTES), ("send", 40.0, 30 * GIB)], "inference", "disagg"),
             "idle": ([("idle", 30.0, IDLE_MEM_BYTES)], "other", "idle")}
    out = {"gpu_check": read_trace_readings(GPU_CHECK)}
    for name, (plan, cls, family) in plans.items():
        out[name] = read_trace_readings(write_probe_trace(tmp, name, plan, cls, family, f"{family}-bench"))
    return out


def batches(node: str, key: str, readings: list, shift: float) -> list[tuple[bytes, str]]:
    """1-s signed, chained batches of the readings, timestamps shifted by ``shift`` seconds."""
    out, prev, seq, i = [], GENESIS_PREV, 0, 0
    t_first = readings[0].t
    while i < len(readings):
        edge = t_first + seq + 1.0
        chunk = []
        while i < len(readings) and readings[i].t < edge:
            r = readings[i]
            chunk.append({"dev": r.device, "kind": r.kind, "t": round(r.t + shift, 6), "m": r.values})
            i += 1
        body = encode_batch(node, seq, prev, chunk, edge + shift, 1.0)
        out.append((body, sign(key, body)))
        prev, seq = digest(body), seq + 1
    return out


def judge_sources(db: Path, sources: dict[str, list], now: float) -> dict[str, float]:
    """Run the live processor over each source as node ``src-NAME``; return each one's time shift."""
    from trainsentry.collector.hooks import CommittedBatch
    from trainsentry.collector.live import LiveConfig, LiveProcessor
    store = Store(db)
    proc = LiveProcessor(db, config=LiveConfig(models_dir=db.parent / "no-models"))
    shifts = {}
    try:
        for name, readings in sources.items():
            node = f"src-{name}"
            shifts[name] = now - readings[-1].t - 1.0
            key = store.enroll(node)
            for body, sig in batches(node, key, readings, shifts[name]):
                acc = store.ingest(node, sig, body)
                proc.on_batch(CommittedBatch(node, acc.seq, acc.digest, acc.received_at, acc.batch.samples, acc.gaps))
    finally:
        proc.close()
        store.close()
    return shifts


def build_fleet(db: Path, sources: dict[str, list], n_nodes: int, now: float) -> dict:
    t = time.perf_counter()
    shifts = judge_sources(db, sources, now)
    store = Store(db)
    names = list(sources)
    n_samples = 0
    conn = store.conn
    for i in range(n_nodes):
        src = names[i % len(names)]
        node = f"node{i:04d}"
        offset = (i * 7919) % 600          # spread the nodes' last samples over the last 10 minutes
        key = store.enroll(node)
        shift = shifts[src] - offset
        for body, sig in batches(node, key, sources[src], shift):
            n_samples += store.ingest(node, sig, body).n_samples
        # copies of the source node's verdicts, alerts and job, shifted by -offset
        conn.execute("BEGIN IMMEDIATE")
        src_node, at = f"src-{src}", "'@' || ?"   # job names get "@node" so each node has its own
        conn.execute("INSERT INTO verdicts SELECT scope, ?, t_start - ?, t_end - ?, state, p_training, detector, "
                     f"artifact, evidence, job || {at}, computed_at FROM verdicts WHERE scope = 'node' AND subject = ?",
                     (node, offset, offset, node, src_node))
        conn.execute(f"INSERT INTO verdicts SELECT scope, subject || {at}, t_start - ?, t_end - ?, state, p_training, "
                     "detector, artifact, evidence, job, computed_at FROM verdicts WHERE scope = 'job' AND subject IN "
                     "(SELECT job FROM jobs WHERE nodes = ?)", (node, offset, offset, json.dumps([src_node])))
        conn.execute("INSERT INTO alerts (scope, subject, raised_t, cleared_t, threshold, k, n, p_max, detector, "
                     "evidence, raised_at) SELECT scope, ?, raised_t - ?, cleared_t - ?, threshold, k, n, p_max, "
                     "detector, evidence, raised_at FROM alerts WHERE scope = 'node' AND subject = ?",
                     (node, offset, offset, src_node))
        conn.execute(f"INSERT INTO jobs (job, nodes, start_t, last_t, updated_at) SELECT job || {at}, ?, start_t - ?, "
                     "last_t - ?, updated_at FROM jobs WHERE nodes = ?",
                     (node, json.dumps([node]), offset, offset, json.dumps([src_node])))
        conn.execute("COMMIT")
    counts = dict(conn.execute("SELECT 'verdicts', COUNT(*) FROM verdicts UNION ALL "
                               "SELECT 'alerts', COUNT(*) FROM alerts UNION ALL SELECT 'jobs', COUNT(*) FROM jobs"))
    store.close()
    return {"nodes": n_nodes, "sources": {k: len(v) for k, v in sources.items()}, "samples": n_samples,
            "rows": counts, "build_s": round(time.perf_counter() - t, 1)}


def start_server(db: Path, ttl_s: float) -> tuple[subprocess.Popen, str, int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TRAINSENTRY_OVERVIEW_TTL_S=str(ttl_s),
               TRAINSENTRY_MODELS=str(db.parent / "no-models"))
    proc = subprocess.Popen([sys.executable, "-m", "trainsentry.collector.server", "--db", str(db), "--port", "0"],
                            stdout=subprocess.PIPE, text=True, env=env)
    host, port = wait_ready(proc)
    return proc, host, port


def measure(db: Path, token: str, ttl_s: float, n: int) -> dict:
    proc, host, port = start_server(db, ttl_s)
    load_before = os.getloadavg()[0]
    try:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        ms, body = [], b""
        for _ in range(n):
            t = time.perf_counter()
            conn.request("GET", "/v1/overview", headers={"Authorization": f"Bearer {token}", "Accept-Encoding": "gzip"})
            r = conn.getresponse()
            body = r.read()
            ms.append((time.perf_counter() - t) * 1e3)
            if r.status != 200:
                raise RuntimeError(f"/v1/overview: {r.status} {body[:200]!r}")
        if r.getheader("content-encoding") != "gzip":
            raise RuntimeError("/v1/overview did not answer gzip to a client that accepts it")
        raw = gzip.decompress(body)
        doc = json.loads(raw)
    finally:
        proc.terminate()
        proc.wait(30)
    ms.sort()
    return {"ttl_s": ttl_s, "requests": n, "median_ms": round(statistics.median(ms), 2),
            "p95_ms": round(ms[int(0.95 * (n - 1))], 2), "max_ms": round(ms[-1], 2),
            "payload_bytes_on_wire_gzip": len(body), "payload_bytes_json": len(raw),
            "nodes_in_answer": doc["n_nodes"], "counts": doc["counts"], "jobs_in_answer": len(doc["jobs"]),
            # other work on the machine shares its cores: the 1-min load average says how much
            "load_avg_1min": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "dashboard.json")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as d:
        tmp = Path(d)
        db = tmp / "collector.db"
        fleet = build_fleet(db, source_traces(tmp / "traces"), a.nodes, time.time())
        token = enroll_inspector_in(db, "bench")
        runs = {"uncached": measure(db, token, 0.0, a.requests), "cached_1s": measure(db, token, 1.0, a.requests)}
    result = {"command": "python benchmarks/bench_dashboard.py" + (f" --nodes {a.nodes}" if a.nodes != 1000 else "")
              + (f" --requests {a.requests}" if a.requests != 200 else ""),
              "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
              "fleet": fleet, "overview": runs}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
