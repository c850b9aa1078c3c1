"""Parallelism applied from outside to the one GPT definition: DDP, FSDP2, tensor and pipeline parallel.

Weights are kept in fp32 and the GPU computes in bf16 under autocast (FSDP additionally gathers bf16
parameters), so AdamW and SGD update the same master weights whatever the parallelism. Every rank
builds the model from the same seed, directly on its device, so replicated weights agree without a
broadcast and a multi-billion-parameter model is ready in seconds.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn as nn

from torch.utils._python_dispatch import TorchDispatchMode

from . import flops
from .base import Context, Ledger
from .comm import CollectiveCounter, counting_allreduce_hook
from .model import GPT, ModelConfig

MODEL_KEYS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "seq_len")


def model_config(cfg: dict) -> ModelConfig:
    return ModelConfig(**{k: cfg[k] for k in MODEL_KEYS if k in cfg})


def build_model(ctx: Context, mcfg: ModelConfig) -> GPT:
    torch.manual_seed(ctx.seed)          # same initial weights on every rank
    with torch.device(ctx.device):
        return GPT(mcfg)


def autocast(ctx: Context):
    """bf16 compute on GPU; fp32 on CPU (CPU bf16 matmuls are slow and toy runs check exact counts)."""
    if ctx.is_cuda:
        return torch.autocast("cuda", dtype=ctx.dtype)
    return contextlib.nullcontext()


def make_optimizers(ctx: Context, model: nn.Module, cfg: dict) -> list[torch.optim.Optimizer]:
    """AdamW or SGD (momentum) over trainable parameters. DTensor and plain parameters go to separate
    optimizers because foreach kernels refuse a mix (tensor parallel leaves embeddings replicated)."""
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [[p for p in params if isinstance(p, DTensor)], [p for p in params if not isinstance(p, DTensor)]]
    opts = []
    warmup = max(1, int(cfg.get("warmup", 1)))
    for group in groups:
        if not group:
            continue
        fast = {"fused": True} if ctx.is_cuda and not isinstance(group[0], DTensor) else {"foreach": True}
        if cfg.get("optimizer", "adamw") == "sgd":
            opts.append(torch.optim.SGD(group, lr=cfg.get("lr_sgd", 0.1), momentum=0.9, **fast))
        else:
            opts.append(torch.optim.AdamW(group, lr=cfg["lr"], betas=(0.9, 0.95), weight_decay=0.1, **fast))
    # Linear warm-up: without it the multi-billion-parameter configs spike to a loss of ~20 first.
    for opt in opts:
        opt.warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warmup))
    return opts


def optimizer_step(opts: list[torch.optim.Optimizer]) -> None:
    for opt in opts:
        opt.step()
        opt.warmup.step()
        opt.zero_grad(set_to_none=True)


def wrap_ddp(ctx: Context, model: nn.Module) -> nn.Module:
    """DDP with a comm hook that counts every gradient bucket handed to all-reduce."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    ids = [ctx.device.index] if ctx.is_cuda else None
    # DDP's construction broadcasts rank 0's weights: real traffic, counted under "broadcast".
    with CollectiveCounter(ctx.ledger):
        ddp = DDP(model, device_ids=ids, gradient_as_bucket_view=True)
    ddp.register_comm_hook(None, counting_allreduce_hook(ctx.ledger))
    return ddp


def mesh(ctx: Context):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(ctx.device.type, (ctx.world_size,))


def wrap_fsdp(ctx: Context, model: GPT) -> GPT:
    """FSDP2: each block sharded on its own (all-gathered just before use, resharded after), then
    the root (embeddings, norm, head). On GPU parameters are gathered in bf16, gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    kw = {"mesh": mesh(ctx)}
    if ctx.is_cuda:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=ctx.dtype, reduce_dtype=torch.float32)
    for block in model.layers.values():
        fully_shard(block, **kw)
    fully_shard(model, **kw)
    return model


def tp_dp_mesh(ctx: Context, tp: int):
    """A 2-D mesh over all ranks: ``tp`` consecutive ranks share a layer (inner dimension, the fast
    link inside a node), ``world / tp`` such groups train as data-parallel replicas (outer)."""
    from torch.distributed.device_mesh import init_device_mesh

    if tp < 1 or ctx.world_size % tp:
        raise ValueError(f"tensor-parallel degree {tp} does not divide the {ctx.world_size} ranks")
    return init_device_mesh(ctx.device.type, (ctx.world_size // tp, tp), mesh_dim_names=("dp", "tp"))


def apply_tensor_parallel(ctx: Context, model: GPT, tp_mesh=None) -> GPT:
    """Megatron-style: q/k/v and fc1 split by columns, o and fc2 by rows, so each block costs one
    all-reduce after attention and one after the MLP, forward and backward. Embeddings, norms and the
    head stay replicated (every rank of the group sees the same activations, so their gradients
    agree). ``tp_mesh``: the 1-D mesh of this rank's tensor-parallel group (default: all ranks)."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    cfg = model.cfg
    tp_mesh = tp_mesh if tp_mesh is not None else mesh(ctx)
    tp = tp_mesh.size()
    if cfg.n_heads % tp or cfg.kv_heads % tp:
        raise ValueError(f"heads {cfg.n_heads}/{cfg.kv_heads} not divisible by {tp} tensor-parallel ranks")
    plan = {"attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.o": RowwiseParallel(), "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel()}
    for block in model.layers.values():
        parallelize_module(block, tp_mesh, plan)
    return model


def local_numel(p: torch.Tensor) -> int:
    """Elements this rank holds: a DTensor's local shard, a plain tensor's all."""
    from torch.distributed.tensor import DTensor

    return p.to_local().numel() if isinstance(p, DTensor) else p.numel()


def all_reduce_grads(model: nn.Module, group, size: int) -> int:
    """Average this rank's gradients (local shards of DTensor ones) over a data-parallel group in one
    flat all-reduce, as DDP does with one bucket. Returns the bytes handed over."""
    from torch.distributed.tensor import DTensor

    grads = [p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
             for p in model.parameters() if p.grad is not None]
    if not grads:
        return 0
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat.div_(size)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
    return flat.numel() * flat.element_size()


def pipeline_stage_module(ctx: Context, model: GPT, stages: int | None = None) -> GPT:
    """Keep this rank's contiguous share of the layers (stage = rank, ``stages`` default all ranks);
    the first stage keeps the embeddings, the last the final norm and head (GPT.forward passes hidden
    states through when they are missing)."""
    n, rank = model.cfg.n_layers, ctx.rank
    stages = stages or ctx.world_size
    if n < stages:
        raise ValueError(f"{n} layers cannot be split over {stages} pipeline stages")
    lo, hi = rank * n // stages, (rank + 1) * n // stages
    for key in list(model.layers.keys()):
        if not lo <= int(key) < hi:
            del model.layers[key]
    if rank > 0:
        model.tok = None
        model.pos = None
    if rank < stages - 1:
        model.norm = None
        model.head = None
    return model


class FloatOutput(nn.Module):
    """A pipeline stage's output in fp32. The stage infers its output dtype by running on meta
    tensors, where CUDA autocast does not apply (fp32), so a bf16 output at run time would fail the
    stage's own check on one rank and leave the other waiting in a receive."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x).float()


def pipeline_schedule(ctx: Context, stage_model: GPT, cfg: dict, loss_fn, stages: int | None = None, group=None):
    """Stage ``ctx.rank`` of ``stages`` (default all ranks) in ``group`` (default the world; a group
    of the first ``stages`` ranks when the pipeline is smaller than the launch)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    stage = PipelineStage(FloatOutput(stage_model), ctx.rank, stages or ctx.world_size, ctx.device, group=group)
    # Check every chunk's shapes, strides and dtypes against the inferred metadata, as torch 2.11
    # always does (2.13 only under TORCH_DISTRIBUTED_DEBUG=DETAIL): a mismatch fails one rank and
    # leaves the other waiting in a receive, so CPU tests must catch it before a GPU run hangs.
    if hasattr(stage, "_runtime_validate"):
        stage._runtime_validate = True
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[cfg.get("schedule", "1f1b")]
    return kind(stage, n_microbatches=cfg["microbatches"], loss_fn=loss_fn)


def counting(ctx: Context) -> CollectiveCounter:
    return CollectiveCounter(ctx.ledger)


def ledger_note_method(ledger: Ledger, method: str) -> None:
    ledger.extra["collective_method"] = method


def world_ok(ctx: Context, need: int) -> None:
    if ctx.world_size < need or not dist.is_initialized():
        raise RuntimeError(f"this workload needs {need} ranks in a process group, got {ctx.world_size}")


class _LocalFlopMode(TorchDispatchMode):
    """FlopCounterMode's counting, but after DTensor has desugared each op into the rank's local ops.

    FlopCounterMode, like every dispatch mode, sees a DTensor matmul before DTensor runs, with the
    global (unsharded) shapes, and also counts the fake-tensor matmuls DTensor runs to propagate
    shardings, so under tensor parallel each rank would be credited with far more than it computed.
    Returning NotImplemented for DTensor lets DTensor run first; the local matmuls it issues come back
    here and are counted with torch's own formulas (flop_counter.flop_registry); fake ones are not.
    """

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch.distributed.tensor import DTensor
        from torch.utils import flop_counter as fc

        from torch._subclasses.fake_tensor import FakeTensor

        kwargs = kwargs or {}
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        if any(issubclass(t, FakeTensor) for t in types):
            # DTensor's sharding propagation runs ops on fake global-shape tensors: no real work.
            return func(*args, **kwargs)
        packet = getattr(func, "_overloadpacket", None)
        if packet is not None and packet not in fc.flop_registry and isinstance(func, torch._ops.OpOverload):
            with self:                                    # as FlopCounterMode: count what it decomposes into
                out = func.decompose(*args, **kwargs)
                if out is not NotImplemented:
                    return out
        out = func(*args, **kwargs)
        if packet in fc.flop_registry:
            self.flops += int(fc.flop_registry[packet](*args, **kwargs, out_val=out))
        return out


def measure_local(step) -> int:
    """This rank's FLOPs for one call of ``step()``, counting sharded (DTensor) work at its local size."""
    flops.counter()                                       # registers the CPU attention formulas
    mode = _LocalFlopMode()
    with mode:
        step()
    return mode.flops
