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

# Measured on the H200s (2026-11-30, third session, campaign_log.jsonl elapsed_s): 10 runs of 38 s
# with 5 s gaps took 452 s, 6 took 276 s, the six red-team runs (390 s + 6 x 8 s gaps) 457 s, i.e.
# ~15-20 s per launch and ~1 s per run beyond seconds + gap. The planner keeps a margin over that.
STARTUP_S = 25.0            # torchrun + NCCL + corpus + first model build, paid once per launch
PER_RUN_OVERHEAD_S = 3.0    # model build, FLOP counting step, result gathering, teardown
COLLECTIVE_TIMEOUT_S = 120  # a rank stuck this long in a collective ends the launch
RUN_GRACE_S = 75.0          # a run still going this long after its deadline has hung: the launch is
                            # ended (Python stacks of every rank dumped to the log first), relaunched


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
        """Every run of the campaign in the order it is run: first repeat 0 of every entry, then
        repeat 1, …, and runs longer than the campaign's ``seconds`` last; a seeded shuffle within
        each group, so classes interleave over time. A campaign spread over many device calls thus
        covers every configuration before it repeats one."""
        from ..workloads.base import WORKLOADS
        from ..workloads import registry  # noqa: F401
        items = []
        for entry in self.runs:
            name = entry["workload"]
            if name not in WORKLOADS:
                raise ValueError(f"unknown workload {name!r}")
            if WORKLOADS[name].min_ranks > self.nproc:
                raise ValueError(f"workload {name!r} needs {WORKLOADS[name].min_ranks} ranks; "
                                 f"campaign {self.name!r} launches {self.nproc}")
            overrides = entry.get("overrides") or {}
            resolved = WORKLOADS[name].resolve(self.toy, overrides)   # as the launch will see it
            for key in ("lora_targets", "lora_layers"):   # refused here, before a device call, not at launch
                if key in overrides and not resolved.get("lora_rank"):
                    raise ValueError(f"workload {name!r}: {key} without lora_rank (no adapters to place)")
            if "lora_targets" in overrides:
                from ..workloads.lora import check_targets
                if not isinstance(overrides["lora_targets"], list):
                    raise ValueError(f"workload {name!r}: lora_targets must be a list, got {overrides['lora_targets']!r}")
                # one adapter set, one configuration: in the order of lora.TARGETS whatever the file's order
                overrides = {**overrides, "lora_targets": list(check_targets(overrides["lora_targets"]))}
            if "lora_layers" in overrides:
                from ..workloads.lora import check_layers
                from ..workloads.parallel import model_config
                check_layers(overrides["lora_layers"], model_config(resolved).n_layers)
            # runs of one workload differ by overrides and, when an entry sets its own, by length
            ident = {**overrides, **({"_seconds": entry["seconds"]} if "seconds" in entry else {})}
            tag = hashlib.sha1(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:6] if ident else "base"
            for rep in range(int(entry.get("repeats", 1))):
                items.append({"run_id": f"{name}-{tag}-r{rep}", "workload": name, "overrides": overrides,
                              "seconds": float(entry.get("seconds", self.seconds)), "gap_before_s": self.gap_s,
                              "seed": rep, **{k: entry[k] for k in ("max_steps", "min_steps") if k in entry}})
        random.Random(self.seed).shuffle(items)
        # stable: the shuffle survives inside each (long?, repeat) group
        items.sort(key=lambda r: (r["seconds"] > self.seconds, int(r["run_id"].rsplit("-r", 1)[1])))
        return items


def failed_before(out_root: Path) -> set[str]:
    """Runs an earlier call of this campaign failed (crashed or hung) and no later log line
    ``{"retry": [...], "note": why}`` cleared (lab.summary.campaign_failures reads the log)."""
    from .summary import campaign_failures
    return {f["run_id"] for f in campaign_failures(out_root) if not f["retry"]}


def plan_runs(campaign: Campaign, out_root: Path, budget_s: float | None,
              retry_failed: bool = False) -> list[dict]:
    """The runs not on disk yet, in campaign order, that fit the budget. A run that failed in an
    earlier call is not planned again (a hang would cost every call its grace time) unless
    ``retry_failed``; the campaign log keeps the failures for the dataset card."""
    skip = set() if retry_failed else failed_before(out_root)
    todo = [r for r in campaign.expand()
            if not (out_root / r["run_id"] / "manifest.json").exists() and r["run_id"] not in skip]
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


def cut_run(readings: list, truth: dict, campaign: Campaign, out_root: Path, command: str,
            machine: dict, overrides: dict | None = None) -> Path | None:
    """Write one finished run as a trace: the readings in [start − pre_s, end + post_s]. ``overrides``:
    the campaign's overrides of the registered config, as planned (the config is the resolved one);
    a red-team setting is named by them (redteam.rounds._setting), whatever the registry says later."""
    if not truth.get("ok"):
        return None
    lo, hi = truth["start"] - campaign.pre_s, truth["end"] + campaign.post_s
    rows = [r for r in readings if lo <= r.t <= hi]
    if not rows:
        return None
    manifest = {
        "run_id": truth["run_id"], "node": campaign.node, "campaign": campaign.name,
        "start": truth["start"], "end": truth["end"], "record_start": lo, "record_end": hi,
        "sample_hz": campaign.hz, "devices": sorted({r.device for r in rows}),
        "labels": {"workload": truth["workload"], "class": truth["class"], "family": truth["family"],
                   "config": truth["config"], "ranks": truth["ranks"],
                   **({"overrides": overrides} if overrides is not None else {})},
        "ground_truth": truth["ground_truth"], "machine": {**machine, "device": truth.get("device")},
        "command": command, "toy": campaign.toy,
    }
    return write_trace(out_root / truth["run_id"], readings_to_columns(campaign.node, rows), manifest)


def launch_command(nproc: int, plan_path: Path, work: Path) -> list[str]:
    """torchrun over the campaign's worker. --standalone: a rendezvous on a free local port, not the
    fixed 29500 that a second campaign (or anything else holding that port) would make the launch fail
    on (torch 2.13's torchrun moves to a free port by itself; older ones do not)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            "-m", "trainsentry.workloads.worker", str(plan_path), str(work)]


def run_campaign(path: str | Path, data_root: str | Path = "data", budget_s: float | None = None,
                 sources: list[str] | None = None, work_dir: str | Path | None = None,
                 recorder_factory=None, progress=print, retry_failed: bool = False) -> list[Path]:
    """Execute the runs of a campaign not yet on disk; returns the run directories written."""
    campaign = Campaign.load(path)
    out_root = Path(data_root) / campaign.name
    runs = plan_runs(campaign, out_root, budget_s, retry_failed)
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
        recorder_factory = lambda: Recorder(open_sources(sources or ["nvml", "net", "host"]), hz=campaign.hz,  # noqa: E731
                                            node=campaign.node)
    recorder = recorder_factory()
    recorder.start()
    cmd = launch_command(campaign.nproc, plan_path, work)
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "TS_COLLECTIVE_TIMEOUT_S": str(int(COLLECTIVE_TIMEOUT_S))}
    machine, command = _machine(), " ".join(cmd)
    written: dict[str, Path] = {}
    launches: list[int] = []
    t0 = time.time()
    deadline = None if budget_s is None else t0 + budget_s

    planned = {r["run_id"]: r for r in runs}

    def harvest(final: bool) -> None:
        """Write every finished run whose trailing idle has been recorded (all of them when final)."""
        for p in sorted(work.glob("*.truth.json")):
            run_id = p.name.removesuffix(".truth.json")
            if run_id in written:
                continue
            truth = json.loads(p.read_text())
            if not final and time.time() < truth.get("end", 0.0) + campaign.post_s + 1.5:
                continue
            path = cut_run(recorder.snapshot(), truth, campaign, out_root, command, machine,
                           planned.get(run_id, {}).get("overrides"))
            written[run_id] = path
            if path is not None:
                progress(f"  {run_id}: written ({truth['end'] - truth['start']:.0f} s)")
            else:
                progress(f"  {run_id}: FAILED {str(truth.get('errors'))[-300:]}")

    try:
        # A launch that crashes or hangs (a rank stuck in a collective is ended by the collective
        # timeout) is relaunched; the worker skips runs it already attempted.
        while _attempted(work) < len(runs) and len(launches) < 1 + len(runs):
            remaining = None if deadline is None else deadline - time.time()
            if remaining is not None and remaining < STARTUP_S:
                break
            proc = subprocess.Popen(cmd, env=env, start_new_session=True)
            while proc.poll() is None:
                harvest(final=False)
                if deadline is not None and time.time() > deadline:
                    kill_launch(proc)
                    progress("budget reached: worker stopped; finished runs are kept")
                    break
                hung = hung_run(work, {r["run_id"]: r for r in runs}, time.time())
                if hung is not None:
                    progress(f"  {hung}: still running {RUN_GRACE_S:.0f} s after its deadline; stacks "
                             "of every rank follow, then the launch is ended and started again")
                    end_hung_launch(proc, work, hung)
                    break
                time.sleep(1.0)
            launches.append(proc.wait())
            if launches[-1] != 0:
                progress(f"worker launch exited {launches[-1]}")
            if deadline is not None and time.time() > deadline:
                break
    finally:
        time.sleep(campaign.post_s)
        recorder.stop()
        harvest(final=True)
    paths = [p for p in written.values() if p is not None]
    failed = [rid for rid, p in written.items() if p is None]
    log = {"t": time.time(), "planned": [r["run_id"] for r in runs], "written": [p.name for p in paths],
           "failed": failed, "worker_rcs": launches, "elapsed_s": round(time.time() - t0, 1)}
    out_root.mkdir(parents=True, exist_ok=True)
    with (out_root / "campaign_log.jsonl").open("a") as f:
        f.write(json.dumps(log) + "\n")
    progress(f"wrote {len(paths)} runs, {len(failed)} failed: {failed}")
    return paths


def hung_run(work: Path, runs: dict[str, dict], now: float) -> str | None:
    """The run that started but has not ended although its deadline is RUN_GRACE_S past, if any."""
    open_runs: dict[str, float] = {}
    for e in _events(work):
        if e.get("phase") == "start":
            open_runs[e["run_id"]] = e["t"]
        else:
            open_runs.pop(e["run_id"], None)
    for run_id, t in open_runs.items():
        seconds = float(runs.get(run_id, {}).get("seconds", 40.0))
        if now > t + seconds + RUN_GRACE_S:
            return run_id
    return None


def end_hung_launch(proc: subprocess.Popen, work: Path, run_id: str) -> None:
    """Dump every rank's Python stacks (faulthandler on SIGUSR1 in the worker), end the launch, and
    record the run as failed so the relaunch skips it."""
    for pid in _descendants(proc.pid):       # the workers, not torchrun itself
        try:
            os.kill(pid, signal.SIGUSR1)
        except OSError:
            pass
    time.sleep(3.0)
    kill_launch(proc)
    truth = {"run_id": run_id, "ok": False, "errors": [f"hung: no end {RUN_GRACE_S:.0f} s after the deadline"]}
    (work / f"{run_id}.truth.json").write_text(json.dumps(truth))
    with (work / "events.jsonl").open("a") as f:
        f.write(json.dumps({"t": time.time(), "run_id": run_id, "phase": "end", "ok": False}) + "\n")


def kill_launch(proc: subprocess.Popen) -> None:
    """SIGKILL torchrun and every process under it. torchrun starts each worker in a session of its
    own, so killing torchrun's process group alone would leave the workers running, holding the GPUs."""
    victims = _descendants(proc.pid)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for pid in victims:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    proc.wait()


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, grandchildren, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))   # field 4: the parent
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _events(work: Path) -> list[dict]:
    """The worker's start/end events so far (workloads.worker writes them)."""
    events = work / "events.jsonl"
    if not events.exists():
        return []
    return [json.loads(line) for line in events.read_text().splitlines() if line.strip()]


def _attempted(work: Path) -> int:
    return len({e["run_id"] for e in _events(work)})
