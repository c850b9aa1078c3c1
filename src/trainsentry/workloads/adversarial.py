"""The red team's training strategies, registered as workloads ``adv.<strategy>.<setting>``.

Every one trains the same GPT on the same text as the benign training configs, really (the loss
falls; the ``dit-*`` throttle settings train ``train.diffusion``'s diffusion transformer instead), class
``training``, family = the strategy; each names the benign DDP config it is compared
with in ``extra["baseline"]`` (same model, batch per rank and learning rate; mostly the 680M
``train.ddp.w1536-l24``). The engines live beside this file: adversarial_core (replica, step loop,
agreement), adversarial_sync (exchanges and byte counting), adversarial_diloco, adversarial_step
(per-step strategies), adversarial_serve (online learning, white-box gating), adversarial_split
(separate processes resuming from checkpoints). docs/redteam-strategies.md describes each.

Power capping and clock limits are not registered: they are not allowed on the shared GPU machines.
"""

from __future__ import annotations

from . import train, train_diffusion
from .adversarial_core import BASE, BASELINE, TOY, strategy_extra
from .adversarial_diloco import run_diloco
from .adversarial_serve import run_online, run_whitebox
from .adversarial_split import run_split_processes
from .adversarial_step import run_grad_exchange, run_powersgd, run_shape, run_split, run_throttle
from .base import Context, register, variants
from .train_configs import w

CLS = "training"
W1024 = "train.ddp.w1024-l16"


def _reg(strategy: str, fn, grid: dict[str, dict], toy: dict | None = None, base: dict | None = None,
         description: str = "", gpus: int = 0) -> None:
    # the strategies built on the benign DDP or pipeline machinery need two ranks (train.py's families)
    min_ranks = 2 if fn in (run_ddp_variant, run_pp_variant) else 0
    variants(f"adv.{strategy}", CLS, strategy, fn, {**BASE, "strategy": strategy, **(base or {})}, {**TOY, **(toy or {})}, grid,
             gpus=gpus, description=description, min_ranks=min_ranks)


def run_ddp_variant(ctx: Context, cfg: dict) -> None:
    """Benign DDP machinery with an adversarial setting (accumulation, head geometry, batch)."""
    strategy_extra(ctx, cfg, cfg["strategy"], **{k: cfg.get(k) for k in ("accum", "n_heads", "batch")})
    train._data_parallel(ctx, cfg, "ddp")


def run_pp_variant(ctx: Context, cfg: dict) -> None:
    """Pipeline-parallel training: one-way activations and one-way gradients, like pipelined serving."""
    strategy_extra(ctx, cfg, "pp", schedule=cfg.get("schedule"), microbatches=cfg.get("microbatches"))
    train._pipeline(ctx, cfg)


def run_offload(ctx: Context, cfg: dict) -> None:
    """ZeRO-Offload on one GPU (train_offload.HostAdamW) with an update on few host threads: the GPU
    computes forward and backward in bf16, the host's AdamW updates fp32 master weights. With one or two
    threads the host shows no more busy cores than a GPU job's launching thread (docs/host.md)."""
    strategy_extra(ctx, cfg, "offload", host_threads=cfg.get("host_threads"), accum=cfg.get("accum", 1))
    train.train_single(ctx, cfg)


def _register() -> None:
    diloco = "DiLoCo: H silent inner AdamW steps per GPU, then one averaged pseudo-gradient, outer Nesterov"
    _reg("diloco", run_diloco, {
        "h10": {"h": 10}, "h50": {"h": 50}, "h200": {"h": 200}, "h500": {"h": 500},
        "h50-int8": {"h": 50, "compress": "int8"}, "h200-int8": {"h": 200, "compress": "int8"},
        "h50-topk1pct": {"h": 50, "compress": "topk", "topk_fraction": 0.01},
    }, toy={"h": 2}, description=diloco)
    _reg("diloco", run_diloco, {
        "streaming-h50": {"h": 50, "fragments": 5}, "streaming-h200-int8": {"h": 200, "fragments": 8, "compress": "int8"},
    }, toy={"h": 4, "fragments": 2}, description=f"streaming {diloco}; fragments synchronised at staggered steps")
    _reg("split", run_split, {
        "gap6": {"parts": 4, "gap_s": 6.0}, "gap60": {"parts": 2, "gap_s": 60.0},
    }, toy={"part_steps": 2, "gap_s": 0.2}, description="one DDP run cut into parts with idle gaps")
    _reg("split", run_split_processes, {"processes": {"parts": 3, "gap_s": 6.0}},
         toy={"part_steps": 3, "gap_s": 0.2, "parts": 2},
         description="one DDP run as separate processes resuming from checkpoints, idle gaps between")
    _reg("throttle", run_throttle, {
        "pause50ms": {"pause_s": 0.05}, "pause200ms": {"pause_s": 0.2},
        "lowutil": {"batch": 4, "duty": 0.3},
    }, toy={"pause_s": 0.01}, description="DDP with micro-pauses or a low duty cycle")
    # the same rhythms on a trainer that is not a language model: train.diffusion's DiT-B/2 (one GPU, the
    # rectified-flow loss), throttled with the gaps of an image-generation service (docs/redteam-strategies.md)
    _reg("throttle", run_throttle, {
        "dit-b-pause200ms": {"pause_s": 0.2}, "dit-b-exp1s": {"pause_s": 1.0, "pause_dist": "exp"},
        "dit-b-exp300ms": {"pause_s": 0.3, "pause_dist": "exp"}, "dit-b-lowutil": {"batch": 16, "duty": 0.3},
    }, base={**train_diffusion.BASE, **train_diffusion.B256, "arch": "dit", "baseline": "train.diffusion.b-256"},
         toy={**train_diffusion.TOY, "pause_s": 0.01},
         description="a diffusion transformer trainer with micro-pauses, a service's random gaps or a low duty cycle")
    _reg("kvdisguise", run_grad_exchange, {
        "step-p2k": {"exchange": "kv", "kv_prompt_len": 2048, "decode_batch": 16, "decode_prompt_len": 128,
                     "decode_len": 256},
    }, toy={"kv_prompt_len": 8, "decode_batch": 2, "decode_prompt_len": 8, "decode_len": 8},
         description="gradients as one-way KV-cache-sized send/recv bursts, direction alternating, real decoding between")
    _reg("kvdisguise", run_diloco, {
        "h20-p2k": {"h": 20, "compress": "kv", "kv_prompt_len": 2048, "decode_batch": 16,
                    "decode_prompt_len": 128, "decode_len": 256},
    }, toy={"h": 2, "kv_prompt_len": 8, "decode_batch": 2, "decode_prompt_len": 8, "decode_len": 8},
         description="DiLoCo pseudo-gradients as one-way KV-cache-sized bursts with real decoding between")
    _reg("powersgd", run_powersgd, {"r1": {"psgd_rank": 1}, "r4": {"psgd_rank": 4}, "r8": {"psgd_rank": 8}},
         toy={"psgd_start_iter": 2}, description="DDP with torch's PowerSGD comm hook (error feedback)")
    _reg("topk", run_grad_exchange, {
        "k1pct": {"exchange": "topk", "topk_fraction": 0.01}, "k0.1pct": {"exchange": "topk", "topk_fraction": 0.001},
    }, description="every step: top-k gradient values with error feedback, all-gathered")
    _reg("accum", run_ddp_variant, {"k8": {"accum": 8}, "k32": {"accum": 32}}, base={"strategy": "accum"},
         toy={"accum": 4}, description="DDP synchronising every k micro-batches")
    _reg("cover", run_diloco, {
        "tp-decoy": {"h": 50, "decoy": "tp", "decoy_batch": 32, "decoy_tokens": 8},
    }, toy={"h": 2, "decoy_tokens": 1}, description="DiLoCo H=50 plus tensor-parallel-decode-like decoy all-reduces")
    _reg("cover", run_diloco, {
        "flatten": {"h": 50, "fragments": 50, "decoy": "pad"},
    }, toy={"h": 4, "fragments": 4}, description="streaming DiLoCo, one fragment per step, padded to a flat byte stream")
    _reg("shape", run_shape, {
        "pid": {"target_duty": 0.55, "swing": 0.15, "period_s": 40.0},
    }, toy={"period_s": 2.0}, description="DDP whose duty cycle a PID steers along a serving-like load profile")
    _reg("hostsync", run_grad_exchange, {"pcie": {"exchange": "host_shm"}, "net": {"exchange": "gloo"}},
         description="per-step gradient averaging through host memory (PCIe) or gloo sockets, not NVLink")
    _reg("pp", run_pp_variant, {
        "1f1b-mb8": {"schedule": "1f1b", "microbatches": 8}, "gpipe-mb2": {"schedule": "gpipe", "microbatches": 2},
    }, toy={"microbatches": 2}, description="pipeline-parallel training (one-way activations, one-way gradients)")
    online = {"decode_batch": 32, "decode_prompt_len": 256, "decode_len": 128}
    _reg("online", run_online, {
        "lora-k4": {"k": 4, "lora_rank": 16, **online}, "lora-k16": {"k": 16, "lora_rank": 16, **online},
        "full-k8": {"k": 8, **online},
    }, toy={"k": 2, "decode_batch": 2, "decode_prompt_len": 8, "decode_len": 4},
         description="an inference server taking one training step every k served batches")
    gate = {"lora_rank": 16, "decode_batch": 32, "decode_prompt_len": 256, "decode_len": 128, "window_s": 30.0}
    _reg("whitebox", run_whitebox, {
        "proxy-lora": {"gate": "proxy", "threshold": 0.30, **gate},
        "surrogate-lora": {"gate": "surrogate", "threshold": 0.30, "surrogate_path": None, **gate},
        "straddle-lora": {"gate": "straddle", "stride_s": 15.0, "burst_s": 6.0, **gate},
    }, toy={"lora_rank": 4, "decode_batch": 2, "decode_prompt_len": 8, "decode_len": 8, "window_s": 0.3,
            "stride_s": 0.2, "burst_s": 0.1},
         description="training gated by a copy of the detector (P(training) < threshold) or straddling windows")
    # ZeRO-Offload hidden from the host witness (docs/host.md): the benign family's 201M and 1.2B models,
    # compared with the GPU-only bf16 run of the same model (train.single.* was also recorded in fp32)
    offload = {"offload": True, "param_dtype": "bf16", "baseline_config": {"param_dtype": "bf16"}}
    for model, over, grid in (
            ("w1024-l16", w(1024, 16, batch=32), {"t1": {"host_threads": 1}, "t2": {"host_threads": 2},
                                                  "t1-x8": {"host_threads": 1, "accum": 8}}),
            ("w2048-l24", w(2048, 24, batch=16), {"t1-x4-1b": {"host_threads": 1, "accum": 4}})):
        _reg("offload", run_offload, grid, base={**over, **offload, "baseline": f"train.single.{model}"},
             gpus=1,
             description="ZeRO-Offload with the AdamW update on one or two host threads (hidden from the host witness)")
    flops_base = {**w(1024, 16, batch=32), "strategy": "flops", "baseline": W1024}
    flops = "attack on the FLOP estimator: atypical head geometry or an inflated batch"
    # toy sizes keep the geometry extreme: one 64-wide head, or 32 heads of 2
    for name, over, toy in (("heads2", {"n_heads": 2}, {"n_heads": 1}), ("heads128", {"n_heads": 128}, {"n_heads": 32}),
                            ("batch-inflate", {"batch": 96}, {"batch": 16})):
        _reg("flops", run_ddp_variant, {name: over}, base=flops_base, toy=toy, description=flops)


_register()
from .base import WORKLOADS  # noqa: E402


def names() -> list[str]:
    return sorted(n for n in WORKLOADS if n.startswith("adv."))


__all__ = ["names", "BASELINE", "register"]
