"""Ground-truth FLOPs: torch.utils.flop_counter.FlopCounterMode, the same on CPU and GPU.

FlopCounterMode has formulas for the GPU attention kernels (flash, efficient, cuDNN) but not for the
CPU flash kernel, so a CPU run would silently count no attention. We register the CPU kernels with
torch's own SDPA formulas, so toy CPU runs and H200 runs count alike. As torch does, the causal mask
is not discounted: attention counts the full QKᵀ and AV products.
"""

from __future__ import annotations

import torch
from torch.utils import flop_counter as fc

_registered = False


def _register_cpu_attention() -> None:
    global _registered
    if _registered:
        return
    aten = torch.ops.aten

    def forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return fc.sdpa_flop_count(query_shape, key_shape, value_shape)

    def backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
        return fc.sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)

    for name, formula in (("_scaled_dot_product_flash_attention_for_cpu", forward),
                          ("_scaled_dot_product_flash_attention_for_cpu_backward", backward)):
        op = getattr(aten, name, None)
        if op is not None and op not in fc.flop_registry:
            fc.register_flop_formula(op)(formula)
    _registered = True


def counter() -> fc.FlopCounterMode:
    """A FlopCounterMode that also counts CPU attention."""
    _register_cpu_attention()
    return fc.FlopCounterMode(display=False)


def measure(step) -> int:
    """FLOPs of one call of ``step()`` on this rank."""
    with counter() as c:
        step()
    return int(c.get_total_flops())
