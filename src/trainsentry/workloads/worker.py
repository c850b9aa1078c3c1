"""Run a plan of workloads back to back inside one torchrun launch (start-up paid once).

    torchrun --nproc_per_node=2 -m trainsentry.workloads.worker PLAN.json OUT_DIR

PLAN.json: {"toy": false, "runs": [{"run_id": "...", "workload": "train.ddp.w1024",
"overrides": {}, "seconds": 40, "gap_before_s": 5, "max_steps": null, "min_steps": 0}, ...]}.
For each run, every rank waits out the idle gap, then the workload runs until its deadline. Rank 0
appends a line to ``OUT_DIR/events.jsonl`` when a run starts and ends (so a recorder running beside
can cut its stream into runs even if a later run crashes) and writes ``OUT_DIR/<run_id>.truth.json``
with the ground truth merged over ranks. A run that fails is recorded as failed and the plan goes on.
"""

from __future__ import annotations

import datetime
import faulthandler
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

from . import registry  # noqa: F401  (registers every workload)
from .base import WORKLOADS, Context, Ledger


def _timeout_s() -> float:
    return float(os.environ.get("TS_COLLECTIVE_TIMEOUT_S", "600"))


def _setup() -> tuple[int, int, torch.device, object]:
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if world > 1 or "RANK" in os.environ:
        kw = {"device_id": device} if backend == "nccl" else {}
        # a rank stuck in a collective (its peer failed) ends the launch after this long; the
        # campaign runner then relaunches for the runs not yet attempted
        timeout_s = _timeout_s()
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kw)
        cpu_group = (dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))
                     if backend == "nccl" else dist.group.WORLD)
    else:
        cpu_group = None
    return rank, world, device, cpu_group


def merge(ledgers: list[dict | None], ranks: tuple[int, ...]) -> dict:
    """Ground truth over ranks: FLOPs and tokens summed over ranks, timing and loss from the lead rank."""
    present = [(r, l) for r, l in enumerate(ledgers) if l is not None and (not ranks or r in ranks)]
    if not present:
        return {}
    lead = present[0][1]
    return {
        "flops": sum(l["flops"] for _, l in present),
        "flops_per_step_per_rank": {str(r): l["flops_per_step"] for r, l in present},
        "tokens": sum(l["tokens"] for _, l in present),
        "steps": lead["steps"],
        "first_step_t": lead.get("first_step_t"),
        "step_times_s": lead["step_times_s"],
        "loss_curve": next((l["loss_curve"] for _, l in present if l["loss_curve"]), []),
        "collective_bytes_per_rank": {str(r): l["collective_bytes"] for r, l in present},
        "collective_by_group_per_rank": {str(r): l.get("collective_by_group", {}) for r, l in present},
        "extra": {str(r): l["extra"] for r, l in present if l["extra"]},
    }


def run_errors(rank_errors: list[str | None], ground_truth: dict, seconds: float) -> list[str]:
    """Why a run failed: its ranks' exceptions, or, when none raised, that no step completed (its
    set-up outlasted the run, so the trace would show a held GPU under a workload's label)."""
    errors = [e for e in rank_errors if e]
    if not errors and not ground_truth.get("steps"):
        errors = [f"no step completed in {seconds:.0f} s (set-up outlasted the run)"]
    return errors


def run_groups(ranks: tuple[int, ...], world: int, cpu_group, cache: dict) -> tuple[object, object]:
    """The run's groups of exactly its active ranks: a gloo one for control votes and, when the
    active ranks are fewer than the launch, one on the default backend (NCCL on GPUs) for the
    workload's own traffic; None where the whole launch takes part. Created once per rank set and
    kept for the launch.

    Every rank calls this, in plan order. The NCCL group must be created by every rank of the launch:
    with the default group bound to a device, torch builds a subgroup by ncclCommSplit, which all
    ranks of the parent take part in (non-members with "no colour"). The gloo group is created by its
    members only (use_local_synchronization): a non-member creating a gloo subgroup would still enter
    that NCCL split, which the members (building gloo) never join, and wait forever; this hung every
    single-GPU run of the first H200 campaign calls."""
    if cpu_group is None or not ranks or len(ranks) >= world:
        return (cpu_group if cpu_group is not None else None), None
    if ranks not in cache:
        timeout = datetime.timedelta(seconds=_timeout_s())
        run_group = dist.new_group(ranks=list(ranks), timeout=timeout)
        active = (dist.new_group(ranks=list(ranks), backend="gloo", timeout=timeout,
                                 use_local_synchronization=True) if dist.get_rank() in ranks else None)
        cache[ranks] = (active, run_group if dist.get_rank() in ranks else None)
    return cache[ranks]


def run_plan(plan: dict, out_dir: Path) -> None:
    rank, world, device, cpu_group = _setup()
    toy = bool(plan.get("toy", device.type == "cpu"))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out_dir.mkdir(parents=True, exist_ok=True)
    events = out_dir / "events.jsonl"

    def event(**kw):
        if rank == 0:
            with events.open("a") as f:
                f.write(json.dumps({"t": time.time(), **kw}) + "\n")
                f.flush()
                os.fsync(f.fileno())

    # a workload that sizes its host threads (ZeRO-Offload's update, RAG's search, the stream's detector)
    # sets torch's process-wide count; every run starts from the launch's own
    launch_threads = torch.get_num_threads()
    # every run is attempted once per work directory: a run that crashed or hung a launch is not retried
    done = {json.loads(l)["run_id"] for l in events.read_text().splitlines()
            if l.strip()} if events.exists() else set()
    groups: dict = {}
    for item in plan["runs"]:
        run_id = item["run_id"]
        if run_id in done or (out_dir / f"{run_id}.truth.json").exists():
            continue
        spec = WORKLOADS[item["workload"]]
        cfg = spec.resolve(toy, item.get("overrides"))
        ranks = (0,) if spec.gpus == 1 else tuple(range(min(world, spec.gpus))) if spec.gpus else ()
        if cpu_group is not None:
            dist.barrier(group=cpu_group)
        time.sleep(float(item.get("gap_before_s", 0)))
        if cpu_group is not None:
            dist.barrier(group=cpu_group)
        active_group, run_group = run_groups(ranks, world, cpu_group, groups)
        start = time.time()
        ctx = Context(rank=rank, world_size=world, device=device, dtype=dtype,
                      deadline=start + float(item.get("seconds", 40)), max_steps=item.get("max_steps"),
                      min_steps=int(item.get("min_steps") or 0),
                      toy=toy, ranks=ranks, cpu_group=cpu_group, active_group=active_group,
                      run_group=run_group, ledger=Ledger(),
                      seed=int(item.get("seed", 0)))
        event(run_id=run_id, phase="start", workload=spec.name)
        # A launch too small for the workload is refused before any rank starts it: every rank
        # decides the same way, so none is left waiting in a collective for a peer that never came.
        error = spec.rank_error(world)
        try:
            torch.set_num_threads(launch_threads)
            torch.manual_seed(ctx.seed + 1000 * rank)
            if ctx.active and error is None:
                spec.fn(ctx, cfg)
            ctx.sync()
        except Exception:  # one failed workload must not end the campaign
            error = traceback.format_exc()
        if error is not None:
            print(f"[rank {rank}] {run_id} failed:\n{error}", file=sys.stderr, flush=True)
        end = time.time()
        ledgers = [None] * world
        mine = ctx.ledger.to_dict() if ctx.active else None
        if cpu_group is not None:
            dist.all_gather_object(ledgers, {"ledger": mine, "error": error}, group=cpu_group)
        else:
            ledgers = [{"ledger": mine, "error": error}]
        ground_truth = merge([x["ledger"] for x in ledgers], ranks)
        errors = run_errors([x["error"] for x in ledgers if x], ground_truth, end - start)
        event(run_id=run_id, phase="end", ok=not errors)
        if rank == 0:
            truth = {"run_id": run_id, "workload": spec.name, "class": spec.cls, "family": spec.family,
                     "config": cfg, "ranks": list(ranks) or list(range(world)), "world_size": world,
                     "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                     "start": start, "end": end, "ok": not errors, "errors": errors[:2],
                     "ground_truth": ground_truth}
            (out_dir / f"{run_id}.truth.json").write_text(json.dumps(truth, indent=1, default=float))
        del ctx
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if dist.is_initialized():
        dist.barrier(group=cpu_group)
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    # the campaign runner sends SIGUSR1 to a launch it judges hung: every thread's stack to stderr
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    if len(argv) != 2:
        raise SystemExit("usage: python -m trainsentry.workloads.worker PLAN.json OUT_DIR")
    run_plan(json.loads(Path(argv[0]).read_text()), Path(argv[1]))


if __name__ == "__main__":
    main()
