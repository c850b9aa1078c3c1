"""Post-training quantization (class ``other``, family ``quantize``): GPTQ (Frantar et al., 2023) on a
frozen language model, the way a model is compressed before it is served.

Why it is in the benign corpus. It is neither training nor serving, yet it has two physical traits of
training that telemetry read from outside could take for it:
- it reduces over the token dimension: every linear layer's statistic ``H = XᵀX`` over the calibration
  tokens is a GEMM of the same shape as that layer's weight gradient ``δᵀX``;
- it rewrites the weights of every linear layer of every block (all but the embeddings, norms and
  output head, as GPTQ does), once per pass.
It has no loss, no backward pass, no gradient and no optimizer: each weight moves to a point of a
quantization grid chosen to keep its layer's output close to the original's, and nothing is learned.
It is also the case that evidence of "weights changed" must tell apart from training (the report's
recommendations): here the weights do change.

A pass quantizes the whole model; a ledger step is one transformer block:
1. the block runs on the calibration inputs (``calib`` texts of ``text_len`` tokens, ``chunk`` texts at
   a time) with hooks on its six linear layers accumulating ``H += XᵀX`` in fp32;
2. each linear layer's weight is quantized column by column in GPTQ's lazy blocks of ``blocksize``
   columns: every column is rounded to the grid (asymmetric, ``bits`` bits, a scale and zero point
   per output row and per ``group`` columns, 0 = one per row) and its rounding error, weighted by the
   upper Cholesky factor of ``H⁻¹`` (damped by ``damp`` × the mean of diag H), is taken off the
   columns not yet quantized; the dequantized weight is written back in the model's dtype;
3. the block runs again, quantized, and its outputs are the next block's inputs (errors propagate to
   later blocks' statistics, as in GPTQ).
Before a pass the model's loss on ``eval_texts`` held-out texts is measured, after it again; then the
original weights are restored (a device copy) and the next pass takes the next of ``bits``.

Ground truth: ``passes`` (bits, loss before and after, and the layers' output error relative to
round-to-nearest on the same grid, ``tr(ΔW H ΔWᵀ)`` over RTN's, below 1 when GPTQ works),
``tensors_written`` per pass (the weight tensors written before the restore: six per finished block,
nothing else), ``weights_changed`` (True) and ``weight_grads`` (0). FLOPs per step: the two block forwards and the
``XᵀX`` hooks counted by FlopCounterMode on one chunk, GPTQ's own arithmetic from ``gptq_flops``
(its matrix products exactly, the two Cholesky factorisations and the inverse by their textbook
counts), and the ground truth's error measurement (``ΔW H`` for GPTQ and for RTN: ``4·rows·cols²``
per layer), which the GPU does too.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from . import flops as flopcount
from .base import Context, variants
from .infer import weight_versions
from .infer_common import build_model, model_config, prompt_source
from .model import loss_fn


def grid(w: torch.Tensor, maxq: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric min-max grid per row of ``w`` [rows, cols] (0 always representable): scale, zero."""
    lo = w.min(dim=1).values.clamp(max=0)
    hi = w.max(dim=1).values.clamp(min=0)
    flat = (lo == 0) & (hi == 0)
    lo, hi = torch.where(flat, -1.0, lo), torch.where(flat, 1.0, hi)
    scale = (hi - lo) / maxq
    return scale, torch.round(-lo / scale)


def fake_quant(w: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor, maxq: int) -> torch.Tensor:
    """Round ``w`` (a column [rows] or a block [rows, cols] with per-row ``scale``/``zero``) to the grid
    and return the dequantized values."""
    if w.dim() == 2:
        scale, zero = scale[:, None], zero[:, None]
    q = torch.clamp(torch.round(w / scale) + zero, 0, maxq)
    return scale * (q - zero)


def rtn(w: torch.Tensor, bits: int, group: int) -> torch.Tensor:
    """Round-to-nearest on the same grids GPTQ uses (the baseline it is measured against)."""
    maxq, w = 2 ** bits - 1, w.float()
    step = group if group > 0 else w.shape[1]
    out = torch.empty_like(w)
    for j in range(0, w.shape[1], step):
        blk = w[:, j:j + step]
        out[:, j:j + step] = fake_quant(blk, *grid(blk, maxq), maxq)
    return out


def check_shape(cols: int, blocksize: int, group: int) -> None:
    if blocksize < 1 or group < 0 or (group and group % blocksize):
        raise ValueError(f"group ({group}) must be 0 or a multiple of blocksize ({blocksize})")
    if group and cols % group:
        raise ValueError(f"{cols} columns do not split into groups of {group}")


def gptq(w: torch.Tensor, h: torch.Tensor, bits: int, blocksize: int = 128, group: int = 128,
         damp: float = 0.01) -> torch.Tensor:
    """GPTQ's quantized (dequantized, fp32) version of ``w`` [rows, cols] given ``h = XᵀX`` [cols, cols].

    Column ``j`` is rounded, and its error divided by ``U[j, j]`` (``U`` the upper Cholesky factor of
    the damped ``H⁻¹``) is spread over the columns after it with row ``U[j, j:]``: within a block at
    once, to the rest of the matrix once per block (one GEMM), which is GPTQ's lazy batch update."""
    rows, cols = w.shape
    check_shape(cols, blocksize, group)
    maxq = 2 ** bits - 1
    w = w.float().clone()
    h = h.float().clone()
    dead = h.diagonal() == 0   # inputs that were always 0: their weights cannot matter
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    h.diagonal().add_(damp * h.diagonal().mean())
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.zeros_like(w)
    scale, zero = grid(w, maxq) if group == 0 else (None, None)
    for i1 in range(0, cols, blocksize):
        i2 = min(i1 + blocksize, cols)
        w1 = w[:, i1:i2].clone()
        err = torch.zeros_like(w1)
        u1 = u[i1:i2, i1:i2]
        if group and i1 % group == 0:   # groups start on block starts (check_shape), so w1 is fresh here
            scale, zero = grid(w[:, i1:i1 + group], maxq)
        for i in range(i2 - i1):
            col = w1[:, i]
            qc = fake_quant(col, scale, zero, maxq)
            q[:, i1 + i] = qc
            e = (col - qc) / u1[i, i]
            w1[:, i:] -= e[:, None] * u1[i, i:][None, :]
            err[:, i] = e
        w[:, i2:] -= err @ u[i1:i2, i2:]
    return q


def gptq_flops(rows: int, cols: int, blocksize: int) -> int:
    """GPTQ's arithmetic on one ``rows × cols`` weight: the per-block GEMMs and the in-block rank-one
    updates exactly (2 FLOPs per multiply-add); the two Cholesky factorisations at ``cols³/3`` each and
    the inverse from the factor at ``2·cols³/3`` (textbook counts; FlopCounterMode does not count them)."""
    total = 0
    for i1 in range(0, cols, blocksize):
        b = min(blocksize, cols - i1)
        total += 2 * rows * b * (cols - i1 - b)          # err @ u[block, rest]
        total += 2 * rows * b * (b + 1) // 2             # rank-one updates inside the block
    return total + 4 * cols ** 3 // 3


def linears(block: nn.Module) -> list[tuple[str, nn.Linear]]:
    return [(n, m) for n, m in block.named_modules() if isinstance(m, nn.Linear)]


def collect_h(block: nn.Module, inputs: torch.Tensor, chunk: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Run ``block`` over ``inputs`` [n, T, d] in chunks, summing ``XᵀX`` (fp32) at each linear layer's
    input; returns the statistics and the block's outputs."""
    stats = {n: torch.zeros(m.in_features, m.in_features, device=inputs.device) for n, m in linears(block)}

    def hook(name):
        def fn(mod, args, out):
            x = args[0].reshape(-1, mod.in_features).float()
            stats[name] += x.T @ x   # an mm, which FlopCounterMode counts (it has no formula for addmm_)
        return fn

    handles = [m.register_forward_hook(hook(n)) for n, m in linears(block)]
    try:
        out = torch.cat([block(inputs[i:i + chunk]) for i in range(0, inputs.shape[0], chunk)])
    finally:
        for hd in handles:
            hd.remove()
    return stats, out


def quantize_block(block: nn.Module, stats: dict[str, torch.Tensor], bits: int, blocksize: int, group: int,
                   damp: float) -> float:
    """Quantize every linear layer of ``block`` in place; returns the block's output error summed over
    its layers, relative to round-to-nearest's (``Σ tr(ΔW H ΔWᵀ)`` GPTQ over RTN)."""
    ours = base = 0.0
    for name, mod in linears(block):
        w, h = mod.weight.detach().float(), stats[name]
        q = gptq(w, h, bits, blocksize, group, damp)
        for approx, acc in ((q, "ours"), (rtn(w, bits, group), "base")):
            d = approx - w
            v = float(((d @ h) * d).sum())
            if acc == "ours":
                ours += v
            else:
                base += v
        mod.weight.copy_(q.to(mod.weight.dtype))
    return ours / base if base > 0 else 1.0


def run_quantize(ctx: Context, cfg: dict) -> None:
    """GPTQ post-training quantization, pass after pass (see the module docstring)."""
    mcfg = model_config(cfg)
    model = build_model(ctx, mcfg)
    for p in model.parameters():
        p.requires_grad_(False)
    bits_cycle = [int(b) for b in (cfg["bits"] if isinstance(cfg["bits"], (list, tuple)) else [cfg["bits"]])]
    if any(not 2 <= b <= 8 for b in bits_cycle):
        raise ValueError(f"bits must be between 2 and 8, got {bits_cycle}")
    calib, length, chunk = int(cfg["calib"]), int(cfg["text_len"]), int(cfg["chunk"])
    blocksize, group, damp = int(cfg.get("blocksize", 128)), int(cfg.get("group", 128)), float(cfg.get("damp", 0.01))
    if length > mcfg.seq_len:
        raise ValueError(f"text_len {length} exceeds seq_len {mcfg.seq_len}")
    for _, m in linears(next(iter(model.layers.values()))):
        check_shape(m.in_features, blocksize, group)
    src = prompt_source(ctx, salt=ctx.rank)
    blocks = list(model.layers.values())
    pos = torch.arange(length, device=ctx.device)
    with torch.no_grad():
        tokens = src.prompts(calib, length)
        held = src.prompts(int(cfg.get("eval_texts", 8)), length + 1)
        original = [p.detach().clone() for p in model.parameters()]
        versions = weight_versions(model)

        def held_loss() -> float:
            return float(loss_fn(model(held[:, :-1]), held[:, 1:]))

        def embed() -> torch.Tensor:
            return model.tok(tokens) + model.pos(pos)

        x0 = embed()
        first = x0[:chunk]
        fwd_hooked = flopcount.measure(lambda: collect_h(blocks[0], first, chunk))
        fwd = flopcount.measure(lambda: blocks[0](first))
        chunks = -(-calib // chunk)
        per_linear = sum(gptq_flops(m.out_features, m.in_features, blocksize) + 4 * m.out_features * m.in_features ** 2
                         for _, m in linears(blocks[0]))
        ctx.ledger.flops_per_step = chunks * (fwd_hooked + fwd) + per_linear
        ctx.ledger.extra.update(params=mcfg.params(), method="flop_counter+gptq_flops",
                                weights_dtype=str(next(model.parameters()).dtype), blocks=len(blocks),
                                calibration_tokens=calib * length)
        passes: list[dict] = []
        while ctx.keep_going():
            bits = bits_cycle[len(passes) % len(bits_cycle)]
            entry = {"bits": bits, "loss_before": held_loss(), "blocks_done": 0, "error_vs_rtn": []}
            passes.append(entry)
            x = embed()
            for block in blocks:
                if not ctx.keep_going():
                    break
                t0 = time.perf_counter()
                stats, _ = collect_h(block, x, chunk)
                entry["error_vs_rtn"].append(quantize_block(block, stats, bits, blocksize, group, damp))
                x = torch.cat([block(x[i:i + chunk]) for i in range(0, calib, chunk)])
                ctx.sync()
                ctx.ledger.step(time.perf_counter() - t0, calib * length)
                entry["blocks_done"] += 1
            entry["loss_after"] = held_loss()
            # the ground truth that GPTQ wrote: every linear weight of every block it finished, nothing else
            written = [p._version != v for p, v in zip(model.parameters(), versions)]
            entry["tensors_written"] = sum(written)
            ratios = entry.pop("error_vs_rtn")
            entry["error_vs_rtn_mean"] = sum(ratios) / max(len(ratios), 1)
            for p, o in zip(model.parameters(), original):
                p.copy_(o)
            versions = weight_versions(model)   # the restore is not the next pass's writing
        # GPTQ wrote the weights if a pass did (the restores between passes are writes too, so the
        # versions at the end would say True whatever GPTQ did)
        ctx.ledger.extra.update(passes=passes, weights_changed=any(p["tensors_written"] for p in passes),
                                weight_grads=sum(p.grad is not None for p in model.parameters()))


variants("other.quantize", "other", "quantize", run_quantize,
         base={"model": "gpt1b", "seq_len": 2048, "text_len": 2048, "calib": 128, "chunk": 16, "bits": [4, 3],
               "blocksize": 128, "group": 128, "damp": 0.01, "eval_texts": 8},
         toy={"model": "toy", "seq_len": 32, "text_len": 16, "calib": 6, "chunk": 4, "blocksize": 16,
              "group": 32, "eval_texts": 2},
         gpus=1, description="GPTQ post-training quantization of a frozen model: XᵀX statistics and every block"
                             "'s weights rewritten, no loss gradient and no optimizer", grid={
             "l1b_c128": {},
             "m350m_c256": {"model": "gpt350m", "calib": 256, "chunk": 32},
             "xl3b_c64_g0": {"model": "gpt3b", "calib": 64, "chunk": 8, "bits": [4], "group": 0},
             "g7b_c32": {"model": "gpt7b", "calib": 32, "chunk": 4, "bits": [4, 8]},
         })
