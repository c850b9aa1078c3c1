"""GPU check of the training configs: run them under torchrun while sampling NVML utilization.

    python -m trainsentry.workloads.train_check OUT_DIR SUMMARY.json SECONDS TIMEOUT_S NAME[,NAME...]

Writes one summary row per workload (median step time, mean GPU utilization over the steady steps,
peak memory, counted TFLOP/s per GPU, counted/analytic FLOPs, first and last loss, validation loss,
collective MB per step) — the numbers quoted in docs/workloads-training.md. Needs NVIDIA GPUs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def _sampler(handles, samples: list, stop: threading.Event, period_s: float = 0.1) -> None:
    import pynvml

    while not stop.is_set():
        t = time.time()
        util = [pynvml.nvmlDeviceGetUtilizationRates(h).gpu for h in handles]
        mem = [pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**30 for h in handles]
        samples.append((t, util, mem))
        stop.wait(period_s)


def summarize(truth: dict, samples: list) -> dict:
    g = truth["ground_truth"]
    times = g["step_times_s"]
    steady = times[1:] or times                         # the first step also counts FLOPs and warms up
    start = truth["end"] - sum(steady)
    window = [s for s in samples if start <= s[0] <= truth["end"]]
    n_gpu = len(samples[0][1]) if samples else 0
    util = [round(sum(s[1][i] for s in window) / max(1, len(window)), 1) for i in range(n_gpu)]
    mem = [round(max((s[2][i] for s in window), default=0.0), 1) for i in range(n_gpu)]
    median = sorted(steady)[len(steady) // 2]
    ex = next(iter(g["extra"].values()))
    losses = [l for _, l in g["loss_curve"]]
    per_rank = [f for f in g["flops_per_step_per_rank"].values() if f]
    return {"name": truth["workload"], "steps": g["steps"], "step_s": round(median, 3),
            "util_pct": util, "mem_GiB": mem,
            "tflops_per_gpu": round(sum(per_rank) / len(per_rank) / median / 1e12, 1) if per_rank else None,
            "counted_over_analytic": round(g["flops"] / (ex["analytic_flops_per_token"] * g["tokens"]), 3),
            "loss_first": round(losses[0], 3) if losses else None,
            "loss_last3": round(sum(losses[-3:]) / len(losses[-3:]), 3) if losses else None,
            "val_loss": next((e["val_loss"] for e in g["extra"].values() if "val_loss" in e), None),
            "collective_MB_per_step_rank0": {op: round(b / g["steps"] / 1e6, 1)
                                             for op, b in g["collective_bytes_per_rank"]["0"].items()}}


def main(argv: list[str]) -> int:
    import pynvml

    out, summary_path, seconds, timeout_s, names = Path(argv[0]), Path(argv[1]), float(argv[2]), float(argv[3]), argv[4].split(",")
    out.mkdir(parents=True, exist_ok=True)
    plan = {"toy": False, "runs": [{"run_id": n.replace(".", "_"), "workload": n, "seconds": seconds} for n in names]}
    (out / "plan.json").write_text(json.dumps(plan))
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    samples: list = []
    stop = threading.Event()
    thread = threading.Thread(target=_sampler, args=(handles, samples, stop), daemon=True)
    thread.start()
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={len(handles)}",
           "-m", "trainsentry.workloads.worker", str(out / "plan.json"), str(out)]
    # Own session, so a hung collective can be killed with all of torchrun's children.
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rc = -9
        print("TIMEOUT", flush=True)
    stop.set()
    thread.join()
    rows = []
    for n in names:
        path = out / f"{n.replace('.', '_')}.truth.json"
        if not path.exists():
            rows.append({"name": n, "error": "not run (timeout or crash)"})
        else:
            truth = json.loads(path.read_text())
            rows.append(summarize(truth, samples) if truth["ok"] else {"name": n, "error": truth["errors"][0][-1500:]})
        print(json.dumps(rows[-1]), flush=True)
    summary_path.write_text(json.dumps(rows, indent=1))
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
