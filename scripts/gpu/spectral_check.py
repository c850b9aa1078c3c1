"""The spectral solver's first steps on the GPU, printed (2026-12-02): the first H200 recording (RK2)
lost 5-8 % of the mean-square vorticity in its first 10 fp32 steps, where the CPU loses 0.01 %.
This runs 20 steps of each configuration at full size in fp32 and fp64, one field and all fields,
and prints the curve, to tell a GPU-side numerical effect from the physics.

    python scripts/gpu/spectral_check.py > $OUT/spectral_check.txt
"""

from __future__ import annotations

import time

import torch

from trainsentry.workloads import other  # noqa: F401  (registers the workloads)
from trainsentry.workloads.base import WORKLOADS, Context

for name in ("other.spectral.n4096_f8", "other.spectral.n8192_f2", "other.spectral.n2048_f16_fp64"):
    spec = WORKLOADS[name]
    for precision in ("fp32", "fp64"):
        for fields in (1, spec.config["fields"]):
            ctx = Context(rank=0, world_size=1, device=torch.device("cuda"), dtype=torch.bfloat16,
                          deadline=time.time() + 60, max_steps=20, seed=7)
            spec.fn(ctx, {**spec.resolve(toy=False), "precision": precision, "fields": fields, "log_every": 2})
            curve = [round(z, 6) for _, z in ctx.ledger.extra["enstrophy_curve"]]
            print(name, precision, f"fields={fields}", f"dt={ctx.ledger.extra['dt_s']:.3g}", curve, flush=True)
