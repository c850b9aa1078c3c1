"""FP8 training: every eligible linear layer's three products (forward, input gradient, weight gradient)
in float8 e4m3 on the tensor cores (``torch._scaled_mm``), with a per-tensor scale taken from each
operand's current absolute maximum (dynamic scaling), bf16 out; the weights, their fp32 master copy
and the optimizer stay as they were.

Why the lab has it: GPM's tensor activity counts an FP8 product's busy cycles as a BF16 one's while
each does twice the FLOPs (docs/below-floor.md, *Precision*), so an estimator that converts tensor
activity to FLOPs at BF16 rates sees half of an FP8 trainer's compute. A trainer that wants to look
smaller needs nothing more exotic than this recipe (per-tensor dynamic scaling, the simplest of the
published FP8 training recipes); ``train.single`` runs it with ``precision: fp8``.

``precision: fp8_delayed`` runs the recipe production FP8 libraries run instead (delayed scaling, as
in Micikevicius et al. 2022, "FP8 formats for deep learning", and NVIDIA's Transformer Engine): each
operand is cast at a scale taken from the largest absolute values of its previous casts (an amax
history), so the cast no longer waits for a reduction over the tensor it casts; one Triton kernel
casts, transposes and records the tensor's maximum for the next step, reading it once (eager torch,
several kernels, where there is no GPU or the kernel fails its check: the ledger's ``fp8_cast`` says
which), and the backward pass reuses the forward's FP8 operands instead of re-quantising bf16 copies
(a ``torch.compile``d cast was tried first and ran far slower: docs/lab.md). The dynamic recipe's separate reduction, scaling, cast and transpose kernels are what made its trainers look
memory-bound to the single-device lead (docs/fp8-training.md); this one keeps the tensor cores
busier for the same products.

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
RECIPES = {"fp8": "dynamic", "fp8_delayed": "delayed"}   # a run's precision -> the FP8 recipe it names
PRECISIONS = ("bf16", *RECIPES)
AMAX_HISTORY = 16    # casts of each operand whose maxima set its next scale (Transformer Engine keeps up to 1024)
_COUNTING = False
_CAST = None         # "triton" once ``cast_kernel`` has checked the one-pass cast on this GPU


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


def _cast(t: torch.Tensor, scale: torch.Tensor):
    """``t`` (2-D) in e4m3 at ``scale`` (values beyond the format saturate), the same transposed and made
    contiguous (the layout the other two products take it in), and ``t``'s absolute maximum (the next
    scale's history). The reference for ``_triton_cast``, which does the same in one pass; both
    multiply by the same float32 reciprocal, so on a GPU the two agree bit for bit."""
    q = (t.float() * scale.reciprocal()).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, q.t().contiguous(), t.abs().amax().float()


def _triton_cast(t: torch.Tensor, scale: torch.Tensor):
    """``_cast`` in one kernel (``fp8_cast``, as Transformer Engine's cast-transpose does): each tile of
    ``t`` is read once and written twice in e4m3, and its maximum is folded in by an atomic max."""
    import triton

    from .fp8_cast import cast_transpose_amax
    t = t.contiguous()
    m, n = t.shape
    q = torch.empty((m, n), dtype=torch.float8_e4m3fn, device=t.device)
    qt = torch.empty((n, m), dtype=torch.float8_e4m3fn, device=t.device)
    amax = torch.zeros((), dtype=torch.float32, device=t.device)
    grid = (triton.cdiv(m, 64), triton.cdiv(n, 64))
    cast_transpose_amax[grid](t, q, qt, amax, scale.reciprocal(), m, n, BM=64, BN=64)
    return q, qt, amax


def _caster(device: torch.device):
    """The cast the delayed recipe runs: ``_triton_cast`` on a GPU where ``cast_kernel`` found it
    agreeing with ``_cast``, else ``_cast`` (eager, several kernels)."""
    return _triton_cast if device.type == "cuda" and _CAST == "triton" else _cast


def cast_kernel(device) -> str:
    """Build the one-pass cast for ``device`` and check it against the eager reference on an odd-shaped
    tensor (bit for bit); ``"triton"`` if it is used from now on, else ``"eager"`` and, after a colon,
    why (no GPU, no Triton, a build error, a disagreement)."""
    global _CAST
    device = torch.device(device)
    if device.type != "cuda":
        return "eager: no GPU"
    try:
        t = torch.randn(300, 200, device=device, dtype=torch.bfloat16) * 7
        scale = torch.tensor(0.02, device=device)
        got, want = _triton_cast(t, scale), _cast(t, scale)
        same = all(torch.equal(a.view(torch.uint8) if a.dtype != torch.float32 else a,
                               b.view(torch.uint8) if b.dtype != torch.float32 else b) for a, b in zip(got, want))
        _CAST = "triton" if same else None
        return "triton" if same else "eager: the Triton cast differs from torch's"
    except Exception as e:   # noqa: BLE001 - any build failure leaves the eager cast, said in the ledger
        _CAST = None
        return "eager: " + ((str(e).strip().splitlines() or [type(e).__name__])[0][:200])


class _Amax:
    """One layer's amax histories (operands: 0 input, 1 weight, 2 output gradient) on its device."""

    def __init__(self):
        self.hist: torch.Tensor | None = None
        self.casts = [0, 0, 0]

    def scale(self, row: int, t: torch.Tensor) -> torch.Tensor:
        """The scale to cast ``t`` (operand ``row``) at: its history's maximum over the format's; the
        first cast of an operand has no history and reads ``t``'s own maximum (one extra pass, once)."""
        if self.hist is None:
            self.hist = torch.zeros(3, AMAX_HISTORY, device=t.device)
        if self.casts[row] == 0:
            self.hist[row, 0] = t.detach().abs().amax().float()
        return (self.hist[row].amax() / E4M3_MAX).clamp(min=1e-12)

    def record(self, row: int, amax: torch.Tensor) -> None:
        self.hist[row, self.casts[row] % AMAX_HISTORY] = amax
        self.casts[row] += 1


class _Fp8DelayedLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor, amax: _Amax) -> torch.Tensor:
        cast = _caster(x.device)
        x2, wb = x.reshape(-1, x.shape[-1]).to(torch.bfloat16), w.to(torch.bfloat16)
        sx, sw = amax.scale(0, x2), amax.scale(1, wb)
        x8, x8t, ax = cast(x2, sx)
        w8, w8t, aw = cast(wb, sw)
        amax.record(0, ax)
        amax.record(1, aw)
        ctx.save_for_backward(x8t, w8t, sx, sw)
        ctx.amax, ctx.x_shape, ctx.x_dtype, ctx.w_dtype = amax, x.shape, x.dtype, w.dtype
        y = torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x8t, w8t, sx, sw = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1]).to(torch.bfloat16)
        sg = ctx.amax.scale(2, g2)
        g8, g8t, ag = _caster(grad.device)(g2, sg)
        ctx.amax.record(2, ag)
        dx = torch._scaled_mm(g8, w8t.t(), scale_a=sg, scale_b=sw, out_dtype=torch.bfloat16)   # input gradient
        dw = torch._scaled_mm(g8t, x8t.t(), scale_a=sg, scale_b=sx, out_dtype=torch.bfloat16)  # weight gradient
        return dx.reshape(ctx.x_shape).to(ctx.x_dtype), dw.to(ctx.w_dtype), None


def _served(x: torch.Tensor, w8: torch.Tensor, sw: torch.Tensor, amax: _Amax | None) -> torch.Tensor:
    """A served layer's forward product over a weight quantised once (``w8`` at scale ``sw``): the input
    cast per the layer's recipe (its own maximum, or ``amax``'s history and the one-pass cast, whose
    transposed copy a forward-only product leaves unused)."""
    x2 = x.reshape(-1, x.shape[-1]).to(torch.bfloat16)
    if amax is None:
        x8, sx = _quantize(x2)
    else:
        sx = amax.scale(0, x2)
        x8, _, ax = _caster(x.device)(x2, sx)
        amax.record(0, ax)
    y = torch._scaled_mm(x8, w8.t(), scale_a=sx, scale_b=sw, out_dtype=torch.bfloat16)
    return y.reshape(*x.shape[:-1], w8.shape[0])


class Fp8Linear(nn.Module):
    """A bias-free linear layer whose products run in FP8; holds the original layer's weight parameter
    (so optimizers, checkpoints and DDP see the same tensor)."""

    def __init__(self, linear: nn.Linear, serving: bool = False, recipe: str = "dynamic",
                 store_weights: bool = False):
        super().__init__()
        if recipe not in RECIPES.values():
            raise ValueError(f"recipe must be 'dynamic' or 'delayed', got {recipe!r}")
        self.weight = linear.weight
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.serving = serving   # FP8 in evaluation too (a served model); a trainer validates in bf16
        self.recipe = recipe
        self.amax = _Amax() if recipe == "delayed" else None   # not a buffer: DDP would broadcast it
        # a served model's weight quantised once, at its first product without gradients, and kept (as FP8
        # inference servers store their weights); otherwise cast at every product
        self.store_weights = store_weights
        self._w8: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if _COUNTING or (not self.serving and not torch.is_grad_enabled() and not self.training):
            return F.linear(x, self.weight)
        if self.store_weights and not torch.is_grad_enabled():
            if self._w8 is None:
                self._w8 = _quantize(self.weight.detach().to(torch.bfloat16))
            return _served(x, *self._w8, self.amax)
        if self.amax is not None:
            return _Fp8DelayedLinear.apply(x, self.weight, self.amax)
        return _Fp8Linear.apply(x, self.weight)


def eligible(m: nn.Module) -> bool:
    """Bias-free linear layers whose sizes the FP8 product takes (both multiples of 16)."""
    return isinstance(m, nn.Linear) and m.bias is None and m.in_features % 16 == 0 and m.out_features % 16 == 0


def convert(model: nn.Module, serving: bool = False, recipe: str = "dynamic", store_weights: bool = False) -> int:
    """Replace every eligible linear layer of ``model`` by an ``Fp8Linear`` over the same weight; the count.
    ``serving``: the products run in FP8 in evaluation mode too (inference in FP8). ``recipe``:
    ``dynamic`` (scales from each operand's current maximum) or ``delayed`` (from its history).
    ``store_weights``: a served layer quantises its weight once and keeps it."""
    n = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if eligible(child):
                setattr(parent, name, Fp8Linear(child, serving, recipe, store_weights))
                n += 1
    return n


def setup(ledger_extra: dict, cfg: dict, model: nn.Module, device, dtype_run: str, serving: bool = False):
    """The run's ``precision`` (``bf16``, the default: the run's dtype; ``fp8``: the dynamic recipe;
    ``fp8_delayed``: the delayed one): converts ``model`` where the device has an FP8 product, records
    ``precision``, ``precision_run`` (``fp8``, or ``dtype_run`` where nothing was converted),
    ``fp8_layers``, ``fp8_recipe``, for a served model ``fp8_weights`` (``cast`` at every product, the
    default, or ``stored``: quantised once, ``cfg["fp8_weights"]``) and, for the delayed recipe,
    ``fp8_cast`` (triton or eager) in the ledger, and returns the context a FLOP measurement runs in
    (``counting`` where layers were converted)."""
    precision = str(cfg.get("precision", "bf16"))
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    recipe = RECIPES.get(precision, "dynamic")
    weights = str(cfg.get("fp8_weights", "cast"))
    if weights not in ("cast", "stored") or (weights == "stored" and not serving):
        raise ValueError(f"fp8_weights must be 'cast' or, for a served model, 'stored'; got {weights!r}")
    n = (convert(model, serving, recipe, weights == "stored")
         if precision != "bf16" and available(torch.device(device)) else 0)
    ledger_extra.update(precision=precision, precision_run="fp8" if n else dtype_run)
    if precision != "bf16":
        ledger_extra.update(fp8_layers=n, fp8_recipe=recipe)
        if serving:
            ledger_extra["fp8_weights"] = weights
    if n and recipe == "delayed":
        ledger_extra["fp8_cast"] = cast_kernel(device)
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
