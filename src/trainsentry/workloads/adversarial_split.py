"""Run splitting across processes: one DDP training run executed as several separate processes,
each resuming from the checkpoint the previous one wrote, with idle gaps between them.

On a node this looks like several short, unrelated jobs: each part starts a fresh interpreter, a
fresh process group and CUDA context, loads the weights from disk (a burst of host→device PCIe
traffic), trains, writes them back (device→host), and exits, freeing the GPU memory. The campaign
runner sees one run (one labeled trace covering every part and gap), which is what the alert rule
is scored on; the workload (on every rank of the worker's launch) starts the part processes itself:

    worker rank r ──> python -m trainsentry.workloads.adversarial_split SPEC_r.json   (part 0)
                      idle gap_s
                  ──> python -m trainsentry.workloads.adversarial_split SPEC_r.json   (part 1, resumes)

Each part process builds a new process group on its own TCP port (chosen by rank 0 of the worker
and shared over the worker's CPU group), uses the same GPU as its parent, and writes its ledger as
JSON beside the checkpoint; the parent merges the parts into the run's ledger. A part can also be
given ``ckpt_dir`` explicitly, so separate campaign runs can continue one training run
(docs/redteam-strategies.md).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .base import Context, Ledger

CHILD_TIMEOUT_S = 900


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _share(ctx: Context, value):
    """Rank 0's ``value`` on every rank (CPU group)."""
    if not dist.is_initialized() or ctx.world_size == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=ctx.cpu_group)
    return box[0]


def merge_part(led: Ledger, part: dict) -> None:
    """Add one part's ledger (as written by a part process) to the run's ledger."""
    offset = led.steps
    if led.first_step_t is None:
        led.first_step_t = part.get("first_step_t")
    led.steps += part["steps"]
    led.tokens += part["tokens"]
    led.step_times_s.extend(part["step_times_s"])
    led.loss_curve.extend((offset + s, l) for s, l in part["loss_curve"])
    if led.flops_per_step is None:
        led.flops_per_step = part["flops_per_step"]
    led.flops += part["flops"]
    for op, b in part["collective_bytes"].items():
        led.collective(op, b)
    for key in ("val_loss", "val_collective_bytes", "params_total", "params_local", "params_trainable_local",
                "analytic_flops_per_token", "model", "optimizer", "batch_per_rank", "seq_len", "compute_dtype"):
        if key in part["extra"]:
            led.extra[key] = part["extra"][key]


def run_split_processes(ctx: Context, cfg: dict) -> None:
    from .adversarial_core import strategy_extra

    parts, gap_s = int(cfg["parts"]), float(cfg["gap_s"])
    total_s = max(0.0, ctx.deadline - time.time() - (parts - 1) * gap_s)
    part_s = total_s / parts
    own_dir = not cfg.get("ckpt_dir")
    mine = cfg.get("ckpt_dir") or (tempfile.mkdtemp(prefix="trainsentry-split-") if ctx.rank == 0 else None)
    ckpt = Path(_share(ctx, mine))
    ckpt.mkdir(parents=True, exist_ok=True)
    strategy_extra(ctx, cfg, "split", parts=parts, gap_s=gap_s, part_s=round(part_s, 3), processes=True,
                   part_steps=cfg.get("part_steps"), ckpt_dir=str(ckpt))
    ctx.ledger.extra["collective_method"] = "ddp-comm-hook"
    walls = []
    for part in range(parts):
        port = _share(ctx, _free_port())
        spec = {"cfg": cfg, "part": part, "last": part == parts - 1, "ckpt_dir": str(ckpt), "rank": ctx.rank,
                "world_size": ctx.world_size, "port": port, "seed": ctx.seed, "toy": ctx.toy,
                "device": ctx.device.index if ctx.is_cuda else None, "seconds": part_s,
                "max_steps": cfg.get("part_steps")}
        spec_path = ckpt / f"spec-{part}-{ctx.rank}.json"
        spec_path.write_text(json.dumps(spec))
        t0 = time.time()
        proc = subprocess.run([sys.executable, "-m", "trainsentry.workloads.adversarial_split", str(spec_path)],
                              capture_output=True, text=True, timeout=CHILD_TIMEOUT_S + part_s, env=_child_env())
        walls.append(round(time.time() - t0, 3))
        if proc.returncode != 0:
            raise RuntimeError(f"split part {part} (rank {ctx.rank}) exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        merge_part(ctx.ledger, json.loads((ckpt / f"ledger-{part}-{ctx.rank}.json").read_text()))
        ctx.barrier()
        if part < parts - 1:
            time.sleep(gap_s)
    ctx.ledger.extra["part_process_wall_s"] = walls
    ctx.barrier()
    if own_dir and ctx.rank == 0:
        shutil.rmtree(ckpt, ignore_errors=True)


def _child_env() -> dict:
    """The worker's environment without torchrun's rendezvous variables: a part process makes its
    own process group (with them it would try to join the worker's store as a client and wait)."""
    drop = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "ROLE_RANK", "ROLE_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_NAME")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("TORCHELASTIC_")}


# ------------------------------------------------------------------------------------ part process
def _save(rep, ctx: Context, ckpt: Path, steps_done: int) -> None:
    if ctx.rank == 0:
        state = {"model": rep.model.state_dict(), "opts": [o.state_dict() for o in rep.opts],
                 "warmup": [o.warmup.state_dict() for o in rep.opts]}
        torch.save(state, ckpt / "state.pt.tmp")
        os.replace(ckpt / "state.pt.tmp", ckpt / "state.pt")
    torch.save({"gen": rep.batches.gen.get_state(), "steps": steps_done}, ckpt / f"data-{ctx.rank}.pt")


def _load(rep, ctx: Context, ckpt: Path) -> int:
    if not (ckpt / "state.pt").exists():
        return 0
    state = torch.load(ckpt / "state.pt", map_location=ctx.device, weights_only=False)
    rep.model.load_state_dict(state["model"])
    for o, s, w in zip(rep.opts, state["opts"], state["warmup"]):
        o.load_state_dict(s)
        o.warmup.load_state_dict(w)
    data = torch.load(ckpt / f"data-{ctx.rank}.pt", weights_only=False)
    rep.batches.gen.set_state(data["gen"])
    return int(data["steps"])


def part_main(spec_path: str) -> None:
    from .adversarial_core import run_steps
    from .adversarial_step import _ddp_step, ddp_replica

    spec = json.loads(Path(spec_path).read_text())
    rank, world = spec["rank"], spec["world_size"]
    if spec["device"] is not None:
        torch.cuda.set_device(spec["device"])
        device, backend = torch.device("cuda", spec["device"]), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    if world > 1:
        kw = {"device_id": device} if backend == "nccl" else {}
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{spec['port']}", rank=rank,
                                world_size=world, timeout=datetime.timedelta(seconds=CHILD_TIMEOUT_S), **kw)
        cpu_group = dist.new_group(backend="gloo") if backend == "nccl" else dist.group.WORLD
    else:
        cpu_group = None
    ctx = Context(rank=rank, world_size=world, device=device,
                  dtype=torch.bfloat16 if device.type == "cuda" else torch.float32,
                  deadline=time.time() + float(spec["seconds"]), max_steps=spec["max_steps"], toy=spec["toy"],
                  cpu_group=cpu_group, ledger=Ledger(), seed=spec["seed"])
    torch.manual_seed(ctx.seed + 1000 * rank)
    rep = ddp_replica(ctx, spec["cfg"])
    ckpt = Path(spec["ckpt_dir"])
    resumed = _load(rep, ctx, ckpt)
    ctx.ledger.extra["resumed_at_step"] = resumed
    run_steps(ctx, lambda ph: _ddp_step(rep, ph), rep.tokens_per_micro)
    _save(rep, ctx, ckpt, resumed + ctx.ledger.steps)
    if spec["last"]:
        rep.val_loss()
    (ckpt / f"ledger-{spec['part']}-{rank}.json").write_text(json.dumps(ctx.ledger.to_dict(), default=float))
    if dist.is_initialized():
        dist.barrier(group=cpu_group)
        dist.destroy_process_group()


if __name__ == "__main__":
    part_main(sys.argv[1])
