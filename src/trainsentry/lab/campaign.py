"""Run a campaign of workloads under the recording agent and write each run as a labeled trace.

A campaign (YAML) lists workloads with repeats and overrides. The runner expands it into runs,
drops those already on disk (so an interrupted campaign resumes), keeps as many as fit the time
budget, then starts ONE recorder (NVML + network at ``hz``) and ONE torchrun launch of
:mod:`trainsentry.workloads.worker` that executes the runs back to back with idle gaps. Afterwards
the recording is cut at the start/end times the worker logged, and each run is written with
:func:`trainsentry.traces.io.write_trace`: samples plus a manifest carrying the labels and the
ground truth (never shown to detectors).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..traces.io import readings_to_columns, write_trace

STARTUP_S = 25.0          # torchrun + NCCL + first model build, paid once per launch
PER_RUN_OVERHEAD_S = 4.0  # model build, FLOP counting step, teardown


@dataclass
class Campaign:
    name: str
    node: str = "node0"
    hz: float = 10.0
    seconds: float = 40.0
    gap_s: float = 6.0
    pre_s: float = 3.0
    post_s: float = 2.0
    nproc: int = 2
    toy: bool = False
    seed: int = 0
    runs: list[dict] = field(default_factory=list)

    @classmethod
    def load(cls, path: str | Path) -> "Campaign":
        raw = yaml.safe_load(Path(path).read_text())
        if not isinstance(raw, dict) or "name" not in raw or "runs" not in raw:
            raise ValueError(f"{path}: a campaign needs 'name' and 'runs'")
        known = set(cls.__dataclass_fields__)
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"{path}: unknown campaign keys {sorted(unknown)}")
        return cls(**raw)

    def expand(self) -> list[dict]:
        """Every run of the campaign, in a seeded shuffled order (classes interleave over time)."""
        from ..workloads.base import WORKLOADS
        from ..workloads import registry  # noqa: F401
        items = []
        for entry in self.runs:
            name = entry["workload"]
            if name not in WORKLOADS:
                raise ValueError(f"unknown workload {name!r}")
            overrides = entry.get("overrides") or {}
            tag = hashlib.sha1(json.dumps(overrides, sort_keys=True).encode()).hexdigest()[:6] if overrides else "base"
            for rep in range(int(entry.get("repeats", 1))):
                items.append({"run_id": f"{name}-{tag}-r{rep}", "workload": name, "overrides": overrides,
                              "seconds": float(entry.get("seconds", self.seconds)), "gap_before_s": self.gap_s,
                              "seed": rep, **({"max_steps": entry["max_steps"]} if "max_steps" in entry else {})})
        random.Random(self.seed).shuffle(items)
        return items


def plan_runs(campaign: Campaign, out_root: Path, budget_s: float | None) -> list[dict]:
    todo = [r for r in campaign.expand() if not (out_root / r["run_id"] / "manifest.json").exists()]
    if budget_s is None:
        return todo
    chosen, used = [], STARTUP_S
    for r in todo:
        cost = r["seconds"] + r["gap_before_s"] + PER_RUN_OVERHEAD_S
        if used + cost > budget_s:
            break
        chosen.append(r)
        used += cost
    return chosen


def _machine() -> dict:
    info = {"host": platform.node(), "python": platform.python_version(), "platform": platform.platform()}
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0:
            info["gpus"] = [l.strip() for l in out.stdout.strip().splitlines()]
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def cut_runs(readings: list, events: list[dict], truths: dict[str, dict], campaign: Campaign,
             out_root: Path, command: str, machine: dict) -> list[Path]:
    """Write one trace per finished run: readings in [start − pre_s, end + post_s]."""
    written = []
    for run_id, truth in truths.items():
        if not truth.get("ok"):
            continue
        lo, hi = truth["start"] - campaign.pre_s, truth["end"] + campaign.post_s
        rows = [r for r in readings if lo <= r.t <= hi]
        if not rows:
            continue
        gt = truth["ground_truth"]
        manifest = {
            "run_id": run_id, "node": campaign.node, "campaign": campaign.name,
            "start": truth["start"], "end": truth["end"], "record_start": lo, "record_end": hi,
            "sample_hz": campaign.hz, "devices": sorted({r.device for r in rows}),
            "labels": {"workload": truth["workload"], "class": truth["class"], "family": truth["family"],
                       "config": truth["config"], "ranks": truth["ranks"]},
            "ground_truth": gt, "machine": {**machine, "device": truth.get("device")},
            "command": command, "toy": campaign.toy,
        }
        written.append(write_trace(out_root / run_id, readings_to_columns(campaign.node, rows), manifest))
    return written


def run_campaign(path: str | Path, data_root: str | Path = "data", budget_s: float | None = None,
                 sources: list[str] | None = None, work_dir: str | Path | None = None,
                 recorder_factory=None, progress=print) -> list[Path]:
    """Execute the runs of a campaign not yet on disk; returns the run directories written."""
    campaign = Campaign.load(path)
    out_root = Path(data_root) / campaign.name
    runs = plan_runs(campaign, out_root, budget_s)
    if not runs:
        progress(f"campaign {campaign.name}: nothing left to run")
        return []
    work = Path(work_dir or out_root.parent / f".work-{campaign.name}")
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    plan_path = work / "plan.json"
    plan_path.write_text(json.dumps({"toy": campaign.toy, "runs": runs}, indent=1))
    progress(f"campaign {campaign.name}: {len(runs)} runs planned -> {out_root}")

    if recorder_factory is None:
        from ..agent.record import Recorder
        from ..agent.sources import open_sources
        recorder_factory = lambda: Recorder(open_sources(sources or ["nvml", "net"]), hz=campaign.hz,  # noqa: E731
                                            node=campaign.node)
    recorder = recorder_factory()
    recorder.start()
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={campaign.nproc}",
           "-m", "trainsentry.workloads.worker", str(plan_path), str(work)]
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    t0 = time.time()
    # a hung collective must not hang the campaign: bound the launch by the plan's own length
    limit_s = 2 * STARTUP_S + 1.5 * sum(r["seconds"] + r["gap_before_s"] + PER_RUN_OVERHEAD_S for r in runs) + 60
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        returncode = proc.wait(timeout=limit_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        returncode = proc.wait()
        progress(f"worker killed after {limit_s:.0f} s (hung); finished runs are kept")
    finally:
        time.sleep(campaign.post_s)
        readings = recorder.stop()
    progress(f"worker exited {returncode} after {time.time() - t0:.0f} s; {len(readings)} readings")
    events_path = work / "events.jsonl"
    events = [json.loads(l) for l in events_path.read_text().splitlines()] if events_path.exists() else []
    truths = {p.name.removesuffix(".truth.json"): json.loads(p.read_text()) for p in work.glob("*.truth.json")}
    written = cut_runs(readings, events, truths, campaign, out_root, " ".join(cmd), _machine())
    failed = [rid for rid, t in truths.items() if not t.get("ok")]
    log = {"t": time.time(), "planned": [r["run_id"] for r in runs], "written": [p.name for p in written],
           "failed": {rid: truths[rid]["errors"] for rid in failed}, "worker_rc": returncode}
    out_root.mkdir(parents=True, exist_ok=True)
    with (out_root / "campaign_log.jsonl").open("a") as f:
        f.write(json.dumps(log) + "\n")
    progress(f"wrote {len(written)} runs, {len(failed)} failed: {failed}")
    return written
