"""Molecular dynamics driven by a learned interatomic potential (class ``inference``, family ``md``).

Why it is in the benign corpus: machine-learned potentials (the SchNet, NequIP and MACE line of work)
now drive a large share of the molecular dynamics run on GPUs, and every time step differentiates
the model's energy with respect to the atoms' positions to get the forces. So each step is a forward
and a backward pass through a frozen network, at high arithmetic load, for hours, with no weight
gradient, no optimizer and no update: the same physical look-alike of fine-tuning that input
attribution is (infer.py), but from a community that is neither training nor serving a language model.
A verifier that calls a backward pass training would flag every such simulation.

The potential is a continuous-filter convolution network in the manner of SchNet (Schütt et al.,
2017): each atom's ``neighbours`` nearest atoms (periodic box, minimum image) enter through a radial
basis of their distance under a smooth cosine cutoff at ``cutoff``; ``blocks`` interaction blocks turn
the basis into filters (a two-layer MLP per edge), sum the neighbours' features weighted by them and
update each atom's features; a readout MLP gives each atom's energy. The weights are random and frozen
(no trained potential can be shipped here), so the network is a small correction added to a
Lennard-Jones pair term, switched smoothly to zero between 0.8 and 1 × ``cutoff``, that holds the
liquid together, as Δ-learning potentials add theirs to a physical baseline. At this density (0.71
atoms per unit volume) about 24 atoms lie within the default cutoff of 2.0 (4/3·π·2.0³·0.71), so a list of 32 holds all
of them but in rare fluctuations, and the energy barely moves when the list is rebuilt.
A step is one velocity-Verlet step of ``systems`` independent boxes of ``atoms`` atoms each, with a
Langevin thermostat at temperature ``temperature`` (reduced units): half-kick, drift, forces
(−∂E/∂x by autograd), half-kick, friction and noise. The neighbour list is rebuilt every
``rebuild_every`` steps (all-pairs distances of every box at once, in chunks of atoms, and top-k; no
gradient). Every rank runs its own
boxes (an ensemble): no communication. Ground truth: ``weights_changed`` and ``weight_grads`` as
attribution's, the temperature and potential energy every ``log_every`` steps (``md_curve``), and
``tokens`` counts atom-steps (atoms advanced per step, summed). FLOPs per step from the FLOP counter
on one real step (the matrix products of the filter, update and readout MLPs, forward and backward).
"""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from . import flops as flopcount
from .base import Context, variants
from .infer import weight_versions, weights_written

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16}   # the network's; positions and integration stay fp32
LATTICE_SPACING = 1.12   # reduced units: near the Lennard-Jones minimum (2^(1/6) sigma), a dense liquid


class Potential(nn.Module):
    """Per-atom energy of a one-species system from its neighbour distances (see the module text)."""

    def __init__(self, features: int, rbf: int, blocks: int, cutoff: float, nn_scale: float = 0.1):
        super().__init__()
        self.cutoff, self.nn_scale, self.rbf = cutoff, nn_scale, rbf
        self.embed = nn.Parameter(torch.randn(features) * 0.5)
        self.gamma = (rbf / cutoff) ** 2
        self.filters = nn.ModuleList(nn.Sequential(nn.Linear(rbf, features), nn.SiLU(), nn.Linear(features, features))
                                     for _ in range(blocks))
        self.updates = nn.ModuleList(nn.Sequential(nn.Linear(features, features), nn.SiLU(),
                                                   nn.Linear(features, features)) for _ in range(blocks))
        self.readout = nn.Sequential(nn.Linear(features, max(features // 2, 1)), nn.SiLU(),
                                     nn.Linear(max(features // 2, 1), 1))

    def forward(self, d: torch.Tensor, nbr: torch.Tensor) -> torch.Tensor:
        """Energy of each system [S] from distances ``d`` [S, N, K] to neighbours ``nbr`` [S, N, K]."""
        s, n, k = d.shape
        dtype = self.embed.dtype
        smooth = 0.5 * (torch.cos(math.pi * d.clamp(max=self.cutoff) / self.cutoff) + 1.0)
        centres = torch.linspace(0.0, self.cutoff, self.rbf, device=d.device, dtype=d.dtype)   # in the distances' precision
        basis = torch.exp(-self.gamma * (d.unsqueeze(-1) - centres) ** 2) * smooth.unsqueeze(-1)
        basis = basis.to(dtype)
        flat = flat_neighbours(nbr)
        h = self.embed.expand(s, n, -1)
        for filt, upd in zip(self.filters, self.updates):
            w = filt(basis)                                        # [S, N, K, F]: one filter per edge
            hj = h.reshape(s * n, -1)[flat].view(s, n, k, -1)      # the neighbours' features
            h = h + upd((hj * w).sum(2))
        learned = self.readout(h).to(d.dtype).sum((1, 2))          # summed in the positions' precision
        inv6 = (1.0 / d.clamp(min=0.5)) ** 6                        # Lennard-Jones, switched off smoothly
        lj = (4.0 * (inv6 * inv6 - inv6) * switch(d, 0.8 * self.cutoff, self.cutoff)).sum((1, 2)) * 0.5
        return lj + self.nn_scale * learned


def switch(d: torch.Tensor, r_on: float, r_off: float) -> torch.Tensor:
    """1 below ``r_on``, 0 beyond ``r_off``, a half cosine between: the pair energy and its force stay
    continuous where a pair leaves the cutoff."""
    u = ((d - r_on) / (r_off - r_on)).clamp(0.0, 1.0)
    return 0.5 * (torch.cos(math.pi * u) + 1.0)


def lattice(systems: int, atoms: int, device, dtype=torch.float32) -> tuple[torch.Tensor, float]:
    """``atoms`` sites of a simple cubic lattice (the first of side³), the same in every system, and
    the periodic box edge."""
    side = math.ceil(atoms ** (1 / 3))
    g = torch.arange(side, device=device, dtype=dtype)
    sites = torch.stack(torch.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)[:atoms] * LATTICE_SPACING
    return sites.expand(systems, -1, -1).clone(), side * LATTICE_SPACING


def minimum_image(dr: torch.Tensor, box: float) -> torch.Tensor:
    return dr - box * torch.round(dr / box)


@torch.no_grad()
def neighbour_list(x: torch.Tensor, box: float, k: int, pairs_per_chunk: int = 1 << 26) -> torch.Tensor:
    """Indices [S, N, k] of each atom's k nearest other atoms (periodic minimum image), every box at
    once, in chunks of atoms holding at most ``pairs_per_chunk`` distances (about 1 GB of
    displacements) so the all-pairs distances of a large box never sit in memory at once."""
    s, n, _ = x.shape
    if k >= n:
        raise ValueError(f"neighbours ({k}) must be fewer than atoms ({n})")
    chunk = max(1, pairs_per_chunk // (s * n))
    out = torch.empty(s, n, k, dtype=torch.long, device=x.device)
    for i0 in range(0, n, chunk):
        rows = x[:, i0:i0 + chunk]                                                             # [S, c, 3]
        d2 = minimum_image(x.unsqueeze(1) - rows.unsqueeze(2), box).pow(2).sum(-1)             # [S, c, N]
        idx = torch.arange(rows.shape[1], device=x.device)
        d2[:, idx, idx + i0] = float("inf")                                                    # not itself
        out[:, i0:i0 + chunk] = d2.topk(k, largest=False).indices
    return out


def flat_neighbours(nbr: torch.Tensor) -> torch.Tensor:
    """The neighbour indices [S, N, K] as rows of the systems' atoms stacked into one [S·N, ...] array."""
    s, n, _ = nbr.shape
    return (nbr + torch.arange(s, device=nbr.device).view(s, 1, 1) * n).reshape(-1)


def distances(x: torch.Tensor, nbr: torch.Tensor, box: float) -> torch.Tensor:
    """Minimum-image distances [S, N, K] from each atom to its listed neighbours (differentiable in x)."""
    s, n, k = nbr.shape
    xj = x.reshape(s * n, 3)[flat_neighbours(nbr)].view(s, n, k, 3)
    return minimum_image(xj - x.unsqueeze(2), box).pow(2).sum(-1).clamp(min=1e-12).sqrt()


def energy_and_forces(model: Potential, x: torch.Tensor, nbr: torch.Tensor, box: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each system's energy [S] and the forces −∂E/∂x [S, N, 3]: a backward pass to the positions only."""
    x = x.detach().requires_grad_(True)
    e = model(distances(x, nbr, box), nbr)
    (grad,) = torch.autograd.grad(e.sum(), x)
    return e.detach(), -grad


def run_md(ctx: Context, cfg: dict) -> None:
    systems, atoms, k = int(cfg["systems"]), int(cfg["atoms"]), int(cfg["neighbours"])
    precision = str(cfg.get("precision", "fp32"))
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {sorted(PRECISIONS)}")
    dt, temp, friction = float(cfg.get("dt", 0.002)), float(cfg.get("temperature", 1.0)), float(cfg.get("friction", 1.0))
    rebuild_every, log_every = int(cfg.get("rebuild_every", 20)), int(cfg.get("log_every", 10))
    torch.manual_seed(ctx.seed)      # the same potential on every rank; each rank's own boxes below
    model = Potential(int(cfg["features"]), int(cfg["rbf"]), int(cfg["blocks"]), float(cfg.get("cutoff", 2.0)))
    model = model.to(device=ctx.device, dtype=PRECISIONS[precision]).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    versions = weight_versions(model)
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed * 1000 + ctx.rank)
    x, box = lattice(systems, atoms, ctx.device)
    x = (x + 0.05 * torch.randn(x.shape, device=ctx.device, generator=gen)) % box
    v = math.sqrt(temp) * torch.randn(x.shape, device=ctx.device, generator=gen)
    nbr = neighbour_list(x, box, k)
    c1 = math.exp(-friction * dt)
    c2 = math.sqrt((1 - c1 * c1) * temp)
    ctx.ledger.flops_per_step = flopcount.measure(lambda: energy_and_forces(model, x, nbr, box))
    ctx.ledger.extra.update(method="flop_counter", params=sum(p.numel() for p in model.parameters()),
                            weights_dtype=str(next(model.parameters()).dtype), atoms_per_step=systems * atoms)
    energy, force = energy_and_forces(model, x, nbr, box)
    curve = []
    while ctx.keep_going():
        t0 = time.perf_counter()
        step = ctx.ledger.steps + 1
        v += 0.5 * dt * force
        x = (x + dt * v) % box
        if step % rebuild_every == 0:
            nbr = neighbour_list(x, box, k)
        energy, force = energy_and_forces(model, x, nbr, box)
        v += 0.5 * dt * force
        v = c1 * v + c2 * torch.randn(v.shape, device=ctx.device, generator=gen)   # Langevin thermostat
        if step % log_every == 0:
            curve.append((step, float(v.pow(2).mean()), float(energy.mean()) / atoms))   # kT = <v²> per axis, unit mass
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, systems * atoms)
    ctx.ledger.extra.update(md_curve=curve, weights_changed=weights_written(model, versions),
                            weight_grads=sum(p.grad is not None for p in model.parameters()),
                            positions_finite=bool(torch.isfinite(x).all()))


# Sizes per GPU: edges = systems · atoms · neighbours (4 · 32,768 · 32 = 4.2 M for the 128-feature
# configurations); one edge × feature tensor is 4.2 M · 128 · 4 B = 2.1 GB in fp32, and each block keeps
# a few of them for the backward (tests/workloads/test_infer.py bounds six per block under 110 GB). fp32 is what MD codes run by default (torch's fp32 products do not use TF32 unless
# asked); bf16 is a deployment that trades accuracy for speed; small boxes many at a time are a
# screening campaign.
variants("infer.md", "inference", "md", run_md,
         base={"systems": 4, "atoms": 32768, "neighbours": 32, "features": 128, "rbf": 32, "blocks": 3,
               "cutoff": 2.0, "precision": "fp32", "rebuild_every": 20, "log_every": 10},
         toy={"systems": 2, "atoms": 64, "neighbours": 8, "features": 16, "rbf": 8, "blocks": 1,
              "rebuild_every": 2, "log_every": 1},
         gpus=0, description="molecular dynamics with a learned potential: forces by a backward pass "
                             "through a frozen network every step, no update", grid={
             "schnet_fp32": {},
             "schnet_bf16_f256": {"precision": "bf16", "features": 256},
             "screen_64x2048": {"systems": 64, "atoms": 2048},
         })
