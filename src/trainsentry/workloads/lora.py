"""LoRA fine-tuning: a low-rank adapter beside each linear layer of the GPT blocks (or, with
``lora_targets``, beside some of them: query and value at least; with ``lora_layers``, in the last
that many blocks only), base frozen.

y = W x + (alpha / r) · B A x, with A [r, in] random and B [out, r] zero, so training starts from the
base model exactly. Only A and B get gradients, so the gradient all-reduce of a LoRA run is tiny
(adapter bytes) while the forward and backward still cost nearly a full model's FLOPs: the shape a
detector sees is "training compute, inference-like traffic".
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .model import GPT, ModelConfig

TARGETS = ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.fc1", "mlp.fc2")
# Adapters on some projections only (``lora_targets``), as PEFT's default of query and value: both must
# be among them, so every block's first adapter reads the block input and the FLOP formula below holds.
REQUIRED_TARGETS = ("attn.q", "attn.v")


def check_targets(targets) -> tuple[str, ...]:
    """``lora_targets`` as a tuple in TARGETS order; a clear error for an unknown name or a set without
    both ``attn.q`` and ``attn.v``."""
    targets = tuple(targets)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown or not set(REQUIRED_TARGETS) <= set(targets):
        raise ValueError(f"lora_targets must be names from {TARGETS} including {REQUIRED_TARGETS}; got {list(targets)}")
    return tuple(t for t in TARGETS if t in targets)


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        dev, dt = base.weight.device, base.weight.dtype
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, device=dev, dtype=dt))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, device=dev, dtype=dt))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale


def check_layers(layers, n_layers: int) -> int:
    """``lora_layers``: how many of the last blocks carry adapters (None: all); a clear error otherwise."""
    if layers is None:
        return n_layers
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= n_layers:
        raise ValueError(f"lora_layers must be an integer from 1 to the model's {n_layers} layers; got {layers!r}")
    return layers


def apply_lora(model: GPT, rank: int, alpha: float = 16.0, targets=TARGETS, layers: int | None = None) -> int:
    """Freeze every base weight and wrap the block linears named in ``targets`` (all six by default)
    of the last ``layers`` blocks (all by default); returns the adapter parameter count.

    Adapters in the top blocks only make fine-tuning cheap: the blocks below them are frozen and
    nothing below needs a gradient, so autograd records no graph there and the backward pass stops at
    the lowest adapted block; the step is a full forward and a partial backward (the cheapest of the
    fine-tuning workloads here; training the output head alone would cost less still)."""
    targets = check_targets(targets)
    blocks = list(model.layers.values())
    layers = check_layers(layers, len(blocks))
    for p in model.parameters():
        p.requires_grad_(False)
    n = 0
    for block in blocks[len(blocks) - layers:]:
        for path in targets:
            parent_name, attr = path.split(".")
            parent = getattr(block, parent_name)
            lora = LoRALinear(getattr(parent, attr), rank, alpha)
            setattr(parent, attr, lora)
            n += lora.lora_a.numel() + lora.lora_b.numel()
    return n


def lora_from_config(extra: dict, model: GPT, mcfg: ModelConfig, cfg: dict) -> float | None:
    """The adapters a run's config asks for (``lora_rank``, ``lora_targets``, ``lora_layers``), placed
    on ``model`` and recorded in the ledger's ``extra``; returns the analytic FLOPs per token, or None
    (and changes nothing) without ``lora_rank``. One place for every workload that fine-tunes so."""
    if not cfg.get("lora_rank"):
        return None
    targets = TARGETS if cfg.get("lora_targets") is None else cfg["lora_targets"]
    layers = cfg.get("lora_layers")
    extra["lora_params"] = apply_lora(model, cfg["lora_rank"], cfg.get("lora_alpha", 16.0), targets, layers)
    extra["lora_targets"] = list(check_targets(targets))
    extra["lora_layers"] = check_layers(layers, mcfg.n_layers)
    return lora_flops_per_token(mcfg, cfg["lora_rank"], mcfg.seq_len, targets, layers)


def lora_flops_per_token(cfg: ModelConfig, rank: int, context: int, targets=TARGETS,
                         layers: int | None = None) -> float:
    """Analytic FLOPs per token of a LoRA training step (same conventions as ModelConfig).

    Forward: base matmuls + attention + adapters. Backward: frozen weights get no weight gradient,
    so each base matmul costs one input-gradient product (2 per weight) instead of two, except the
    lowest adapted block's q/k/v whose input (embeddings, or a frozen block's output) needs no
    gradient at all. Attention backward is twice its forward (as the fused attention kernels compute
    it; an unfused path skips dK where k carries no adapter in that block). Each adapter costs its
    weight gradients (A and B) plus the gradient through B; the gradient through A back to the input is needed
    everywhere but in the lowest adapted block. Only the projections in ``targets`` of the last
    ``layers`` blocks (default all) carry adapters; the blocks below them run forward only.
    """
    n = check_layers(layers, cfg.n_layers)
    on = [t in check_targets(targets) for t in TARGETS]
    d, hd, ff, L = cfg.d_model, cfg.head_dim, cfg.ff, cfg.n_layers
    kv = cfg.kv_heads * hd
    shapes = [(d, d), (d, kv), (d, kv), (d, d), (d, ff), (ff, d)]   # (in, out) of q k v o fc1 fc2
    base = sum(i * o for i, o in shapes)
    adapter = sum(rank * (i + o) for (i, o), a in zip(shapes, on) if a)
    attn = 2 * 2 * context * d                                       # per layer, forward
    head = d * cfg.vocab
    fwd = L * (2 * base + attn) + n * 2 * adapter + 2 * head
    first_qkv = sum(i * o for i, o in shapes[:3])
    first_qkv_a = sum(rank * i for (i, _), a in zip(shapes[:3], on[:3]) if a)
    bwd_base = n * 2 * base - 2 * first_qkv + 2 * head
    bwd_adapter = n * 4 * adapter - 2 * first_qkv_a
    return fwd + bwd_base + bwd_adapter + n * 2 * attn
