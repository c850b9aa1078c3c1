"""The spectral solver's first steps, printed: the mean-square vorticity after each logged step, to tell
a device-side numerical effect from the physics. On the H200 (2026-12-02,
results/device/spectral-check-s16-2026-12-02.txt) fp32 lost 3-7 % by step 2 where fp64 lost
about 1e-5 per step; on the CPU (``--device cpu``, committed beside it) fp32 did not.
spectral_fft_compare.py found the cause in the start, which the workload now builds Hermitian by
construction; spectral-check-s18-2026-12-02.txt is this script's GPU output since.

    python scripts/gpu/spectral_check.py > $OUT/spectral_check.txt                  # GPU, every configuration
    python scripts/gpu/spectral_check.py --device cpu --steps 2 --log-every 1 \
        --name other.spectral.n4096_f8 --one-field        # CPU: the first steps (its own random field)
"""

from __future__ import annotations

import argparse
import time

import torch

from trainsentry.workloads import other  # noqa: F401  (registers the workloads)
from trainsentry.workloads.base import WORKLOADS, Context

NAMES = ("other.spectral.n4096_f8", "other.spectral.n8192_f2", "other.spectral.n2048_f16_fp64")

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--device", default="cuda")
ap.add_argument("--steps", type=int, default=20)
ap.add_argument("--log-every", type=int, default=2)
ap.add_argument("--name", action="append", choices=NAMES, help="configurations (default: all three)")
ap.add_argument("--one-field", action="store_true", help="one field only (default: one field, then all)")
args = ap.parse_args()
print(f"# device {args.device} ({torch.cuda.get_device_name() if args.device == 'cuda' else 'cpu'}), "
      f"torch {torch.__version__}, {args.steps} steps, logged every {args.log_every}", flush=True)
for name in args.name or NAMES:
    spec = WORKLOADS[name]
    for precision in ("fp32", "fp64"):
        for fields in (1,) if args.one_field else (1, spec.config["fields"]):
            ctx = Context(rank=0, world_size=1, device=torch.device(args.device), dtype=torch.bfloat16,
                          deadline=float("inf"), max_steps=args.steps, seed=7)
            t0 = time.time()
            spec.fn(ctx, {**spec.resolve(toy=False), "precision": precision, "fields": fields,
                          "log_every": args.log_every})
            curve = [round(z, 6) for _, z in ctx.ledger.extra["enstrophy_curve"]]
            print(name, precision, f"fields={fields}", f"dt={ctx.ledger.extra['dt_s']:.3g}", curve,
                  f"({time.time() - t0:.0f} s)", flush=True)
