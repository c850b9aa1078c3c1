"""FP8 training on the GPU before a campaign records it: the 0.2 B lab model (train.single.w1024-l16's
shape) trained 30 steps in BF16 (autocast) and 30 in FP8 (workloads/fp8.py) from the same weights on
the same batches; prints each loss at the start and end and each step's time, so a broken product or a
recipe that does not learn shows before the campaign's runs do.

    PYTHONPATH=src python3 scripts/gpu/fp8_train_check.py [PRECISION ...]

PRECISION: ``bf16``, ``fp8`` (the dynamic recipe) or ``fp8_delayed`` (the delayed recipe, its one-pass
cast built and checked first, as ``fp8.setup`` does, and timed against the eager one); by default
``bf16 fp8``, as call s31-2 ran it.
"""

import sys
import time

import torch

from trainsentry.workloads import fp8
from trainsentry.workloads.model import GPT, ModelConfig, loss_fn

assert fp8.available(torch.device("cuda")), "no FP8 matmul on this GPU"
cfg = ModelConfig(d_model=1024, n_layers=16, n_heads=16, seq_len=1024)
gen = torch.Generator(device="cuda").manual_seed(0)
data = [torch.randint(0, 64, (32, 1025), device="cuda", generator=gen) * 3 % 256 for _ in range(30)]
for precision in sys.argv[1:] or ("bf16", "fp8"):
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = GPT(cfg)
    recipe = "delayed" if precision == "fp8_delayed" else "dynamic"
    n = fp8.convert(model, recipe=recipe) if precision != "bf16" else 0
    if recipe == "delayed":
        print(f"{precision}: cast {fp8.cast_kernel('cuda')}")
        big, sc = torch.randn(32768, 4096, device="cuda", dtype=torch.bfloat16), torch.tensor(0.01, device="cuda")
        for name, fn in (("one-pass", fp8._triton_cast), ("eager", fp8._cast)):
            fn(big, sc)
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(20):
                fn(big, sc)
            torch.cuda.synchronize()
            print(f"{precision}: {name} cast of 32768x4096 bf16: {1e3 * (time.perf_counter() - t) / 20:.3f} ms")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    losses, times = [], []
    for x in data:
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_fn(model(x[:, :-1]), x[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        losses.append(float(loss))
    print(f"{precision}: {n} FP8 layers, loss {losses[0]:.3f} -> {losses[-1]:.3f}, "
          f"median step {1e3 * sorted(times)[len(times) // 2]:.1f} ms")
