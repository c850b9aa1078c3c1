"""The scientific look-alikes are real computations, checked against physics on CPU: molecular
dynamics with a learned potential (infer_md.py: forces are the exact negative gradient of the energy,
the neighbour list is the true nearest-neighbour set, the thermostat holds the temperature, the frozen
weights are never written) and the pseudo-spectral turbulence solver (other_hpc.py: a steady
Taylor–Green vortex decays at exactly the viscous rate, the advection term has its analytic value and
sign, turbulence at the configurations' time step loses enstrophy and stays finite). Both also run in
the every-workload toy launch of test_infer.py."""

from __future__ import annotations

import math

import pytest
import torch

from trainsentry.workloads import infer, other  # noqa: F401  (registers the workloads)
from trainsentry.workloads.base import WORKLOADS, Context
from trainsentry.workloads.infer_md import (Potential, distances, energy_and_forces, lattice, minimum_image,
                                            neighbour_list)
from trainsentry.workloads.other_hpc import rk4_step, spectral_grid, vorticity_rhs


def _ctx(steps: int) -> Context:
    # No deadline: the step count alone ends the run, so the exact counts below hold on a slow machine
    # (a 120 s deadline cut the MD run at 276 of 300 steps on a loaded 2-core one).
    return Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32,
                   deadline=math.inf, max_steps=steps, toy=True, seed=3)


def _liquid(atoms: int = 64, k: int = 12):
    torch.manual_seed(0)
    x, box = lattice(2, atoms, "cpu", torch.float64)
    x = (x + 0.1 * torch.randn(x.shape, dtype=torch.float64)) % box
    model = Potential(features=8, rbf=6, blocks=2, cutoff=3.0, nn_scale=1.0).double()
    return model, x, box, neighbour_list(x, box, k)


def test_md_forces_are_minus_the_energy_gradient():
    """Central differences of the energy, in float64, match the autograd forces on every coordinate
    probed: the backward pass computes the physics, not a number that merely looks busy."""
    model, x, box, nbr = _liquid()
    _, force = energy_and_forces(model, x, nbr, box)
    h = 1e-6
    for s, i, a in [(0, 0, 0), (0, 17, 1), (1, 40, 2), (1, 63, 0)]:
        up, down = x.clone(), x.clone()
        up[s, i, a] += h
        down[s, i, a] -= h
        e_up, _ = energy_and_forces(model, up, nbr, box)
        e_down, _ = energy_and_forces(model, down, nbr, box)
        fd = -(e_up[s] - e_down[s]) / (2 * h)
        assert float(force[s, i, a]) == pytest.approx(float(fd), rel=1e-5, abs=1e-7)
    assert float(force[0].abs().sum()) > 0   # the forces are not trivially zero


def test_neighbour_list_is_the_true_nearest_set_across_the_periodic_boundary():
    model, x, box, nbr = _liquid(atoms=64, k=6)
    d_all = minimum_image(x[:, None, :, :] - x[:, :, None, :], box).pow(2).sum(-1).sqrt()
    d_all.diagonal(dim1=1, dim2=2).fill_(float("inf"))
    expect = d_all.topk(6, largest=False).values
    got = distances(x, nbr, box)
    assert torch.allclose(got.sort(-1).values, expect, atol=1e-9)
    assert not (nbr == torch.arange(64).view(1, 64, 1)).any()   # never itself
    # chunks of 7 atoms (of both boxes at once) give the same list
    assert torch.equal(neighbour_list(x, box, 6, pairs_per_chunk=7 * 2 * 64).sort(-1).values, nbr.sort(-1).values)
    with pytest.raises(ValueError, match="fewer than atoms"):
        neighbour_list(x, box, 64)


def test_md_run_holds_its_temperature_and_never_writes_the_weights():
    """The full-size network (128 features, 32 radial functions, 3 blocks) on one small box: the
    dynamics stays finite and near its thermostat's temperature through neighbour-list rebuilds."""
    spec = WORKLOADS["infer.md.schnet_fp32"]
    cfg = {**spec.resolve(toy=False), "systems": 1, "atoms": 216, "log_every": 10}
    ctx = _ctx(300)
    spec.fn(ctx, cfg)
    x = ctx.ledger.extra
    assert x["weights_changed"] is False and x["weight_grads"] == 0 and x["positions_finite"]
    temps = [t for _, t, _ in x["md_curve"]]
    late = sum(temps[10:]) / len(temps[10:])
    assert 0.8 < late < 1.2, temps     # the Langevin thermostat at temperature 1 (reduced units)
    assert ctx.ledger.tokens == 300 * 216 and ctx.ledger.flops_per_step > 0
    with pytest.raises(ValueError, match="unknown precision"):
        spec.fn(_ctx(1), {**cfg, "precision": "fp8"})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_spectral_taylor_green_vortex_decays_at_the_viscous_rate(dtype):
    """ω = 2 cos x cos y is a steady solution of the inviscid equations (its advection vanishes), so
    with viscosity ν it decays as exp(−2νt) exactly: the solver's nonlinear term and its viscous term
    are both checked against the analytic answer."""
    n, nu, dt, steps = 32, 0.05, 0.01, 100
    kx, ky, k2, keep = spectral_grid(n, "cpu", dtype)
    g = torch.arange(n, dtype=dtype) * (2 * math.pi / n)
    w0 = 2 * torch.cos(g).view(n, 1) * torch.cos(g).view(1, n)
    w = torch.fft.rfft2(w0).unsqueeze(0)
    for _ in range(steps):
        w = rk4_step(w, dt, kx, ky, k2, keep, nu)
    got = torch.fft.irfft2(w, s=(n, n))[0]
    expect = w0 * math.exp(-2 * nu * dt * steps)
    assert torch.allclose(got, expect, atol=1e-5 if dtype == torch.float32 else 1e-12)


def test_spectral_advection_has_its_analytic_value_and_sign():
    """ψ = sin x + sin 2y: ω = −∇²ψ = sin x + 4 sin 2y, u = ∂ψ/∂y = 2 cos 2y, v = −∂ψ/∂x = −cos x, so
    u·∇ω = −6 cos x cos 2y and, without viscosity, ∂ω/∂t = +6 cos x cos 2y (a single Fourier mode, the
    Taylor–Green test above, has no advection at all; this one would catch a sign or a swapped axis)."""
    n = 32
    kx, ky, k2, keep = spectral_grid(n, "cpu", torch.float64)
    g = torch.arange(n, dtype=torch.float64) * (2 * math.pi / n)
    x, y = g.view(n, 1), g.view(1, n)
    w = torch.fft.rfft2(torch.sin(x) + 4 * torch.sin(2 * y)).unsqueeze(0)
    got = torch.fft.irfft2(vorticity_rhs(w, kx, ky, k2, keep, 0.0), s=(n, n))[0]
    assert torch.allclose(got, 6 * torch.cos(x) * torch.cos(2 * y), atol=1e-10)


@pytest.mark.parametrize("name", ["other.spectral.n4096_f8", "other.spectral.n2048_f16_fp64"])
def test_spectral_turbulence_at_its_time_step_stays_finite_and_loses_enstrophy(name):
    """The full configuration's initial spectrum and CFL time step on a 256² grid (the CPU's share),
    for 400 steps: a time step past the advective limit blows up within tens of steps (a review found
    the first version's fixed step did, at every full size), and at this step Heun's RK2 is unstable
    too (on the H200 its fp64 run turned to NaN after about 300 steps); RK4 decays."""
    spec = WORKLOADS[name]
    ctx = _ctx(400)
    spec.fn(ctx, {**spec.resolve(toy=False), "n": 256, "fields": 1, "log_every": 20})
    curve = [z for _, z in ctx.ledger.extra["enstrophy_curve"]]
    assert curve[0] == pytest.approx(1.0) and all(math.isfinite(z) for z in curve)
    assert len(curve) == 21 and all(b < a for a, b in zip(curve, curve[1:])), curve
    # the check has teeth: 32 times past the limit the same flow gains enstrophy or blows up
    ctx = _ctx(60)
    spec.fn(ctx, {**spec.resolve(toy=False), "n": 256, "fields": 1, "log_every": 5, "cfl": 16.0})
    curve = [z for _, z in ctx.ledger.extra["enstrophy_curve"]]
    assert not all(math.isfinite(z) for z in curve) or max(curve) > curve[0], curve


def _hermitian_error(x: torch.Tensor) -> float:
    """How far a half spectrum [..., n, n//2+1] is from a real field's in the columns an inverse real
    FFT reads twice (kx = 0 and, n even, kx = n/2): there X[ky] must be conj(X[-ky])."""
    n = x.shape[-2]
    flip = (-torch.arange(n)) % n
    cols = [0] + ([x.shape[-1] - 1] if n % 2 == 0 else [])
    err = max(float((x[..., :, c] - x[..., flip, c].conj()).abs().max()) for c in cols)
    return err / max(float(x.abs().max()), 1e-30)


def test_spectral_start_never_hands_an_inverse_transform_a_spectrum_no_real_field_has(monkeypatch):
    """The regression test of the fp32 start fixed on 2026-12-02 (docs/lab.md, the eighteenth time):
    the old start drew random coefficients in the band and made them Hermitian with rfft2(irfft2(·)).
    The CPU's inverse transform projects such input exactly, so every other CPU test passed, but
    cuFFT's fp32 path did not, and 4-7 % of ⟨ω²⟩ went in the first step. What a CPU can check is the
    cause: no inverse real FFT in a run, start included, is given a spectrum that is not a real
    field's (checked here in its redundant columns, to rounding)."""
    real_irfft2 = torch.fft.irfft2
    worst = []

    def checked(x, *a, **kw):
        worst.append(_hermitian_error(x))
        return real_irfft2(x, *a, **kw)

    spec = WORKLOADS["other.spectral.n4096_f8"]
    monkeypatch.setattr(torch.fft, "irfft2", checked)
    ctx = _ctx(3)
    spec.fn(ctx, spec.resolve(toy=True))
    assert worst and max(worst) < 1e-5, max(worst)
    # the check has teeth: the old start's construction fails it
    n = 32
    _, _, k2, keep = spectral_grid(n, torch.device("cpu"), torch.float32)
    band = torch.exp(-((k2.sqrt() - 4.0) ** 2) / 8.0) * keep
    g = torch.Generator().manual_seed(0)
    old = torch.complex(torch.randn((1, n, n // 2 + 1), generator=g), torch.randn((1, n, n // 2 + 1), generator=g)) * band
    assert _hermitian_error(old) > 0.1


def test_spectral_run_counts_its_flops_and_its_precision():
    spec = WORKLOADS["other.spectral.n4096_f8"]
    ctx = _ctx(20)
    spec.fn(ctx, spec.resolve(toy=True))
    curve = [z for _, z in ctx.ledger.extra["enstrophy_curve"]]
    assert len(curve) == 21 and all(b < a for a, b in zip(curve, curve[1:])), curve
    assert ctx.ledger.flops == pytest.approx(20 * 2 * (20 * 2.5 * 32 ** 2 * math.log2(32 ** 2) + 80 * 32 ** 2), rel=1e-6)
    fp64 = WORKLOADS["other.spectral.n2048_f16_fp64"]
    ctx = _ctx(2)
    fp64.fn(ctx, fp64.resolve(toy=True))
    assert ctx.ledger.extra["precision"] == "float64"
