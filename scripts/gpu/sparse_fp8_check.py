"""A 2:4-sparse FP8 product against the dense FP8 one on the GPU, as ``other.matmul`` runs them with
``precision: fp8_sparse24`` and ``fp8``: does cuSPARSELt take the compressed e4m3 operand, is the product
right (against ``torch._scaled_mm`` of the pruned matrix), and how fast is each (20 timed 8192 x 8192
products, FLOPs counted as the dense product's 2n^3).

    python3 scripts/gpu/sparse_fp8_check.py
"""

import time

import torch

n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
keep = torch.tensor([0, 0, 1, 1], dtype=a.dtype, device="cuda").tile(n, n // 4)
one = torch.ones((), device="cuda", dtype=torch.float32)
a8 = (a * keep).to(torch.float8_e4m3fn)
b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
packed = torch._cslt_compress(a8)
d = torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16).float()
y = torch._cslt_sparse_mm(packed, b8, out_dtype=torch.bfloat16).float()
print("fp8 sparse ok", float((y - d).abs().max() / d.abs().max()))
for name, f in (("fp8 dense", lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)),
                ("fp8 sparse", lambda: torch._cslt_sparse_mm(packed, b8, out_dtype=torch.bfloat16))):
    f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        f()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / 20
    print(name, "dense-equiv TFLOP/s %.0f" % (2 * n ** 3 / dt / 1e12))
