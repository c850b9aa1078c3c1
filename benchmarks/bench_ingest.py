"""Collector ingest throughput vs the raw SQLite insert ceiling, measured in the same run.

    .venv/bin/python benchmarks/bench_ingest.py            # writes results/ingest.json ("collector" key)
    .venv/bin/python benchmarks/bench_ingest.py --live     # the same with the live verdict engine running
                                                           # in the server ("collector_with_live" key)

What is measured:

* **collector**: the real server (``trainsentry serve``: uvicorn, one worker, pinned to CPU 0 when
  the machine has two or more) receives pre-signed batches over loopback from client threads in this
  process (pinned to CPU 1), one keep-alive connection per node, each node's batches in seq order.
  Time runs from the first request to the last acknowledgement; every batch must be acknowledged
  as newly accepted (200, not duplicate) and the server's stats must count every sample.
* **raw SQLite ceiling**: the same sample rows (already built as tuples by the collector's own
  ``sample_rows``, one INSERT per metric set) inserted with ``executemany`` into a fresh database
  with the collector's schema and pragmas, one transaction per batch, WAL checkpoints on a thread
  as in the collector, on CPU 0
  after the server has stopped. It leaves out everything the collector does besides inserting sample
  rows: HTTP, HMAC, parsing, chain checks, keeping the signed body.

Two batch shapes: ``realistic`` (an 8-GPU node with 4 NICs at 10 Hz sending 1-s batches: 120
samples) and ``replay`` (the same node flushing 50 s of spooled samples at once: 6,000 samples).
Each is run ``--repeats`` times; the median is reported along with every run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import random
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from trainsentry.collector.checkpoint import Checkpointer  # noqa: E402
from trainsentry.collector.schema import open_db  # noqa: E402
from trainsentry.collector.server import wait_ready  # noqa: E402
from trainsentry.collector.store import Store, sample_rows  # noqa: E402
from trainsentry.traces.schema import GPU_METRICS, NET_METRICS  # noqa: E402
from trainsentry.wire.batch import GENESIS_PREV, NODE_HEADER, SIGNATURE_HEADER, digest, encode_batch, sign  # noqa: E402

SHAPES = {"realistic": 10, "replay": 500}  # 10 Hz steps per batch; x 12 devices = samples per batch
GPUS, NICS, HZ = 8, 4, 10.0


class _Counters:
    """Plausible raw readings: counters that only grow, gauges that wander."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.c = {f"gpu{g}": {m.name: rng.randrange(1 << 40) for m in GPU_METRICS if m.kind == "counter"}
                  for g in range(GPUS)}
        self.c.update({f"eth{i}": {m.name: rng.randrange(1 << 44) for m in NET_METRICS} for i in range(NICS)})

    def sample(self, dev: str, kind: str, t: float) -> dict:
        r = self.rng
        m = {}
        for name in self.c[dev]:
            self.c[dev][name] += r.randrange(1 << 20)
            m[name] = self.c[dev][name]
        if kind == "gpu":
            for g in GPU_METRICS:
                if g.kind != "counter":
                    m[g.name] = r.randrange(700_000) if g.integer else round(r.uniform(0, 100), 2)
        return {"dev": dev, "kind": kind, "t": round(t, 6), "m": m}


def make_batches(node: str, key: str, n_batches: int, steps: int, t0: float, seed: int) -> list[tuple[bytes, str, int]]:
    gen = _Counters(random.Random(seed))
    out, prev = [], GENESIS_PREV
    for seq in range(n_batches):
        samples = []
        for k in range(steps):
            t = t0 + (seq * steps + k) / HZ
            samples += [gen.sample(f"gpu{g}", "gpu", t) for g in range(GPUS)]
            samples += [gen.sample(f"eth{i}", "net", t) for i in range(NICS)]
        body = encode_batch(node, seq, prev, samples, t0 + (seq + 1) * steps / HZ, steps / HZ)
        prev = digest(body)
        out.append((body, sign(key, body), len(samples)))
    return out


def _pin(cpu: int) -> bool:
    try:
        if hasattr(os, "sched_setaffinity") and os.cpu_count() and os.cpu_count() >= 2:
            os.sched_setaffinity(0, {cpu})
            return True
    except OSError:
        pass
    return False


LIVE = {"on": False}  # --live: the live verdict engine runs in the server process as in production


def start_server(db: Path) -> tuple[subprocess.Popen, str, int]:
    pin = "import os; os.sched_setaffinity(0, {0}) if (os.cpu_count() or 1) >= 2 else None; "
    code = pin + "from trainsentry.collector.server import main; main(['--db', %r, '--port', '0'])" % str(db)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), TRAINSENTRY_LIVE="1" if LIVE["on"] else "0")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    host, port = wait_ready(proc)
    return proc, host, port


def send_all(host: str, port: int, per_node: dict[str, list]) -> float:
    errors: list[str] = []
    barrier = threading.Barrier(len(per_node) + 1)

    def worker(node: str, batches: list) -> None:
        conn = http.client.HTTPConnection(host, port, timeout=60)
        conn.connect()
        # http.client sends headers and a large body in separate writes: without TCP_NODELAY, Nagle's
        # algorithm and the server's delayed ACK stall every request by ~40 ms.
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        barrier.wait()
        for body, sig, _ in batches:
            conn.request("POST", "/v1/batches", body, {NODE_HEADER: node, SIGNATURE_HEADER: sig,
                                                        "Content-Type": "application/json"})
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200 or b'"duplicate"' in answer:
                errors.append(f"{node}: {resp.status} {answer[:200]!r}")
                return
        conn.close()

    threads = [threading.Thread(target=worker, args=item) for item in per_node.items()]
    for th in threads:
        th.start()
    barrier.wait()
    t = time.perf_counter()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t
    if errors:
        raise RuntimeError(f"ingest failed: {errors[:3]}")
    return elapsed


def collector_run(per_node: dict[str, list], keys: dict[str, str], tmp: Path, run: int) -> dict:
    db = tmp / f"collector-{time.monotonic_ns()}.db"
    store = Store(db)
    for node, key in keys.items():
        store.enroll(node, key=key)
    store.close()
    proc, host, port = start_server(db)
    try:
        cpu0 = _cpu_seconds(proc.pid)
        elapsed = send_all(host, port, per_node)
        cpu = _cpu_seconds(proc.pid) - cpu0
        conn = http.client.HTTPConnection(host, port)
        conn.request("GET", "/v1/stats")
        stats = json.loads(conn.getresponse().read())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    n = sum(b[2] for batches in per_node.values() for b in batches)
    if stats["since_start"]["accepted_samples"] != n:
        raise RuntimeError(f"server counted {stats['since_start']['accepted_samples']} samples, sent {n}")
    return {"samples": n, "batches": sum(len(v) for v in per_node.values()), "seconds": elapsed,
            "samples_per_s": n / elapsed, "cpu_us_per_sample": cpu / n * 1e6}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc): the server's own cost, whatever else runs."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def raw_run(per_node: dict[str, list], tmp: Path, run: int) -> dict:
    import orjson
    db = tmp / f"raw-{time.monotonic_ns()}.db"
    conn = open_db(db)
    conn.execute("INSERT INTO nodes (node_id, name, key, enrolled_at) VALUES (1, 'raw', '00', 0)")
    # The rows and INSERT statements the collector itself would execute for these batches.
    row_batches = [sample_rows(1, orjson.loads(body)["samples"]) for batches in per_node.values()
                   for body, _, _ in batches]
    conn.execute("PRAGMA wal_autocheckpoint=0")  # checkpoints off the insert path, as in the collector
    checkpointer = Checkpointer(db)
    t = time.perf_counter()
    for groups in row_batches:
        conn.execute("BEGIN IMMEDIATE")
        for sql, rows in groups:
            conn.executemany(sql, rows)
        conn.execute("COMMIT")
        checkpointer.poke()
    elapsed = time.perf_counter() - t
    checkpointer.close()
    conn.close()
    n = sum(len(rows) for groups in row_batches for _, rows in groups)
    got = sqlite3.connect(db).execute("SELECT COUNT(*) FROM samples").fetchone()[0]
    assert got == n, (got, n)
    return {"samples": n, "seconds": elapsed, "samples_per_s": n / elapsed}


def machine() -> dict:
    model = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "platform": platform.platform()}


def bench_shape(shape: str, steps: int, n_nodes: int, samples_target: int, repeats: int, tmp: Path) -> dict:
    per_batch = steps * (GPUS + NICS)
    n_batches = max(2, samples_target // (per_batch * n_nodes))
    keys = {f"node-{i}": os.urandom(32).hex() for i in range(n_nodes)}
    t0 = 1_790_000_000.0
    per_node = {node: make_batches(node, key, n_batches, steps, t0, seed=i) for i, (node, key) in enumerate(keys.items())}
    runs = []
    for r in range(repeats):
        col = collector_run(per_node, keys, tmp, r)
        _pin(0)
        raw = raw_run(per_node, tmp, r)
        _pin(1)
        runs.append({"collector_samples_per_s": round(col["samples_per_s"]),
                     "collector_cpu_us_per_sample": round(col["cpu_us_per_sample"], 2),
                     "raw_sqlite_samples_per_s": round(raw["samples_per_s"]),
                     "ratio": round(col["samples_per_s"] / raw["samples_per_s"], 3),
                     "collector_seconds": round(col["seconds"], 3), "raw_seconds": round(raw["seconds"], 3),
                     "load_1min_after": round(os.getloadavg()[0], 2)})
        print(f"{shape} run {r}: collector {col['samples_per_s']:,.0f} samples/s, raw SQLite "
              f"{raw['samples_per_s']:,.0f} samples/s, ratio {col['samples_per_s'] / raw['samples_per_s']:.2f}, "
              f"server CPU {col['cpu_us_per_sample']:.2f} us/sample, load {os.getloadavg()[0]:.2f}", flush=True)
    body_bytes = statistics.mean(len(b[0]) for b in per_node["node-0"])
    med = lambda k: statistics.median(x[k] for x in runs)  # noqa: E731
    return {"samples_per_batch": per_batch, "batches_per_node": n_batches, "nodes": n_nodes,
            "mean_body_bytes": round(body_bytes), "samples_per_run": n_batches * n_nodes * per_batch,
            "collector_samples_per_s": med("collector_samples_per_s"),
            "collector_cpu_us_per_sample": med("collector_cpu_us_per_sample"),
            "raw_sqlite_samples_per_s": med("raw_sqlite_samples_per_s"), "ratio": med("ratio"), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=240_000, help="samples per run and shape")
    ap.add_argument("--nodes", type=int, default=4, help="nodes (client connections) sending at once")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "ingest.json")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--live", action="store_true",
                    help="also run the live verdict engine in the server (written under collector_with_live)")
    args = ap.parse_args(argv)
    LIVE["on"] = args.live
    pinned = _pin(1)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        shapes = {shape: bench_shape(shape, steps, args.nodes, args.samples, args.repeats, Path(tmp))
                  for shape, steps in SHAPES.items()}
    result = {
        "what": "collector ingest (HTTP POST of signed batches over loopback into SQLite) vs raw SQLite insert "
                "of the same sample rows, same schema and pragmas, same run",
        "command": "python benchmarks/bench_ingest.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        # Other processes on the machine compete for the two cores: the load average says how much.
        "load_average_1min": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
        "server": ("trainsentry serve: uvicorn (httptools, uvloop) with the direct ingest path, 1 worker, pinned to CPU 0"
                   if pinned else "trainsentry serve: not pinned"),
        "client": "this process, pinned to CPU 1" if pinned else "this process, not pinned",
        "sqlite": {"journal_mode": "wal", "synchronous": "normal"},
        "live_verdicts": args.live,
        "targets": {"collector_samples_per_s": 100_000, "ratio": 0.25},
        "shapes": shapes,
    }
    print(json.dumps(result, indent=1))
    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = json.loads(args.out.read_text()) if args.out.exists() else {}
        # read-modify-write: other keys (e.g. "agent") belong to others
        doc["collector_with_live" if args.live else "collector"] = result
        args.out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
