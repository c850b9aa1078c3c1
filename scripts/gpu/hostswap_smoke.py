"""Run every infer.kvswap and other.stream configuration for a few seconds on the GPU before a campaign
records them: set-up time (pinning host memory, warm-up), turns or blocks, and the achieved PCIe
rates each way from the workloads' own byte counts.

    python3 scripts/gpu/hostswap_smoke.py 6 > $OUT/hostswap_smoke.txt
"""

from __future__ import annotations

import sys
import time

import torch

from trainsentry.workloads import infer, other  # noqa: F401  (registers the workloads)
from trainsentry.workloads.base import WORKLOADS, Context

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
for name in sorted(n for n in WORKLOADS if n.startswith(("infer.kvswap.", "other.stream."))):
    spec = WORKLOADS[name]
    torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    ctx = Context(rank=0, world_size=1, device=torch.device("cuda", 0), dtype=torch.bfloat16,
                  deadline=t0 + seconds, seed=1)
    try:
        spec.fn(ctx, spec.resolve(toy=False))
        ctx.sync()
    except Exception as e:  # report and go on to the next configuration
        print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
        continue
    total = time.time() - t0
    x, steps = ctx.ledger.extra, ctx.ledger.step_times_s
    busy = sum(steps)
    # (a rate only over steps; with none, the loads issued before the first turn have no time to go with)
    rates = (f"{x['bytes_to_device'] / 1e9 / busy:.2f} / {x['bytes_to_host'] / 1e9 / busy:.2f} GB/s" if steps
             else "no steps")
    print(f"{name}: {total:.1f} s in all, {len(steps)} steps in {busy:.1f} s (set-up {total - busy:.1f} s), "
          f"to device {x['bytes_to_device'] / 1e9:.2f} GB, to host {x['bytes_to_host'] / 1e9:.2f} GB = {rates}, "
          f"{ {k: x[k] for k in ('turns', 'conversations_ended', 'blocks', 'peaks_correct') if k in x} }, "
          f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB", flush=True)
    del ctx
    torch.cuda.empty_cache()
