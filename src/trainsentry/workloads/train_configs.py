"""The training configs, as data: families of the seed FLOP study plus the other parallelisms.

Sized for 2 × H200 (141 GB, ~800 TFLOP/s bf16): steps of roughly 0.1–1 s with per-rank batches large
enough that the GPU is busy (no launch-bound small kernels), from ~50M to a few B parameters.
Keys: model shape (d_model, n_layers, n_heads, n_kv_heads, d_ff, seq_len), batch (per rank,
sequences), optimizer (adamw | sgd), accum (micro-batches per step), microbatches and schedule
(pipeline), lora_rank. Each entry: (name prefix, family, workload function name, gpus, base, grid).
"""

from __future__ import annotations


def w(d: int, L: int, heads: int | None = None, **kw) -> dict:
    """Shape helper: width, depth, (by default) 64-wide heads, and an AdamW learning rate falling as
    1/width above d=1024: at a flat 3e-4 the 2.5B+ models spiked to a loss of ~10 in their first steps."""
    return {"d_model": d, "n_layers": L, "n_heads": heads or max(1, d // 64), "lr": 3e-4 * min(1.0, 1024 / d), **kw}


FAMILIES: list[tuple[str, str, str, int, dict, dict[str, dict]]] = [
    ("train.ddp", "ddp-width-depth", "train_ddp", 0, {}, {
        "w640-l12": w(640, 12, batch=32),            # 59M
        "w1024-l16": w(1024, 16, batch=32),          # 201M
        "w1536-l24": w(1536, 24, batch=16),          # 680M
        "w2048-l24": w(2048, 24, batch=16),          # 1.2B
        "w2560-l32": w(2560, 32, batch=8),           # 2.5B
        "w3072-l32": w(3072, 32, batch=8),           # 3.6B
    }),
    ("train.ddp", "ddp-long-seq", "train_ddp", 0, {}, {
        "seq4k": w(1024, 12, seq_len=4096, batch=8),
        "seq8k": w(1024, 12, seq_len=8192, batch=4),
        "seq16k": w(1024, 12, seq_len=16384, batch=2),
    }),
    ("train.ddp", "ddp-wide-ff", "train_ddp", 0, {}, {
        "ff8x": w(1024, 16, d_ff=8192, batch=16),    # 335M
        "ff16x": w(1024, 12, d_ff=16384, batch=16),  # 453M
    }),
    ("train.ddp", "ddp-deep-narrow", "train_ddp", 0, {}, {
        "w384-l64": w(384, 64, batch=48),
        "w512-l48": w(512, 48, batch=32),
        "w768-l48": w(768, 48, batch=24),
    }),
    ("train.ddp", "ddp-head-geometry", "train_ddp", 0, {}, {
        "h4": w(1024, 16, heads=4, batch=32),              # head_dim 256
        "h64": w(1024, 16, heads=64, batch=32),            # head_dim 16
        "h32": w(2048, 16, heads=32, batch=16),            # head_dim 64, wider model
        "gqa16-2": w(1024, 16, heads=16, n_kv_heads=2, batch=32),
    }),
    ("train.ddp", "ddp-optimizer", "train_ddp", 0, {}, {
        "adamw-w1024": w(1024, 16, batch=32, optimizer="adamw"),
        "sgd-w1024": w(1024, 16, batch=32, optimizer="sgd"),
        "adamw-w2048": w(2048, 24, batch=16, optimizer="adamw"),
        "sgd-w2048": w(2048, 24, batch=16, optimizer="sgd"),
    }),
    ("train.ddp", "ddp-batch", "train_ddp", 0, {}, {
        "b8": w(1024, 16, batch=8),
        "b16": w(1024, 16, batch=16),
        "b64": w(1024, 16, batch=64),
    }),
    ("train.fsdp", "fsdp", "train_fsdp", 0, {}, {
        "w2048-l24": w(2048, 24, batch=16),          # 1.2B
        "w3072-l32": w(3072, 32, batch=8),           # 3.6B
        "w4096-l32": w(4096, 32, batch=8),           # 6.4B
    }),
    ("train.tp", "tensor-parallel", "train_tp", 0, {}, {
        "w2048-l24": w(2048, 24, batch=16),
        "w4096-l16": w(4096, 16, batch=8),           # 3.2B
        "w1024-l24-seq4k": w(1024, 24, seq_len=4096, batch=8),
    }),
    ("train.pp", "pipeline-parallel", "train_pp", 0, {"microbatches": 8}, {
        "gpipe-w2048-l24": w(2048, 24, batch=32, schedule="gpipe"),
        "1f1b-w2048-l24": w(2048, 24, batch=32, schedule="1f1b"),
        "1f1b-w1024-l32": w(1024, 32, batch=64, schedule="1f1b"),
    }),
    ("train.accum", "grad-accum", "train_ddp", 0, {}, {
        "x4-w1024": w(1024, 16, batch=16, accum=4),
        "x8-w2048": w(2048, 24, batch=8, accum=8),
    }),
    ("train.single", "single-gpu", "train_single", 1, {}, {
        "w1024-l16": w(1024, 16, batch=32),
        "w2048-l24": w(2048, 24, batch=16),
        "w640-l12-seq4k": w(640, 12, seq_len=4096, batch=8),
    }),
    ("train.lora", "lora", "train_ddp", 0, {}, {
        "ddp-r16-w2048": w(2048, 24, batch=16, lora_rank=16),
        "ddp-r64-w3072": w(3072, 32, batch=8, lora_rank=64),
    }),
    ("train.lora", "lora", "train_single", 1, {}, {
        "single-r8-w1536": w(1536, 24, batch=16, lora_rank=8),
    }),
    # ZeRO-Offload (train_offload.py): bf16 weights on the GPU, fp32 master weights and AdamW on the host
    ("train.offload", "zero-offload", "train_single", 1, {"offload": True, "param_dtype": "bf16"}, {
        "w1024-l16": w(1024, 16, batch=32),          # 201M
        "w2048-l24": w(2048, 24, batch=16),          # 1.2B
        "w2048-l24-dpu": w(2048, 24, batch=16, offload_overlap=True),   # delayed parameter update
        # gradient accumulation: several micro-batches on the GPU per exchange and host update, so the
        # GPU works most of the time instead of waiting for the CPU, and PCIe carries less per second
        "w1024-l16-x8": w(1024, 16, batch=32, accum=8),
        "w2048-l24-x4": w(2048, 24, batch=16, accum=4),
    }),
]

# Configs for larger launches (issue 9: 8 × H200), each with the ranks it needs; the 2-GPU configs
# above keep their names and behaviour. Each entry: (name prefix, family, workload function name,
# gpus, min_ranks, base, toy extra, grid). Sizes: the same per-GPU load as the 2-GPU runs, or models
# that only fit when sharded over 8 GPUs (FSDP ~12 B: 16 bytes of weights and AdamW state per
# parameter is ~200 GB, 25 GB per GPU).
FAMILIES_N: list[tuple[str, str, str, int, int, dict, dict, dict[str, dict]]] = [
    ("train.ddp8", "ddp-width-depth", "train_ddp", 0, 8, {}, {}, {
        "w1024-l16": w(1024, 16, batch=32),          # 201M
        "w2048-l24": w(2048, 24, batch=16),          # 1.2B
    }),
    ("train.fsdp8", "fsdp", "train_fsdp", 0, 8, {}, {}, {
        "w4096-l32": w(4096, 32, batch=8),           # 6.4B
        "w5120-l40": w(5120, 40, batch=4),           # 12.6B
    }),
    ("train.tp4dp2", "tensor-parallel", "train_tp", 0, 8, {"tp": 4}, {"tp": 4}, {
        "w4096-l16": w(4096, 16, batch=8),           # 3.2B, 4-way sharded, 2 replicas
        "w2048-l24": w(2048, 24, batch=16),
    }),
    ("train.pp4", "pipeline-parallel", "train_pp", 4, 4, {"microbatches": 8, "pp": 4},
     {"microbatches": 4, "batch": 4, "n_layers": 4}, {
        "1f1b-w2048-l24": w(2048, 24, batch=32, schedule="1f1b"),
        "gpipe-w4096-l32": w(4096, 32, batch=16, schedule="gpipe"),   # 6.4B over 4 stages
    }),
]

# Toy overrides per family on top of the shared toy model (CPU, gloo, a few steps).
TOY_EXTRA = {"pipeline-parallel": {"microbatches": 2, "batch": 4}, "grad-accum": {"accum": 2},
             "lora": {"lora_rank": 4}}

_DDP = "DDP on every rank: one all-reduce of all gradients per step"
DESCRIPTIONS = {
    "ddp-width-depth": f"{_DDP}; model width x depth",
    "ddp-long-seq": f"{_DDP}; long sequences (attention-heavy)",
    "ddp-wide-ff": f"{_DDP}; feed-forward 8-16x wider than the model",
    "ddp-deep-narrow": f"{_DDP}; many narrow layers",
    "ddp-head-geometry": f"{_DDP}; head count / head size / grouped-query attention",
    "ddp-optimizer": f"{_DDP}; AdamW vs SGD with momentum",
    "ddp-batch": f"{_DDP}; per-GPU batch size",
    "fsdp": "FSDP2 fully_shard: per-block bf16 parameter all-gathers, fp32 gradient reduce-scatters",
    "tensor-parallel": "tensor parallel (column/row split): activation all-reduces inside every block",
    "pipeline-parallel": "pipeline parallel: activations forward and gradients back between stages",
    "grad-accum": "DDP with gradient accumulation: one all-reduce every few micro-batches",
    "single-gpu": "one GPU, no interconnect traffic",
    "lora": "LoRA fine-tuning, base frozen: adapter-only gradient traffic, ~4N FLOPs per token",
    "zero-offload": "ZeRO-Offload on one GPU: bf16 gradients to the host, AdamW there, bf16 weights back over PCIe",
}
