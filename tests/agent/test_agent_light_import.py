"""The agent must run on a bare node: no torch, pyarrow, numpy, fastapi, uvicorn or orjson."""

import json
import subprocess
import sys

from agent_testkit import CollectorProcess, env

BLOCKED = ["torch", "pyarrow", "numpy", "pandas", "fastapi", "uvicorn", "starlette", "orjson", "sklearn",
           "trainsentry.collector.app", "trainsentry.traces.io"]

SCRIPT = """
import json, sys
for name in {blocked!r}:
    sys.modules[name] = None          # any import of these now raises ImportError
import trainsentry.agent.commands     # the agent's own command module and everything it pulls in
from trainsentry.agent.node import Agent, AgentConfig
from agent_testkit import CounterSource
agent = Agent(AgentConfig(collector_url=sys.argv[1], node="node-a", key=sys.argv[2], spool_path=sys.argv[3],
                          hz=20, batch_s=0.25, duration_s=1.0, drain_s=20), [CounterSource()])
print(json.dumps(agent.run().to_dict()))
leaked = [m for m in {blocked!r} if sys.modules.get(m) is not None]
assert not leaked, leaked
"""


def test_agent_runs_with_heavy_packages_blocked(tmp_path):
    c = CollectorProcess(tmp_path / "c.db")
    key = c.enroll("node-a")
    c.start()
    try:
        p = subprocess.run([sys.executable, "-c", SCRIPT.format(blocked=BLOCKED), c.url, key,
                            str(tmp_path / "spool.db")], capture_output=True, text=True, env=env(),
                           cwd=str(tmp_path), timeout=60)
        assert p.returncode == 0, p.stderr[-3000:]
        s = json.loads(p.stdout.strip().splitlines()[-1])
        # 20 Hz for 1 s, two devices a tick. On a loaded machine the sampler skips ticks it overran
        # (counted in missed_ticks) instead of reading late in a burst, so the count read is not fixed;
        # what is fixed: every tick is taken or counted missed, and everything read is stored.
        assert s["ticks"] + s["missed_ticks"] >= 20 and s["ticks"] >= 5
        assert s["samples_read"] == 2 * s["ticks"] and s["pending_batches"] == 0
        assert len(c.samples("node-a")) == s["samples_read"]
    finally:
        c.stop()


def test_the_cli_starts_with_heavy_packages_blocked(tmp_path):
    script = f"import sys\nfor n in {BLOCKED!r}: sys.modules[n] = None\nimport trainsentry.cli\n"
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env(), timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]


def test_live_sources_open_with_heavy_packages_blocked():
    """Opening nvml and net must not import the replay source (pyarrow): before, it was imported for
    every open_sources call, and the agent could not start on a node without pyarrow."""
    from agent_testkit import REPO
    root = REPO / "tests" / "fixtures" / "sysfs" / "node1"
    script = (f"import sys\nfor n in {BLOCKED!r}: sys.modules[n] = None\n"
              "from trainsentry.agent.sources import open_sources\n"
              f"[net] = open_sources([{'net:' + str(root)!r}])\n"
              "print(sorted(r.device for r in net.read()))\n")
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env(), timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split("\n")[0] == "['eth0', 'ifb0', 'mlx5_0:1', 'mlx5_1:1']"


def test_nvml_spec_sets_the_read_periods(monkeypatch):
    import pytest
    from trainsentry import telemetry
    from trainsentry.agent import sources
    seen = {}
    monkeypatch.setattr(telemetry, "open_sources", lambda specs, **opts: seen.update(specs=specs, opts=opts) or [])
    sources.open_sources(["nvml:nvlink_period_s=0.5,energy_period_s=5", "net"])
    assert seen == {"specs": ["nvml", "net"], "opts": {"nvml_nvlink_period_s": 0.5, "nvml_energy_period_s": 5.0}}
    for bad in ("nvml:nvlink=1", "nvml:nvlink_period_s=x", "nvml:energy_period_s=-1"):
        with pytest.raises(ValueError, match="KEY=SECONDS"):
            sources.open_sources([bad])
