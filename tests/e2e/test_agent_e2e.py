"""Real ``trainsentry serve`` + real ``trainsentry agent`` (fake NVML from recorded H200 readings) on loopback."""

import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))
from agent_testkit import CollectorProcess, env, free_port  # noqa: E402

FAKE_NODE = str(Path(__file__).with_name("fake_node.py"))
SYSFS = str(Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "node1")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def collector(tmp_path):
    c = CollectorProcess(tmp_path / "collector.db")
    c.key_file = tmp_path / "node-a.key"
    c.key_file.write_text(c.enroll("node-a") + "\n")
    c.start()
    yield c
    c.stop()


def agent(collector, spool, *extra, gpus=4):
    return subprocess.Popen([sys.executable, FAKE_NODE, "--gpus", str(gpus), "agent", "--collector", collector.url,
                             "--node", "node-a", "--key-file", str(collector.key_file), "--spool", str(spool),
                             "--source", "nvml", "--source", f"net:{SYSFS}", "--hz", "10", "--batch-s", "0.5", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env())


def summary(proc, timeout=60):
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def wait_rows(collector, n, timeout_s=20):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and len(collector.samples("node-a")) < n:
        time.sleep(0.1)


def test_collector_sigkilled_mid_stream_every_sample_stored_exactly_once(tmp_path, collector):
    proc = agent(collector, tmp_path / "spool.db", "--duration", "6", "--drain-s", "30")
    wait_rows(collector, 40)                       # streaming has started
    collector.kill()                               # SIGKILL: no shutdown, no flush
    time.sleep(1.5)                                # the agent keeps sampling into its spool
    collector.start()                              # same database, same port
    s = summary(proc)
    rows = collector.samples("node-a")
    assert s["pending_batches"] == 0 and s["send_failures"] >= 1
    # 6 s at 10 Hz: every slot is read or counted missed (a stall past the end adds one or more)
    assert s["ticks"] + s["missed_ticks"] >= 60
    assert s["samples_read"] == s["ticks"] * (4 + 4)   # 4 GPUs + the fixture's eth0, ifb0, 2 IB ports
    assert len(rows) == s["samples_read"]          # all arrived ...
    assert len(set(rows)) == len(rows)             # ... exactly once
    assert collector.gaps("node-a") == []          # and nothing was declared lost


def spooled_samples(spool_path):
    """(device, t) of every sample an agent left in its spool: sealed batches and staged ticks."""
    db = sqlite3.connect(spool_path)
    try:
        out = set()
        for (body,) in db.execute("SELECT body FROM pending"):
            out |= {(s["dev"], s["t"]) for s in json.loads(body)["samples"]}
        for (text,) in db.execute("SELECT samples FROM staged"):
            out |= {(s["dev"], s["t"]) for s in json.loads(text)}
        through = dict(db.execute("SELECT key, value FROM meta")).get("staged_through", "0")
        log = Path(str(spool_path) + "-ticks")             # staged ticks: "<id> <n> <json>" lines
        for line in (log.read_text().splitlines(keepends=True) if log.exists() else []):
            tick, _, text = line.split(" ", 2)
            if line.endswith("\n") and int(tick) > int(through):
                out |= {(s["dev"], s["t"]) for s in json.loads(text)}
        return out
    finally:
        db.close()


def test_agent_sigkilled_and_restarted_on_its_spool_loses_nothing(tmp_path, collector):
    spool = tmp_path / "spool.db"
    first = agent(collector, spool)
    wait_rows(collector, 40)
    collector.kill()                               # so the spool holds unsent batches when the agent dies
    time.sleep(1.2)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    before = set(collector.samples("node-a")) | spooled_samples(spool)
    assert len(before) > len(collector.samples("node-a"))   # the spool really held unsent data
    collector.start()
    s = summary(agent(collector, spool, "--duration", "2", "--drain-s", "30"))
    rows = collector.samples("node-a")
    assert len(rows) == len(set(rows))
    assert before <= set(rows)                     # everything the first agent had taken arrived
    assert len(rows) == len(before) + s["samples_read"]
    assert s["pending_batches"] == 0
    assert collector.gaps("node-a") == [] or all(g[0] == "silence" for g in collector.gaps("node-a"))


def test_prometheus_endpoint_serves_dcgm_names(tmp_path, collector):
    import urllib.request
    port = free_port()   # below the ephemeral range: the polling below cannot connect to itself
    proc = agent(collector, tmp_path / "spool.db", "--duration", "3", "--prometheus-port", str(port), gpus=2)
    text = ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "DCGM_FI_DEV_POWER_USAGE" not in text:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
        except OSError:
            time.sleep(0.2)
    summary(proc)
    power = [ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_POWER_USAGE{")]
    assert len(power) == 2 and 'gpu="1"' in power[1] and 'Hostname="node-a"' in power[0]
    uuids = [re.search(r'UUID="([^"]*)"', ln).group(1) for ln in power]   # from nvmlDeviceGetUUID, once
    assert all(re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", u) for u in uuids)
    assert uuids[0] != uuids[1]
    assert 50 < float(power[0].rsplit(" ", 1)[1]) < 800            # watts, from the recorded H200 idle/load
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in text
    assert "trainsentry_agent_spool_pending_batches{" in text
    # the durable watermark: what the collector has stored but not yet synced, and its last watermark
    assert "trainsentry_agent_spool_stored_not_durable_batches{" in text
    assert "trainsentry_agent_collector_durable_seq{" in text and "trainsentry_agent_durable_polls_total{" in text


def test_a_recorded_trace_replays_complete(tmp_path, collector):
    from trainsentry.traces.io import read_trace
    run = tmp_path / "run"
    rec = subprocess.run([sys.executable, FAKE_NODE, "--gpus", "2", "record", str(run), "--source", "nvml",
                          "--source", f"net:{SYSFS}", "--duration", "2", "--label", "workload=idle",
                          "--label", "class=other"], capture_output=True, text=True, env=env(), timeout=60)
    assert rec.returncode == 0, rec.stderr[-2000:]
    table, _ = read_trace(run)
    s = summary(subprocess.Popen([sys.executable, "-m", "trainsentry.cli", "replay", str(run), "--collector",
                                  collector.url, "--node", "node-a", "--key-file", str(collector.key_file),
                                  "--speed", "4", "--spool", str(tmp_path / "replay.db")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env()))
    rows = collector.samples("node-a")
    assert s["samples_read"] == table.num_rows == len(rows) == len(set(rows))
    assert sorted({d for d, _ in rows}) == sorted(set(table.column("device").to_pylist()))
    # Played at 4x, not at recorded speed: the sampling loop (10 Hz) ended after about 0.5 s of slots,
    # where the 2 s trace at recorded speed needs 20 at least. Counted in slots, not in the run's
    # seconds, which also hold the drain's durable poll (2 s) and the machine's load.
    assert s["ticks"] + s["missed_ticks"] < 2.0 * 10
