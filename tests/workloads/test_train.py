"""Training workloads at toy size on CPU: two gloo ranks under torchrun, the real plan worker.

One torchrun launch runs every training type for a few steps (start-up is the cost, so it is
shared); the tests then read the truth files the worker wrote.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest
from torchrun_plan import run_plan
import torch

from trainsentry.workloads import train
from trainsentry.workloads.base import WORKLOADS
from trainsentry.workloads.lora import TARGETS as TARGETS_ALL
from trainsentry.workloads.lora import apply_lora, lora_flops_per_token
from trainsentry.workloads.model import GPT, ModelConfig
from trainsentry.workloads.parallel import model_config

HERE = Path(__file__).parent
STEPS = 4
LONG_STEPS = 40
RUNS = {  # run_id -> workload (toy overrides apply)
    "ddp": "train.ddp.w640-l12",
    "sgd": "train.ddp.sgd-w1024",
    "fsdp": "train.fsdp.w2048-l24",
    "tp": "train.tp.w2048-l24",
    "pp_gpipe": "train.pp.gpipe-w2048-l24",
    "pp_1f1b": "train.pp.1f1b-w2048-l24",
    "accum": "train.accum.x4-w1024",
    "single": "train.single.w1024-l16",
    "lora_ddp": "train.lora.ddp-r16-w2048",
    "lora_single": "train.lora.single-r8-w1536",
    "offload": "train.offload.w1024-l16",
    "offload_dpu": "train.offload.w2048-l24-dpu",
    "offload_accum": "train.offload.w1024-l16-x8",
    "dit": "train.diffusion.l-256",
    "convnet": "train.convnet.r50_b256",
    "convnet_mobile": "train.convnet.mnv2_b256",
}


@pytest.fixture(scope="module")
def truths(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("train_runs")
    runs = [{"run_id": rid, "workload": name, "max_steps": STEPS, "seconds": 120} for rid, name in RUNS.items()]
    runs.append({"run_id": "long", "workload": "train.single.w1024-l16", "max_steps": LONG_STEPS, "seconds": 120})
    runs.append({"run_id": "bf16_long", "workload": "train.single.w1024-l16", "max_steps": LONG_STEPS, "seconds": 120,
                 "overrides": {"param_dtype": "bf16"}})
    runs.append({"run_id": "offload_long", "workload": "train.offload.w1024-l16", "max_steps": LONG_STEPS, "seconds": 120})
    runs.append({"run_id": "dit_long", "workload": "train.diffusion.b-256", "max_steps": LONG_STEPS, "seconds": 120})
    runs.append({"run_id": "convnet_long", "workload": "train.convnet.r50_b256", "max_steps": LONG_STEPS, "seconds": 120})
    runs.append({"run_id": "lora_bf16", "workload": "train.lora.single-r8-w1536", "max_steps": STEPS, "seconds": 120,
                 "overrides": {"param_dtype": "bf16"}})
    runs.append({"run_id": "single_fp8", "workload": "train.single.w1024-l16", "max_steps": STEPS, "seconds": 120,
                 "overrides": {"precision": "fp8"}})
    runs.append({"run_id": "lora_fp8", "workload": "train.lora.single-r8-w1536", "max_steps": STEPS, "seconds": 120,
                 "overrides": {"precision": "fp8"}})
    return run_plan(out, runs, 2, [str(HERE / "train_worker.py")], timeout=300)


def gt(truth: dict) -> dict:
    return truth["ground_truth"]


def extra(truth: dict, rank: int = 0) -> dict:
    return gt(truth)["extra"][str(rank)]


def toy_cfg(run_id: str) -> dict:
    return WORKLOADS[RUNS[run_id]].resolve(toy=True)


def bytes_per_step(truth: dict, rank: int, op: str) -> float:
    return gt(truth)["collective_bytes_per_rank"][str(rank)].get(op, 0) / gt(truth)["steps"]


# --- every run: ran, and its ledger is filled ------------------------------------------------------

@pytest.mark.parametrize("run_id", list(RUNS))
def test_run_ok_and_ledger_filled(truths, run_id):
    t = truths[run_id]
    assert t["ok"], t["errors"]
    assert t["class"] == "training"
    g = gt(t)
    assert g["steps"] == STEPS and len(g["step_times_s"]) == STEPS
    assert all(dt > 0 for dt in g["step_times_s"])
    assert g["tokens"] > 0 and g["flops"] > 0
    assert all(f and f > 0 for f in g["flops_per_step_per_rank"].values())
    assert len(g["loss_curve"]) == STEPS and all(math.isfinite(l) for _, l in g["loss_curve"])
    vals = [e["val_loss"] for e in g["extra"].values() if "val_loss" in e]
    assert vals and all(math.isfinite(v) and 0 < v < 8 for v in vals)


def test_single_gpu_runs_on_rank_zero_only_and_sends_nothing(truths):
    for rid in ("single", "lora_single", "offload", "offload_dpu"):
        g = gt(truths[rid])
        assert truths[rid]["ranks"] == [0]
        assert list(g["flops_per_step_per_rank"]) == ["0"]
        assert g["collective_bytes_per_rank"] == {"0": {}}


# --- FLOPs: FlopCounterMode ground truth against the analytic count ------------------------------------

def analytic_total(truth: dict) -> float:
    return extra(truth)["analytic_flops_per_token"] * gt(truth)["tokens"]


@pytest.mark.parametrize("run_id", ["ddp", "sgd", "fsdp", "accum", "single", "long", "pp_gpipe", "pp_1f1b", "offload"])
def test_counted_flops_match_6n_plus_attention(truths, run_id):
    # Counted and analytic differ only by the attention backward: torch's formula counts the flash
    # kernel's recomputation of QKᵀ (5 products, not 4), a few % at toy size.
    # Pipeline: stages together do one model's work (tokens recorded once, on the first stage).
    t = truths[run_id]
    assert extra(t)["analytic_flops_per_token"] == pytest.approx(
        model_config(toy_cfg(run_id) if run_id != "long" else WORKLOADS["train.single.w1024-l16"].resolve(True))
        .flops_per_token(64))
    assert gt(t)["flops"] == pytest.approx(analytic_total(t), rel=0.10)


def test_pipeline_stages_split_the_work(truths):
    per_rank = gt(truths["pp_1f1b"])["flops_per_step_per_rank"]
    # one layer each; stage 1 also holds the 256-way head, so it does a bit more
    assert 1.0 < per_rank["1"] / per_rank["0"] < 1.6


def test_tensor_parallel_flops_are_counted_per_shard(truths):
    # Each rank computes half of every block (local DTensor shards) but the whole replicated head,
    # so together they do the model once plus one extra head: 6·d·vocab per token.
    t = truths["tp"]
    m = model_config(toy_cfg("tp"))
    per_rank = gt(t)["flops_per_step_per_rank"]
    assert per_rank["0"] == per_rank["1"]
    expected = analytic_total(t) + 6 * m.d_model * m.vocab * gt(t)["tokens"]
    assert gt(t)["flops"] == pytest.approx(expected, rel=0.10)
    assert gt(t)["flops"] < 0.7 * 2 * analytic_total(t)     # not the global count on every rank


def test_lora_flops_match_frozen_base_formula(truths):
    # Frozen base weights get no weight gradient: the step costs ~4N per token, not 6N.
    for rid in ("lora_ddp", "lora_single"):
        t = truths[rid]
        cfg = toy_cfg(rid)
        expected = lora_flops_per_token(model_config(cfg), cfg["lora_rank"], 64) * gt(t)["tokens"]
        assert gt(t)["flops"] == pytest.approx(expected, rel=0.10)
        assert gt(t)["flops"] < 0.85 * model_config(cfg).flops_per_token(64) * gt(t)["tokens"]


# --- loss ---------------------------------------------------------------------------------------------

def test_loss_falls_on_a_short_run(truths):
    losses = [l for _, l in gt(truths["long"])["loss_curve"]]
    assert len(losses) == LONG_STEPS
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 1.0, (first, last)
    assert extra(truths["long"])["val_loss"] < first - 0.8


def test_a_diffusion_transformer_learns_its_latents_and_its_flops_are_counted(truths):
    """train.diffusion: the rectified-flow loss falls on the class-conditional latents (about 2 at the
    start: the target ε − x₀ has variance 2), and the counted FLOPs match the DiT's analytic count."""
    losses = [l for _, l in gt(truths["dit_long"])["loss_curve"]]
    assert len(losses) == LONG_STEPS
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert 1.5 < first < 2.6 and last < first - 0.3, (first, last)
    assert extra(truths["dit_long"])["val_loss"] < first - 0.2
    t = truths["dit"]
    assert t["ranks"] == [0] and gt(t)["collective_bytes_per_rank"] == {"0": {}}
    assert gt(t)["tokens"] == STEPS * toy_cfg("dit")["batch"] * toy_cfg("dit")["tokens"]
    assert gt(t)["flops"] == pytest.approx(analytic_total(t), rel=0.10)
    # the DiT's own parameter count, not a GPT's of the same width and depth
    assert extra(t)["params_total"] == extra(t)["params_local"] > 0


def test_a_convolutional_network_learns_its_images_and_its_flops_are_counted(truths):
    """train.convnet: the cross-entropy falls from chance (ln 10 over the toy's 10 classes) on the pool
    of images, the held-out images' loss is below chance too, and the counted FLOPs are the analytic
    convolution count (three forward passes less the stem's input gradient) of every image."""
    losses = [l for _, l in gt(truths["convnet_long"])["loss_curve"]]
    assert len(losses) == LONG_STEPS
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert first > 1.8 and last < first - 0.8, (first, last)
    assert extra(truths["convnet_long"])["val_loss"] < math.log(10) - 0.5
    t = truths["convnet"]
    x = extra(t)
    assert t["ranks"] == [0] and gt(t)["collective_bytes_per_rank"] == {"0": {}}
    assert gt(t)["tokens"] == STEPS * toy_cfg("convnet")["batch"]                   # a token is an image
    assert gt(t)["flops"] == gt(t)["tokens"] * x["analytic_flops_per_token"]
    assert x["model"]["arch"] == "resnet" and x["model"]["causal"] is False
    assert x["params_total"] == x["params_local"] > 0
    # MobileNetV2's depthwise convolutions are counted once, not once per channel (workloads.flops)
    m = truths["convnet_mobile"]
    xm = extra(m)
    assert gt(m)["flops"] == gt(m)["tokens"] * xm["analytic_flops_per_token"] > 0
    assert xm["model"] == {"arch": "mobilenet_v2", "width": toy_cfg("convnet_mobile")["width"], "classes": 10,
                           "causal": False}
    # when the first step began: the set-up before it is the manifest's start to this
    for run in (t, m):
        assert time.time() - 3600 < gt(run)["first_step_t"] < time.time()


def test_fp8_asked_for_without_an_fp8_matmul_trains_as_usual_and_says_so(truths):
    """precision fp8 (workloads/fp8.py; its products are checked in test_fp8.py): on this CPU nothing is
    converted, the run trains in its dtype, and the ledger records both what was asked and what ran."""
    t = truths["single_fp8"]
    assert t["ok"], t["errors"]
    assert extra(t)["precision"] == "fp8" and extra(t)["precision_run"] == "float32" and extra(t)["fp8_layers"] == 0
    assert gt(t)["flops"] == gt(truths["single"])["flops"]
    assert extra(truths["single"])["precision"] == "bf16" and "fp8_layers" not in extra(truths["single"])
    bad = truths["lora_fp8"]   # adapters over frozen FP8 layers: not a recipe this lab runs
    assert not bad["ok"] and "precision fp8 and fp8_delayed train a whole model" in str(bad["errors"]), bad


def test_pure_bf16_training_holds_bf16_weights_and_still_learns(truths):
    """param_dtype bf16: weights, gradients and optimizer state in bf16 (no fp32 master copy), the
    red-team counter-case to an FP32-pipe signal (docs/pipes.md); the default keeps fp32 weights."""
    assert extra(truths["bf16_long"])["param_dtype"] == "bf16" and extra(truths["long"])["param_dtype"] == "fp32"
    # the tensors the optimizer updates, as they were (adapters follow their base model's dtype)
    assert extra(truths["bf16_long"])["trainable_dtypes"] == ["torch.bfloat16"]
    assert extra(truths["lora_bf16"])["trainable_dtypes"] == ["torch.bfloat16"]
    assert extra(truths["long"])["trainable_dtypes"] == extra(truths["lora_single"])["trainable_dtypes"] == ["torch.float32"]
    losses = [l for _, l in gt(truths["bf16_long"])["loss_curve"]]
    assert len(losses) == LONG_STEPS
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 1.0, (first, last)


def test_offloaded_optimizer_learns_and_moves_gradients_down_and_weights_up(truths):
    """ZeRO-Offload: bf16 weights on the device, the update on the host; every step sends the bf16
    gradients down and brings the bf16 weights back, as many bytes each way (the delayed update too,
    once its last update has landed; with gradient accumulation, once per step, not per micro-batch)."""
    for rid in ("offload", "offload_dpu", "offload_accum"):
        x, steps = extra(truths[rid]), gt(truths[rid])["steps"]
        assert x["optimizer_location"] == "host" and x["trainable_dtypes"] == ["torch.bfloat16"]
        params = x["params_trainable_local"]
        assert x["offload_bytes_each_way_per_step"] == 2 * params
        assert x["offload_bytes_d2h"] == x["offload_bytes_h2d"] == steps * 2 * params and x["host_updates"] == steps
    assert extra(truths["offload"])["offload_overlap"] is False and extra(truths["offload_dpu"])["offload_overlap"] is True
    assert truths["offload_accum"]["config"]["accum"] == 8 and truths["offload"]["config"].get("accum", 1) == 1
    losses = [l for _, l in gt(truths["offload_long"])["loss_curve"]]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert len(losses) == LONG_STEPS and last < first - 1.0, (first, last)


@pytest.mark.parametrize("overlap", [False, True])
def test_host_adamw_is_adamw_on_fp32_master_weights(overlap):
    """The device's weights after each update are exactly AdamW's fp32 master weights cast to bf16; with
    the delayed update (overlap, after one ordinary step) they lag one step until ``finish``."""
    from trainsentry.workloads.base import Context
    from trainsentry.workloads.train_offload import HostAdamW, _cpu_fused_adamw

    torch.manual_seed(0)
    model = GPT(ModelConfig(d_model=32, n_layers=2, n_heads=4, seq_len=16)).to(torch.bfloat16)
    ctx = Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32, deadline=math.inf)
    # one ordinary step, then the delayed update; the process's thread count left as it is
    cfg = {"lr": 1e-2, "warmup": 1, "offload_overlap": overlap, "offload_overlap_after": 1,
           "host_threads": torch.get_num_threads()}
    opt = HostAdamW(ctx, model.parameters(), cfg)
    ref_w = [p.detach().float().clone() for p in model.parameters()]
    impl = {"fused": True} if _cpu_fused_adamw() else {"foreach": True}   # the same kernel as HostAdamW's
    ref = torch.optim.AdamW(ref_w, lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, **impl)
    x = torch.randint(0, 256, (2, 16))
    seen = []
    for _ in range(3):
        model(x).float().square().mean().backward()
        for r, p in zip(ref_w, model.parameters()):
            r.grad = p.grad.float()
        ref.step()
        seen.append([r.detach().to(torch.bfloat16) for r in ref_w])
        opt.step()
        opt.zero_grad()
        now = list(model.parameters())
        expect = seen[-1] if not overlap or len(seen) == 1 else seen[-2]
        assert all(torch.equal(p, e) for p, e in zip(now, expect))
    opt.finish()
    assert all(torch.equal(p, e) for p, e in zip(model.parameters(), seen[-1]))
    with pytest.raises(ValueError, match="AdamW"):
        HostAdamW(ctx, model.parameters(), {"lr": 1e-2, "optimizer": "sgd"})


# --- collective bytes (ground truth of interconnect traffic) -----------------------------------------

def test_ddp_all_reduce_bytes_equal_gradient_bytes(truths):
    for rid in ("ddp", "sgd", "accum", "lora_ddp"):
        e = extra(truths[rid])
        grad_bytes = e["params_trainable_local"] * 4                 # fp32 gradients on CPU
        for rank in (0, 1):
            # one all-reduce of every gradient per optimizer step (accum: only the last micro-batch)
            assert bytes_per_step(truths[rid], rank, "all_reduce") == grad_bytes
    assert extra(truths["lora_ddp"])["params_trainable_local"] == extra(truths["lora_ddp"])["lora_params"]


def test_fsdp_gathers_shards_and_reduce_scatters_gradients(truths):
    t = truths["fsdp"]
    param_bytes = extra(t)["params_total"] * 4
    for rank in (0, 1):
        assert bytes_per_step(t, rank, "reduce_scatter") == param_bytes        # full gradients in
        gathered = bytes_per_step(t, rank, "all_gather")                      # own shard out
        assert param_bytes / 2 <= gathered <= param_bytes                    # forward, and again in backward
    assert "all_reduce" not in gt(t)["collective_bytes_per_rank"]["0"]


def test_tensor_parallel_all_reduces_activations(truths):
    t = truths["tp"]
    cfg = toy_cfg("tp")
    act_bytes = cfg["batch"] * cfg["seq_len"] * cfg["d_model"] * 4
    per_step = bytes_per_step(t, 0, "all_reduce")
    # 2 all-reduces per block forward (after attention and MLP) and at least 2 backward
    assert per_step % act_bytes == 0
    assert 4 * cfg["n_layers"] <= per_step / act_bytes <= 8 * cfg["n_layers"]
    assert per_step == bytes_per_step(t, 1, "all_reduce")


@pytest.mark.parametrize("run_id", ["pp_gpipe", "pp_1f1b"])
def test_pipeline_sends_activations_forward_and_gradients_back(truths, run_id):
    t = truths[run_id]
    cfg = toy_cfg(run_id)
    act_bytes = cfg["batch"] * cfg["seq_len"] * cfg["d_model"] * 4           # all micro-batches of a step
    coll = gt(t)["collective_bytes_per_rank"]
    steps = gt(t)["steps"]
    # activations 0 -> 1, their gradients 1 -> 0; the first step also exchanges a little shape metadata
    assert coll["0"]["send"] == pytest.approx(steps * act_bytes, rel=0.01)
    assert coll["1"]["send"] == pytest.approx(steps * act_bytes, rel=0.01)
    assert coll["0"]["send"] == coll["1"]["recv"] and coll["1"]["send"] == coll["0"]["recv"]


# --- registry and pieces that need no process group -------------------------------------------------

def test_registry_covers_the_families():
    rows = train.describe()
    assert len(rows) >= 30 and len({r["name"] for r in rows}) == len(rows)
    families = {r["family"] for r in rows}
    assert families == {"ddp-width-depth", "ddp-long-seq", "ddp-wide-ff", "ddp-deep-narrow", "ddp-head-geometry",
                        "ddp-optimizer", "ddp-batch", "fsdp", "tensor-parallel", "pipeline-parallel",
                        "grad-accum", "single-gpu", "lora", "zero-offload", "dit", "convnet"}
    sizes = [r["params_M"] for r in rows]
    assert min(sizes) < 80 and max(sizes) > 2000
    assert {r["optimizer"] for r in rows if r["family"] == "ddp-optimizer"} == {"adamw", "sgd"}
    for spec in WORKLOADS.values():
        if spec.cls != "training" or spec.family == "convnet":    # no transformer to check
            continue
        for toy in (False, True):
            m = model_config(spec.resolve(toy))
            assert m.d_model % m.n_heads == 0 and m.n_heads % m.kv_heads == 0, spec.name
            if spec.family == "tensor-parallel":
                assert m.kv_heads % 2 == 0, spec.name
            if spec.family == "pipeline-parallel":
                assert m.n_layers >= 2 and spec.resolve(toy)["batch"] % spec.resolve(toy)["microbatches"] == 0


def test_lora_starts_from_the_base_model_and_trains_only_adapters():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=4, seq_len=16)
    model = GPT(cfg)
    x = torch.randint(0, 256, (2, 16))
    before = model(x)
    n = apply_lora(model, rank=4)
    assert torch.allclose(model(x), before)                              # B starts at zero
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == n


def test_lora_on_query_and_value_only_matches_its_formula_and_refuses_other_sets():
    """``lora_targets`` (PEFT's default: query and value): adapters on those projections only, and the
    analytic FLOPs follow them: what leaving adapters out saves is, to the FLOP, what torch's own counter
    measures on one training step (the rest of the step is test_lora_flops_match_frozen_base_formula's)."""
    from torch.utils.flop_counter import FlopCounterMode

    from trainsentry.workloads.lora import TARGETS

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=64, n_layers=3, n_heads=4, n_kv_heads=2, seq_len=32)
    measured, analytic = {}, {}
    for targets in (TARGETS, ("attn.v", "attn.q"), ("attn.q", "attn.k", "attn.v")):
        model = GPT(cfg)
        n = apply_lora(model, rank=4, targets=targets)
        wrapped = {name.split(".", 2)[-1].rsplit(".", 1)[0] for name, p in model.named_parameters() if p.requires_grad}
        assert wrapped == set(targets)
        assert sum(p.numel() for p in model.parameters() if p.requires_grad) == n
        x = torch.randint(0, 256, (2, 32))
        with FlopCounterMode(display=False) as fc:
            model(x).float().logsumexp(-1).mean().backward()
        measured[targets], analytic[targets] = fc.get_total_flops(), lora_flops_per_token(cfg, 4, 32, targets) * x.numel()
    qv, qkv = ("attn.v", "attn.q"), ("attn.q", "attn.k", "attn.v")
    for more in (TARGETS, qkv):
        assert measured[more] - measured[qv] == pytest.approx(analytic[more] - analytic[qv], rel=1e-9)
        assert measured[more] > measured[qv]
    for bad in (("attn.q",), ("attn.q", "attn.v", "mlp.gate")):
        with pytest.raises(ValueError, match="lora_targets"):
            apply_lora(GPT(cfg), rank=4, targets=bad)


def test_lora_in_the_top_layers_only_stops_the_backward_and_matches_its_formula():
    """``lora_layers``: adapters in the last N blocks only. Nothing below them needs a gradient, so the
    backward stops at the lowest adapted block: the workloads' FLOP counter (torch's, with the CPU
    attention kernels registered) measures, to the FLOP, the formula plus the attention recompute of
    the N adapted blocks' backward (2·s·d per token each), as flops/dataset.py reads a recorded run."""
    from trainsentry.workloads import flops as flopcount
    from trainsentry.workloads.lora import check_layers

    torch.manual_seed(0)
    cfg = ModelConfig(d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, seq_len=32)
    recompute = 2 * 32 * 64                      # per token per adapted block (context 32, width 64)
    for targets in (("attn.q", "attn.v"), None):
        measured = {}
        for layers in (4, 2, 1):
            model = GPT(cfg)
            apply_lora(model, rank=4, targets=targets or TARGETS_ALL, layers=layers)
            adapted = {name.split(".")[1] for name, p in model.named_parameters() if p.requires_grad}
            assert adapted == {str(i) for i in range(4 - layers, 4)}
            x = torch.randint(0, 256, (2, 32))
            with flopcount.counter() as fc:
                model(x).float().logsumexp(-1).mean().backward()
            measured[layers] = fc.get_total_flops()
            analytic = lora_flops_per_token(cfg, 4, 32, targets or TARGETS_ALL, layers) * x.numel()
            assert measured[layers] == analytic + layers * recompute * x.numel()
            assert all(p.grad is not None for name, p in model.named_parameters() if "lora_" in name)
        assert measured[1] < measured[2] < measured[4]
    assert lora_flops_per_token(cfg, 4, 32) == lora_flops_per_token(cfg, 4, 32, layers=4)
    for bad in (0, 5, 2.0, True):
        with pytest.raises(ValueError, match="lora_layers"):
            check_layers(bad, 4)
