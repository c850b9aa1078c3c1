"""Where the spectral solver's fp32 loss on the GPU comes from: one field, one initial vorticity built
on the CPU in fp64, then the first right-hand side's transforms and one RK4 step computed four ways
(CPU fp64 as the reference, CPU fp32, GPU fp64, GPU fp32). Each stage prints its relative error
against the reference, ‖x − ref‖ / ‖ref‖, and each way prints ⟨ω²⟩ after the step. spectral_check.py
showed fp32 losing 3-7 % by step 2 on the H200 and not on the CPU; this says which transform
(the four inverse FFTs to physical space, or the forward FFT of the advection) differs, or whether
the input leaves the Hermitian subspace that a real-to-complex transform assumes. Last, the workload's
earlier start (random coefficients made Hermitian by rfft2(irfft2(·))) projected each way: how much of
the field each puts outside the band.

    python scripts/gpu/spectral_fft_compare.py                      # GPU machine, n = 4096
    python scripts/gpu/spectral_fft_compare.py --n 64 --no-cuda     # anywhere: the CPU ways only
"""

from __future__ import annotations

import argparse
import math

import torch

from trainsentry.workloads.other_hpc import (mean_square_vorticity, rk4_step, spectral_band, spectral_grid,
                                             velocity, velocity_max)

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--n", type=int, default=4096)
ap.add_argument("--no-cuda", action="store_true", help="compare the CPU ways only")
args = ap.parse_args()
n = args.n
ways = [("cpu", torch.float64), ("cpu", torch.float32)]
if not args.no_cuda and torch.cuda.is_available():
    ways += [("cuda", torch.float64), ("cuda", torch.float32)]
print(f"# n {n}, torch {torch.__version__}, "
      f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU'}", flush=True)

# one initial field, built as run_spectral built it until 2026-12-02 but on the CPU in fp64, where that
# projection is exact: a Hermitian start (the defect printed below checks it) shared by every way
kx, ky, k2, keep = spectral_grid(n, "cpu", torch.float64)
gen = torch.Generator().manual_seed(7)
band = spectral_band(k2, keep)
w0 = torch.complex(torch.randn((1, n, n // 2 + 1), dtype=torch.float64, generator=gen),
                   torch.randn((1, n, n // 2 + 1), dtype=torch.float64, generator=gen)) * band
w0 = torch.fft.rfft2(torch.fft.irfft2(w0, s=(n, n)))
w0 = w0 / math.sqrt(mean_square_vorticity(w0))
dt = 0.5 * (2 * math.pi / n) / velocity_max(w0, kx, ky, k2)
print(f"# dt {dt:.4g}; the ky = 0 column's Hermitian defect |w[k] - conj(w[-k])| / |w|: "
      f"{float((w0[0, :, 0] - w0[0, :, 0].roll(-1).flip(0).conj()).norm() / w0.norm()):.2e}", flush=True)


def stages(w: torch.Tensor, dev: str, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    kx, ky, k2, keep = spectral_grid(n, dev, dtype)
    u, v = velocity(w, kx, ky, k2)
    wx = torch.fft.irfft2(1j * kx * w, s=(n, n))
    wy = torch.fft.irfft2(1j * ky * w, s=(n, n))
    adv = torch.fft.rfft2(u * wx + v * wy) * keep
    out = {"u": u, "v": v, "wx": wx, "wy": wy, "adv": adv}
    # and one whole RK4 step from the same start
    out["step"] = rk4_step(w, dt, kx, ky, k2, keep, 1e-4)
    return {k: t.cpu().to(torch.complex128 if t.is_complex() else torch.float64) for k, t in out.items()}


ref = None
for dev, dtype in ways:
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    with torch.inference_mode():
        got = stages(w0.to(dev, cdtype), dev, dtype)
    if ref is None:
        ref = got
    errs = "  ".join(f"{k} {float((got[k] - ref[k]).norm() / ref[k].norm()):.1e}" for k in got)
    print(f"{dev:4s} {str(dtype).split('.')[-1]}: {errs}  <w^2> after the step "
          f"{mean_square_vorticity(got['step']):.6f}", flush=True)

# the forward FFT alone, on the reference's product, and the inverse alone, on the reference's field
if torch.cuda.is_available() and not args.no_cuda:
    prod = (ref["u"] * ref["wx"] + ref["v"] * ref["wy"])
    f_ref = torch.fft.rfft2(prod)
    for dtype in (torch.float64, torch.float32):
        f = torch.fft.rfft2(prod.to("cuda", dtype)).cpu().to(torch.complex128)
        i = torch.fft.irfft2(w0.to("cuda", torch.complex128 if dtype == torch.float64 else torch.complex64),
                             s=(n, n)).cpu().to(torch.float64)
        i_ref = torch.fft.irfft2(w0, s=(n, n))
        print(f"cuda {str(dtype).split('.')[-1]} alone: rfft2 {float((f - f_ref).norm() / f_ref.norm()):.1e}  "
              f"irfft2 {float((i - i_ref).norm() / i_ref.norm()):.1e}", flush=True)

# The workload's start before 2026-12-02 (eighteenth session): random coefficients in the band, made a
# real field's spectrum by rfft2(irfft2(·)), which hands the inverse transform input that is not
# Hermitian. Each way's projection of one such start: its difference from the CPU fp64 projection and
# the share of ⟨ω²⟩ it puts more than 12 from the band's wavenumber 4 (the band's amplitude is below 2e-8 there).
raw = torch.complex(torch.randn((1, n, n // 2 + 1), dtype=torch.float64, generator=gen),
                    torch.randn((1, n, n // 2 + 1), dtype=torch.float64, generator=gen)) * band
outside = (k2.sqrt() - 4.0).abs() > 12.0
p_ref = None
for dev, dtype in ways:
    cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
    with torch.inference_mode():
        p = torch.fft.rfft2(torch.fft.irfft2(raw.to(dev, cdtype), s=(n, n))).cpu().to(torch.complex128)
    p_ref = p if p_ref is None else p_ref
    share = mean_square_vorticity(p * outside) / mean_square_vorticity(p)
    print(f"{dev:4s} {str(dtype).split('.')[-1]} projection of a non-Hermitian start: difference from CPU fp64 "
          f"{float((p - p_ref).norm() / p_ref.norm()):.1e}, share of <w^2> outside the band {share:.1e}", flush=True)
