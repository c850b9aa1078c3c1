"""Ground-truth FLOPs: torch.utils.flop_counter.FlopCounterMode, the same on CPU and GPU.

FlopCounterMode has formulas for the GPU attention kernels (flash, efficient, cuDNN) but not for the
CPU flash kernel, so a CPU run would silently count no attention. We register the CPU kernels with
torch's own SDPA formulas, so toy CPU runs and H200 runs count alike. As torch does, the causal mask
is not discounted: attention counts the full QKᵀ and AV products.

FlopCounterMode's formula for a convolution's backward (torch 2.13) counts the weight gradient of a
grouped convolution as if it were not grouped: a depthwise 3×3 convolution of C channels is charged C
times its weight gradient's work (MobileNetV2's training step 7 times over). ``counter`` replaces it
with the same formula, the weight-gradient term divided by the groups; the input gradient and every
ungrouped convolution (groups 1) count as torch counts them.
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


def conv_backward_flops(grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed,
                        output_padding, groups, output_mask, out_shape=None, **kwargs) -> int:
    """A convolution's backward: torch's count of the input gradient, plus torch's count of the weight
    gradient divided by ``groups`` (each group's weights see only its own input channels)."""
    def torch_count(mask) -> int:
        return int(fc.conv_backward_flop.__wrapped__(grad_out_shape, x_shape, w_shape, bias, stride, padding,
                                                     dilation, transposed, output_padding, groups, mask,
                                                     out_shape=out_shape, **kwargs))

    total = torch_count([output_mask[0], False, False]) if output_mask[0] else 0
    if output_mask[1]:
        total += torch_count([False, True, False]) // max(1, int(groups))
    return total


def counter() -> fc.FlopCounterMode:
    """A FlopCounterMode that also counts CPU attention, and counts grouped convolutions' weight
    gradients by their groups."""
    _register_cpu_attention()
    return fc.FlopCounterMode(display=False, custom_mapping={torch.ops.aten.convolution_backward: conv_backward_flops})


def measure(step) -> int:
    """FLOPs of one call of ``step()`` on this rank."""
    with counter() as c:
        step()
    return int(c.get_total_flops())
