"""Scientific-computing look-alikes (class ``other``): a 3-D Jacobi solver of Laplace's equation with
its domain split over the GPUs and halo planes exchanged every sweep (family ``stencil``), and a
pseudo-spectral solver of 2-D turbulence (family ``spectral``, below ``run_spectral``).

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

import math
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


def spectral_grid(n: int, device, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Wavenumbers of an n × n periodic box of side 2π in rfft2 layout: kx [n, 1], ky [1, n//2 + 1],
    k² (with k² = 1 at the mean mode, which carries no flow) and the 2/3-rule dealiasing mask."""
    kx = torch.fft.fftfreq(n, 1.0 / n, device=device, dtype=dtype).view(n, 1)
    ky = torch.fft.rfftfreq(n, 1.0 / n, device=device, dtype=dtype).view(1, -1)
    k2 = kx * kx + ky * ky
    k2[0, 0] = 1.0
    keep = (kx.abs() < n / 3) & (ky.abs() < n / 3)
    return kx, ky, k2, keep


def spectral_band(k2: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """The initial spectrum's amplitude envelope: energy near wavenumber 4, dealiased, no mean mode (a
    periodic box has no mean vorticity)."""
    band = torch.exp(-((k2.sqrt() - 4.0) ** 2) / 8.0) * keep
    band[0, 0] = 0.0
    return band


def velocity(w: torch.Tensor, kx, ky, k2) -> tuple[torch.Tensor, torch.Tensor]:
    """The velocity (u, v) in physical space from the vorticity's spectrum, through the stream function
    ψ̂ = ω̂/k²: u = ∂ψ/∂y, v = −∂ψ/∂x."""
    n = w.shape[-2]
    psi = w / k2
    return torch.fft.irfft2(1j * ky * psi, s=(n, n)), torch.fft.irfft2(-1j * kx * psi, s=(n, n))


def vorticity_rhs(w: torch.Tensor, kx, ky, k2, keep, nu: float) -> torch.Tensor:
    """∂ω̂/∂t of the 2-D incompressible Navier–Stokes equations in vorticity form, pseudo-spectrally:
    velocity from the stream function (ψ̂ = ω̂/k²; u = ∂ψ/∂y, v = −∂ψ/∂x), the advection u·∇ω formed in
    physical space (four inverse FFTs, one forward) and dealiased, viscosity exactly in Fourier space."""
    n = w.shape[-2]
    u, v = velocity(w, kx, ky, k2)
    wx = torch.fft.irfft2(1j * kx * w, s=(n, n))
    wy = torch.fft.irfft2(1j * ky * w, s=(n, n))
    adv = torch.fft.rfft2(u * wx + v * wy) * keep
    return -adv - nu * k2 * w


def rk4_step(w: torch.Tensor, dt: float, kx, ky, k2, keep, nu: float) -> torch.Tensor:
    """One classical fourth-order Runge–Kutta step of ``vorticity_rhs``."""
    k1 = vorticity_rhs(w, kx, ky, k2, keep, nu)
    k2_ = vorticity_rhs(w + 0.5 * dt * k1, kx, ky, k2, keep, nu)
    k3 = vorticity_rhs(w + 0.5 * dt * k2_, kx, ky, k2, keep, nu)
    k4 = vorticity_rhs(w + dt * k3, kx, ky, k2, keep, nu)
    return w + (dt / 6.0) * (k1 + 2 * k2_ + 2 * k3 + k4)


def mean_square_vorticity(w: torch.Tensor) -> float:
    """⟨ω²⟩ over the box and the fields, from the spectrum by Parseval: Σ|ω̂|² / n⁴ (rfft2 layout: the
    modes 0 < ky < n/2 stand for two; the Nyquist column is masked out by the dealiasing anyway)."""
    n = w.shape[-2]
    e = w.abs().pow(2)
    return float((e[..., 0].sum() + 2 * e[..., 1:].sum()) / (w.shape[0] * n ** 4))


def velocity_max(w: torch.Tensor, kx, ky, k2) -> float:
    """The largest speed |u| anywhere in the fields."""
    u, v = velocity(w, kx, ky, k2)
    return float(torch.sqrt(u * u + v * v).max())


@torch.inference_mode()
def run_spectral(ctx: Context, cfg: dict) -> None:
    """``fields`` independent periodic flows on an n × n grid (decaying 2-D turbulence from a random
    band-limited vorticity of unit root-mean-square), one classical Runge–Kutta (RK4) step per step:
    four right-hand sides, twenty FFTs (RK4, as spectral turbulence codes use, is stable while the
    advection's imaginary eigenvalues times dt stay below 2.8; Heun's RK2, which the first recording
    used, is unstable for any of them, and its fp64 run turned to NaN after about 300 steps). Why it
    is in the benign corpus: spectral codes (turbulence, weather, plasma) keep a GPU busy with FFTs
    and elementwise work, memory-bound, regular and periodic, with no model and almost no tensor-core
    work; in double precision (``precision: fp64``, as direct simulations
    often run) they are the GPU's FP64 units at work. Each rank runs its own fields: no
    communication. The time step obeys the advective (CFL) limit: ``dt = cfl · (2π/n) / max|u|`` of
    the initial flow (``dt_s`` in the ground truth); the viscosity drains enstrophy every step, so the
    recorded mean-square vorticity (``enstrophy_curve``) falls: the solution is a real one. FLOPs are
    analytic: 2.5 · M · log₂M per real FFT of M = n² points, twenty per step, plus about 80 elementwise
    operations per point, per field."""
    n, fields = int(cfg["n"]), int(cfg["fields"])
    dtype = {"fp32": torch.float32, "fp64": torch.float64}[str(cfg.get("precision", "fp32"))]
    nu, cfl, log_every = float(cfg.get("nu", 1e-4)), float(cfg.get("cfl", 0.5)), int(cfg.get("log_every", 10))
    kx, ky, k2, keep = spectral_grid(n, ctx.device, dtype)
    gen = torch.Generator(device=ctx.device).manual_seed(ctx.seed * 1000 + ctx.rank)
    band = spectral_band(k2, keep)
    # White noise in physical space, filtered to the band: a real field's spectrum, Hermitian by
    # construction. The start recorded until 2026-12-02 (random coefficients in the band, made Hermitian
    # by rfft2(irfft2(·))) relied on what an inverse transform does with input that is not: cuFFT's fp32
    # path put 8.4 % of ⟨ω²⟩ far outside the band (results/device/spectral-fft-compare-s18-2026-12-02.txt;
    # the CPU and fp64 do not), and those fp32 runs lost 3-7 % of it by step 2
    # (results/device/spectral-check-s16-2026-12-02.txt); from this start, at most about 1e-5 a step, as
    # in fp64 (spectral-check-s18-2026-12-02.txt).
    w = torch.fft.rfft2(torch.randn((fields, n, n), device=ctx.device, dtype=dtype, generator=gen)) * band
    w = w / math.sqrt(mean_square_vorticity(w))                   # unit rms vorticity
    dt = cfl * (2 * math.pi / n) / velocity_max(w, kx, ky, k2)
    m = n * n
    flops = fields * (20 * 2.5 * m * math.log2(m) + 80 * m)
    ctx.ledger.extra.update(method="analytic", grid=n, fields=fields, precision=str(dtype).split(".")[-1], dt_s=dt)
    curve = [(0, mean_square_vorticity(w))]
    while ctx.keep_going():
        t0 = time.perf_counter()
        w = rk4_step(w, dt, kx, ky, k2, keep, nu)
        step = ctx.ledger.steps + 1
        if step % log_every == 0:
            curve.append((step, mean_square_vorticity(w)))
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, 0, flops=int(flops))
    ctx.ledger.extra["enstrophy_curve"] = curve


# Sizes per GPU: a field's spectrum is n · (n/2 + 1) complex values (n4096: 4096 · 2049 · 8 B = 67 MB in
# fp32), and a step keeps a few dozen such arrays alive per field (the RK4 stages and each right-hand
# side's transforms).
variants("other.spectral", "other", "spectral", run_spectral,
         base={"n": 4096, "fields": 8, "precision": "fp32", "nu": 1e-4, "cfl": 0.5, "log_every": 10},
         toy={"n": 32, "fields": 2, "log_every": 1, "nu": 1e-2}, gpus=0, grid={
             "n4096_f8": {},
             "n8192_f2": {"n": 8192, "fields": 2},
             "n2048_f16_fp64": {"n": 2048, "fields": 16, "precision": "fp64"},
         }, description="pseudo-spectral 2-D turbulence: FFTs and elementwise work, no model")
