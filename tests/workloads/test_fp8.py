"""FP8 training (workloads/fp8.py): the three products of a linear layer in float8 with dynamic
per-tensor scales. torch's ``_scaled_mm`` also runs on the CPU, so the products, their gradients and a
real training run are checked here; on a GPU the same code runs on the tensor cores."""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from trainsentry.workloads import fp8
from trainsentry.workloads.flops import measure
from trainsentry.workloads.model import GPT, ModelConfig, loss_fn


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm())


def test_the_three_products_match_bf16_to_fp8_precision():
    torch.manual_seed(0)
    x = torch.randn(64, 96, requires_grad=True)
    w = torch.randn(48, 96, requires_grad=True)
    y = fp8._Fp8Linear.apply(x, w)
    assert y.dtype == torch.bfloat16 and y.shape == (64, 48)
    g = torch.randn(64, 48)
    y.backward(g)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    F.linear(xr, wr).backward(g)
    # e4m3 keeps 3 mantissa bits: each element is off by up to ~6 %, a product's sum much less
    assert _rel(y, F.linear(x.detach(), w.detach())) < 0.08
    assert x.grad.dtype == x.dtype and w.grad.dtype == w.dtype
    assert _rel(x.grad, xr.grad) < 0.08 and _rel(w.grad, wr.grad) < 0.08
    # and it is not the bf16 product: quantisation error is there
    assert _rel(y, F.linear(x.detach(), w.detach())) > 1e-3


def test_scales_follow_the_operand_so_small_and_large_tensors_survive():
    for s in (1e-4, 1.0, 1e4):
        a, b = torch.randn(32, 64) * s, torch.randn(64, 32)
        assert _rel(fp8._mm(a, b), a @ b) < 0.08, s


def _tiny(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(d_model=64, n_layers=2, n_heads=4, seq_len=32))


def test_convert_swaps_every_eligible_layer_and_keeps_the_weights():
    model = _tiny()
    before = {n: p for n, p in model.named_parameters()}
    n = fp8.convert(model)
    assert n == 2 * 6 + 1   # q, k, v, o, fc1, fc2 per block, and the head (vocab 256)
    assert {n: p for n, p in model.named_parameters()} == before   # the same Parameter objects
    assert not fp8.eligible(torch.nn.Linear(64, 10, bias=False)) and not fp8.eligible(torch.nn.Linear(64, 64))


def test_the_flop_counter_sees_the_fp8_model_as_the_bf16_one_inside_counting():
    x = torch.randint(0, 256, (4, 32))
    ref, model = _tiny(), _tiny()
    fp8.convert(model)
    want = measure(lambda: loss_fn(ref(x[:, :-1]), x[:, 1:]).backward())
    with fp8.counting():
        got = measure(lambda: loss_fn(model(x[:, :-1]), x[:, 1:]).backward())
    assert got == want > 0


@pytest.mark.parametrize("recipe", ["dynamic", "delayed"])
def test_a_model_trained_in_fp8_learns(recipe):
    """One block of width 32: torch's FP8 product on the CPU is a slow reference implementation, so the
    learning run is kept to what shows learning in a few seconds."""
    torch.manual_seed(1)
    model = GPT(ModelConfig(d_model=32, n_layers=1, n_heads=2, seq_len=16))
    assert fp8.convert(model, recipe=recipe) == 7
    assert all(m.recipe == recipe for m in model.modules() if isinstance(m, fp8.Fp8Linear))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.randint(0, 16, (4, 17)) * 3 % 256     # a small alphabet: learnable in a few steps
    losses = []
    for _ in range(30):
        loss = loss_fn(model(data[:, :-1]), data[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] - 3.0, (losses[0], losses[-1])


def test_no_fp8_matmul_on_this_device_means_nothing_is_converted():
    assert fp8.available(torch.device("cpu")) is False


@pytest.mark.parametrize("bad", ["fp4", "int8"])
def test_precision_is_checked(bad):
    from trainsentry.workloads.train import _precision

    class Ctx:
        is_cuda, dtype, device = False, torch.float32, "cpu"
        ledger = type("L", (), {"extra": {}})()
    with pytest.raises(ValueError, match="precision must be"):
        _precision(Ctx(), {"precision": bad}, _tiny(), "single")


def test_a_served_model_runs_its_products_in_fp8_in_evaluation_too():
    """serving=True (infer.embed with precision fp8): FP8 under inference mode; a trainer's layers
    validate in bf16 (F.linear) instead."""
    x = torch.randint(0, 256, (2, 32))
    ref, served, trained = _tiny(), _tiny(), _tiny()
    fp8.convert(served, serving=True)
    fp8.convert(trained)
    for m in (ref, served, trained):
        m.eval()
    with torch.inference_mode():
        want, got, val = ref.embed(x), served.embed(x), trained.embed(x)
    assert torch.equal(val, want)                        # the trainer's evaluation path: the bf16 product
    assert 0 < _rel(got, want) < 0.1, _rel(got, want)     # the served one: FP8, close to it


def test_the_delayed_recipe_matches_the_products_and_takes_its_scale_from_history():
    """fp8_delayed: the first cast of each operand reads its own maximum; later casts the history's, so a
    tensor much larger than the ones before it saturates (the delayed recipe's known cost), and the
    history then holds its maximum for the next cast."""
    torch.manual_seed(0)
    amax = fp8._Amax()
    x = torch.randn(64, 96, requires_grad=True)
    w = torch.randn(48, 96, requires_grad=True)
    g = torch.randn(64, 48)
    y = fp8._Fp8DelayedLinear.apply(x, w, amax)
    y.backward(g)
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    F.linear(xr, wr).backward(g)
    assert y.dtype == torch.bfloat16 and 1e-3 < _rel(y, F.linear(x.detach(), w.detach())) < 0.08
    assert _rel(x.grad, xr.grad) < 0.08 and _rel(w.grad, wr.grad) < 0.08
    assert amax.casts == [1, 1, 1]
    assert torch.allclose(amax.hist[0, 0], x.detach().abs().max().to(torch.bfloat16).float())
    big = (x.detach() * 100).requires_grad_()
    y_big = fp8._Fp8DelayedLinear.apply(big, w, amax)     # scaled for x's range: saturates at 448 × scale
    assert float(y_big.float().abs().max()) < 0.2 * float(F.linear(big.detach(), w.detach()).abs().max())
    y_after = fp8._Fp8DelayedLinear.apply(big, w, amax)   # the history now holds big's maximum
    assert _rel(y_after, F.linear(big.detach(), w.detach())) < 0.08
    assert amax.casts[0] == 3 and amax.casts[2] == 1


def test_the_history_is_a_ring_of_the_last_casts():
    amax = fp8._Amax()
    for i in range(fp8.AMAX_HISTORY + 3):
        t = torch.full((16, 16), float(i + 1))
        amax.scale(0, t)
        amax.record(0, t.abs().amax())
    # the first three entries were overwritten by the newest maxima; the oldest kept is cast 4's
    assert float(amax.hist[0].min()) == 4.0 and float(amax.hist[0].max()) == fp8.AMAX_HISTORY + 3


@pytest.mark.parametrize("recipe", ["dynamic", "delayed"])
@pytest.mark.parametrize("store", [False, True])
def test_a_model_served_in_fp8_generates_with_its_kv_cache(recipe, store):
    """infer.generate with precision fp8 / fp8_delayed: prefill and one-token decode steps (a product of
    a few rows) run in FP8 and stay close to the bf16 model's logits (a bf16 model and cache, as a GPU
    serves them: the FP8 products return bf16), with the weights cast at every product or quantised
    once and stored (``fp8_weights: stored``)."""
    from trainsentry.workloads.model import KVCache
    ref, served = _tiny().to(torch.bfloat16), _tiny().to(torch.bfloat16)
    fp8.convert(served, serving=True, recipe=recipe, store_weights=store)
    prompts = torch.randint(0, 256, (2, 8))
    out = []
    for m in (ref, served):
        m.eval()
        cache = KVCache(m.cfg, len(m.layers), 2, 12, "cpu", torch.bfloat16)
        with torch.inference_mode():
            logits = [m(prompts, cache)[:, -1]]
            for _ in range(3):
                logits.append(m(logits[-1].argmax(-1, keepdim=True), cache)[:, -1])
        out.append(torch.stack(logits))
    assert 0 < _rel(out[1], out[0]) < 0.1, _rel(out[1], out[0])
    layers = [m for m in served.modules() if isinstance(m, fp8.Fp8Linear)]
    assert all((m._w8 is not None) == store for m in layers)
    if store:
        assert all(m._w8[0].dtype == torch.float8_e4m3fn and m._w8[0].shape == m.weight.shape for m in layers)


def test_setup_records_the_recipe_and_the_cast():
    extra: dict = {}
    ctx = fp8.setup(extra, {"precision": "fp8_delayed"}, _tiny(), "cpu", "float32")
    # no FP8 product on the CPU: nothing converted, and the ledger says so
    assert extra == {"precision": "fp8_delayed", "precision_run": "float32", "fp8_layers": 0, "fp8_recipe": "delayed"}
    assert ctx is not fp8.counting
    assert fp8.cast_kernel("cpu") == "eager: no GPU"
    with pytest.raises(ValueError, match="recipe must be"):
        fp8.Fp8Linear(torch.nn.Linear(16, 16, bias=False), recipe="mxfp8")
    served: dict = {}
    fp8.setup(served, {"precision": "fp8", "fp8_weights": "stored"}, _tiny(), "cpu", "bfloat16", serving=True)
    assert served["fp8_weights"] == "stored" and "fp8_cast" not in served
    with pytest.raises(ValueError, match="fp8_weights must be"):   # a trainer's weights change every step
        fp8.setup({}, {"precision": "fp8_delayed", "fp8_weights": "stored"}, _tiny(), "cpu", "float32")


def test_the_one_pass_cast_lays_out_what_the_reference_does():
    """The Triton kernel under Triton's CPU interpreter, where Triton is installed (CUDA builds of torch
    bring it; CI's CPU build does not): the transposed copy is the copy transposed, partial tiles are
    masked and the maximum is exact. The interpreter emulates the e4m3 rounding only roughly, so the
    values are checked bit for bit on the GPU, by ``cast_kernel`` before a run uses the kernel. In a
    process of its own: Triton reads ``TRITON_INTERPRET`` when it is first imported."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("no Triton (torch's CPU build does not bring it)")
    code = """
import torch
from trainsentry.workloads import fp8
torch.manual_seed(0)
t = (torch.randn(100, 80) * 3).to(torch.bfloat16)
q, qt, amax = fp8._triton_cast(t, torch.tensor(0.01))
ref, _, ref_amax = fp8._cast(t, torch.tensor(0.01))
assert q.shape == (100, 80) and qt.shape == (80, 100) and q.dtype == qt.dtype == torch.float8_e4m3fn
assert torch.equal(qt.view(torch.uint8), q.t().contiguous().view(torch.uint8))
assert float(amax) == float(ref_amax)
err = float((q.float() - ref.float()).norm() / ref.float().norm())
assert err < 0.2, err
"""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
