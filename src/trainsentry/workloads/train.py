"""Training workloads: one GPT, trained on real text (stdlib source bytes), parallelised from outside.

Each registered name is one declarative config (see ``describe()`` and docs/workloads-training.md).
Every run records per step: wall time, tokens, the training loss; FLOPs per rank per step from
FlopCounterMode on the first (real, counted) step; the bytes handed to collectives; at the end a
validation loss on held-out text, and the analytic FLOPs per token for comparison.
"""

from __future__ import annotations

import contextlib
import time

import torch
import torch.distributed as dist

from . import fp8
from . import parallel as par
from .base import WORKLOADS, Context, Ledger, variants
from .comm import CollectiveCounter
from .data import Batches
from .flops import measure
from .lora import lora_from_config
from .model import loss_fn, n_params
from .train_offload import HostAdamW

CLS = "training"
# Shared toy override: a model that runs a few steps in well under a second on one CPU core.
TOY = {"d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": None, "d_ff": None, "seq_len": 64,
       "batch": 4, "lr": 3e-3, "lr_sgd": 0.3, "val_batches": 2, "warmup": 2}
BASE = {"d_model": 1024, "n_layers": 16, "n_heads": 16, "n_kv_heads": None, "d_ff": None, "seq_len": 1024,
        "batch": 32, "optimizer": "adamw", "lr": 3e-4, "lr_sgd": 0.1, "val_batches": 4,
        "warmup": 20}


def _train_loop(ctx: Context, cfg: dict, step, tokens_per_step: int, measure_fn=measure,
                measure_at: int = 0) -> None:
    """Run ``step() -> loss tensor | None`` until the deadline. Step ``measure_at`` runs under a FLOP
    counter (it is a real step and counts); its count is this rank's FLOPs per step, credited to the
    steps before it too (a pipeline's first step also infers stage shapes, so it measures the second)."""
    led = ctx.ledger
    while ctx.keep_going_together():
        t0 = time.perf_counter()
        if led.flops_per_step is None and led.steps >= measure_at:
            out: list = []
            led.flops_per_step = measure_fn(lambda: out.append(step()))
            led.flops += led.flops_per_step * led.steps
            loss = out[0]
        else:
            loss = step()
        loss_value = float(loss.item()) if loss is not None else None   # .item() waits for the GPU
        ctx.sync()
        led.step(time.perf_counter() - t0, tokens_per_step, loss_value)


def _record_setup(ctx: Context, cfg: dict, model, mcfg, analytic_per_token: float | None = None,
                  params_total: int | None = None) -> None:
    """The run's model in the ledger. ``params_total`` is the whole model's count where ``mcfg.params()``
    (a GPT's: embedding and head) does not describe it; local: this rank's share (a tensor-parallel
    DTensor counts its shard, not its global shape)."""
    ctx.ledger.extra.update({
        "model": mcfg.to_dict(), "params_total": mcfg.params() if params_total is None else int(params_total),
        "params_local": n_params(model),
        "params_trainable_local": sum(par.local_numel(p) for p in model.parameters() if p.requires_grad),
        "analytic_flops_per_token": analytic_per_token or mcfg.flops_per_token(mcfg.seq_len),
        "optimizer": cfg.get("optimizer", "adamw"), "batch_per_rank": cfg["batch"],
        "seq_len": mcfg.seq_len, "compute_dtype": str(ctx.dtype) if ctx.is_cuda else "torch.float32",
    })


@torch.no_grad()
def _val_loss(ctx: Context, cfg: dict, model, mcfg, seed: int) -> float:
    model.eval()
    val = Batches("val", cfg["batch"], mcfg.seq_len, ctx.device, seed=seed)
    losses = []
    for _ in range(cfg.get("val_batches", 4)):
        x, y = val.next()
        with par.autocast(ctx):
            losses.append(float(loss_fn(model(x), y)))
    model.train()
    return sum(losses) / len(losses)


def _data_parallel(ctx: Context, cfg: dict, wrap: str) -> None:
    """Shared body of DDP, FSDP, gradient accumulation, single-GPU and LoRA runs: every active rank
    trains on its own batches; the wrapper decides what crosses the interconnect."""
    mcfg = par.model_config(cfg)
    model = par.build_model(ctx, mcfg)
    # param_dtype bf16: pure bf16 training (weights, gradients and optimizer state in bf16, no fp32
    # master copy), the recipe that leaves the least fp32 arithmetic; default: fp32 weights, bf16 autocast.
    param_dtype = cfg.get("param_dtype", "fp32")
    if param_dtype not in ("fp32", "bf16"):
        raise ValueError(f"param_dtype must be 'fp32' or 'bf16', got {param_dtype!r}")
    if param_dtype == "bf16":
        model.to(torch.bfloat16)
    ctx.ledger.extra["param_dtype"] = param_dtype
    measure_fn = _precision(ctx, cfg, model, wrap)
    analytic = lora_from_config(ctx.ledger.extra, model, mcfg, cfg)
    _record_setup(ctx, cfg, model, mcfg, analytic)
    # what the optimizer will update, as the tensors are (not as configured): LoRA adapters follow their base's dtype
    ctx.ledger.extra["trainable_dtypes"] = sorted({str(p.dtype) for p in model.parameters() if p.requires_grad})
    counter = None
    if wrap == "ddp":
        par.world_ok(ctx, 2)
        net = par.wrap_ddp(ctx, model)
        ctx.ledger.extra["collective_method"] = "ddp-comm-hook"
    elif wrap == "fsdp":
        par.world_ok(ctx, 2)
        net = par.wrap_fsdp(ctx, model)
        counter = par.counting(ctx)
        ctx.ledger.extra["collective_method"] = "dispatch-mode"
    else:
        net = model
        ctx.ledger.extra["collective_method"] = "none"
    if cfg.get("offload"):   # ZeRO-Offload: master weights, optimizer state and update on the host
        if wrap != "single" or param_dtype != "bf16":
            raise ValueError("offload trains one GPU's bf16 weights (wrap single, param_dtype bf16)")
        opts = [HostAdamW(ctx, net.parameters(), cfg)]
    else:
        opts = par.make_optimizers(ctx, net, cfg)
    batches = Batches("train", cfg["batch"], mcfg.seq_len, ctx.device, seed=ctx.seed * 7919 + ctx.rank + 1)
    accum = int(cfg.get("accum", 1))
    # Clip plain-tensor gradients (DDP, single GPU); FSDP's sharded norm would add a collective.
    clip = wrap != "fsdp"

    def step():
        total = 0.0
        for micro in range(accum):
            x, y = batches.next()
            # DDP: all-reduce only on the last micro-batch; earlier ones accumulate locally.
            sync_ctx = net.no_sync() if wrap == "ddp" and micro < accum - 1 else contextlib.nullcontext()
            with sync_ctx:
                with par.autocast(ctx):
                    loss = loss_fn(net(x), y) / accum
                loss.backward()
            total = total + loss.detach()
        if clip:
            torch.nn.utils.clip_grad_norm_([p for p in net.parameters() if p.requires_grad], 1.0)
        par.optimizer_step(opts)
        return total

    with counter if counter is not None else contextlib.nullcontext():
        _train_loop(ctx, cfg, step, accum * cfg["batch"] * mcfg.seq_len, measure_fn=measure_fn)
    for opt in opts:
        if isinstance(opt, HostAdamW):
            opt.finish()   # an update still running on the host lands before validation
    # DDP's forward without grad needs no traffic: evaluate the bare module. FSDP must gather.
    _set_val(ctx, lambda: _val_loss(ctx, cfg, net if wrap == "fsdp" else model, mcfg, ctx.seed + 99))


def _precision(ctx: Context, cfg: dict, model, wrap: str):
    """``precision``: ``bf16`` (default: the run's dtype under autocast), ``fp8`` or ``fp8_delayed`` (every
    eligible linear layer's products in float8 with dynamic or delayed scaling, ``workloads.fp8``;
    full-model training on one GPU or DDP). Returns the
    FLOP counter to measure a step with: for FP8, one that runs the measured step through ``F.linear``,
    which it can count. The ledger records what ran (``precision_run``) and how many layers were FP8."""
    if cfg.get("precision") in fp8.RECIPES and (wrap not in ("single", "ddp") or cfg.get("lora_rank")
                                                or cfg.get("offload")):
        raise ValueError("precision fp8 and fp8_delayed train a whole model on one GPU or with DDP "
                         "(no LoRA, offload or FSDP)")
    ran = str(ctx.dtype).replace("torch.", "") if ctx.is_cuda else "float32"
    within = fp8.setup(ctx.ledger.extra, cfg, model, ctx.device, ran)

    def counted(fn):
        with within():
            return measure(fn)
    return counted


def _set_val(ctx: Context, evaluate) -> None:
    """Validation loss; its collectives are kept apart (extra) so collective_bytes is training traffic."""
    side = Ledger()
    with CollectiveCounter(side):
        value = evaluate()
    if value is not None:
        ctx.ledger.extra["val_loss"] = value
    ctx.ledger.extra["val_collective_bytes"] = side.collective_bytes


def _tensor_parallel(ctx: Context, cfg: dict) -> None:
    """``tp`` consecutive ranks (default 2) hold one model, each a 1/tp share of every block's weights,
    and see the same batch; the world / tp such groups are data-parallel replicas whose gradients are
    averaged over the data-parallel group (one flat all-reduce per step, as DDP's one bucket)."""
    par.world_ok(ctx, 2)
    if ctx.n_active != ctx.world_size:
        raise ValueError("tensor parallel runs on every rank of the launch")
    tp = int(cfg.get("tp") or 2)
    dev_mesh = par.tp_dp_mesh(ctx, tp)
    dp, dp_index, tp_index = ctx.world_size // tp, dev_mesh.get_local_rank("dp"), dev_mesh.get_local_rank("tp")
    dp_group = dev_mesh["dp"].get_group() if dp > 1 else None
    mcfg = par.model_config(cfg)
    model = par.build_model(ctx, mcfg)
    with par.counting(ctx):
        model = par.apply_tensor_parallel(ctx, model, dev_mesh["tp"])
        _record_setup(ctx, cfg, model, mcfg)
        ctx.ledger.extra.update({
            "collective_method": "dispatch-mode", "tp": tp, "dp": dp, "tp_index": tp_index, "dp_index": dp_index,
            "tp_group": dev_mesh["tp"].mesh.flatten().tolist(), "dp_group": dev_mesh["dp"].mesh.flatten().tolist(),
            "tokens_note": "a tensor-parallel group shares one batch; tokens are recorded on its first rank"})
        opts = par.make_optimizers(ctx, model, cfg)
        # one batch stream per tensor-parallel group (dp_index 0 draws the stream of the 2-rank runs)
        batches = Batches("train", cfg["batch"], mcfg.seq_len, ctx.device, seed=ctx.seed * 7919 + 1 + dp_index)

        def step():
            x, y = batches.next()
            with par.autocast(ctx):
                loss = loss_fn(model(x), y)
            loss.backward()
            if dp_group is not None:
                par.all_reduce_grads(model, dp_group, dp)
            par.optimizer_step(opts)
            return loss.detach()

        tokens = cfg["batch"] * mcfg.seq_len if tp_index == 0 else 0
        _train_loop(ctx, cfg, step, tokens, par.measure_local)
    # data-parallel replicas must hold the same weights after training: a fingerprint to compare
    ctx.ledger.extra["local_weights_sum"] = float(sum(
        (p.to_local() if hasattr(p, "to_local") else p).detach().double().sum() for p in model.parameters()))
    _set_val(ctx, lambda: _val_loss(ctx, cfg, model, mcfg, ctx.seed + 99))


def _pipeline(ctx: Context, cfg: dict) -> None:
    """Layers split over the run's ranks, one stage each (stage i on rank i); micro-batches flow
    forward (activations) and back (gradients). ``pp``, when given, must equal the run's ranks."""
    par.world_ok(ctx, 2)
    stages = int(cfg.get("pp") or ctx.n_active)
    if stages != ctx.n_active or (ctx.ranks and tuple(ctx.ranks) != tuple(range(len(ctx.ranks)))):
        # a pipeline on part of a run's ranks would need a subgroup only its members create, and an
        # NCCL subgroup is split from the launch's communicator with every rank taking part
        raise ValueError(f"a pipeline has one stage on each of the run's {ctx.n_active} ranks 0.., got pp={stages}")
    mcfg = par.model_config(cfg)
    model = par.pipeline_stage_module(ctx, par.build_model(ctx, mcfg), stages)
    _record_setup(ctx, cfg, model, mcfg)
    ctx.ledger.extra.update({"collective_method": "dispatch-mode", "stage": ctx.rank, "pp": stages,
                             "stage_layers": list(model.layers.keys()),
                             "tokens_note": "the batch flows through every stage; tokens are recorded on the first stage"})
    first, last = ctx.rank == 0, ctx.rank == stages - 1
    opts = par.make_optimizers(ctx, model, cfg)
    batches = Batches("train", cfg["batch"], mcfg.seq_len, ctx.device, seed=ctx.seed * 7919 + 1)
    # A pipeline over fewer ranks than the launch needs its own group (PipelineStage maps stage i to
    # rank i of its group). The worker creates it on every rank (an NCCL subgroup is split from the
    # launch's communicator, which every rank must join), for the run's active ranks.
    if stages == ctx.world_size:
        group = None
    else:
        group = ctx.run_group
    with par.counting(ctx):
        schedule = par.pipeline_schedule(ctx, model, cfg, loss_fn, stages, group)

        def step():
            x, y = batches.next()          # every stage draws the batch so the generators stay in step
            # Windows of one buffer are strided views; stages check inputs against contiguous metadata.
            x, y = x.contiguous(), y.contiguous()
            losses: list = []
            with par.autocast(ctx):
                if first:
                    schedule.step(x)
                elif last:
                    schedule.step(target=y, losses=losses)
                else:
                    schedule.step()
            par.optimizer_step(opts)
            return torch.stack(losses).mean() if losses else None

        _train_loop(ctx, cfg, step, cfg["batch"] * mcfg.seq_len if first else 0, measure_at=1)

    @torch.no_grad()
    def evaluate():
        val = Batches("val", cfg["batch"], mcfg.seq_len, ctx.device, seed=ctx.seed + 99)
        vals = []
        model.eval()
        for _ in range(cfg.get("val_batches", 4)):
            x, y = (t.contiguous() for t in val.next())
            losses: list = []
            with par.autocast(ctx):
                if first:
                    schedule.eval(x)
                elif last:
                    schedule.eval(target=y, losses=losses)
                else:
                    schedule.eval()
            if losses:
                vals.append(float(torch.stack(losses).mean()))
        return sum(vals) / len(vals) if vals else None

    _set_val(ctx, evaluate)


def train_ddp(ctx: Context, cfg: dict) -> None:
    """DDP over all ranks: a full-gradient all-reduce every step."""
    _data_parallel(ctx, cfg, "ddp")


def train_fsdp(ctx: Context, cfg: dict) -> None:
    """FSDP2 (fully_shard): per-block parameter all-gathers and gradient reduce-scatters."""
    _data_parallel(ctx, cfg, "fsdp")


def train_single(ctx: Context, cfg: dict) -> None:
    """One GPU, no interconnect traffic."""
    _data_parallel(ctx, cfg, "single")


def train_tp(ctx: Context, cfg: dict) -> None:
    """Tensor parallel (Megatron column/row split): activation all-reduces inside every block."""
    _tensor_parallel(ctx, cfg)


def train_pp(ctx: Context, cfg: dict) -> None:
    """Pipeline parallel (torch.distributed.pipelining): point-to-point activations and gradients."""
    _pipeline(ctx, cfg)


def _register() -> None:
    from .train_configs import DESCRIPTIONS, FAMILIES, FAMILIES_N, TOY_EXTRA

    fns = {"train_ddp": train_ddp, "train_fsdp": train_fsdp, "train_tp": train_tp, "train_pp": train_pp,
           "train_single": train_single}
    for prefix, family, fn_name, gpus, base, grid in FAMILIES:
        fn = fns[fn_name]
        # data, tensor and pipeline parallelism refuse a launch of one rank (parallel.world_ok); declared
        # here, a campaign of one rank is refused when planned instead of failing each run on the GPU
        variants(prefix, CLS, family, fn, {**BASE, **base}, {**TOY, **TOY_EXTRA.get(family, {})}, grid,
                 gpus=gpus, description=DESCRIPTIONS[family], min_ranks=0 if fn_name == "train_single" else 2)
    for prefix, family, fn_name, gpus, min_ranks, base, toy, grid in FAMILIES_N:
        variants(prefix, CLS, family, fns[fn_name], {**BASE, **base}, {**TOY, **TOY_EXTRA.get(family, {}), **toy},
                 grid, gpus=gpus, description=f"{DESCRIPTIONS[family]} ({min_ranks}+ GPUs)", min_ranks=min_ranks)


_register()


from . import train_diffusion  # noqa: E402,F401  (registers train.diffusion.*, which uses this module's loop)
from . import train_vision  # noqa: E402,F401  (registers train.convnet.*, which uses this module's loop)


def describe() -> list[dict]:
    """One row per training workload: name, family, GPUs, model size, tokens per step per rank."""
    from .parallel import model_config

    rows = []
    for spec in WORKLOADS.values():
        # the benign training configs (red-team strategies, adv.*, are class training too)
        if spec.cls != CLS or not spec.name.startswith("train."):
            continue
        c = spec.config
        if spec.family == "convnet":        # no GPT: its own row (workloads/train_vision.py)
            rows.append(_convnet_row(spec))
            continue
        m = model_config(c)
        rows.append({"name": spec.name, "family": spec.family, "gpus": _gpus(spec),
                     "params_M": round(m.params() / 1e6, 1), "d_model": m.d_model, "n_layers": m.n_layers,
                     "heads": f"{m.n_heads}/{m.kv_heads}", "d_ff": m.ff, "seq_len": m.seq_len,
                     "batch_per_rank": c["batch"], "accum": c.get("accum", 1),
                     "optimizer": c.get("optimizer", "adamw"), "extra": _extra(c),
                     "tokens_per_step_per_rank": c["batch"] * m.seq_len * c.get("accum", 1),
                     "description": spec.description})
    return rows


def _convnet_row(spec) -> dict:
    """``describe``'s row of a convolutional trainer: parameters counted on the meta device, the
    transformer's columns empty, the image side where a sequence length would be."""
    from .infer_vision import describe_net, make_net

    c = spec.config
    with torch.device("meta"):
        net = make_net(c)
    return {"name": spec.name, "family": spec.family, "gpus": _gpus(spec),
            "params_M": round(sum(p.numel() for p in net.parameters()) / 1e6, 1), "d_model": "–",
            "n_layers": sum(1 for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))), "heads": "–",
            "d_ff": "–", "seq_len": f"{c['image_px']} px", "batch_per_rank": c["batch"], "accum": 1,
            "optimizer": c.get("optimizer", "sgd"), "extra": describe_net(c),
            "tokens_per_step_per_rank": c["batch"], "description": spec.description}


def _gpus(spec) -> str | int:
    """Ranks a config uses (1, all, or N), with the launch size it needs (≥N) when it has one."""
    used = spec.gpus or "all"
    return f"{used} (≥{spec.min_ranks})" if spec.min_ranks else used


def _extra(c: dict) -> str:
    bits = []
    if c.get("tp"):
        bits.append(f"tp={c['tp']}")
    if c.get("pp"):
        bits.append(f"pp={c['pp']}")
    if c.get("lora_rank"):
        bits.append(f"lora r={c['lora_rank']}")
    if c.get("microbatches"):
        bits.append(f"{c.get('schedule', '1f1b')} x{c['microbatches']}")
    if c.get("offload"):
        bits.append("host AdamW" + (", delayed update" if c.get("offload_overlap") else ""))
    return ", ".join(bits)


def markdown_table() -> str:
    """The configs table of docs/workloads-training.md: ``python -m trainsentry.workloads.train``."""
    cols = ["name", "family", "gpus", "params_M", "d_model", "n_layers", "heads", "d_ff", "seq_len",
            "batch_per_rank", "accum", "optimizer", "extra"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in describe()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table())
