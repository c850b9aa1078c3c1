"""Other GPU work (class ``other``): neither training nor inference, but look-alikes on some signal.

- matmul burn: dense bf16 (or fp8) GEMMs back to back, full power and tensor activity, no link traffic;
- NCCL sweep: all-reduce / all-gather / send-recv ring / one-way sends over all ranks, a range of sizes, heavy, regular and symmetric
  NVLink traffic with no model at all (the hard negative for "gradient all-reduce means training");
- memory copies: device-to-device, host-to-device / device-to-host over PCIe, and peer GPU0 → GPU1
  copies on the copy engines (NVLink bytes with an idle SM);
- idle: nothing on the GPU, optionally with memory held (a parked process);
- stencil (other_hpc.py): a domain-decomposed 3-D Jacobi solver exchanging halo planes every sweep,
  symmetric and regular GPU-to-GPU traffic from a simulation; spectral (other_hpc.py): a
  pseudo-spectral turbulence solver;
- quantize (other_quant.py): GPTQ post-training quantization of a frozen model, token-dimension
  reductions shaped like weight gradients and the blocks' weights rewritten, with no gradient and no optimizer.

A step: one burn iteration (``iters`` GEMMs), one collective call, one copy, one sleep interval.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from . import flops as flopcount
from .base import Context, variants
from .comm import group_label, peer_label
from .infer_common import agree


def _fp8_operands(a: torch.Tensor, b: torch.Tensor):
    """``a`` row-major and ``b`` column-major in float8 (e4m3) with unit scales, as ``torch._scaled_mm``
    takes them, or None where this torch or device has no FP8 matmul (CPU, pre-Hopper GPUs)."""
    if a.device.type != "cuda" or not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        return None
    if torch.cuda.get_device_capability(a.device) < (8, 9):
        return None
    one = torch.ones((), device=a.device, dtype=torch.float32)
    return a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t(), one


def _sparse24_operand(a: torch.Tensor):
    """``a`` pruned to the 2:4 pattern (two of every four along a row kept) in the semi-structured sparse
    layout the tensor cores' sparse mode reads, or None where this torch or device has none (CPU)."""
    if a.device.type != "cuda":
        return None
    try:
        from torch.sparse import to_sparse_semi_structured
    except ImportError:
        return None
    return to_sparse_semi_structured(a * _keep24(a))


def _keep24(a: torch.Tensor) -> torch.Tensor:
    """The 2:4 mask: the last two of every four elements along a row kept."""
    return torch.tensor([0, 0, 1, 1], dtype=a.dtype, device=a.device).tile(a.shape[0], a.shape[1] // 4)


def _fp8_sparse24_operands(a: torch.Tensor, b: torch.Tensor):
    """``a`` pruned to 2:4 in float8 (e4m3) and compressed for cuSPARSELt (``torch._cslt_compress``), with
    ``b`` column-major in float8, or None where this torch or device has no FP8 matmul or no cuSPARSELt.
    The semi-structured tensor class refuses FP8 ``mm``, so the compressed operand is used directly."""
    dense = _fp8_operands(a * _keep24(a), b)
    if dense is None or not hasattr(torch, "_cslt_compress"):
        return None
    a8, b8, _ = dense
    try:
        return torch._cslt_compress(a8), b8
    except RuntimeError:   # a build without cuSPARSELt
        return None


PRECISIONS = ("bf16", "fp8", "bf16_sparse24", "fp8_sparse24")


@torch.inference_mode()
def run_matmul(ctx: Context, cfg: dict) -> None:
    """Matmul burn: ``iters`` products of n×n matrices per step, in ``precision`` ``bf16`` (the run's
    dtype, fp32 on CPU), ``fp8`` (e4m3 operands, bf16 out, ``torch._scaled_mm``: twice the dense BF16
    tensor-core peak on Hopper, which is what a bound read from tensor activity at the BF16 peak must
    know about, docs/below-floor.md) or ``bf16_sparse24`` (the first operand pruned to 2:4 and held in
    the semi-structured layout, ``torch.sparse.to_sparse_semi_structured``: the tensor cores' sparse
    mode, which skips the pruned half of the multiply-adds; the ledger counts the dense product's 2n³
    FLOPs, as sparse datasheet rates do, and the executed n³ in ``executed_flops_per_step``) or
    ``fp8_sparse24`` (both: the pruned first operand in e4m3, compressed for cuSPARSELt, bf16 out,
    ``torch._cslt_sparse_mm``; counted as ``bf16_sparse24`` is). Where the device has none of them the
    run falls back to the run's dtype, dense, and the ledger says so (``precision_run``)."""
    n, iters = int(cfg["n"]), int(cfg["iters"])
    duty = float(cfg.get("duty", 1.0))
    precision = str(cfg.get("precision", "bf16"))
    if precision not in PRECISIONS:
        raise ValueError(f"other.matmul: precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    if precision.endswith("_sparse24") and n % 64:
        raise ValueError(f"other.matmul: the 2:4 sparse layout needs n divisible by 64, not {n}")
    a = torch.randn(n, n, device=ctx.device, dtype=ctx.dtype)
    b = torch.randn(n, n, device=ctx.device, dtype=ctx.dtype)
    out = torch.empty(n, n, device=ctx.device, dtype=ctx.dtype)
    fp8 = _fp8_operands(a, b) if precision == "fp8" else None
    sparse = _sparse24_operand(a) if precision == "bf16_sparse24" else None
    sparse8 = _fp8_sparse24_operands(a, b) if precision == "fp8_sparse24" else None

    if sparse8 is not None:
        packed, b8 = sparse8

        def step():
            for _ in range(iters):
                torch._cslt_sparse_mm(packed, b8, out_dtype=torch.bfloat16)
        ctx.ledger.flops_per_step = 2 * n ** 3 * iters   # the dense product's count; half is executed
        ctx.ledger.extra.update(executed_flops_per_step=n ** 3 * iters)
        method = "analytic"
    elif sparse is not None:
        def step():
            for _ in range(iters):
                torch.mm(sparse, b)
        ctx.ledger.flops_per_step = 2 * n ** 3 * iters   # the dense product's count; half is executed
        ctx.ledger.extra.update(executed_flops_per_step=n ** 3 * iters)
        method = "analytic"
    elif fp8 is not None:
        a8, b8, one = fp8

        def step():
            for _ in range(iters):
                torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        # counted analytically (whether FlopCounterMode counts _scaled_mm depends on the torch version):
        # a product of n×n matrices is 2n³ FLOPs
        ctx.ledger.flops_per_step = 2 * n ** 3 * iters
        method = "analytic"
    else:
        def step():
            for _ in range(iters):
                torch.mm(a, b, out=out)
        ctx.ledger.flops_per_step = flopcount.measure(step)
        method = "flop_counter"
    ran = ("fp8_sparse24" if sparse8 is not None else "fp8" if fp8 is not None else
           "bf16_sparse24" if sparse is not None else str(ctx.dtype).replace("torch.", ""))
    ctx.ledger.extra.update(method=method, n=n, precision=precision, precision_run=ran)
    while ctx.keep_going():
        t0 = time.perf_counter()
        step()
        ctx.sync()
        dt = time.perf_counter() - t0
        ctx.ledger.step(dt, 0)
        if duty < 1.0:
            time.sleep(dt * (1 - duty) / duty)   # a partially loaded burn (e.g. a shared benchmark box)


variants("other.matmul", "other", "matmul", run_matmul,
         base={"n": 8192, "iters": 20}, toy={"n": 64, "iters": 2, "duty": 1.0}, gpus=0, grid={
             "n8192_x2": {},
             "n4096_half_duty": {"n": 4096, "iters": 50, "duty": 0.5},
         })
variants("other.matmul", "other", "matmul", run_matmul,
         base={"n": 16384, "iters": 4}, toy={"n": 64, "iters": 2, "duty": 1.0}, gpus=1, grid={
             "n16384_gpu0": {},
         })


def _sizes(cfg: dict) -> list[int]:
    """Byte sizes from ``min_bytes`` doubling up to ``max_bytes``."""
    out, s = [], int(cfg["min_bytes"])
    while s <= int(cfg["max_bytes"]):
        out.append(s)
        s *= 2
    return out


def _one_collective(ctx: Context, op: str, buf: torch.Tensor, gathered: list[torch.Tensor]) -> None:
    nbytes = buf.numel() * buf.element_size()
    label = group_label(range(ctx.world_size))
    if op == "all_reduce":
        dist.all_reduce(buf)
    elif op == "all_gather":
        dist.all_gather(gathered, buf)
    elif op == "send_recv":      # a ring: every rank sends to the next and receives from the previous
        nxt, prv = (ctx.rank + 1) % ctx.world_size, (ctx.rank - 1) % ctx.world_size
        recv, label = gathered[0], peer_label("send", nxt)
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, buf, nxt), dist.P2POp(dist.irecv, recv, prv)])
        for r in reqs:
            r.wait()
    elif op == "send_oneway":    # first half → second half (rank i → i + n/2), as a disaggregated server
        half = ctx.world_size // 2  # sends; 2 ranks: 0 → 1. An odd last rank sits out.
        if ctx.rank < half:
            dist.send(buf, dst=ctx.rank + half)
            label = peer_label("send", ctx.rank + half)
        elif ctx.rank < 2 * half:
            dist.recv(buf, src=ctx.rank - half)
        if ctx.rank >= half:
            nbytes, label = 0, None
    else:
        raise ValueError(f"unknown collective {op!r}")
    ctx.ledger.collective(op, nbytes, label)


@torch.inference_mode()
def run_nccl_sweep(ctx: Context, cfg: dict) -> None:
    """Collectives over a range of sizes (each step: ``reps`` calls of one op at one size), cycling."""
    if ctx.world_size < 2 or ctx.n_active != ctx.world_size:
        raise ValueError("the NCCL sweep needs all ranks of a launch of at least 2")
    ops, sizes, reps = list(cfg["ops"]), _sizes(cfg), int(cfg["reps"])
    elem = torch.empty(0, dtype=ctx.dtype).element_size()
    biggest = max(sizes) // elem
    buf_all = torch.ones(biggest, device=ctx.device, dtype=ctx.dtype)
    gathered_all = [torch.empty(biggest, device=ctx.device, dtype=ctx.dtype) for _ in range(ctx.world_size)]
    ctx.ledger.flops_per_step = 0
    ctx.ledger.extra.update(ops=ops, sizes_bytes=sizes)
    i = 0
    # Rank 0 decides when to stop, shared on the CPU group, so no rank is left waiting in a collective.
    while agree(ctx, ctx.keep_going()):
        op, size = ops[(i // len(sizes)) % len(ops)], sizes[i % len(sizes)]
        n = max(1, size // elem)
        buf, gathered = buf_all[:n], [g[:n] for g in gathered_all]
        t0 = time.perf_counter()
        for _ in range(reps):
            _one_collective(ctx, op, buf, gathered)
        ctx.sync()
        ctx.ledger.step(time.perf_counter() - t0, 0)
        if op == "all_reduce":
            buf.fill_(1.0)   # keep values finite across repeated sums
        i += 1


variants("other.nccl_sweep", "other", "nccl_sweep", run_nccl_sweep,
         base={"ops": ["all_reduce", "all_gather", "send_recv"], "min_bytes": 1 << 10, "max_bytes": 1 << 28,
               "reps": 20},
         toy={"min_bytes": 256, "max_bytes": 4096, "reps": 2}, gpus=0, grid={
             "mixed_1k_256m": {},
             "allreduce_256m": {"ops": ["all_reduce"], "min_bytes": 1 << 28, "max_bytes": 1 << 28, "reps": 10},
             "allgather_64k_16m": {"ops": ["all_gather"], "min_bytes": 1 << 16, "max_bytes": 1 << 24},
             "oneway_1m_512m": {"ops": ["send_oneway"], "min_bytes": 1 << 20, "max_bytes": 1 << 29, "reps": 5},
         })


@torch.inference_mode()
def run_memcpy(ctx: Context, cfg: dict) -> None:
    """Memory copies of ``mib`` MiB: d2d (same GPU), h2d / d2h (pinned host memory), peer (GPU → GPU)."""
    nbytes = int(cfg["mib"]) * (1 << 20)
    kind = cfg["kind"]
    n = nbytes // 2
    dev = ctx.device
    src = torch.ones(n, dtype=torch.bfloat16, device=dev)
    pin = ctx.is_cuda
    if kind == "d2d":
        dst = torch.empty_like(src)
    elif kind in ("h2d", "d2h"):
        host = torch.ones(n, dtype=torch.bfloat16, pin_memory=pin)
        dst = host if kind == "d2h" else src
        src = src if kind == "d2h" else host
    elif kind == "peer":
        other = torch.device("cuda", (dev.index + 1) % torch.cuda.device_count()) if ctx.is_cuda else dev
        if ctx.is_cuda and other == dev:
            raise ValueError("peer copies need a second GPU visible to this process")
        dst = torch.empty(n, dtype=torch.bfloat16, device=other)
    else:
        raise ValueError(f"unknown copy kind {kind!r}")
    ctx.ledger.flops_per_step = 0
    copied = 0
    while ctx.keep_going():
        t0 = time.perf_counter()
        for _ in range(int(cfg["reps"])):
            dst.copy_(src, non_blocking=True)
        if ctx.is_cuda:
            torch.cuda.synchronize()   # all devices: a peer copy may run on the other GPU's stream
        ctx.ledger.step(time.perf_counter() - t0, 0)
        copied += nbytes * int(cfg["reps"])
    ctx.ledger.extra.update(kind=kind, copy_bytes=copied)


variants("other.memcpy", "other", "memcpy", run_memcpy,
         base={"kind": "d2d", "mib": 1024, "reps": 8}, toy={"mib": 1, "reps": 2}, gpus=1, grid={
             "d2d_1g": {},
             "h2d_256m": {"kind": "h2d", "mib": 256, "reps": 4},
             "d2h_256m": {"kind": "d2h", "mib": 256, "reps": 4},
             "peer_1g": {"kind": "peer", "mib": 1024, "reps": 8},
         })


def run_idle(ctx: Context, cfg: dict) -> None:
    """Nothing on the GPU: sleep in steps of ``interval_s``, optionally holding ``hold_gib`` of memory."""
    held = None
    if float(cfg.get("hold_gib", 0)) > 0:
        held = torch.empty(int(float(cfg["hold_gib"]) * (1 << 30)), dtype=torch.uint8, device=ctx.device)
    ctx.ledger.flops_per_step = 0
    while ctx.keep_going():
        t0 = time.perf_counter()
        time.sleep(float(cfg["interval_s"]))
        ctx.ledger.step(time.perf_counter() - t0, 0)
    ctx.ledger.extra["held_bytes"] = 0 if held is None else held.numel()


variants("other.idle", "other", "idle", run_idle,
         base={"interval_s": 1.0, "hold_gib": 0}, toy={"interval_s": 0.01, "hold_gib": 0.001}, gpus=0, grid={
             "bare": {},
             "hold_40g": {"hold_gib": 40},
         })

from . import other_hpc, other_quant, other_stream  # noqa: E402,F401  (register the stencil and spectral solvers, GPTQ, the stream service)
