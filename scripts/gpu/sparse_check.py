"""A 2:4-sparse BF16 product against the dense one on the GPU: is the sparse layout there, is it right,
and how fast is it (20 timed 8192 x 8192 products each, FLOPs counted as the dense product's 2n^3).

Call s30-2 (results/device/README.md) ran exactly this code inline, as ``python3 -c "..."``, before its
campaign; it printed "sparse ok SparseSemiStructuredTensorCUSPARSELT 0.004913330078125", "dense
dense-equiv TFLOP/s 794" and "sparse dense-equiv TFLOP/s 775".

    python3 scripts/gpu/sparse_check.py
"""

import time

import torch
from torch.sparse import to_sparse_semi_structured

n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
keep = torch.tensor([0, 0, 1, 1], dtype=a.dtype, device="cuda").tile(n, n // 4)
s = to_sparse_semi_structured(a * keep)
d = torch.mm(a * keep, b)
y = torch.mm(s, b)
print("sparse ok", type(s).__name__, float((y - d).abs().max() / d.abs().max()))
for name, f in (("dense", lambda: torch.mm(a, b)), ("sparse", lambda: torch.mm(s, b))):
    f()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(20):
        f()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t) / 20
    print(name, "dense-equiv TFLOP/s %.0f" % (2 * n ** 3 / dt / 1e12))
