"""Time two blocks of every other.quantize configuration on the GPU before a campaign records them:
seconds per block, FLOPs per block, peak memory, and the first pass's error against round-to-nearest.

    python3 scripts/gpu/quantize_smoke.py > $OUT/quantize_smoke.txt
"""

from __future__ import annotations

import math
import time

import torch

from trainsentry.workloads import other  # noqa: F401  (registers the workloads)
from trainsentry.workloads.base import WORKLOADS, Context

for name in sorted(n for n in WORKLOADS if n.startswith("other.quantize.")):
    spec = WORKLOADS[name]
    torch.cuda.reset_peak_memory_stats()
    ctx = Context(rank=0, world_size=1, device=torch.device("cuda", 0), dtype=torch.bfloat16,
                  deadline=math.inf, max_steps=2, seed=1)
    t0 = time.perf_counter()
    spec.fn(ctx, spec.resolve(toy=False))
    total = time.perf_counter() - t0
    p = ctx.ledger.extra["passes"][0]
    print(f"{name}: {total:.1f} s in all, blocks {ctx.ledger.step_times_s} s, "
          f"{ctx.ledger.flops_per_step:.3e} FLOPs/block, peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB, "
          f"bits {p['bits']}, error vs RTN {p['error_vs_rtn_mean']:.3f}, loss {p['loss_before']:.4f} -> {p['loss_after']:.4f}",
          flush=True)
    del ctx
    torch.cuda.empty_cache()
