"""Ground truth for interconnect traffic: the bytes a workload hands to collectives, counted inside it.

Two counters, one convention (the bytes of the buffer this rank hands over, per call):

- DDP: a comm hook that adds each gradient bucket's bytes to the ledger and then runs the default
  all-reduce, so nothing about DDP's own bucketing or overlap changes.
- Everything else (FSDP2, tensor parallel, pipeline, DDP's start-up broadcast): a TorchDispatchMode
  that sees every ``c10d.*`` and ``_c10d_functional.*`` op. Every torch.distributed collective goes
  through the dispatcher as one of these ops, including the ones DTensor issues when it redistributes
  and the ones issued from autograd's backward threads (dispatch modes follow the autograd engine).

Each count is also filed under the members of the op's group (their global ranks) or, for a send
or receive, the peer, so a test can tell a tensor-parallel all-reduce from a data-parallel one.

Per op, the counted tensor is the one this rank contributes: the input of an all-gather (its shard),
the input of a reduce-scatter (the full unreduced tensor), the tensor of an all-reduce, send or
broadcast. A recv is counted under ``recv`` with the size of the buffer it fills.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode

from .base import Ledger

# Ops that move no payload (a barrier's tensor is a dummy) or only wait for one.
_SKIP = {"barrier", "monitored_barrier", "wait_tensor", "wait", "work_wait"}
# The argument that holds what this rank hands over, by schema argument name, in order of preference.
_PAYLOAD_ARGS = ("input_tensor", "input", "inputs", "input_tensors", "tensors", "tensor")
# Normalised op names, so c10d and functional flavours of one collective share a ledger key.
_KEY = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "allgather_base": "all_gather", "all_gather_into_tensor": "all_gather",
    "allgather_into_tensor": "all_gather", "all_gather_into_tensor_out": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "alltoall": "all_to_all", "alltoall_base": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "send": "send", "recv": "recv", "recv_any_source": "recv",
    "reduce": "reduce", "gather": "gather", "scatter": "scatter",
}
_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd", "c10d_functional")


def tensor_bytes(obj) -> int:
    """Bytes of every tensor in ``obj`` (a tensor or nested lists of tensors)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x) for x in obj)
    return 0


def op_key(func) -> str | None:
    """Ledger key for a collective op, or None if ``func`` is not a payload-carrying collective."""
    ns = getattr(func, "namespace", None)
    if ns not in _NAMESPACES:
        return None
    name = func._schema.name.split("::")[-1].strip("_")
    if name in _SKIP:
        return None
    base = name.removesuffix("_coalesced").strip("_")
    return _KEY.get(base)          # unknown ops (e.g. funcol's wrap_tensor_autograd) carry no new payload


def payload_bytes(func, args, kwargs) -> int:
    schema = func._schema
    values = {a.name: (args[i] if i < len(args) else kwargs.get(a.name))
              for i, a in enumerate(schema.arguments)}
    for name in _PAYLOAD_ARGS:
        if name in values and values[name] is not None:
            return tensor_bytes(values[name])
    return 0


def group_ranks(group=None) -> list[int]:
    """Global ranks of a process group (None: the default group)."""
    if not dist.is_initialized():
        return [0]
    return dist.get_process_group_ranks(group if group is not None else dist.group.WORLD)


def group_label(ranks) -> str:
    """Ledger key for the members of a collective: their global ranks, "0,1,2,3"."""
    return ",".join(str(r) for r in ranks)


def peer_label(op: str, peer: int) -> str:
    """Ledger key for a point-to-point transfer: "->5" for a send to rank 5, "<-0" for a receive."""
    return f"<-{peer}" if op == "recv" else f"->{peer}"


def op_group(func, args, kwargs, key: str) -> str:
    """Who is on the other end of a collective op: its group's global ranks, or the peer of a
    send / recv (the op carries the peer's rank inside its group). "?" if it cannot be resolved."""
    from torch.distributed.distributed_c10d import _resolve_process_group

    values = {a.name: (args[i] if i < len(args) else kwargs.get(a.name))
              for i, a in enumerate(func._schema.arguments)}
    try:
        if isinstance(values.get("group_name"), str):
            pg = _resolve_process_group(values["group_name"])
        elif values.get("process_group") is not None:
            pg = dist.ProcessGroup.unbox(values["process_group"])
        else:
            return "?"
        ranks = dist.get_process_group_ranks(pg)
    except (RuntimeError, ValueError, AttributeError, KeyError, TypeError):
        return "?"
    for arg in ("dst", "dstRank", "src", "srcRank"):
        if key in ("send", "recv") and isinstance(values.get(arg), int) and values[arg] >= 0:
            return peer_label(key, ranks[values[arg]])
    return group_label(ranks)


class CollectiveCounter(TorchDispatchMode):
    """Adds the payload bytes of every collective issued while active to ``ledger.collective``."""

    def __init__(self, ledger: Ledger):
        super().__init__()
        self.ledger = ledger
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        # Let tensor subclasses (DTensor) run first and desugar into plain-tensor collectives, which
        # come back through this mode; counting at the DTensor level would miss or misname them.
        if any(issubclass(t, DTensor) for t in types):
            return NotImplemented
        if isinstance(func, torch._ops.OpOverload):
            key = op_key(func)
            if key is not None:
                self.ledger.collective(key, payload_bytes(func, args, kwargs), op_group(func, args, kwargs, key))
                self.calls[key] = self.calls.get(key, 0) + 1
        return func(*args, **kwargs)


def counting_allreduce_hook(ledger: Ledger):
    """A DDP comm hook: count the bucket's bytes, then the default all-reduce (average)."""
    # No annotations: DDP checks the literal annotation of ``bucket`` (a string under postponed evaluation).
    def hook(state, bucket):
        buf = bucket.buffer()
        group = state if state is not None else dist.group.WORLD
        ledger.collective("all_reduce", buf.numel() * buf.element_size(), group_label(group_ranks(group)))
        buf.div_(dist.get_world_size(group))
        fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])
    return hook
