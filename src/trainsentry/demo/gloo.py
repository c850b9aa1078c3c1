"""The demo's live CPU run: 2-rank gloo DDP training over loopback, then inference.

``torch.distributed.run --nproc_per_node=2 -m trainsentry.workloads.worker PLAN OUT`` runs the
plan below; the worker writes when each run starts and ends (``events.jsonl``), which is the
truth the verdicts are compared with. The ranks talk over the loopback interface, so a live agent
with ``--source net+lo`` sees the gradient all-reduce as bytes on ``lo``.

The training config: the registry's DDP workload at its toy size, with one 16-token sequence per
step and d_model 256 × 4 layers, so the gradient exchange per second is what a data-parallel job
of that size moves (~150-200 MB/s on loopback on a 2-core machine). At the registry's default toy
size (d_model 64, 4 × 64 tokens per step) the exchange was 10-40 MB/s on this machine, below
comm-rules' 100 MB/s per-GPU volume threshold, and reads as not training: see docs/collector.md.
Inference: the pipeline-parallel toy (activations rank 0 → rank 1), batch 32.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TRAIN = {"workload": "train.ddp.w1024-l16", "overrides": {"batch": 1, "seq_len": 16, "d_model": 256, "n_layers": 4}}
INFER = {"workload": "infer.pp.xl3b_b64_mb4", "overrides": {"batch": 32}}


def plan(train_s: float, infer_s: float, gap_s: float = 10.0) -> dict:
    # The gap before each run is longer than a window (8 s) so the verdicts show idle between them.
    # Training runs for train_s seconds: its loop stops when every rank agrees (a MIN vote over gloo,
    # workloads.base.Context.keep_going_together), so no rank is left waiting in an all-reduce. It
    # used to stop after train_s / 0.1 steps, which on a fast, quiet machine ended in ~10 s and left
    # the live verdicts only two whole windows of training to be judged on.
    return {"toy": True, "runs": [
        {"run_id": "cpu-train", **TRAIN, "seconds": train_s, "gap_before_s": gap_s},
        {"run_id": "cpu-infer", **INFER, "seconds": infer_s, "gap_before_s": gap_s}]}


def start(work: Path, train_s: float, infer_s: float, env: dict) -> subprocess.Popen:
    work.mkdir(parents=True, exist_ok=True)
    (work / "plan.json").write_text(json.dumps(plan(train_s, infer_s)))
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                             "--standalone",
                             "-m", "trainsentry.workloads.worker", str(work / "plan.json"), str(work / "out")],
                            env={**env, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=(work / "worker.log").open("w"))


def truth(work: Path) -> list[tuple[float, float, str]]:
    """(start, end, class) of each run the worker finished, from its events and truth files."""
    events = work / "out" / "events.jsonl"
    if not events.exists():
        return []
    starts, spans = {}, []
    for line in events.read_text().splitlines():
        e = json.loads(line)
        if e["phase"] == "start":
            starts[e["run_id"]] = e["t"]
        elif e["run_id"] in starts:
            tf = work / "out" / f"{e['run_id']}.truth.json"
            cls = json.loads(tf.read_text())["class"] if tf.exists() else "other"
            spans.append((starts[e["run_id"]], e["t"], cls))
    return spans
