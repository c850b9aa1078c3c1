"""How the red team's replicas average a vector (gradients or DiLoCo pseudo-gradients).

Each function takes one flat fp32 vector per rank and returns the mean over ranks, and records in
the ledger exactly the bytes this rank handed to the transport, under the op that carried them:

- ``mean_allreduce``: one all-reduce of the vector (DDP's shape, optionally bf16 on the wire).
- ``mean_int8``: per-block absmax int8 quantisation, all-gathered (INTELLECT-1's int8 all-reduce
  moves ~1/4 of fp32; an all-gather keeps the sum exact in fp32 on every rank).
- ``TopK``: top-k by magnitude with error feedback (the residual is added back next time), indices
  and values all-gathered.
- ``mean_host_shm``: through host memory only: each rank copies its vector over PCIe into its slot
  of a shared-memory file, then reads every slot back; no NCCL, no network.
- ``mean_gloo``: a CPU all-reduce over gloo's TCP transport (host path over sockets).
- ``mean_kv_shaped``: one-way point-to-point bursts cut to the size of a prefill→decode KV-cache
  hand-off; senders → rank 0, then rank 0 → everyone, so the direction alternates.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from .base import Context

INT8_BLOCK = 4096      # values per quantisation scale


def flat(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1).float() for t in tensors])


def unflat_into(vec: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    i = 0
    for t in tensors:
        n = t.numel()
        t.copy_(vec[i:i + n].view_as(t).to(t.dtype))
        i += n


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def mean_allreduce(ctx: Context, vec: torch.Tensor, wire_dtype: torch.dtype | None = None,
                   op_name: str = "all_reduce") -> torch.Tensor:
    if ctx.world_size == 1:
        return vec
    buf = vec.to(wire_dtype) if wire_dtype is not None else vec.clone()
    ctx.ledger.collective(op_name, _nbytes(buf))
    dist.all_reduce(buf)
    return buf.float().div_(ctx.world_size)


def quantize_int8(vec: torch.Tensor, block: int = INT8_BLOCK) -> tuple[torch.Tensor, torch.Tensor, int]:
    n = vec.numel()
    pad = (-n) % block
    v = torch.nn.functional.pad(vec, (0, pad)).view(-1, block)
    scale = v.abs().amax(dim=1).clamp_min(1e-12) / 127.0
    q = torch.round(v / scale[:, None]).clamp_(-127, 127).to(torch.int8)
    return q, scale.float(), n


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, n: int) -> torch.Tensor:
    return (q.float() * scale[:, None]).reshape(-1)[:n]


def mean_int8(ctx: Context, vec: torch.Tensor) -> torch.Tensor:
    q, scale, n = quantize_int8(vec)
    if ctx.world_size == 1:
        return dequantize_int8(q, scale, n)
    qs = [torch.empty_like(q) for _ in range(ctx.world_size)]
    ss = [torch.empty_like(scale) for _ in range(ctx.world_size)]
    ctx.ledger.collective("all_gather", _nbytes(q) + _nbytes(scale))
    dist.all_gather(qs, q)
    dist.all_gather(ss, scale)
    out = torch.zeros(n, device=vec.device, dtype=torch.float32)
    for qi, si in zip(qs, ss):
        out += dequantize_int8(qi, si, n)
    return out.div_(ctx.world_size)


class TopK:
    """Top-k sparsification with error feedback: what is not sent this time is kept and added next."""

    def __init__(self, numel: int, fraction: float, device):
        if not 0 < fraction <= 1:
            raise ValueError(f"top-k fraction must be in (0, 1], got {fraction}")
        self.k = max(1, int(math.ceil(numel * fraction)))
        self.error = torch.zeros(numel, device=device, dtype=torch.float32)

    def mean(self, ctx: Context, vec: torch.Tensor) -> torch.Tensor:
        acc = self.error.add_(vec)
        idx = acc.abs().topk(self.k, sorted=False).indices.to(torch.int32)
        val = acc[idx.long()].clone()
        acc[idx.long()] = 0.0                       # the residual stays in the error buffer
        if ctx.world_size == 1:
            return torch.zeros_like(vec).index_put_((idx.long(),), val)
        idxs = [torch.empty_like(idx) for _ in range(ctx.world_size)]
        vals = [torch.empty_like(val) for _ in range(ctx.world_size)]
        ctx.ledger.collective("all_gather", _nbytes(idx) + _nbytes(val))
        dist.all_gather(idxs, idx)
        dist.all_gather(vals, val)
        out = torch.zeros_like(vec)
        for i, v in zip(idxs, vals):
            out.index_add_(0, i.long(), v)
        return out.div_(ctx.world_size)


class HostShm:
    """A shared-memory file (``/dev/shm`` where present) with one slot per rank."""

    def __init__(self, ctx: Context, numel: int, run_tag: str):
        need = 4 * numel * ctx.world_size
        root = Path(tempfile.gettempdir())
        # /dev/shm is RAM; containers often cap it at 64 MB, then a file in the page cache does the same
        if Path("/dev/shm").is_dir() and shutil.disk_usage("/dev/shm").free > 2 * need:
            root = Path("/dev/shm")
        self.path = root / f"trainsentry-adv-{run_tag}-{os.getppid()}.bin"
        self.numel, self.world = numel, ctx.world_size
        if ctx.rank == 0:
            self.path.write_bytes(b"")
            os.truncate(self.path, need)
        ctx.barrier()
        self.buf = torch.from_file(str(self.path), shared=True, size=numel * ctx.world_size,
                                   dtype=torch.float32).view(ctx.world_size, numel)

    def mean(self, ctx: Context, vec: torch.Tensor) -> torch.Tensor:
        self.buf[ctx.rank].copy_(vec)               # device → host over PCIe (a plain copy on CPU)
        ctx.ledger.collective("host_write", _nbytes(vec))
        ctx.barrier()                               # every slot written
        out = self.buf.sum(dim=0).to(vec.device)    # host → device
        ctx.ledger.collective("host_read", 4 * self.numel * self.world)
        ctx.barrier()                               # every rank has read before the next write
        return out.div_(self.world)

    def close(self, ctx: Context) -> None:
        ctx.barrier()
        if ctx.rank == 0:
            self.path.unlink(missing_ok=True)


def mean_gloo(ctx: Context, vec: torch.Tensor) -> torch.Tensor:
    """All-reduce on the CPU over gloo (TCP sockets); the GPU only does the two PCIe copies."""
    if ctx.world_size == 1:
        return vec
    host = vec.to("cpu", copy=True)
    ctx.ledger.collective("gloo_all_reduce", _nbytes(host))
    dist.all_reduce(host, group=ctx.cpu_group)
    return host.to(vec.device).div_(ctx.world_size)


def kv_chunks(numel: int, chunk_bytes: int, elem: int) -> list[tuple[int, int]]:
    per = max(1, chunk_bytes // elem)
    return [(i, min(numel, i + per)) for i in range(0, numel, per)]


def mean_kv_shaped(ctx: Context, vec: torch.Tensor, chunk_bytes: int, between=None,
                   wire_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Average through one-way send/recv bursts the size of a KV-cache hand-off.

    Phase 1 ("prefill → decode"): every rank > 0 sends its vector to rank 0, chunk by chunk.
    Phase 2 (the other way): rank 0 sends the mean back. ``between()`` runs after each chunk on
    the receiving side (real decode steps there, as a decode server between hand-offs)."""
    if ctx.world_size == 1:
        return vec
    wire = vec.to(wire_dtype)
    chunks = kv_chunks(wire.numel(), chunk_bytes, wire.element_size())
    directions = ctx.ledger.extra.setdefault("kv_directions", [])
    if ctx.rank == 0:
        total = vec.clone()
        buf = torch.empty_like(wire)
        for src in range(1, ctx.world_size):
            for lo, hi in chunks:
                part = buf[lo:hi]
                dist.recv(part, src=src)
                ctx.ledger.collective("recv", _nbytes(part))
                if between is not None:
                    between()
            total += buf.float()
        directions.append("in")
        mean = total.div_(ctx.world_size)
        out = mean.to(wire_dtype)
        for dst in range(1, ctx.world_size):
            for lo, hi in chunks:
                dist.send(out[lo:hi], dst=dst)
                ctx.ledger.collective("send", _nbytes(out[lo:hi]))
        directions.append("out")
        return out.float()      # every rank continues from the same (wire-precision) mean
    for lo, hi in chunks:
        dist.send(wire[lo:hi], dst=0)
        ctx.ledger.collective("send", _nbytes(wire[lo:hi]))
    directions.append("out")
    back = torch.empty_like(wire)
    for lo, hi in chunks:
        dist.recv(back[lo:hi], src=0)
        ctx.ledger.collective("recv", _nbytes(back[lo:hi]))
        if between is not None:
            between()
    directions.append("in")
    return back.float()


class CountingDist:
    """Stands in for ``torch.distributed`` inside torch's PowerSGD hook module so every all-reduce
    it issues (including those from future callbacks on other threads, which a dispatch mode would
    miss) is added to the ledger of the run currently using it."""

    def __init__(self):
        self.ledger = None

    def all_reduce(self, tensor, *args, **kwargs):
        if self.ledger is not None:
            self.ledger.collective("all_reduce", _nbytes(tensor))
        return dist.all_reduce(tensor, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(dist, name)


_COUNTING = CountingDist()


def powersgd_hook(ctx: Context, rank: int, start_iter: int, min_compression_rate: float = 2.0):
    """torch's PowerSGD DDP hook (error feedback, warm start) with its all-reduces counted."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    # the hook's first start_iter steps are plain all-reduces issued from default_hooks
    psgd.dist = default_hooks.dist = _COUNTING
    _COUNTING.ledger = ctx.ledger
    state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                               start_powerSGD_iter=start_iter, min_compression_rate=min_compression_rate,
                               use_error_feedback=True, warm_start=True, random_seed=0)
    return state, psgd.powerSGD_hook


def stop_counting() -> None:
    _COUNTING.ledger = None


def powersgd_bytes_per_step(shapes: list[tuple[int, ...]], rank: int, elem: int,
                            min_compression_rate: float = 2.0) -> int:
    """Bytes PowerSGD all-reduces per step for these gradient shapes (one bucket), as torch's hook
    decides: vectors and poorly compressible matrices go whole; an n×m matrix (n = first dimension)
    sends P (n×r) and Q (m×r) with r capped at min(n, m)."""
    total = 0
    for shape in shapes:
        numel = math.prod(shape)
        if len(shape) <= 1:
            total += numel * elem
            continue
        n, m = shape[0], numel // shape[0]
        r = min(n, m, rank)
        if (n * m) < (n + m) * r * min_compression_rate:
            total += numel * elem
        else:
            total += (n + m) * r * elem
    return total
