"""GPTQ post-training quantization (other_quant.py) is the real algorithm: with uncorrelated inputs it
is exactly round-to-nearest, with correlated ones its layer-output error is well below
round-to-nearest's, its matrix products are the FLOPs ``gptq_flops`` says, and a run rewrites every
weight with no gradient, restoring the original between passes. The every-workload toy launch of
test_infer.py runs it under the real worker too."""

from __future__ import annotations

import math

import pytest
import torch

from trainsentry.workloads import flops as flopcount
from trainsentry.workloads import infer, other  # noqa: F401  (registers the workloads)
from trainsentry.workloads.base import WORKLOADS, Context
from trainsentry.workloads.other_quant import gptq, gptq_flops, rtn


def _correlated(n: int, cols: int, seed: int = 0) -> torch.Tensor:
    """Inputs whose features share a few strong directions, as a language model's activations do."""
    g = torch.Generator().manual_seed(seed)
    basis = torch.randn(8, cols, generator=g)
    return torch.randn(n, 8, generator=g) @ basis * 3 + 0.3 * torch.randn(n, cols, generator=g)


def _err(w, q, x):
    return float(((x @ (w - q).T) ** 2).sum())


@pytest.mark.parametrize("group", [0, 32])
def test_gptq_is_round_to_nearest_when_the_inputs_are_uncorrelated(group):
    """With H a multiple of the identity the inverse's Cholesky factor is diagonal: no error is
    carried to later columns, so GPTQ must give round-to-nearest's weights exactly."""
    w = torch.randn(24, 64, generator=torch.Generator().manual_seed(1))
    q = gptq(w, 5.0 * torch.eye(64), bits=4, blocksize=16, group=group)
    assert torch.allclose(q, rtn(w, 4, group), atol=1e-6)


@pytest.mark.parametrize("bits,group", [(4, 0), (3, 32), (2, 64)])
def test_gptq_beats_round_to_nearest_on_correlated_inputs(bits, group):
    w = torch.randn(48, 128, generator=torch.Generator().manual_seed(2)) * 0.05
    x = _correlated(2048, 128)
    q = gptq(w, x.T @ x, bits=bits, blocksize=32, group=group)
    # every row (every group of a row) holds at most 2^bits distinct values: a real b-bit grid
    step = group or 128
    for j in range(0, 128, step):
        assert max(len(torch.unique(r)) for r in q[:, j:j + step]) <= 2 ** bits
    assert _err(w, q, x) < 0.7 * _err(w, rtn(w, bits, group), x)


def test_gptq_matrix_products_are_what_gptq_flops_counts():
    rows, cols, bs = 16, 96, 32
    w, x = torch.randn(rows, cols), _correlated(256, cols)
    h = x.T @ x
    counted = flopcount.measure(lambda: gptq(w, h, bits=4, blocksize=bs, group=0))
    products = sum(2 * rows * bs * (cols - i - bs) for i in range(0, cols, bs))
    inblock = (cols // bs) * 2 * rows * bs * (bs + 1) // 2
    assert counted == products   # FlopCounterMode sees the per-block GEMMs only
    assert gptq_flops(rows, cols, bs) == products + inblock + 4 * cols ** 3 // 3


def test_the_statistics_hooks_are_counted_as_flops():
    """Collecting XᵀX costs 2·tokens·in² per linear layer on top of the block's forward, and the FLOP
    counter sees it (an in-place addmm_ it would not)."""
    from trainsentry.workloads.infer_common import MODELS
    from trainsentry.workloads.model import Block, ModelConfig
    from trainsentry.workloads.other_quant import collect_h, linears

    block = Block(ModelConfig(**MODELS["toy"], seq_len=16))
    x = torch.randn(3, 16, 64)
    hooked = flopcount.measure(lambda: collect_h(block, x, 2))
    plain = flopcount.measure(lambda: block(x))
    assert hooked - plain == sum(2 * 3 * 16 * m.in_features ** 2 for _, m in linears(block))


def test_bad_grouping_is_refused():
    with pytest.raises(ValueError, match="multiple of blocksize"):
        gptq(torch.randn(4, 64), torch.eye(64), bits=4, blocksize=32, group=48)
    with pytest.raises(ValueError, match="groups of"):
        gptq(torch.randn(4, 96), torch.eye(96), bits=4, blocksize=32, group=64)


def test_a_run_rewrites_every_weight_without_a_gradient_and_restores_them_between_passes():
    spec = WORKLOADS["other.quantize.l1b_c128"]
    cfg = spec.resolve(toy=True)
    ctx = Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32,
                  deadline=math.inf, max_steps=5, toy=True, seed=4)   # toy model: 2 blocks a pass
    spec.fn(ctx, cfg)
    x = ctx.ledger.extra
    assert ctx.ledger.steps == 5 and ctx.ledger.flops == 5 * ctx.ledger.flops_per_step > 0
    assert x["weights_changed"] is True and x["weight_grads"] == 0
    passes = x["passes"]
    assert [p["bits"] for p in passes] == [4, 3, 4] and [p["blocks_done"] for p in passes] == [2, 2, 1]
    # each pass starts from the original weights: the loss before every pass is the same
    assert passes[0]["loss_before"] == pytest.approx(passes[1]["loss_before"], rel=1e-6)
    assert passes[1]["loss_before"] == pytest.approx(passes[2]["loss_before"], rel=1e-6)
    for p in passes:
        assert math.isfinite(p["loss_after"]) and p["loss_after"] != p["loss_before"]
        assert 0 < p["error_vs_rtn_mean"] < 1   # GPTQ's layer outputs closer than round-to-nearest's
        assert p["tensors_written"] == 6 * p["blocks_done"]   # the blocks' linear weights, nothing else
