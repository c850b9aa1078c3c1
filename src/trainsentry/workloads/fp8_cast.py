"""The delayed FP8 recipe's one-pass cast as a Triton kernel (``fp8._triton_cast`` launches it).

A module of its own because it imports Triton, which CUDA builds of torch bring and the CPU build does
not: ``workloads.fp8`` imports it only on a GPU. Each program takes one BM×BN tile of a row-major
matrix, reads it once, multiplies by the scale's reciprocal, saturates at e4m3's largest value, writes
the tile row-major and transposed, and folds the tile's absolute maximum into one float32 by an
atomic max (the values are non-negative, so the order is the integers' too).
"""

import triton
import triton.language as tl


@triton.jit
def cast_transpose_amax(x_ptr, q_ptr, qt_ptr, amax_ptr, inv_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    x = tl.load(x_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0).to(tl.float32)
    q = tl.clamp(x * tl.load(inv_ptr), -448.0, 448.0).to(q_ptr.dtype.element_ty)
    tl.store(q_ptr + rm[:, None] * N + rn[None, :], q, mask=mask)
    tl.store(qt_ptr + rn[:, None] * M + rm[None, :], tl.trans(q), mask=tl.trans(mask))
    tl.atomic_max(amax_ptr, tl.max(tl.abs(x)))
