"""Shared by tests/agent and tests/e2e: small real sources and a real collector subprocess."""

from __future__ import annotations

import os
import random
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from trainsentry.telemetry.base import Reading

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


class FakeClock:
    """A monotonic clock that moves only when something sleeps on it: a sampler run on it takes every
    tick at exactly ``t0 + k / hz`` whatever the machine's load, so its schedule can be tested exactly.

    Patch it in with ``monkeypatch.setattr(trainsentry.agent.sampler, "time", clock.as_time_module())``
    and pass ``clock=clock`` to the sampler (and ``timer=clock, sleep=clock.sleep`` to a source whose
    reads stall). Only for rates of 4 Hz and more: the sampler waits longer than its 0.25 s sleep cap
    on its stop event, in real time, and this clock would never reach the tick."""

    def __init__(self, t: float = 0.0):
        self.t = float(t)

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.t += seconds

    def as_time_module(self):
        from types import SimpleNamespace
        return SimpleNamespace(monotonic=self, time=self, sleep=self.sleep)


class CounterSource:
    """A source over in-process counters: each read advances every device's byte counters.

    Timestamps come from ``clock`` (wall time by default), like the net source's host clock;
    ``read_times`` from ``timer`` and stalls (``read_delay``) sleep with ``sleep``, the real
    monotonic clock by default, a ``FakeClock`` to test a schedule exactly.
    """

    def __init__(self, devices=("eth0", "eth1"), kind="net", clock=time.time, step_bytes=1000,
                 fail_on=(), end_after=None, read_delay=None, timer=time.monotonic, sleep=time.sleep):
        self.name = f"counter-{kind}"
        self._devices = list(devices)
        self.kind = kind
        self.clock = clock
        self.step = step_bytes
        self.count = 0
        self.fail_on = set(fail_on)          # read numbers that raise
        self.end_after = end_after           # raise StopIteration after this many reads
        self.read_delay = read_delay or {}   # read number -> seconds to stall
        self.read_times: list[float] = []    # time of each read, on ``timer``
        self.timer, self.sleep = timer, sleep
        self.closed = False

    def devices(self):
        return list(self._devices)

    def read(self):
        n = self.count
        if self.end_after is not None and n >= self.end_after:
            raise StopIteration
        self.count += 1
        self.read_times.append(self.timer())
        if n in self.read_delay:
            self.sleep(self.read_delay[n])
        if n in self.fail_on:
            raise OSError(f"read {n} failed")
        t = self.clock()
        return [Reading(d, self.kind, t, {"net_tx_bytes": (n + 1) * self.step * (i + 1),
                                          "net_rx_bytes": (n + 1) * self.step})
                for i, d in enumerate(self._devices)]

    def close(self):
        self.closed = True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback port free now and *below the ephemeral range*. A collector's port is chosen before the
    collector starts (a sender may post to it while it is down), and a port the kernel may also hand out
    as a client's source port can be taken in between, or connect to itself: a client connecting to a
    local ephemeral port that nothing listens on can be given that same port as its own and complete a
    TCP simultaneous open with itself, and the collector then fails to bind."""
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1025, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:      # every port tried is taken: fall back to one the kernel picks
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(SRC), str(REPO / "tests"), str(REPO / "tests" / "agent")] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e["PYTHONUNBUFFERED"] = "1"
    return e


class CollectorProcess:
    """``trainsentry serve`` as a subprocess on a fixed loopback port, so it can be killed and restarted."""

    def __init__(self, db: Path, port: int | None = None):
        self.db = Path(db)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def enroll(self, node: str) -> str:
        from trainsentry.collector.store import Store
        store = Store(self.db)
        try:
            return store.enroll(node)
        finally:
            store.close()

    def start(self, timeout_s: float = 30.0) -> "CollectorProcess":
        self.proc = subprocess.Popen([sys.executable, "-m", "trainsentry.cli", "serve", "--db", str(self.db),
                                      "--port", str(self.port)], stdout=subprocess.PIPE, text=True, env=env())
        deadline = time.monotonic() + timeout_s
        line = self.proc.stdout.readline()
        if "listening on" not in line or time.monotonic() > deadline:
            self.proc.kill()
            raise RuntimeError(f"collector did not start: {line!r}")
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def samples(self, node: str) -> list[tuple[str, float]]:
        """(device, t) of every stored sample of ``node``, read straight from the database."""
        db = sqlite3.connect(self.db)
        try:
            return db.execute("SELECT s.device, s.t FROM samples s JOIN nodes n ON n.node_id = s.node_id "
                              "WHERE n.name = ? ORDER BY s.device, s.t", (node,)).fetchall()
        finally:
            db.close()

    def gaps(self, node: str) -> list[tuple]:
        db = sqlite3.connect(self.db)
        try:
            return db.execute("SELECT u.reason, u.seq_from, u.seq_to FROM unmonitored u JOIN nodes n "
                              "ON n.node_id = u.node_id WHERE n.name = ?", (node,)).fetchall()
        finally:
            db.close()
