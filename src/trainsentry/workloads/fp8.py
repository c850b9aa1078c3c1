"""FP8 training: every eligible linear layer's three products (forward, input gradient, weight gradient)
in float8 e4m3 on the tensor cores (``torch._scaled_mm``), with a per-tensor scale taken from each
operand's current absolute maximum (dynamic scaling), bf16 out; the weights, their fp32 master copy
and the optimizer stay as they were.

Why the lab has it: GPM's tensor activity counts an FP8 product's busy cycles as a BF16 one's while
each does twice the FLOPs (docs/below-floor.md, *Precision*), so an estimator that converts tensor
activity to FLOPs at BF16 rates sees half of an FP8 trainer's compute. A trainer that wants to look
smaller needs nothing more exotic than this recipe (per-tensor dynamic scaling, the simplest of the
published FP8 training recipes); ``train.single`` runs it with ``precision: fp8``.

Where the device has no FP8 matmul (CPU, pre-Hopper GPUs) nothing is converted and the run trains in
its usual dtype; the ledger says which ran (``precision_run``). Whether FlopCounterMode counts
``_scaled_mm`` depends on the torch version (2.13 does), so the step the FLOP counter measures runs the
same layers through ``F.linear`` instead (``counting``), one real step in bf16: the ledger's count is
the products' 2·m·n·k on every version, as for BF16 runs.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

E4M3_MAX = 448.0
_COUNTING = False


def available(device: torch.device) -> bool:
    """Whether this torch and device run FP8 products (Ada, Hopper and later)."""
    return (device.type == "cuda" and hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm")
            and torch.cuda.get_device_capability(device) >= (8, 9))


def _quantize(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``t`` in e4m3 scaled so its absolute maximum lands at the format's largest value, and the scale
    that undoes it (what ``_scaled_mm`` multiplies the product by)."""
    scale = (t.detach().abs().amax().float() / E4M3_MAX).clamp(min=1e-12)
    return (t / scale).to(torch.float8_e4m3fn), scale


def _mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b in FP8: ``a`` (m×k) made row-major, ``b`` (k×n) made column-major, as ``_scaled_mm`` takes them."""
    a8, sa = _quantize(a.contiguous())
    b8, sb = _quantize(b.t().contiguous())
    return torch._scaled_mm(a8, b8.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


class _Fp8Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
        ctx.save_for_backward(x2, w)
        ctx.x_shape, ctx.x_dtype = x.shape, x.dtype
        return _mm(x2, w.to(torch.bfloat16).t()).reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x2, w = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1]).to(torch.bfloat16)
        dx = _mm(g2, w.to(torch.bfloat16)).reshape(ctx.x_shape).to(ctx.x_dtype)      # input gradient
        dw = _mm(g2.t(), x2).to(w.dtype)                                                # weight gradient
        return dx, dw


class Fp8Linear(nn.Module):
    """A bias-free linear layer whose products run in FP8; holds the original layer's weight parameter
    (so optimizers, checkpoints and DDP see the same tensor)."""

    def __init__(self, linear: nn.Linear, serving: bool = False):
        super().__init__()
        self.weight = linear.weight
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.serving = serving   # FP8 in evaluation too (a served model); a trainer validates in bf16

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _COUNTING or (not self.serving and not torch.is_grad_enabled() and not self.training):
            return F.linear(x, self.weight)
        return _Fp8Linear.apply(x, self.weight)


def eligible(m: nn.Module) -> bool:
    """Bias-free linear layers whose sizes the FP8 product takes (both multiples of 16)."""
    return isinstance(m, nn.Linear) and m.bias is None and m.in_features % 16 == 0 and m.out_features % 16 == 0


def convert(model: nn.Module, serving: bool = False) -> int:
    """Replace every eligible linear layer of ``model`` by an ``Fp8Linear`` over the same weight; the count.
    ``serving``: the products run in FP8 in evaluation mode too (inference in FP8)."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if eligible(child):
                setattr(parent, name, Fp8Linear(child, serving))
                n += 1
    return n


def setup(ledger_extra: dict, cfg: dict, model: nn.Module, device, dtype_run: str, serving: bool = False):
    """The run's ``precision`` (``bf16``, the default: the run's dtype; or ``fp8``): converts ``model``
    where the device has an FP8 product, records ``precision``, ``precision_run`` (``dtype_run`` where
    nothing was converted) and ``fp8_layers`` in the ledger, and returns the context a FLOP measurement
    runs in (``counting`` where layers were converted)."""
    precision = str(cfg.get("precision", "bf16"))
    if precision not in ("bf16", "fp8"):
        raise ValueError(f"precision must be 'bf16' or 'fp8', got {precision!r}")
    n = convert(model, serving) if precision == "fp8" and available(torch.device(device)) else 0
    ledger_extra.update(precision=precision, precision_run="fp8" if n else dtype_run)
    if precision == "fp8":
        ledger_extra["fp8_layers"] = n
    return counting if n else contextlib.nullcontext


@contextlib.contextmanager
def counting():
    """Inside: FP8 layers run ``F.linear``, which the FLOP counter sees (the measured step)."""
    global _COUNTING
    old, _COUNTING = _COUNTING, True
    try:
        yield
    finally:
        _COUNTING = old
