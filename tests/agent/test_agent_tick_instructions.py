"""benchmarks/agent_tick_instructions.py: its workload (what valgrind counts) runs every part."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "agent_tick_instructions.py"


@pytest.mark.parametrize("part", ["all", "read", "nvml", "fake-calls"])
def test_the_workload_runs_each_part(part):
    # in a subprocess: the workload puts the tree's src/ and tests/ first on sys.path and freezes the GC
    p = subprocess.run([sys.executable, str(SCRIPT), "--workload", "--part", part, "--ticks", "12"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind not installed")
def test_instructions_per_tick_are_counted():
    p = subprocess.run([sys.executable, str(SCRIPT), "--part", "fake-calls", "--short", "2", "--long", "12"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["unit"] == "per GPU call set" and 5_000 < out["instructions"] < 2_000_000
