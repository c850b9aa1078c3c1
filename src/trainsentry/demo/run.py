"""`trainsentry demo`: the whole system on one machine, with no GPU needed.

1. a collector (``trainsentry serve``) on a free loopback port, SQLite in a temporary directory,
   judging every node live (:mod:`trainsentry.collector.live`);
2. the nodes enrolled, each with its own key;
3. an agent replaying a trace recorded on 2 × H200 (NCCL all-reduce then a one-way GPU0 → GPU1
   send, ``data/gpu_check``, class other) through the same sampler, spool, signing and sender as a
   live agent; when ``data/h200`` exists, one training and one inference run from it too;
4. a live agent reading this machine's network counters, loopback included, while 2 gloo ranks
   train a model with DDP and then run pipeline inference over loopback (:mod:`.gloo`);
then the collector's read API is asked what it stored (a table per node) and what it concluded:
each node's verdict timeline, the evidence, alerts, jobs, and the agreement with what really ran
(manifest labels; the gloo worker's own start/end events). Every process is a real one talking
HTTP over loopback; nothing is simulated.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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
H200_ROOT = REPO / "data" / "h200"


def _py(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


def _get(url: str, token: str) -> dict:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # reads need an inspector
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


class Collector:
    """A `trainsentry serve` child process on a free loopback port."""

    def __init__(self, db: Path, env: dict | None = None):
        self.db = db
        self.proc = subprocess.Popen(_py("trainsentry.collector.server", "--db", str(db), "--port", "0"),
                                     stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
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
    from ..features.host import busy_cores
    t = Table(title=f"node {series['node']}: what the collector stored (1 s buckets)")
    for c in ("device", "samples", "TX mean", "TX peak", "RX mean", "RX peak", "power W (mean)", "CPU cores busy"):
        t.add_column(c)
    for dev, s in sorted(series["devices"].items()):
        cols = s["columns"]
        if s["kind"] == "host":   # the host source: CPU time and package energy, no bytes
            pair = [(u, k) for u, k in zip(cols.get("cpu_user_cores", []), cols.get("cpu_system_cores", []))
                    if u is not None and k is not None]
            busy = [float(b) for b in busy_cores([u for u, _ in pair], [k for _, k in pair])]
            w_mean, _ = _stats(cols.get("cpu_energy_W", []))
            b_mean, _ = _stats(busy)
            t.add_row(f"{dev} (host)", str(sum(s["n"])), "—", "—", "—", "—", "—" if w_mean is None else f"{w_mean:.0f}",
                      "—" if b_mean is None else f"{b_mean:.1f}")
            continue
        tx, rx = ("nvlink_tx_Bps", "nvlink_rx_Bps") if s["kind"] == "gpu" else ("net_tx_Bps", "net_rx_Bps")
        tx_mean, tx_max = _stats(cols.get(tx, []))
        rx_mean, rx_max = _stats(cols.get(rx, []))
        p_mean, _ = _stats(cols.get("energy_W", []) or [x / 1000 if x is not None else None
                                                         for x in cols.get("power_mw", [])])
        t.add_row(f"{dev} ({'NVLink' if s['kind'] == 'gpu' else s['kind']})", str(sum(s["n"])),
                  _fmt_rate(tx_mean), _fmt_rate(tx_max), _fmt_rate(rx_mean), _fmt_rate(rx_max),
                  "—" if p_mean is None else f"{p_mean:.0f}", "—")
    return t


def pick_h200_runs(root: Path = H200_ROOT) -> list[tuple[str, Path]]:
    """One training and one inference run from the recorded H200 dataset, chosen by manifest label
    (the first of each class by run id); none while the dataset is not there."""
    from ..traces.io import iter_runs, read_manifest
    if not root.exists():
        return []
    picked: dict[str, Path] = {}
    for run in iter_runs(root):
        try:
            cls = read_manifest(run)["labels"]["class"]
        except (ValueError, KeyError, OSError):
            continue
        if cls in ("training", "inference") and cls not in picked:
            picked[cls] = run
    return [(f"h200-{cls}-replay", run) for cls, run in sorted(picked.items(), reverse=True)]


def replay_truth(trace: Path, last_sample_t: float | None) -> list[tuple[float, float, str]] | None:
    """The manifest's labelled span, shifted as the replay shifted the trace (last sample to last sample)."""
    from ..traces.io import read_trace
    if last_sample_t is None:
        return None
    table, manifest = read_trace(trace)
    shift = last_sample_t - max(table.column("t").to_pylist())
    return [(manifest["start"] + shift, manifest["end"] + shift, manifest["labels"]["class"])]


@contextlib.contextmanager
def _workdir(keep: Path | None):
    """The demo's files: a temporary directory, or ``keep`` (emptied first) so the collector's
    database outlives the demo and the dashboard can be opened on it afterwards."""
    if keep is None:
        with tempfile.TemporaryDirectory(prefix="trainsentry-demo-") as d:
            yield Path(d)
        return
    if keep.exists():
        shutil.rmtree(keep)
    keep.mkdir(parents=True)
    yield keep


def run_demo(trace: Path = DEFAULT_TRACE, live_s: float = 15.0, speed: float = 2.0,
             console: Console | None = None, gloo: bool = True, train_s: float = 20.0,
             infer_s: float = 15.0, keep: Path | None = None, hold: bool = False) -> dict:
    from . import gloo as G
    from .verdicts import print_node
    console = console or Console()
    if not (trace / "samples.parquet").exists():
        raise FileNotFoundError(f"no recorded trace at {trace}")
    live_node = f"{socket.gethostname().split('.')[0] or 'this'}-live"
    replays = [("h200x2-replay", trace), *pick_h200_runs()]
    with _workdir(keep) as tmp:
        # the collector judges every node live; on this one machine the gloo ranks talk over `lo`
        col = Collector(tmp / "collector.db", {"TRAINSENTRY_LIVE_LOOPBACK": "1",
                                               "TRAINSENTRY_MODELS": str(REPO / "models")})
        try:
            console.print(f"[bold]collector[/] {col.url}  (SQLite {tmp / 'collector.db'})")
            from ..collector.auth import enroll_inspector_in
            token = enroll_inspector_in(tmp / "collector.db", "demo-inspector")
            console.print(f"[bold]dashboard[/] {col.url}/login#token={token}", soft_wrap=True)
            for node in [n for n, _ in replays] + [live_node]:
                col.enroll(node, tmp / f"{node}.key")
            t0 = time.time()
            env = {**os.environ, "PYTHONUNBUFFERED": "1"}
            procs = {}
            for node, run in replays:
                procs[node] = subprocess.Popen(
                    _py("trainsentry.cli", "replay", str(run), "--collector", col.url, "--node", node,
                        "--key-file", str(tmp / f"{node}.key"), "--speed", str(speed),
                        "--spool", str(tmp / f"{node}.spool.db")), env=env, stdout=subprocess.DEVNULL)
                console.print(f"agent [cyan]{node}[/] replays {run.name} at {speed}× speed")
            live = subprocess.Popen(_py("trainsentry.cli", "agent", "--collector", col.url, "--node", live_node,
                                        "--key-file", str(tmp / f"{live_node}.key"),
                                        "--source", "net+lo" if gloo else "net", "--source", "host",
                                        "--spool", str(tmp / "live.spool.db"),
                                        "--duration", str(3600 if gloo else live_s)), env=env, stdout=subprocess.DEVNULL)
            if gloo:
                console.print(f"agent [cyan]{live_node}[/] reads this machine's network counters, loopback "
                              f"included, while 2 gloo ranks train (DDP, {train_s:.0f} s) then infer "
                              f"(pipeline, {infer_s:.0f} s) over loopback")
                worker = G.start(tmp / "gloo", train_s, infer_s, env)
                worker_rc = worker.wait(timeout=600)
                time.sleep(10.0)  # a window of quiet after the last run, so the end shows too
                live.terminate()
                procs["gloo-worker"] = worker_rc
            else:
                console.print(f"agent [cyan]{live_node}[/] reads this machine's network counters for {live_s:.0f} s")
            rcs = {n: (p.wait(timeout=300) if isinstance(p, subprocess.Popen) else p) for n, p in procs.items()}
            rcs[live_node] = live.wait(timeout=300)
            nodes = _get(f"{col.url}/v1/nodes", token)
            console.print(f"agents finished after {time.time() - t0:.0f} s (exit codes {rcs})")
            result = {"collector": col.url, "dashboard": f"{col.url}/login#token={token}", "nodes": {},
                      "verdicts": {}}
            for n in nodes["nodes"]:
                name = n["node"]
                # replayed samples are retimed to the moment of replay, so both nodes lie in [t0, now]
                span = f"start={t0 - 5:.3f}&end={time.time() + 120:.3f}"
                series = _get(f"{col.url}/v1/nodes/{name}/series?{span}&step=1", token)
                gaps = _get(f"{col.url}/v1/nodes/{name}/unmonitored?{span}", token)
                console.print(node_table(series))
                result["nodes"][name] = {"devices": sorted(series["devices"]), "unmonitored": gaps,
                                         "samples": {d: sum(v["n"]) for d, v in series["devices"].items()}}
            time.sleep(1.0)  # the live processor judges off the request path: let it finish the last batch
            console.rule("live verdicts")
            live_info = _get(f"{col.url}/v1/live", token)
            console.print(f"[bold]detector[/] {live_info['note']}", soft_wrap=True)
            runs = dict(replays)
            for n in nodes["nodes"]:
                name = n["node"]
                timeline = _get(f"{col.url}/v1/nodes/{name}/verdicts?start={t0 - 5:.3f}&end={time.time() + 3600:.3f}",
                                token)["verdicts"]
                alerts = _get(f"{col.url}/v1/nodes/{name}/alerts", token)["alerts"]
                if name in runs:
                    spans, note = replay_truth(runs[name], n.get("last_sample_t")), f"manifest label of {runs[name].name}"
                elif name == live_node and gloo:
                    spans, note = G.truth(tmp / "gloo"), "the gloo worker's own start/end events"
                else:
                    spans, note = None, ""
                agree = print_node(console, name, timeline, alerts, spans, note)
                result["verdicts"][name] = {"states": [v["state"] for v in timeline], "alerts": alerts,
                                            "agreement": agree, "truth": spans,
                                            "evidence": timeline[-1]["evidence"] if timeline else []}
            jobs = _get(f"{col.url}/v1/jobs", token)["jobs"]
            for j in jobs:
                console.print(f"job [cyan]{j['job']}[/]: nodes {', '.join(j['nodes'])}, last state {j['state']}")
            result["jobs"] = jobs
            stats = _get(f"{col.url}/v1/stats", token)
            console.print(f"collector totals: {json.dumps(stats.get('totals', stats))}")
            result["stats"] = stats
            from ..report.location import report_location
            result["report"] = report_location(REPO / "report")
            console.print(f"[bold]report[/] {result['report']}", soft_wrap=True)
            if hold:  # an interactive demo: keep serving the dashboard until Ctrl-C
                console.print(f"[bold]dashboard[/] {result['dashboard']}  (Ctrl-C stops the collector)",
                              soft_wrap=True)
                try:
                    while col.proc.poll() is None:
                        time.sleep(1)
                except KeyboardInterrupt:
                    pass
            elif keep is not None:
                console.print(f"[bold]dashboard afterwards[/]: trainsentry serve --db {keep / 'collector.db'} "
                              f"--port 8470, then open http://127.0.0.1:8470/login#token={token}", soft_wrap=True)
            return result
        finally:
            col.stop()
