"""A scientific-computing look-alike (class ``other``, family ``stencil``): a 3-D Jacobi solver of
Laplace's equation with its domain split over the GPUs and halo planes exchanged every sweep.

Why it is in the benign corpus: GPU clusters run simulations as well as models, and a domain-
decomposed solver has the communication signature the detectors read as data-parallel training —
every GPU sends its boundary plane to its neighbours and receives theirs at the same moment, the
same bytes each way, once per iteration, regularly, with the GPUs busy in between — but no model,
no gradients and no tensor-core work (the sweep is memory-bound fp32 arithmetic). A verifier that
calls it training would flag every CFD or climate code.

The domain is ``N · nz`` planes of ``n × n`` cells, split along z: rank r owns ``nz`` planes plus one
ghost plane on each side. A step is ``sweeps`` Jacobi sweeps, each followed by a halo exchange with
the neighbours (non-blocking send/recv, ``batch_isend_irecv``); every ``check_every`` steps the ranks
all-reduce the squared update norm, as a real solver checks convergence. The boundary is held at a
hot plate (z = 0) and 0 elsewhere, so the solution is a real one and the update norm falls (recorded
as the run's residual curve). Bytes are counted where this code hands a plane to torch.distributed.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .base import Context, variants
from .comm import group_label, group_ranks, peer_label

TOY = {"n": 12, "nz": 4, "sweeps": 1, "check_every": 2}


def jacobi_sweep(u: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` interior ← mean of the six neighbours of ``u`` (both [nz + 2, n, n]; planes 0 and -1
    and the x/y faces are boundary or ghost cells, copied through)."""
    c = out[1:-1, 1:-1, 1:-1]
    torch.add(u[:-2, 1:-1, 1:-1], u[2:, 1:-1, 1:-1], out=c)
    c.add_(u[1:-1, :-2, 1:-1]).add_(u[1:-1, 2:, 1:-1]).add_(u[1:-1, 1:-1, :-2]).add_(u[1:-1, 1:-1, 2:])
    c.mul_(1.0 / 6.0)


def exchange_halos(ctx: Context, u: torch.Tensor) -> None:
    """Send the first and last owned planes to the ranks below and above, receive their planes into
    the ghost planes."""
    rank, world = ctx.rank, ctx.world_size
    ops = []
    if rank > 0:
        ops += [dist.P2POp(dist.isend, u[1].contiguous(), rank - 1), dist.P2POp(dist.irecv, u[0], rank - 1)]
    if rank < world - 1:
        ops += [dist.P2POp(dist.isend, u[-2].contiguous(), rank + 1), dist.P2POp(dist.irecv, u[-1], rank + 1)]
    if not ops:
        return
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    plane = u[0].numel() * u.element_size()
    for peer in (rank - 1, rank + 1):
        if 0 <= peer < world:
            ctx.ledger.collective("send_halo", plane, peer_label("send", peer))


@torch.inference_mode()
def run_stencil(ctx: Context, cfg: dict) -> None:
    n, nz = int(cfg["n"]), int(cfg["nz"])
    sweeps, check_every = int(cfg.get("sweeps", 1)), int(cfg.get("check_every", 10))
    u = torch.zeros(nz + 2, n, n, device=ctx.device, dtype=torch.float32)
    if ctx.rank == 0:
        u[0] = 1.0                          # the hot plate at z = 0 (the lowest rank's outer ghost)
    out = u.clone()
    cells = nz * (n - 2) * (n - 2)
    ctx.ledger.extra.update(method="analytic", cells_per_rank=cells, halo_plane_bytes=n * n * 4,
                            stencil_flops_per_sweep_per_rank=6 * cells)
    label = group_label(group_ranks(None))
    residuals = []
    while ctx.keep_going_together():
        t0 = time.perf_counter()
        for _ in range(sweeps):
            jacobi_sweep(u, out)
            u, out = out, u
            if ctx.world_size > 1:
                exchange_halos(ctx, u)
        step = ctx.ledger.steps + 1          # this step, recorded below
        if step % check_every == 0:
            # squared update of the last sweep, summed over the domain: the solver's convergence check
            r = torch.sub(u[1:-1], out[1:-1]).pow_(2).sum().reshape(1)
            if ctx.world_size > 1:
                dist.all_reduce(r)
                ctx.ledger.collective("all_reduce", r.numel() * r.element_size(), label)
            residuals.append((step, float(r)))
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, 0, flops=6 * cells * sweeps)
    ctx.ledger.extra["residual_curve"] = residuals


# Sizes (fp32, per GPU): n² · nz · 4 B twice (two buffers). n1024_z512: 2 × 2.1 GB, planes of 4 MiB;
# n2048_z256: 2 × 4.3 GB, planes of 16 MiB; n512_z1024_s4: four sweeps between checks, planes of 1 MiB.
variants("other.stencil", "other", "stencil", run_stencil,
         base={"n": 1024, "nz": 512, "sweeps": 1, "check_every": 10}, toy=TOY, gpus=0, grid={
             "n1024_z512": {},
             "n2048_z256": {"n": 2048, "nz": 256},
             "n512_z1024_s4": {"n": 512, "nz": 1024, "sweeps": 4, "check_every": 5},
         }, description="3-D Jacobi solver, domain split over the GPUs, halo planes exchanged every sweep")
