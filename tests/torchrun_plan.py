"""Run a worker plan under torchrun on the CPU (gloo) and return each run's truth file: the launch
the workload, red-team and n-GPU tests share."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_plan(out: Path, runs: list[dict], nproc: int, target: list[str], timeout: float,
             cwd: Path | None = None) -> dict[str, dict]:
    """``runs`` (toy size) launched as ``torchrun --nproc_per_node=nproc TARGET plan.json out/``;
    TARGET is a script path or ``["-m", module]``. Asserts the launch succeeded and every run wrote
    its truth; returns {run_id: truth}."""
    plan = out / "plan.json"
    plan.write_text(json.dumps({"toy": True, "runs": runs}))
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           *target, str(plan), str(out / "out")]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = {}
    for run in runs:
        path = out / "out" / f"{run['run_id']}.truth.json"
        assert path.exists(), f"no truth for {run['run_id']}: {proc.stderr[-3000:]}"
        result[run["run_id"]] = json.loads(path.read_text())
    return result
