"""`trainsentry demo`: the whole backbone on one machine, with no GPU needed.

1. a collector (``trainsentry serve``) on a free loopback port, SQLite in a temporary directory;
2. two nodes enrolled, each with its own key;
3. an agent replaying a trace recorded on 2 × H200 (NCCL all-reduce then a one-way GPU0 → GPU1
   send, ``data/gpu_check``) through the same sampler, spool, signing and sender as a live agent;
4. a live agent reading this machine's network counters;
then the collector's read API is asked what it stored, and a table per node shows it.
Every process is a real one talking HTTP over loopback; nothing is simulated.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[3]
DEFAULT_TRACE = REPO / "data" / "gpu_check" / "nccl-known-bytes-2026-11-30"


def _py(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


def _get(url: str, token: str) -> dict:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # reads need an inspector
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Collector:
    """A `trainsentry serve` child process on a free loopback port."""

    def __init__(self, db: Path):
        self.db = db
        self.proc = subprocess.Popen(_py("trainsentry.collector.server", "--db", str(db), "--port", "0"),
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            raise RuntimeError(f"collector did not start: {line!r}")
        self.url = line.strip().rsplit(" ", 1)[-1]

    def enroll(self, node: str, key_file: Path) -> None:
        subprocess.run(_py("trainsentry.cli", "enroll", node, "--db", str(self.db), "--key-out", str(key_file)),
                       check=True, stdout=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _fmt_rate(x: float | None) -> str:
    if x is None:
        return "—"
    for unit, f in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if abs(x) >= f:
            return f"{x / f:.2f} {unit}"
    return f"{x:.0f} B/s"


def _stats(values: list) -> tuple[float | None, float | None]:
    v = [x for x in values if x is not None]
    return (sum(v) / len(v), max(v)) if v else (None, None)


def node_table(series: dict) -> Table:
    t = Table(title=f"node {series['node']}: what the collector stored (1 s buckets)")
    for c in ("device", "samples", "TX mean", "TX peak", "RX mean", "RX peak", "power W (mean)"):
        t.add_column(c)
    for dev, s in sorted(series["devices"].items()):
        cols = s["columns"]
        tx, rx = ("nvlink_tx_Bps", "nvlink_rx_Bps") if s["kind"] == "gpu" else ("net_tx_Bps", "net_rx_Bps")
        tx_mean, tx_max = _stats(cols.get(tx, []))
        rx_mean, rx_max = _stats(cols.get(rx, []))
        p_mean, _ = _stats(cols.get("energy_W", []) or [x / 1000 if x is not None else None
                                                         for x in cols.get("power_mw", [])])
        t.add_row(f"{dev} ({'NVLink' if s['kind'] == 'gpu' else s['kind']})", str(sum(s["n"])),
                  _fmt_rate(tx_mean), _fmt_rate(tx_max), _fmt_rate(rx_mean), _fmt_rate(rx_max),
                  "—" if p_mean is None else f"{p_mean:.0f}")
    return t


def run_demo(trace: Path = DEFAULT_TRACE, live_s: float = 15.0, speed: float = 2.0,
             console: Console | None = None) -> dict:
    console = console or Console()
    if not (trace / "samples.parquet").exists():
        raise FileNotFoundError(f"no recorded trace at {trace}")
    live_node = f"{socket.gethostname().split('.')[0] or 'this'}-live"
    replay_node = "h200x2-replay"
    with tempfile.TemporaryDirectory(prefix="trainsentry-demo-") as d:
        tmp = Path(d)
        col = Collector(tmp / "collector.db")
        try:
            console.print(f"[bold]collector[/] {col.url}  (SQLite {tmp / 'collector.db'})")
            from ..collector.auth import enroll_inspector_in
            token = enroll_inspector_in(tmp / "collector.db", "demo-inspector")
            console.print(f"[bold]dashboard[/] {col.url}/login#token={token}", soft_wrap=True)
            for node in (replay_node, live_node):
                col.enroll(node, tmp / f"{node}.key")
            t0 = time.time()
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            replay = subprocess.Popen(_py("trainsentry.cli", "replay", str(trace), "--collector", col.url,
                                          "--node", replay_node, "--key-file", str(tmp / f"{replay_node}.key"),
                                          "--speed", str(speed), "--spool", str(tmp / "replay.spool.db")),
                                      env=env, stdout=subprocess.DEVNULL)
            live = subprocess.Popen(_py("trainsentry.cli", "agent", "--collector", col.url, "--node", live_node,
                                        "--key-file", str(tmp / f"{live_node}.key"), "--source", "net",
                                        "--spool", str(tmp / "live.spool.db"), "--duration", str(live_s)),
                                    env=env, stdout=subprocess.DEVNULL)
            console.print(f"agents: [cyan]{replay_node}[/] replays {trace.name} at {speed}× speed; "
                          f"[cyan]{live_node}[/] reads this machine's network counters for {live_s:.0f} s")
            rcs = {replay_node: replay.wait(timeout=300), live_node: live.wait(timeout=300)}
            nodes = _get(f"{col.url}/v1/nodes", token)
            console.print(f"agents finished after {time.time() - t0:.0f} s (exit codes {rcs})")
            result = {"collector": col.url, "dashboard": f"{col.url}/login#token={token}", "nodes": {}}
            for n in nodes["nodes"]:
                name = n["node"]
                # replayed samples are retimed to the moment of replay, so both nodes lie in [t0, now]
                span = f"start={t0 - 5:.3f}&end={time.time() + 120:.3f}"
                series = _get(f"{col.url}/v1/nodes/{name}/series?{span}&step=1", token)
                gaps = _get(f"{col.url}/v1/nodes/{name}/unmonitored?{span}", token)
                console.print(node_table(series))
                result["nodes"][name] = {"devices": sorted(series["devices"]), "unmonitored": gaps,
                                         "samples": {d: sum(v["n"]) for d, v in series["devices"].items()}}
            stats = _get(f"{col.url}/v1/stats", token)
            console.print(f"collector totals: {json.dumps(stats.get('totals', stats))}")
            result["stats"] = stats
            return result
        finally:
            col.stop()
