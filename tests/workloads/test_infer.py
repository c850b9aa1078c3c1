"""Inference and other workloads: every registered one at toy size in one 2-rank gloo torchrun launch
of the real plan worker (start-up paid once), ground truth checked against analytic formulas, plus
in-process correctness of the KV cache, the serving slot pool and the FLOP fit."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from trainsentry.workloads import flops as flopcount
from trainsentry.workloads import infer, infer_common, other  # noqa: F401  (registers the workloads under test)
from trainsentry.workloads.base import WORKLOADS
from trainsentry.workloads.infer_common import MODELS, fit_model, model_config
from trainsentry.workloads.infer_moe import ExpertParallelMoE, capacity, moe_params
from trainsentry.workloads.infer_parallel import kv_transfer_bytes
from trainsentry.workloads.infer_serve import SlotPool, decode_pool, prefill_into_pool
from trainsentry.workloads.model import GPT, KVCache, ModelConfig

ROOT = Path(__file__).resolve().parents[2]
INFER_TYPES = {"generate", "replicas", "tp", "pp", "disagg", "serve", "prefill", "embed", "ep", "cp", "attribute", "md", "offload", "kvswap", "rag", "specdec", "agent", "diffusion", "video", "vision"}
OTHER_TYPES = {"matmul", "nccl_sweep", "memcpy", "idle", "stencil", "spectral", "quantize", "stream"}
# (configs that need a larger launch than this file's 2 ranks are run in test_ngpu.py)
MINE = sorted(n for n, s in WORKLOADS.items() if s.cls in ("inference", "other") and s.min_ranks <= 2)
STEPS = 4
FP32 = 4

# The real worker with only these modules standing in for the registry (the training module is tested
# on its own), then a tensor-parallel vs single-device decode comparison in a fresh gloo group.
LAUNCHER = textwrap.dedent('''
    import json, os, sys
    import torch, torch.distributed as dist
    from trainsentry.workloads import infer, other
    sys.modules.setdefault("trainsentry.workloads.registry", infer)
    from trainsentry.workloads import worker
    worker.main(sys.argv[1:3])

    from trainsentry.workloads.infer_common import MODELS
    from trainsentry.workloads.infer_parallel import shard_tensor_parallel
    from trainsentry.workloads.model import GPT, KVCache, ModelConfig
    # A fresh group on a file store: torchrun's agent store does not take a second default group.
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2] + "/tp_check.store",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = ModelConfig(**MODELS["toy"], seq_len=32)
    torch.manual_seed(0); full = GPT(cfg).eval()
    torch.manual_seed(0); tp = GPT(cfg).eval()
    kv_local = shard_tensor_parallel(tp, rank, world)
    prompt = torch.randint(0, 256, (3, 6), generator=torch.Generator().manual_seed(1))

    def generate(model, kv_heads):
        cache = KVCache(cfg, cfg.n_layers, 3, 16, "cpu", torch.float32, kv_heads)
        logits = [model(prompt, cache)[:, -1]]
        for _ in range(5):
            logits.append(model(logits[-1].argmax(-1, keepdim=True), cache)[:, -1])
        return torch.stack(logits)

    def write_check(name, a, b):
        """Rank 0 writes how far the parallel logits ``b`` are from the single-device ``a``."""
        if rank == 0:
            out = {"max_abs_diff": (a - b).abs().max().item(), "max_abs": a.abs().max().item(),
                   "same_tokens": bool((a.argmax(-1) == b.argmax(-1)).all())}
            open(sys.argv[2] + f"/{name}_check.json", "w").write(json.dumps(out))

    with torch.inference_mode():
        write_check("tp", generate(full, None), generate(tp, kv_local))

    # expert parallel over the two ranks vs the same MoE with every expert on one device
    from trainsentry.workloads.infer_moe import make_moe
    moe_cfg = {"experts": 4, "top_k": 2, "expert_ff": 32, "capacity_factor": 8.0}
    torch.manual_seed(0); single = make_moe(GPT(cfg).eval(), moe_cfg, 0, 1)
    torch.manual_seed(0); ep = make_moe(GPT(cfg).eval(), moe_cfg, rank, world)
    with torch.inference_mode():
        write_check("ep", generate(single, None), generate(ep, None))

    # context parallel over the two ranks vs one device prefilling the whole prompt
    from trainsentry.workloads.infer_cp import make_context_parallel
    torch.manual_seed(0); whole = GPT(cfg).eval()
    torch.manual_seed(0); cp = make_context_parallel(GPT(cfg).eval(), rank, world)
    long_prompt = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(2))
    c = 24 // world
    # and load-balanced (zigzag): rank r holds chunks r and 2N-1-r of 2N
    from trainsentry.workloads.infer_cp import chunk_positions
    torch.manual_seed(0); zz = make_context_parallel(GPT(cfg).eval(), rank, world, balanced=True)
    ranges = chunk_positions(rank, world, 24, True)
    pos = torch.cat([torch.arange(p, q) for p, q in ranges])
    with torch.inference_mode():
        full = whole(long_prompt)
        a = full[:, rank * c:(rank + 1) * c]
        b = cp(long_prompt[:, rank * c:(rank + 1) * c], positions=torch.arange(rank * c, (rank + 1) * c))
        za = full[:, pos]
        zb = zz(long_prompt[:, pos], positions=pos)
    diff = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(diff, torch.maximum((a - b).abs().max(), (za - zb).abs().max()).reshape(1))
    if rank == 0:
        out = {"max_abs_diff": max(float(d) for d in diff), "max_abs": a.abs().max().item()}
        open(sys.argv[2] + "/cp_check.json", "w").write(json.dumps(out))
    dist.destroy_process_group()
''')


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("infer_toy")
    runs = []
    for name in MINE:
        item = {"run_id": name, "workload": name, "seconds": 60, "max_steps": STEPS}
        if name.startswith("other.nccl_sweep"):   # two sizes per op, every op of the variant once
            item.update(overrides={"min_bytes": 1024, "max_bytes": 2048}, max_steps=6)
        runs.append(item)
    for w in ("fp32", "fp16"):
        runs.append({"run_id": f"embed_{w}", "workload": "infer.embed.s125m_b256_l512", "seconds": 60,
                     "max_steps": STEPS, "overrides": {"weights": w}})
    runs.append({"run_id": "embed_fp8", "workload": "infer.embed.s125m_b256_l512", "seconds": 60,
                 "max_steps": STEPS, "overrides": {"precision": "fp8"}})
    runs.append({"run_id": "generate_fp8_delayed", "workload": "infer.generate.l1b_b256", "seconds": 60,
                 "max_steps": STEPS, "overrides": {"precision": "fp8_delayed"}})
    for p in ("fp8", "bf16_sparse24", "fp8_sparse24", "int4"):
        runs.append({"run_id": f"matmul_{p}", "workload": "other.matmul.n8192_x2", "seconds": 60,
                     "max_steps": STEPS, "overrides": {"precision": p}})
    (out / "plan.json").write_text(json.dumps({"toy": True, "runs": runs}))
    (out / "launch.py").write_text(LAUNCHER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(out / "launch.py"), str(out / "plan.json"), str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


def truth(out: Path, name: str) -> dict:
    return json.loads((out / f"{name}.truth.json").read_text())


def test_every_type_registered_with_enough_configs():
    inf = {n: s for n, s in WORKLOADS.items() if s.cls == "inference"}
    oth = {n: s for n, s in WORKLOADS.items() if s.cls == "other"}
    assert {s.family for s in inf.values()} == INFER_TYPES
    assert {s.family for s in oth.values()} == OTHER_TYPES
    assert len(inf) >= 15 and len(oth) >= 6
    for name, spec in inf.items():
        assert name.split(".")[1].startswith(spec.family)   # infer.tp8.* is family tp


def test_every_family_belongs_to_one_class():
    """Results are keyed by family (per-family alert rates, leave-one-family-out): a family name shared
    by two classes would pool, say, offloaded inference with offloaded training."""
    from trainsentry.workloads import train  # noqa: F401  (registers the training workloads)

    classes: dict[str, set] = {}
    for spec in WORKLOADS.values():
        # the lab's workloads; red-team strategies (adv.*) are judged apart and keyed by strategy name
        if spec.name.split(".")[0] in ("train", "infer", "other"):
            classes.setdefault(spec.family, set()).add(spec.cls)
    assert {f: c for f, c in classes.items() if len(c) > 1} == {}


def test_gpu_configs_fit_two_h200():
    """Every full-size config is consistent and its weights plus KV cache fit one H200 (141 GB)."""
    for name, spec in WORKLOADS.items():
        if spec.cls != "inference":
            continue
        cfg = spec.resolve(toy=False)
        if spec.family == "md":   # no language model: edge tensors (a handful per block kept for the backward)
            edges = cfg["systems"] * cfg["atoms"] * cfg["neighbours"]
            width = 2 if cfg["precision"] == "bf16" else 4
            gb = 6 * edges * cfg["features"] * width * cfg["blocks"] / 1e9
            assert cfg["neighbours"] < cfg["atoms"] and gb < 110, f"{name} needs ~{gb:.0f} GB per GPU"
            continue
        if spec.family == "vision":   # no language model: a convolutional network and its pool of images
            host_gb = cfg["pool"] * 3 * cfg["image_px"] ** 2 / 1e9
            assert cfg["pool"] >= cfg["batch"] and host_gb < 40, f"{name} pins ~{host_gb:.0f} GB of host memory"
            continue
        m = model_config(cfg)
        kv_per_token = 2 * m.n_layers * m.kv_heads * m.head_dim * 2
        if spec.family == "serve":
            assert cfg["prompt_max"] < cfg["seq_len"], name
            tokens = cfg["slots"] * cfg["seq_len"]
        elif spec.family == "embed":
            assert cfg["text_len"] <= cfg["seq_len"], name
            tokens = 0
        elif spec.family == "attribute":   # no KV cache; activations kept for the backward are not bounded here
            assert cfg["text_len"] <= cfg["seq_len"], name
            tokens = 0
        elif spec.family == "kvswap":   # two device caches; every cohort's cache in pinned host memory
            assert cfg["turn_len"] + cfg["reply_len"] <= cfg["seq_len"] and cfg["cohorts"] >= 3, name
            tokens = 2 * cfg["batch"] * cfg["seq_len"]
            host_gb = cfg["cohorts"] * cfg["batch"] * cfg["seq_len"] * kv_per_token / 1e9
            assert host_gb < 40, f"{name} pins ~{host_gb:.0f} GB of host memory"
        elif spec.family == "rag":   # retrieved passages before the query; the index and passages in host memory
            assert cfg["top_k"] * cfg["doc_len"] + cfg["query_len"] + cfg["gen_len"] <= cfg["seq_len"], name
            tokens = cfg["batch"] * cfg["seq_len"]
            host_gb = cfg["n_docs"] * (model_config({"model": cfg["embedder"], "seq_len": 8}).d_model * 4
                                       + cfg["doc_len"] * 8) / 1e9
            assert host_gb < 40, f"{name} keeps ~{host_gb:.0f} GB in host memory"
        elif spec.family == "specdec":   # the target's cache on the GPU (the draft's is on the host)
            assert cfg["prompt_len"] + cfg["gen_len"] + cfg["gamma"] + 1 <= cfg["seq_len"], name
            tokens = cfg["batch"] * cfg["seq_len"]
        elif spec.family == "agent":   # prompt, tool calls and results, answer in one cache; the database on the host
            assert cfg["prompt_len"] + cfg["turns"] * (cfg["call_len"] + cfg["doc_len"]) + cfg["answer_len"] < cfg["seq_len"], name
            tokens = cfg["batch"] * cfg["seq_len"]
            host_gb = cfg["host_threads"] * cfg["n_rows"] * cfg["doc_len"] * 2 / 1e9
            assert host_gb < 40, f"{name} keeps ~{host_gb:.0f} GB in host memory"
        elif spec.family in ("diffusion", "video"):   # no KV cache: every step attends over all patches afresh
            assert cfg.get("frames", 1) * cfg["tokens"] <= cfg["seq_len"], name
            assert math.isqrt(cfg["tokens"]) ** 2 == cfg["tokens"], name
            tokens = 0
            m = model_config(cfg, causal=False)
        elif spec.family == "cp":   # no KV cache is kept: one layer's gathered K/V at a time
            assert cfg["prompt_len"] <= cfg["seq_len"] and cfg["prompt_len"] % 2 == 0, name
            tokens = 0
        else:
            assert cfg["prompt_len"] + cfg["gen_len"] <= cfg["seq_len"], name
            tokens = cfg["batch"] * (cfg["prompt_len"] + cfg["gen_len"])
        if spec.family == "pp":
            assert cfg["batch"] % cfg["micro_batches"] == 0, name
        shards = 2 if spec.family == "tp" or cfg.get("tp") else 1
        if shards == 2:
            assert m.n_heads % 2 == 0 and m.kv_heads % 2 == 0, name
        gb = (m.params() * 2 * (1 + (shards == 1)) / shards + kv_per_token * tokens / shards) / 1e9
        if spec.family == "ep":   # dense attention on both GPUs, half the experts on each, no second copy
            assert cfg["experts"] % 2 == 0, name
            experts = moe_params(m, cfg) - (m.params() - 2 * m.d_model * m.ff * m.n_layers)
            gb = ((moe_params(m, cfg) - experts) * 2 + experts * 2 / 2 + kv_per_token * tokens) / 1e9
        assert gb < 110, f"{name} needs ~{gb:.0f} GB per GPU"


def test_every_workload_runs_at_toy_size(toy_run):
    for name in MINE:
        t = truth(toy_run, name)
        assert t["ok"], (name, t["errors"])
        gt = t["ground_truth"]
        assert gt["steps"] >= 1 and len(gt["step_times_s"]) == gt["steps"], name
        if t["class"] == "inference":
            assert gt["tokens"] > 0 and gt["flops"] > 0, name
    assert truth(toy_run, "other.matmul.n8192_x2")["ground_truth"]["flops"] == 2 * STEPS * 2 * 2 * 64 ** 3
    # fp8 asked for on a device without an FP8 matmul: the run's dtype instead, and the ledger says so
    fp8 = truth(toy_run, "matmul_fp8")
    assert fp8["ok"] and fp8["ground_truth"]["flops"] == 2 * STEPS * 2 * 2 * 64 ** 3, fp8
    assert fp8["ground_truth"]["extra"]["0"]["precision"] == "fp8"
    assert fp8["ground_truth"]["extra"]["0"]["precision_run"] == "float32"
    sparse = truth(toy_run, "matmul_bf16_sparse24")   # no sparse layout on CPU: dense, said in the ledger
    assert sparse["ok"] and sparse["ground_truth"]["extra"]["0"]["precision_run"] == "float32", sparse
    assert sparse["ground_truth"]["flops"] == fp8["ground_truth"]["flops"]
    # an embedding service asked to serve in FP8 on a device without an FP8 matmul: as usual, said so
    e8 = truth(toy_run, "embed_fp8")
    assert e8["ok"] and e8["ground_truth"]["extra"]["0"]["precision"] == "fp8", e8
    assert e8["ground_truth"]["extra"]["0"]["precision_run"] == "float32" and e8["ground_truth"]["extra"]["0"]["fp8_layers"] == 0
    assert e8["ground_truth"]["flops"] == truth(toy_run, "infer.embed.s125m_b256_l512")["ground_truth"]["flops"]
    g8 = truth(toy_run, "generate_fp8_delayed")   # a generation server in the delayed recipe: the same
    assert g8["ok"] and g8["ground_truth"]["extra"]["0"]["precision"] == "fp8_delayed", g8
    assert g8["ground_truth"]["extra"]["0"]["fp8_recipe"] == "delayed" and g8["ground_truth"]["extra"]["0"]["fp8_layers"] == 0
    assert g8["ground_truth"]["flops"] > 0
    sparse8 = truth(toy_run, "matmul_fp8_sparse24")   # neither FP8 nor cuSPARSELt on CPU: dense, said too
    assert sparse8["ok"] and sparse8["ground_truth"]["extra"]["0"]["precision"] == "fp8_sparse24", sparse8
    assert sparse8["ground_truth"]["extra"]["0"]["precision_run"] == "float32", sparse8
    assert sparse8["ground_truth"]["flops"] == fp8["ground_truth"]["flops"]
    bad = truth(toy_run, "matmul_int4")
    assert not bad["ok"] and "precision must be one of bf16, fp8, bf16_sparse24, fp8_sparse24" in json.dumps(
        bad["errors"]), bad
    # an embedding service hands its vectors to the host (batch x d_model float32 per step); the older
    # configurations keep them on the device
    host = truth(toy_run, "infer.embed.g7b_b64_l512_host")
    d_model = model_config(host["config"], causal=False).d_model
    assert host["ground_truth"]["extra"]["0"]["bytes_to_host_per_step"] == host["config"]["batch"] * d_model * 4
    assert host["ground_truth"]["extra"]["0"]["host_checksum"] > 0   # the vectors reached the host
    kept = truth(toy_run, "infer.embed.s125m_b256_l512")["ground_truth"]["extra"]["0"]
    assert kept["bytes_to_host_per_step"] == 0 and kept["host_checksum"] == 0 and kept["embedding_checksum"] > 0
    # weights: fp32 reaches the run (on CPU the context's dtype is fp32 anyway: the cast is tested below)
    fp32 = truth(toy_run, "embed_fp32")
    assert fp32["ok"] and fp32["ground_truth"]["extra"]["0"]["weights_dtype"] == "torch.float32"
    # fp16 is a cast on CPU too: the run served half-precision weights, and its vectors are finite
    fp16 = truth(toy_run, "embed_fp16")["ground_truth"]["extra"]["0"]
    assert truth(toy_run, "embed_fp16")["ok"] and fp16["weights_dtype"] == "torch.float16"
    assert math.isfinite(fp16["embedding_checksum"]) and fp16["embedding_checksum"] > 0
    # attribution: forward and backward every step, yet the frozen weights never change nor get a gradient
    for name in ("infer.attribute.l1b_b16_l1024", "infer.attribute.xl3b_b4_l2048_host",
                 "infer.attribute.l1b_b4_l1024_ig16", "infer.attribute.l1b_b16_l1024_pgd8"):
        t = truth(toy_run, name)
        x = t["ground_truth"]["extra"]["0"]
        assert x["weights_changed"] is False and x["weight_grads"] == 0 and x["attribution_checksum"] > 0, name
    # the adversarial search is real: signed-gradient ascent raised the loss of every step's texts
    pgd = truth(toy_run, "infer.attribute.l1b_b16_l1024_pgd8")["ground_truth"]["extra"]["0"]
    assert pgd["attribution_method"] == "pgd" and pgd["passes_per_step"] == 3 and pgd["pgd_loss_gain"] > 0
    host = truth(toy_run, "infer.attribute.xl3b_b4_l2048_host")
    x = host["ground_truth"]["extra"]["0"]
    assert x["bytes_to_host_per_step"] == host["config"]["batch"] * host["config"]["text_len"] * 4 and x["host_checksum"] > 0
    kept = truth(toy_run, "infer.attribute.l1b_b16_l1024")["ground_truth"]["extra"]["0"]
    assert kept["bytes_to_host_per_step"] == 0 and kept["host_checksum"] == 0


def test_offloaded_generation_streams_every_block_and_equals_the_resident_model(toy_run):
    """Weights streamed from host memory block by block give the resident model's logits exactly, and
    every forward copies every block once (plus the first block's copy made in advance)."""
    from trainsentry.workloads.base import Context
    from trainsentry.workloads.infer_offload import StreamedBlocks

    cfg = ModelConfig(**MODELS["toy"], seq_len=32)
    torch.manual_seed(0)
    resident = GPT(cfg).eval()
    torch.manual_seed(0)
    streamed = GPT(cfg).eval()
    ctx = Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32, deadline=math.inf)
    s = StreamedBlocks(ctx, streamed)
    prompt = torch.randint(0, 256, (3, 6), generator=torch.Generator().manual_seed(1))

    def generate(model):
        cache = KVCache(cfg, cfg.n_layers, 3, 16, "cpu", torch.float32)
        logits = [model(prompt, cache)[:, -1]]
        for _ in range(5):
            logits.append(model(logits[-1].argmax(-1, keepdim=True), cache)[:, -1])
        return torch.stack(logits)

    with torch.inference_mode():
        assert torch.equal(generate(resident), generate(streamed))
    assert s.forwards == 6 and s.bytes == (1 + 6 * cfg.n_layers) * s.block_bytes
    per_block = sum(p.numel() for p in resident.layers["0"].parameters()) * FP32
    assert s.block_bytes == per_block
    t = truth(toy_run, "infer.offload.g7b_b256")["ground_truth"]["extra"]["0"]
    assert t["forwards"] == STEPS and t["bytes_to_device"] == STEPS * t["weights_streamed_per_forward"] > 0
    # every copy issued: the run's forwards, the FLOP fit's two and the first block's copy in advance
    assert t["bytes_to_device_all"] == (STEPS + 2) * t["weights_streamed_per_forward"] + t["block_bytes"]


def test_kv_tier_moves_a_conversation_and_its_next_turn_equals_the_resident_one():
    """A conversation's cache saved to host memory, the device copy destroyed, loaded into the other
    device cache: the next turn, prefilled as one chunk into it (masked attention), gives the logits the
    resident conversation gets feeding the same tokens one by one; ``new`` saves only the turn's tokens
    and keeps the same host copy."""
    from trainsentry.workloads.base import Context
    from trainsentry.workloads.infer_kvswap import KVTier

    cfg = ModelConfig(**MODELS["toy"], seq_len=32)
    torch.manual_seed(0)
    model = GPT(cfg).eval()
    ctx = Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32, deadline=math.inf)
    g = torch.Generator().manual_seed(3)
    first, second = torch.randint(0, 256, (2, 7), generator=g), torch.randint(0, 256, (2, 5), generator=g)
    full, new = KVTier(ctx, cfg, 3, 2, "full"), KVTier(ctx, cfg, 3, 2, "new")
    resident = KVCache(cfg, cfg.n_layers, 2, 32, "cpu", torch.float32)
    per_token = 2 * cfg.n_layers * 2 * cfg.kv_heads * cfg.head_dim * FP32
    with torch.inference_mode():
        model(first, resident)
        for tier in (full, new):
            tier.slots[0].length = 0
            model(first, tier.slots[0])
            tier.store(1, 0, 0)
            for t in tier.slots[0].store:
                t.normal_()                        # the device copy is gone
            tier.load(1, 1, 7)
        assert full.to_host == full.to_device == 7 * per_token
        chunk = model(second, full.slots[1])
        model(second, new.slots[1])
        new.store(1, 1, 7)                         # only the turn's 5 tokens cross back
        assert new.to_host == 12 * per_token and full.slots[1].length == new.lengths[1] == 12
        ones = [model(second[:, i:i + 1], resident)[:, -1] for i in range(5)]
    for i in range(5):
        torch.testing.assert_close(chunk[:, i], ones[i], rtol=1e-4, atol=1e-5)
    for a, b in zip(new.host[1].store, full.slots[1].store):
        assert torch.equal(a[:12], b[:12])


def test_rag_retrieves_on_the_host_and_moves_both_ways(toy_run):
    t = truth(toy_run, "infer.rag.l1b_b256_n128k_t4")
    c, x = t["config"], t["ground_truth"]["extra"]["0"]
    assert t["ok"] and x["self_retrieved"] is True and x["host_threads"] == 4 and x["rounds"] >= 1
    assert x["bytes_h2d_per_round"] == c["batch"] * c["top_k"] * c["doc_len"] * 8
    d = model_config({"model": c["embedder"], "seq_len": 8}).d_model
    assert x["bytes_d2h_per_round"] == c["batch"] * d * 4 and x["index_bytes"] == c["n_docs"] * d * 4
    # the ledger: one step for the index, then per round one step for embedding, search and prefill, and
    # one per decoded token; its tokens are the passages', the prompts' and the decoded ones
    g = t["ground_truth"]
    decoded = g["steps"] - 1 - x["rounds"]
    prompt = c["top_k"] * c["doc_len"] + c["query_len"]
    assert 0 <= decoded <= x["rounds"] * (c["gen_len"] - 1)
    assert g["tokens"] == c["n_docs"] * c["doc_len"] + x["rounds"] * c["batch"] * prompt + decoded * c["batch"]
    assert x["tokens_generated"] == (decoded + x["rounds"]) * c["batch"]


def test_rag_search_is_exact_inner_product_top_k():
    from trainsentry.workloads.infer_rag import search

    g = torch.Generator().manual_seed(3)
    index, queries = torch.randn(500, 16, generator=g), torch.randn(7, 16, generator=g)
    want = np.argsort(-(queries.numpy() @ index.numpy().T), axis=1)[:, :5]
    assert (search(index, queries, 5).numpy() == want).all()


def _toy_target(seq_len: int = 64):
    torch.manual_seed(0)
    return GPT(ModelConfig(**MODELS["toy"], seq_len=seq_len)).eval()


def _greedy(model, prompts, n):
    cache = KVCache(model.cfg, model.cfg.n_layers, prompts.shape[0], model.cfg.seq_len, "cpu", torch.float32)
    tok = infer_common.sample(model(prompts, cache)[:, -1])
    out = [tok]
    for _ in range(n - 1):
        tok = infer_common.sample(model(tok, cache)[:, -1])
        out.append(tok)
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("copy", [False, True])
def test_speculative_decoding_gives_the_targets_greedy_output(copy):
    """With the 1-layer host draft (few proposals kept) and with a full copy of the target as draft
    (every proposal kept: the path where the draft's cache lacks the last kept proposal), the kept
    tokens are the target's plain greedy decoding, and both caches end where they should."""
    from trainsentry.workloads.infer_specdec import host_draft, speculate

    with torch.inference_mode():
        target = _toy_target()
        if copy:
            draft = GPT(target.cfg).eval()
            draft.load_state_dict(target.state_dict())
        else:
            draft = host_draft(target, 1)
        prompts = torch.randint(0, 256, (3, 6), generator=torch.Generator().manual_seed(1))
        want, gamma = _greedy(target, prompts, 24), 3
        tc = KVCache(target.cfg, target.cfg.n_layers, 3, 64, "cpu", torch.float32)
        dc = KVCache(draft.cfg, draft.cfg.n_layers, 3, 64, "cpu", torch.float32)
        draft(prompts, dc)
        last = infer_common.sample(target(prompts, tc)[:, -1])
        out, pending, kept_n = [last], last, []
        while sum(o.shape[1] for o in out) < 24:
            kept, last, pending, n, _ = speculate(target, draft, tc, dc, last, pending, gamma, "cpu")
            out.append(kept)
            kept_n.append(n)
            made = sum(o.shape[1] for o in out)
            assert tc.length == 6 + made - 1 and dc.length + pending.shape[1] == 6 + made
        assert torch.equal(torch.cat(out, dim=1)[:, :24], want)
        assert set(kept_n) == {gamma} if copy else min(kept_n) == 0


@pytest.mark.parametrize("pending,cached", [(1, 10), (2, 10), (2, 0)])
def test_specdec_draft_flops_equal_a_direct_count(pending, cached):
    from types import SimpleNamespace

    from trainsentry.workloads.infer_specdec import drafting_flops, host_draft

    with torch.inference_mode():
        draft = host_draft(_toy_target(), 1)
        cache = KVCache(draft.cfg, 1, 3, 64, "cpu", torch.float32)

        def propose():
            cache.length = cached
            x = torch.zeros(3, pending, dtype=torch.long)
            for _ in range(4):
                x = infer_common.sample(draft(x, cache)[:, -1])

        # the draft is fitted on the host whatever the context's device (as run_specdec does)
        ctx = SimpleNamespace(device="meta", dtype=torch.bfloat16)
        dfit = fit_model(draft, draft.cfg, ctx, device="cpu", dtype=torch.float32)
        assert drafting_flops(dfit, 3, pending, cached, 4) == flopcount.measure(propose)


def test_speculative_acceptance_is_the_shortest_agreeing_prefix():
    from trainsentry.workloads.infer_specdec import accept

    proposed = torch.tensor([[1, 2, 3], [1, 2, 3]])
    assert accept(proposed, torch.tensor([[1, 2, 3, 9], [1, 2, 3, 9]])) == 3
    assert accept(proposed, torch.tensor([[1, 2, 3, 9], [1, 5, 3, 9]])) == 1   # agreeing after a miss counts for nothing
    assert accept(proposed, torch.tensor([[7, 2, 3, 9], [1, 2, 3, 9]])) == 0


def test_specdec_ledger_and_draft(toy_run):
    t = truth(toy_run, "infer.specdec.l1b_b32_k4_d2_t4")
    c, g = t["config"], t["ground_truth"]
    x = g["extra"]["0"]
    assert t["ok"] and x["host_threads"] == 4 and x["draft_layers"] == c["draft_layers"] and x["rounds"] >= 1
    assert g["steps"] == x["rounds"] + x["verifications"] and 0 <= x["acceptance"] <= 1
    # tokens: every round's prompts and the tokens kept; a verification keeps 1 to gamma + 1 per sequence
    generated = g["tokens"] - x["rounds"] * c["batch"] * c["prompt_len"]
    assert x["verifications"] * c["batch"] <= generated <= x["verifications"] * c["batch"] * (c["gamma"] + 1)
    assert x["draft_flops"] > 0 and x["draft_params"] < x["params"]


def test_agent_tool_is_a_full_scan_of_the_database():
    """The tool's count and first match equal a brute-force search over the passages' bytes; a call
    without a match returns the passage its pattern's bytes number."""
    from trainsentry.workloads.infer_agent import Tool, answer_rows, database

    docs = torch.randint(0, 256, (300, 8), generator=torch.Generator().manual_seed(4))
    docs[17, 2:5] = torch.tensor([1, 2, 3])
    docs[201, 0:3] = torch.tensor([1, 2, 3])
    tool = Tool(database(docs), threads=3)
    try:
        patterns = [bytes([1, 2, 3]), bytes(docs[5, 1:3].tolist()), bytes([255, 255, 255, 255])]
        got = tool.run(patterns)
    finally:
        tool.close()
    raw = [bytes(r.tolist()) for r in docs.to(torch.uint8)]
    for (count, first), p in zip(got, patterns):
        hits = [i for i, r in enumerate(raw) if p in r]
        assert count == len(hits) and first == (hits[0] if hits else None)
    assert got[0][0] >= 2 and got[2] == (0, None)
    assert answer_rows(got, patterns, 300)[2] == int.from_bytes(patterns[2], "big") % 300


def test_agent_ledger(toy_run):
    t = truth(toy_run, "infer.agent.l1b_b32_t8")
    c, g = t["config"], t["ground_truth"]
    x = g["extra"]["0"]
    assert t["ok"] and x["host_threads"] == 8 and x["tool_calls"] >= c["batch"]
    assert 0 <= x["tool_matches"] <= x["tool_calls"] and x["tokens_appended"] == x["tool_calls"] * c["doc_len"]
    # tokens: prompts (one per episode started), decoded tokens and the tool results appended
    prefills = (g["tokens"] - x["tokens_generated"] - x["tokens_appended"]) / (c["batch"] * c["prompt_len"])
    assert prefills == int(prefills) and prefills >= x["episodes"]
    assert g["steps"] == prefills + x["tokens_generated"] / c["batch"] + x["tool_calls"] / c["batch"]


def test_diffusion_ledger_and_images_reach_the_host(toy_run):
    """Toy diffusion (16 patches of 2 x 2 over 4 latent channels, 3 Euler steps, guidance 4 doubling the
    batch): every batch's uint8 images reach host memory, and the batch FLOPs hold every denoising step."""
    for name in ("infer.diffusion.m350m_t256_b32", "infer.diffusion.m350m_t256_b64_nocfg"):
        t = truth(toy_run, name)
        c, g = t["config"], t["ground_truth"]
        x = g["extra"]["0"]
        halves = 2 if c["guidance"] > 1 else 1
        assert t["ok"] and x["image_px"] == 8 * 2 * 4 and x["bytes_to_host_per_step"] == c["batch"] * 3 * 64 * 64, name
        assert g["tokens"] == g["steps"] * c["batch"] * halves * c["tokens"] * c["steps"], name
        # uint8 images summed on the host: the mean byte of what arrived lies strictly inside 0..255
        assert 0 < x["host_checksum"] / (g["steps"] * x["bytes_to_host_per_step"]) < 255, name
        # a batch is its denoising steps and the decoder: more than the steps alone, not much more at toy size
        per_batch = g["flops"] / g["steps"]
        assert c["steps"] * x["flops_per_denoising_step"] < per_batch < 2 * c["steps"] * x["flops_per_denoising_step"], name


def test_vision_ledger_counts_every_convolution_and_the_top_classes_reach_the_host(toy_run):
    """Toy image classification (a residual network of four one-block stages on 32 px images): a step is
    one batch from the pinned pool, its counted FLOPs are the analytic convolution count of every image,
    and the top-1 classes summed on the host lie inside the class range."""
    for name in ("infer.vision.r50_b256", "infer.vision.r18_px128_b1024"):
        t = truth(toy_run, name)
        c, g = t["config"], t["ground_truth"]
        x = g["extra"]["0"]
        assert t["ok"] and x["image_px"] == 32 and x["bytes_from_host_per_step"] == c["batch"] * 3 * 32 * 32, name
        assert g["tokens"] == g["steps"] * c["batch"], name
        assert g["flops"] == g["steps"] * c["batch"] * x["analytic_flops_per_image"], name
        assert 0 <= x["host_checksum"] <= g["steps"] * c["batch"] * (c["classes"] - 1), name


def test_residual_networks_match_the_published_sizes():
    """ResNet-18, -50 and -101 as built here have the parameter counts of the reference implementation
    (torchvision's, 1000 classes), and ResNet-50's forward at 224 px is its 4.1 G multiply-adds."""
    from trainsentry.workloads.infer_vision import ResNet, forward_flops

    with torch.device("meta"):
        nets = {depth: ResNet(blocks, 64, kind, 1000) for depth, blocks, kind in
                ((18, (2, 2, 2, 2), "basic"), (50, (3, 4, 6, 3), "bottleneck"), (101, (3, 4, 23, 3), "bottleneck"))}
    sizes = {depth: sum(p.numel() for p in net.parameters()) for depth, net in nets.items()}
    assert sizes == {18: 11_689_512, 50: 25_557_032, 101: 44_549_160}
    assert forward_flops(nets[50], 224) / 2 == pytest.approx(4.09e9, rel=0.01)
    # training: three forward passes' worth, less the stem's input gradient
    assert forward_flops(nets[50], 224, training=True) < 3 * forward_flops(nets[50], 224)
    # a network cast to bf16 (as inference on a GPU casts it) is probed in its own dtype and keeps its mode
    small = ResNet((1, 1, 1, 1), 8, "basic", 10)
    half = ResNet((1, 1, 1, 1), 8, "basic", 10).to(torch.bfloat16).train()
    assert forward_flops(half, 32) == forward_flops(small, 32) and half.training


def test_mobilenet_and_vgg_match_the_published_sizes_and_their_training_steps_count_as_analysed():
    """MobileNetV2 (width 32) and VGG-16 with batch normalisation have torchvision's parameter counts and
    multiply-adds at 224 px (0.30 G and 15.47 G). The counter behind every ledger's FLOPs charges a
    training step what the analysis says (three forward passes less the stem's input gradient) for all
    three networks; torch's own formula charges a depthwise convolution's weight gradient once per
    channel, which would put MobileNetV2's step at about seven times its work."""
    from trainsentry.workloads.flops import measure
    from trainsentry.workloads.infer_vision import make_net, forward_flops

    mobile = {"arch": "mobilenet_v2", "width": 32, "classes": 1000}
    vgg16 = {"arch": "vgg", "blocks": [2, 2, 3, 3, 3], "width": 64, "classes": 1000}
    with torch.device("meta"):
        nets = {"mobile": make_net(mobile), "vgg16": make_net(vgg16)}
    assert {k: sum(p.numel() for p in n.parameters()) for k, n in nets.items()} == {
        "mobile": 3_504_872, "vgg16": 138_365_992}
    assert forward_flops(nets["mobile"], 224) / 2 == pytest.approx(0.3008e9, rel=0.001)
    assert forward_flops(nets["vgg16"], 224) / 2 == pytest.approx(15.47e9, rel=0.001)
    resnet = {"arch": "resnet", "blocks": [1, 1, 1, 1], "block": "bottleneck", "width": 8, "classes": 10}
    small_vgg = {"arch": "vgg", "blocks": [1, 1, 1, 1, 1], "width": 8, "classes": 10}
    for cfg in ({**mobile, "classes": 10}, small_vgg, resnet):
        torch.manual_seed(0)
        net = make_net(cfg).train()
        x = torch.randn(2, 3, 64, 64)
        assert measure(lambda: net(x).sum().backward()) == 2 * forward_flops(net, 64, training=True), cfg["arch"]
    with pytest.raises(ValueError, match="arch must be one of"):
        make_net({**resnet, "arch": "vit"})


def test_video_ledger_counts_every_frame_and_every_frame_reaches_the_host(toy_run):
    """Toy video (3 latent frames of 16 patches in one 48-token sequence): the tokens through the
    transformer and the uint8 bytes to the host are a frame's times the frames, and the transformer's
    FLOPs per denoising step exceed 3 images' (attention over the whole clip is quadratic in it)."""
    for name in ("infer.video.m350m_f16_t256_b2", "infer.video.xl3b_f16_t1024_b1_nocfg"):
        t = truth(toy_run, name)
        c, g = t["config"], t["ground_truth"]
        x = g["extra"]["0"]
        halves = 2 if c["guidance"] > 1 else 1
        assert t["ok"] and x["frames"] == c["frames"] == 3, name
        assert x["bytes_to_host_per_step"] == c["batch"] * 3 * 3 * 64 * 64, name
        assert g["tokens"] == g["steps"] * c["batch"] * halves * 3 * c["tokens"] * c["steps"], name
        assert 0 < x["host_checksum"] / (g["steps"] * x["bytes_to_host_per_step"]) < 255, name
    image, video = truth(toy_run, "infer.diffusion.m350m_t256_b64_nocfg"), truth(toy_run, "infer.video.xl3b_f16_t1024_b1_nocfg")
    per_image = image["ground_truth"]["extra"]["0"]["flops_per_denoising_step"] / image["config"]["batch"]
    per_frame = video["ground_truth"]["extra"]["0"]["flops_per_denoising_step"] / (3 * video["config"]["batch"])
    assert per_frame > per_image


def test_video_frames_share_one_sequence_and_decode_one_by_one():
    """Frames are consecutive runs of one sequence: attention mixes them (a change to the last frame's
    input moves the first frame's output), and the decoder turns each frame's patches into its own image."""
    from trainsentry.workloads.infer_diffusion import DiT, patchify, sample
    mcfg = model_config({"model": "toy", "seq_len": 48}, causal=False)
    torch.manual_seed(0)
    dit = DiT(mcfg, 16).eval()
    x, labels, t = torch.randn(2, 48, 16), torch.tensor([1, 2]), torch.full((2,), 0.5)
    y = x.clone()
    y[:, 32:] += 1.0
    with torch.inference_mode():
        assert not torch.allclose(dit(x, t, labels)[:, :16], dit(y, t, labels)[:, :16])
    frames = torch.randn(2, 3, 4, 8, 8)          # [clip, frame, channel, side, side]
    seq = torch.cat([patchify(frames[:, f], 2) for f in range(3)], dim=1)

    class Still(torch.nn.Module):                # zero velocity: the sampler returns its noise unchanged
        def forward(self, x, t, labels):
            return torch.zeros_like(x)

    out = sample(Still(), torch.nn.Identity(), seq, labels, 4, 1.0, 4, 2, frames=3)
    assert torch.equal(out, frames.reshape(6, 4, 8, 8))
    with pytest.raises(ValueError, match="frames"):
        spec = WORKLOADS["infer.video.m350m_f16_t256_b2"]
        spec.fn(None, {**spec.resolve(True), "frames": 4})          # 4 x 16 patches > 48 positions


def test_diffusion_guidance_is_one_batch_of_both_halves_and_patches_round_trip():
    from trainsentry.workloads.infer_diffusion import CLASSES, DiT, guided_velocity, patchify, unpatchify
    mcfg = model_config({"model": "toy", "seq_len": 16}, causal=False)
    torch.manual_seed(0)
    dit = DiT(mcfg, 16).eval()
    x, labels = torch.randn(3, 16, 16), torch.tensor([1, 5, 9])
    with torch.inference_mode():
        t = torch.full((3,), 0.25)
        vc, vu = dit(x, t, labels), dit(x, t, torch.full_like(labels, CLASSES))
        assert torch.allclose(guided_velocity(dit, x, 0.25, labels, 3.0), vu + 3.0 * (vc - vu), atol=1e-5)
        assert torch.allclose(guided_velocity(dit, x, 0.25, labels, 1.0), vc, atol=1e-6)   # no guidance: one half
        # bidirectional: the first token's output depends on the last token's input
        y = x.clone()
        y[:, -1] += 1.0
        assert not torch.allclose(dit(x, t, labels)[:, 0], dit(y, t, labels)[:, 0])
    lat = torch.randn(2, 4, 8, 8)
    assert torch.equal(unpatchify(patchify(lat, 2), 4, 2), lat)
    with pytest.raises(ValueError, match="causal"):
        DiT(model_config({"model": "toy", "seq_len": 16}), 16)


def test_the_sampler_integrates_the_flow_the_training_loss_fits():
    """A model that returns the exact velocity toward one latent x0 ((x - x0) / t, the target ε − x₀ of
    train_diffusion.flow_loss given x_t) is the flow's solution: its loss is zero, and the Euler sampler
    from any noise at t = 1 lands on x0 at t = 0 (decoded by an identity-like decoder, checked on the latent)."""
    from trainsentry.workloads.infer_diffusion import patchify, sample, unpatchify
    from trainsentry.workloads.train_diffusion import flow_loss

    x0 = torch.randn(2, 4, 8, 8)
    target = patchify(x0, 2)

    class Exact(torch.nn.Module):
        def forward(self, x, t, labels):
            return (x - target) / t.clamp_min(1e-6)[:, None, None]

    gen = torch.Generator().manual_seed(0)
    assert float(flow_loss(Exact(), x0, torch.zeros(2, dtype=torch.long), 2, gen)) < 1e-8
    noise = torch.randn(2, 16, 16)
    out = sample(Exact(), torch.nn.Identity(), noise, torch.zeros(2, dtype=torch.long), 7, 1.0, 4, 2)
    assert torch.allclose(out, unpatchify(target, 4, 2), atol=1e-4)
    with pytest.raises(ValueError, match="guidance"):
        from trainsentry.workloads.base import WORKLOADS
        WORKLOADS["infer.diffusion.m350m_t256_b32"].fn(None, {**WORKLOADS["infer.diffusion.m350m_t256_b32"].resolve(True),
                                                             "guidance": 0.5})


def test_kvswap_and_stream_ground_truth(toy_run):
    """Toy kvswap (seq 48, turns of 6 + 4 tokens, 3 cohorts of 2 at ages of 0, 1 and 2 turns): the one
    turn a 4-step run has time for (a prefill and 4 decode steps) saves cohort 0's 10 tokens; the loads
    issued are cohort 0's (nothing), cohort 1's 10 and, after the turn, cohort 2's 20. The stream
    service sends every block back as large as it came, and its compressed pulses peak at the echoes."""
    for name, save in (("infer.kvswap.l1b_b16_full", "full"), ("infer.kvswap.l1b_b16_new", "new")):
        x = truth(toy_run, name)["ground_truth"]["extra"]["0"]
        per = 2 * x["kv_bytes_per_token"]            # batch 2
        assert x["save"] == save and x["turns"] == 1 and x["conversations_ended"] == 0, name
        assert x["warmup_bytes_to_host"] == 30 * per and x["bytes_to_device"] == 30 * per, name
        assert x["bytes_to_host"] == 10 * per, name
    for name in ("other.stream.p2048_f1", "other.stream.p2048_f8", "other.stream.p1024_f4_dwell",
                 "other.stream.p2048_f1_cfar", "other.stream.p1024_f4_cfar"):
        t = truth(toy_run, name)
        x, c = t["ground_truth"]["extra"]["0"], t["config"]
        assert x["blocks"] == STEPS and x["block_bytes"] == c["pulses"] * c["samples"] * 8, name
        assert x["bytes_to_device"] == x["bytes_to_host"] == STEPS * x["block_bytes"], name
        assert x["peaks_correct"] == 1.0, name
        # the host's detector ran on every block (on the CPU each block is back before the next)
        assert ("detected_blocks" in x) == name.endswith("_cfar"), name
        if name.endswith("_cfar"):
            assert x["detected_blocks"] == STEPS and x["host_threads"] >= 1 and x["detect_hits"] > 0.5, name


def test_pulse_compression_finds_the_echo_and_its_filter():
    """The matched filter bank peaks at the echo's delay; a filter of another chirp rate peaks lower."""
    from trainsentry.workloads.other_stream import compress, filter_bank, received

    x, delays = received(6, 512, 64, 3, seed=5)
    bank = filter_bank(512, 3, 64)
    assert torch.equal(compress(x, bank).abs().argmax(dim=-1), delays)
    # the echo's amplitude (4) times the chirp's length (64): the right filter's gain on every pulse;
    # the first filter alone, on pulses holding another chirp, falls well short of it
    peak = compress(x, bank).abs().amax(dim=-1)
    one = compress(x, bank[:1]).abs().amax(dim=-1)
    assert torch.allclose(peak, torch.full_like(peak, 4 * 64), rtol=0.1) and bool((peak >= one).all())
    assert float(one.min()) < 0.5 * 4 * 64


def test_cfar_flags_the_echoes_and_nothing_far_from_them():
    """The host's detector after pulse compression: at a chirp of 512 samples every echo cell is flagged
    and no cell farther than a chirp's length from an echo is (a CFAR threshold of 20 times the local
    noise); without an echo in the pulse nearly nothing is."""
    from trainsentry.workloads.other_stream import cfar, compress, filter_bank, received

    m, chirp_len = 4096, 512
    x, delays = received(64, m, chirp_len, 4, seed=5)
    y = compress(x, filter_bank(m, 4, chirp_len))
    found = cfar(y, guard=4, train=32, scale=20.0)
    assert bool(found.gather(1, delays[:, None]).all())
    cells = torch.arange(m)[None, :]
    distance = torch.minimum((cells - delays[:, None]) % m, (delays[:, None] - cells) % m)
    assert int((found & (distance > chirp_len)).sum()) == 0
    noise = compress(torch.randn(64, m, dtype=torch.complex64, generator=torch.Generator().manual_seed(1)),
                     filter_bank(m, 4, chirp_len))
    assert int(cfar(noise, guard=4, train=32, scale=20.0).sum()) <= 2


def test_attribution_weight_check_sees_an_update_a_checksum_would_miss():
    """The negative control of ``weights_changed``: an in-place write is seen, even one that swaps two
    rows (a sum over the weights stays the same), and reading the weights is not a write."""
    from trainsentry.workloads.infer import weight_versions, weights_written

    model = GPT(model_config({"model": "toy", "seq_len": 16}))
    versions = weight_versions(model)
    model(torch.zeros(1, 4, dtype=torch.long))
    assert not weights_written(model, versions)
    w = model.head.weight
    total = float(w.detach().sum())
    with torch.no_grad():
        w[[0, 1]] = w[[1, 0]].clone()
    assert float(w.detach().sum()) == pytest.approx(total) and weights_written(model, versions)


def test_idle_pause_is_exact_or_exponential_with_that_mean():
    """``pause_dist: const`` waits exactly ``pause_s`` (a fixed rhythm); ``exp`` draws gaps whose mean
    is ``pause_s`` and whose spread is the exponential's (standard deviation = mean), reproducibly per
    rank; anything else is refused."""
    from types import SimpleNamespace

    from trainsentry.workloads.infer_common import IdlePause

    ctx = SimpleNamespace(seed=7, rank=0)
    const = IdlePause(ctx, {"pause_s": 0.5}, "const")
    assert {const.draw() for _ in range(10)} == {0.5}
    gaps = np.array([IdlePause(ctx, {"pause_s": 0.5, "pause_dist": "exp"}, "const").draw()])
    exp = IdlePause(ctx, {"pause_s": 0.5}, "exp")
    draws = np.array([exp.draw() for _ in range(4000)])
    assert draws.mean() == pytest.approx(0.5, rel=0.06) and draws.std() == pytest.approx(0.5, rel=0.08)
    assert draws[0] == gaps[0] and (draws > 0).all()   # the same seed and rank give the same gaps
    other = IdlePause(SimpleNamespace(seed=7, rank=1), {"pause_s": 0.5}, "exp").draw()
    assert other != draws[0]
    shared = IdlePause(SimpleNamespace(seed=7, rank=1), {"pause_s": 0.5}, "exp", per_rank=False).draw()
    assert shared == draws[0]                           # ranks in lockstep draw the same gaps
    assert IdlePause(ctx, {}, "exp").draw() == 0.0
    with pytest.raises(ValueError, match="pause_dist"):
        IdlePause(ctx, {"pause_s": 1, "pause_dist": "uniform"}, "exp")


def test_inference_weights_take_the_context_dtype_unless_asked_otherwise():
    """On a GPU the context's dtype is bf16: build_model casts to it, or to the dtype asked for."""
    from types import SimpleNamespace

    from trainsentry.workloads.infer_common import build_model

    ctx = SimpleNamespace(seed=1, device=torch.device("cpu"), dtype=torch.bfloat16)
    mcfg = model_config({"model": "toy", "seq_len": 16}, causal=False)
    assert {p.dtype for p in build_model(ctx, mcfg).parameters()} == {torch.bfloat16}
    assert {p.dtype for p in build_model(ctx, mcfg, torch.float32).parameters()} == {torch.float32}
    from trainsentry.workloads.infer import WEIGHTS
    assert WEIGHTS == {"default": None, "fp32": torch.float32, "fp16": torch.float16}


def _analytic_generate(cfg: dict, steps: int) -> float:
    """Forward FLOPs of ``steps`` steps of generation (prefill then decode), from the model config."""
    m = model_config(cfg)
    b, p, g = cfg["batch"], cfg["prompt_len"], cfg["gen_len"]
    total, length, done = 0.0, 0, 0
    while done < steps:
        if length == 0 or length == p + g - 1:
            total += b * p * m.flops_per_token(p, training=False)
            length = p
        else:
            length += 1
            total += b * m.flops_per_token(length, training=False)
        done += 1
    return total


@pytest.mark.parametrize("name", ["infer.generate.m350m_b128", "infer.prefill.m350m_ctx8k",
                                  "infer.replicas.m350m_b64", "infer.embed.s125m_b256_l512",
                                  "infer.attribute.s125m_b64_l512", "infer.attribute.l1b_b4_l1024_ig16",
                                  "infer.attribute.l1b_b16_l1024_pgd8"])
def test_flop_counter_matches_analytic(toy_run, name):
    t = truth(toy_run, name)
    cfg, gt = t["config"], t["ground_truth"]
    ranks = len(t["ranks"])
    if t["family"] == "embed":
        m = model_config(cfg, causal=False)
        no_head = m.flops_per_token(cfg["text_len"], False) - 2 * m.d_model * m.vocab   # pooled, no LM head
        analytic = gt["steps"] * cfg["batch"] * cfg["text_len"] * no_head
    elif t["family"] == "attribute":
        # forward with the LM head, then the activation gradients only: twice the forward (the counter
        # puts attention's backward at 2.5× its forward, a few % more at these lengths), never 3×;
        # integrated gradients and adversarial search make that many passes per step (the search one
        # more forward, the loss it reached)
        m = model_config(cfg)
        passes = {"ig": cfg.get("ig_steps"), "pgd": cfg.get("pgd_iters")}.get(cfg.get("method"), 1)
        forwards = 2 * passes + (cfg.get("method") == "pgd")
        analytic = forwards * gt["steps"] * cfg["batch"] * cfg["text_len"] * m.flops_per_token(cfg["text_len"], False)
    else:
        analytic = _analytic_generate(cfg, gt["steps"])
    assert gt["flops"] == pytest.approx(ranks * analytic, rel=0.10)


def test_tensor_parallel_all_reduce_bytes(toy_run):
    t = truth(toy_run, "infer.tp.xl3b_b32")
    cfg, gt = t["config"], t["ground_truth"]
    m = model_config(cfg)
    rounds = gt["extra"]["0"]["rounds"]
    tokens_per_round = cfg["prompt_len"] + cfg["gen_len"] - 1
    expect = rounds * 2 * m.n_layers * cfg["batch"] * tokens_per_round * m.d_model * FP32
    for rank in ("0", "1"):
        assert gt["collective_bytes_per_rank"][rank] == {"all_reduce": expect}
    assert gt["tokens"] == rounds * cfg["batch"] * tokens_per_round   # counted once, on rank 0


def test_tensor_parallel_decode_equals_single_device(toy_run):
    check = json.loads((toy_run / "tp_check.json").read_text())
    assert check["same_tokens"]
    assert check["max_abs_diff"] <= 1e-5 * max(1.0, check["max_abs"])


def test_expert_parallel_all_to_all_bytes(toy_run):
    """Two all-to-alls per MoE layer per forward, each of the whole [experts, capacity, d] buffer;
    the same on both ranks (symmetric); the toy run is one round: a prefill and gen_len - 1 decodes."""
    t = truth(toy_run, "infer.ep.l1b_e8_k2_b64")
    cfg, gt = t["config"], t["ground_truth"]
    m = model_config(cfg)
    rounds = gt["extra"]["0"]["rounds"]
    assert rounds >= 1 and gt["extra"]["1"]["rounds"] == rounds
    e, k, f = cfg["experts"], cfg["top_k"], cfg["capacity_factor"]
    slots = capacity(cfg["batch"] * cfg["prompt_len"], e, k, f) + (cfg["gen_len"] - 1) * capacity(cfg["batch"], e, k, f)
    expect = rounds * 2 * m.n_layers * e * slots * m.d_model * FP32
    for rank in ("0", "1"):
        assert gt["collective_bytes_per_rank"][rank] == {"all_to_all": expect}
    # every rank serves its own prompts: tokens from both
    assert gt["tokens"] == 2 * rounds * cfg["batch"] * (cfg["prompt_len"] + cfg["gen_len"] - 1)


def test_expert_parallel_decode_equals_single_device(toy_run):
    check = json.loads((toy_run / "ep_check.json").read_text())
    assert check["same_tokens"]
    assert check["max_abs_diff"] <= 1e-5 * max(1.0, check["max_abs"])


def test_moe_layer_equals_per_token_experts_and_drops_over_capacity():
    """The dispatch by capacity slots computes, for every token, the weighted sum of its top-k
    experts; a token past its expert's capacity gets nothing from that expert (it skips the layer)."""
    torch.manual_seed(0)
    moe = ExpertParallelMoE(16, 8, 4, 2, 100.0, 0, 1, seed=3)
    x = torch.randn(3, 5, 16)
    flat = x.reshape(-1, 16)
    w, e = torch.softmax(flat @ moe.router, -1).topk(2, -1)
    w = w / w.sum(-1, keepdim=True)
    ref = torch.zeros_like(flat)
    for i in range(flat.shape[0]):
        for j in range(2):
            h = torch.nn.functional.gelu(flat[i] @ moe.w1[e[i, j]], approximate="tanh")
            ref[i] += w[i, j] * (h @ moe.w2[e[i, j]])
    assert torch.allclose(moe(x), ref.view_as(x), atol=1e-6)
    tight = ExpertParallelMoE(16, 8, 4, 2, 0.01, 0, 1, seed=3)
    assert capacity(15, 4, 2, 0.01) == 1          # one slot per expert: at most 4 of 30 assignments served
    served = (tight(x).reshape(-1, 16).abs().sum(-1) > 0).sum().item()
    assert 1 <= served <= 4
    with pytest.raises(ValueError, match="do not split"):
        ExpertParallelMoE(16, 8, 3, 2, 1.0, 0, 2)


def test_context_parallel_all_gathers_kv_every_layer(toy_run):
    t = truth(toy_run, "infer.cp.xl3b_ctx32k")
    cfg, gt = t["config"], t["ground_truth"]
    m = model_config(cfg)
    chunk = cfg["prompt_len"] // 2
    per_step = m.n_layers * 2 * cfg["batch"] * m.kv_heads * chunk * m.head_dim * FP32
    for rank in ("0", "1"):
        assert gt["collective_bytes_per_rank"][rank] == {"all_gather": gt["steps"] * per_step}
    assert gt["tokens"] == gt["steps"] * cfg["batch"] * cfg["prompt_len"]     # each rank its chunk
    assert gt["extra"]["1"]["first_tokens"] == gt["steps"] * cfg["batch"]
    assert gt["flops"] > 0


def test_context_parallel_prefill_equals_single_device(toy_run):
    """Every position of every chunk, contiguous and load-balanced (zigzag) split: the logits match
    one device on the whole prompt."""
    check = json.loads((toy_run / "cp_check.json").read_text())
    assert check["max_abs_diff"] <= 1e-5 * max(1.0, check["max_abs"])


def test_stencil_exchanges_halo_planes_both_ways_and_converges(toy_run):
    t = truth(toy_run, "other.stencil.n1024_z512")
    cfg, gt = t["config"], t["ground_truth"]
    plane = cfg["n"] ** 2 * FP32
    checks = gt["steps"] // cfg["check_every"]
    for rank in ("0", "1"):          # one neighbour each: the same bytes each way, every sweep
        assert gt["collective_bytes_per_rank"][rank] == {
            "send_halo": gt["steps"] * cfg["sweeps"] * plane, "all_reduce": checks * 4}
    curve = gt["extra"]["0"]["residual_curve"]
    assert len(curve) == checks >= 2 and curve[-1][1] < curve[0][1]      # the solver converges


def test_split_domain_with_halo_planes_equals_whole_domain():
    """Two slabs, each with a ghost plane on each side, swept and their halos swapped the way
    exchange_halos does (own plane 1 -> the lower neighbour's ghost -1, own plane -2 -> the upper
    neighbour's ghost 0): after every sweep the slabs equal the whole domain swept at once."""
    from trainsentry.workloads.other_hpc import jacobi_sweep
    n, nz = 7, 3
    whole = torch.rand(2 * nz + 2, n, n, generator=torch.Generator().manual_seed(0))
    low, high = whole[:nz + 2].clone(), whole[nz:].clone()
    w_out, l_out, h_out = whole.clone(), low.clone(), high.clone()
    for _ in range(4):
        jacobi_sweep(whole, w_out); whole, w_out = w_out, whole
        jacobi_sweep(low, l_out); low, l_out = l_out, low
        jacobi_sweep(high, h_out); high, h_out = h_out, high
        low[-1], high[0] = high[1].clone(), low[-2].clone()
        assert torch.equal(low[1:-1], whole[1:nz + 1]) and torch.equal(high[1:-1], whole[nz + 1:-1])


def test_disaggregated_kv_transfer_bytes(toy_run):
    t = truth(toy_run, "infer.disagg.l1b_b32_p2k")
    cfg, gt = t["config"], t["ground_truth"]
    m = model_config(cfg)
    rounds = gt["extra"]["0"]["rounds"]
    assert rounds >= 1 and gt["extra"]["1"]["rounds"] == rounds
    per_round = 2 * m.n_layers * m.kv_heads * m.head_dim * FP32 * cfg["batch"] * cfg["prompt_len"]
    assert kv_transfer_bytes(m, cfg["batch"], cfg["prompt_len"], FP32) == per_round
    assert gt["collective_bytes_per_rank"]["0"]["send_kv_cache"] == rounds * per_round
    assert gt["collective_bytes_per_rank"]["1"] == {}     # one way: the decode rank sends nothing
    assert gt["tokens"] == rounds * cfg["batch"] * (cfg["prompt_len"] + cfg["gen_len"] - 1)


def test_pipeline_sends_activations_one_way(toy_run):
    t = truth(toy_run, "infer.pp.xl3b_b64_mb4")
    cfg, gt = t["config"], t["ground_truth"]
    rounds = gt["extra"]["0"]["rounds"]
    d = model_config(cfg).d_model
    tokens_per_round = cfg["prompt_len"] + cfg["gen_len"] - 1
    sent = gt["collective_bytes_per_rank"]
    assert sent["0"] == {"send_activations": rounds * cfg["batch"] * tokens_per_round * d * FP32}
    assert sent["1"] == {"send_tokens": rounds * cfg["gen_len"] * cfg["batch"] * 8}
    assert gt["extra"]["0"]["layers"] == [0, 1] and gt["extra"]["1"]["layers"] == [1, 2]


def test_replicas_and_single_gpu_send_nothing(toy_run):
    for name in ("infer.replicas.m350m_b64", "infer.generate.s50m_b32", "infer.serve.m350m_r16_replicas"):
        gt = truth(toy_run, name)["ground_truth"]
        assert all(v == {} for v in gt["collective_bytes_per_rank"].values()), name
    gt = truth(toy_run, "infer.replicas.m350m_b64")["ground_truth"]
    assert set(gt["flops_per_step_per_rank"]) == {"0", "1"}


def test_serving_completes_requests(toy_run):
    for name in ("infer.serve.m350m_r40_heavy", "infer.serve.l1b_r20_tp2"):
        t = truth(toy_run, name)
        e = t["ground_truth"]["extra"]["0"]
        assert e["requests_arrived"] >= e["requests_done"] >= 1, name
        assert e["median_ttft_s"] is not None and e["median_ttft_s"] <= e["median_latency_s"]
    tp = truth(toy_run, "infer.serve.l1b_r20_tp2")["ground_truth"]["collective_bytes_per_rank"]
    assert tp["0"]["all_reduce"] == tp["1"]["all_reduce"] > 0


def test_nccl_sweep_counts_bytes(toy_run):
    gt = truth(toy_run, "other.nccl_sweep.mixed_1k_256m")["ground_truth"]
    for rank in ("0", "1"):   # 6 steps: 2 sizes × 3 ops, 2 calls each, 1 KiB + 2 KiB
        assert gt["collective_bytes_per_rank"][rank] == {op: 2 * (1024 + 2048)
                                                        for op in ("all_reduce", "all_gather", "send_recv")}
    oneway = truth(toy_run, "other.nccl_sweep.oneway_1m_512m")["ground_truth"]["collective_bytes_per_rank"]
    assert oneway["0"]["send_oneway"] > 0 and oneway["1"]["send_oneway"] == 0


# ------------------------------------------------------------------ in-process correctness
TOY = ModelConfig(**MODELS["toy"], seq_len=48)


def _model() -> GPT:
    torch.manual_seed(3)
    return GPT(TOY).eval()


@torch.inference_mode()
def test_kv_cache_decode_equals_full_forward():
    model = _model()
    seq = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    cache = KVCache(TOY, TOY.n_layers, 2, 16, "cpu", torch.float32)
    steps = [model(seq[:, :8], cache)[:, -1]] + [model(seq[:, i:i + 1], cache)[:, -1] for i in range(8, 12)]
    full = model(seq)
    for j, logits in enumerate(steps):
        torch.testing.assert_close(logits, full[:, 7 + j], rtol=1e-4, atol=1e-5)


@torch.inference_mode()
def test_slot_pool_decode_with_ragged_lengths_equals_full_forward():
    """Continuous batching: three requests of different lengths decoded together, one leaving."""
    model = _model()
    pool = SlotPool(TOY, 4, 32, "cpu", torch.float32, None)
    g = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, 256, (n,), generator=g) for n in (5, 9, 7)]
    prefill_into_pool(model, pool, [seqs[0][:-1].tolist()])            # one joins, then two together
    first = prefill_into_pool(model, pool, [s[:-1].tolist() for s in seqs[1:]])
    assert first == [8, 6] and pool.lengths == [4, 8, 6]
    for i, s in enumerate(seqs):   # the prefill's own next token is the full forward's
        assert int(pool.tokens[i]) == int(model(s[None, :-1])[0, -1].argmax())
    pool.tokens[:3] = torch.stack([s[-1:] for s in seqs])
    logits = decode_pool(model, pool)
    for i, s in enumerate(seqs):
        torch.testing.assert_close(logits[i], model(s[None])[0, -1], rtol=1e-4, atol=1e-5)
    pool.lengths = [n + 1 for n in pool.lengths]
    pool.release(0)                      # slot 2 moves into slot 0
    nxt = torch.tensor([[11], [22]])
    pool.tokens[:2] = nxt
    logits = decode_pool(model, pool)
    for row, s in zip(range(2), (seqs[2], seqs[1])):
        ext = torch.cat([s, nxt[row]])
        torch.testing.assert_close(logits[row], model(ext[None])[0, -1], rtol=1e-4, atol=1e-5)


@torch.inference_mode()
def test_flop_fit_is_exact_for_pool_decode_and_prefill():
    from trainsentry.workloads.base import Context
    model = _model()
    ctx = Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32, deadline=0)
    fit = fit_model(model, TOY, ctx)
    pool = SlotPool(TOY, 4, 32, "cpu", torch.float32, None)
    pool.lengths = [3, 17, 9]
    assert flopcount.measure(lambda: decode_pool(model, pool)) == fit.decode(3, 18)
    cache = KVCache(TOY, TOY.n_layers, 2, 32, "cpu", torch.float32)
    prompt = torch.zeros(2, 21, dtype=torch.long)
    assert flopcount.measure(lambda: model(prompt, cache)) == fit.prefill(2, 21)
    turn = torch.zeros(2, 6, dtype=torch.long)        # a new turn appended to the 21 cached tokens
    assert flopcount.measure(lambda: model(turn, cache)) == fit.extend(2, 6, 21)
    assert fit.decode(1, 30) == pytest.approx(TOY.flops_per_token(30, training=False), rel=1e-9)
