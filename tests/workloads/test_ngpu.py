"""The 8-GPU code paths (issue 9) on CPU: one torchrun launch of the real plan worker with 8 gloo
ranks runs each 8-rank topology at toy size for a few steps; the tests read the truth files and
check the ledgers and who each rank handed its bytes to (``collective_by_group_per_rank``: the
global ranks of a collective's group, or "->peer" for a send). Plus: a launch too small for a
workload is refused, and the 8-GPU campaign names only registered workloads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torchrun_plan import run_plan

from trainsentry.workloads import registry  # noqa: F401  (registers every workload)
from trainsentry.workloads.base import WORKLOADS
from trainsentry.workloads.infer_common import model_config as infer_model_config
from trainsentry.workloads.infer_parallel import kv_transfer_bytes
from trainsentry.workloads.parallel import model_config

ROOT = Path(__file__).resolve().parents[2]
WORLD = 8
FP32 = 4
ALL = ",".join(str(r) for r in range(WORLD))
RUNS = {  # run_id -> (workload, max_steps, overrides)
    "ddp8": ("train.ddp8.w1024-l16", 2, {}),
    "fsdp8": ("train.fsdp8.w4096-l32", 2, {}),
    "tp4dp2": ("train.tp4dp2.w2048-l24", 2, {}),
    "tp2dp4": ("train.tp.w2048-l24", 2, {}),           # a 2-GPU config on 8: tp 2 (its default) x dp 4
    "pp4": ("train.pp4.1f1b-w2048-l24", 3, {}),      # the pipeline measures FLOPs on its 2nd step
    "infer_tp8": ("infer.tp8.g7b_b64", 4, {}),
    "disagg4x4": ("infer.disagg4x4.l1b_b32_p2k", 2, {}),
    "replicas8": ("infer.replicas8.m350m_b64", 4, {}),
    "ep8": ("infer.ep.l1b_e8_k2_b64", 4, {"experts": 8}),   # one expert per rank
    "cp8": ("infer.cp.xl3b_ctx32k", 2, {}),                  # 32 toy tokens, 4 per rank
    "stencil8": ("other.stencil.n1024_z512", 2, {}),          # a chain of 8 slabs
    "oneway": ("other.nccl_sweep.oneway_1m_512m", 2, {"min_bytes": 1024, "max_bytes": 2048, "reps": 1}),
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def truths(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("ngpu")
    runs = [{"run_id": rid, "workload": name, "max_steps": steps, "seconds": 90, "overrides": over}
            for rid, (name, steps, over) in RUNS.items()]
    return run_plan(out, runs, WORLD, ["-m", "trainsentry.workloads.worker"], timeout=240, cwd=ROOT)


def gt(t: dict) -> dict:
    return t["ground_truth"]


def by_group(t: dict, rank: int) -> dict[str, dict[str, int]]:
    return gt(t)["collective_by_group_per_rank"][str(rank)]


def coll(t: dict, rank: int) -> dict[str, int]:
    return gt(t)["collective_bytes_per_rank"][str(rank)]


def extra(t: dict, rank: int = 0) -> dict:
    return gt(t)["extra"][str(rank)]


def toy_cfg(run_id: str) -> dict:
    name, _, over = RUNS[run_id]
    return WORKLOADS[name].resolve(toy=True, overrides=over)


@pytest.mark.parametrize("run_id", list(RUNS))
def test_every_topology_runs_and_fills_its_ledger(truths, run_id):
    t = truths[run_id]
    assert t["ok"], t["errors"]
    assert t["world_size"] == WORLD
    g = gt(t)
    assert g["steps"] == RUNS[run_id][1] and len(g["step_times_s"]) == g["steps"]
    assert len(g["flops_per_step_per_rank"]) == len(t["ranks"])
    if t["class"] != "other":
        assert g["tokens"] > 0 and g["flops"] > 0
    if t["class"] == "training":   # inference credits FLOPs step by step (a fit), not one count per step
        assert all(f and f > 0 for f in g["flops_per_step_per_rank"].values())


def test_ddp_over_8_all_reduces_every_gradient_over_all_ranks(truths):
    t = truths["ddp8"]
    grad_bytes = extra(t)["params_trainable_local"] * FP32
    for rank in range(WORLD):
        groups = by_group(t, rank)
        assert set(groups) == {ALL}                       # start-up broadcast and gradients: everyone
        assert groups[ALL]["all_reduce"] == gt(t)["steps"] * grad_bytes
    assert gt(t)["tokens"] == WORLD * 2 * toy_cfg("ddp8")["batch"] * toy_cfg("ddp8")["seq_len"]


def test_fsdp_over_8_gathers_an_eighth_and_reduce_scatters_all(truths):
    t = truths["fsdp8"]
    param_bytes = extra(t)["params_total"] * FP32
    steps = gt(t)["steps"]
    for rank in range(WORLD):
        assert set(by_group(t, rank)) == {ALL}
        c = coll(t, rank)
        assert c["reduce_scatter"] == steps * param_bytes           # full gradients in
        gathered = c["all_gather"] / steps                           # own shard out, forward + backward
        assert param_bytes / WORLD <= gathered <= 2.2 * param_bytes / WORLD
        assert "all_reduce" not in c


@pytest.mark.parametrize("run_id,tp", [("tp4dp2", 4), ("tp2dp4", 2)])
def test_tensor_parallel_reduces_activations_inside_tp_groups_and_gradients_across(truths, run_id, tp):
    t = truths[run_id]
    cfg = toy_cfg(run_id)
    steps = gt(t)["steps"]
    dp = WORLD // tp
    act_bytes = cfg["batch"] * cfg["seq_len"] * cfg["d_model"] * FP32
    for rank in range(WORLD):
        e = extra(t, rank)
        tp_group = [r for r in range(WORLD) if r // tp == rank // tp]      # consecutive ranks
        dp_group = [rank % tp + tp * i for i in range(dp)]                 # strided
        assert (e["tp"], e["dp"], e["tp_group"], e["dp_group"]) == (tp, dp, tp_group, dp_group)
        groups = by_group(t, rank)
        tp_key, dp_key = ",".join(map(str, tp_group)), ",".join(map(str, dp_group))
        assert set(groups) <= {tp_key, dp_key}, groups               # nothing crosses the whole world
        # activations: 2 all-reduces per block forward and 2..4 backward, each one batch of a TP group
        tp_ar = groups[tp_key]["all_reduce"] / steps
        assert tp_ar % act_bytes == 0 and 4 * cfg["n_layers"] <= tp_ar / act_bytes <= 8 * cfg["n_layers"]
        # gradients: this rank's local shards and the replicated parameters, once per step
        assert groups[dp_key] == {"all_reduce": steps * e["params_trainable_local"] * FP32}
        # the averaged gradients were written back: replicas agree, tp siblings hold other shards
        assert e["local_weights_sum"] == extra(t, dp_group[0])["local_weights_sum"]
        if rank % tp:
            assert e["local_weights_sum"] != extra(t, rank - 1)["local_weights_sum"]
    # each rank holds 1/tp of every block plus the replicated embeddings / head
    e = extra(t)
    m = model_config(cfg)
    d = m.d_model
    block_matmuls = 2 * d * d + 2 * d * m.kv_heads * m.head_dim + 2 * d * m.ff
    replicated = m.params() - m.n_layers * block_matmuls
    assert e["params_local"] == m.n_layers * block_matmuls // tp + replicated
    assert gt(t)["tokens"] == dp * steps * cfg["batch"] * cfg["seq_len"]    # one batch per TP group


def test_pipeline_over_4_of_8_passes_activations_along_the_chain(truths):
    t = truths["pp4"]
    cfg = toy_cfg("pp4")
    assert t["ranks"] == [0, 1, 2, 3]
    act_bytes = gt(t)["steps"] * cfg["batch"] * cfg["seq_len"] * cfg["d_model"] * FP32
    for stage in range(4):
        sends = {k: v["send"] for k, v in by_group(t, stage).items() if "send" in v}
        expect = {}
        if stage < 3:
            expect[f"->{stage + 1}"] = act_bytes                    # activations forward
        if stage > 0:
            expect[f"->{stage - 1}"] = act_bytes                    # their gradients back
        assert sends.keys() == expect.keys()
        for peer, nbytes in expect.items():                          # + a little shape metadata
            assert sends[peer] == pytest.approx(nbytes, rel=0.01)
        assert extra(t, stage)["stage_layers"] == [str(stage)]
    assert gt(t)["tokens"] == gt(t)["steps"] * cfg["batch"] * cfg["seq_len"]


def test_tensor_parallel_inference_over_8(truths):
    t = truths["infer_tp8"]
    cfg = t["config"]
    m = infer_model_config(cfg)
    rounds = extra(t)["rounds"]
    tokens_per_round = cfg["prompt_len"] + cfg["gen_len"] - 1
    expect = rounds * 2 * m.n_layers * cfg["batch"] * tokens_per_round * m.d_model * FP32
    for rank in range(WORLD):
        assert by_group(t, rank) == {ALL: {"all_reduce": expect}}
    assert gt(t)["tokens"] == rounds * cfg["batch"] * tokens_per_round    # counted once per group


def test_disaggregated_4x4_sends_only_prefill_to_decode_pairs(truths):
    t = truths["disagg4x4"]
    cfg = t["config"]
    m = infer_model_config(cfg)
    per_round = kv_transfer_bytes(m, cfg["batch"], cfg["prompt_len"], FP32)
    for rank in range(4):
        e = extra(t, rank)
        assert e["role"] == "prefill" and e["peer"] == rank + 4
        assert extra(t, rank + 4)["role"] == "decode" and extra(t, rank + 4)["rounds"] == e["rounds"] >= 1
        groups = by_group(t, rank)
        assert set(groups) == {f"->{rank + 4}"}                     # one partner, one direction
        assert groups[f"->{rank + 4}"]["send_kv_cache"] == e["rounds"] * per_round
    for rank in range(4, WORLD):
        assert coll(t, rank) == {} and by_group(t, rank) == {}       # decoders send nothing


def test_replicas_on_all_8_share_nothing(truths):
    t = truths["replicas8"]
    assert set(gt(t)["flops_per_step_per_rank"]) == {str(r) for r in range(WORLD)}
    assert all(coll(t, r) == {} for r in range(WORLD))


def test_expert_parallel_over_8_exchanges_all_to_all_among_all_ranks(truths):
    t = truths["ep8"]
    sent = {r: by_group(t, r) for r in range(WORLD)}
    assert set(sent[0]) == {ALL} and sent[0][ALL]["all_to_all"] > 0
    assert all(sent[r] == sent[0] for r in range(WORLD))            # symmetric: the same on every rank
    assert all(e["experts_per_rank"] == 1 for e in gt(t)["extra"].values())


def test_context_parallel_over_8_all_gathers_among_all_ranks(truths):
    t = truths["cp8"]
    sent = {r: by_group(t, r) for r in range(WORLD)}
    assert set(sent[0]) == {ALL} and sent[0][ALL]["all_gather"] > 0
    assert all(sent[r] == sent[0] for r in range(WORLD))
    assert gt(t)["extra"][str(WORLD - 1)]["first_tokens"] > 0       # the last chunk's rank samples


def test_stencil_over_8_sends_halos_to_its_chain_neighbours_only(truths):
    t = truths["stencil8"]
    plane = t["config"]["n"] ** 2 * FP32
    for r in range(WORLD):
        peers = {f"->{p}" for p in (r - 1, r + 1) if 0 <= p < WORLD}
        sends = {k: v for k, v in by_group(t, r).items() if k.startswith("->")}
        assert set(sends) == peers
        assert all(v == {"send_halo": gt(t)["steps"] * plane} for v in sends.values())


def test_one_way_sweep_pairs_first_half_with_second(truths):
    t = truths["oneway"]
    for rank in range(4):
        assert by_group(t, rank) == {f"->{rank + 4}": {"send_oneway": 1024 + 2048}}
    for rank in range(4, WORLD):
        assert coll(t, rank) == {"send_oneway": 0}


def test_a_launch_too_small_is_refused_and_recorded(tmp_path):
    """One process (world 1): an 8-rank workload is refused with a clear error, the plan goes on."""
    plan = {"toy": True, "runs": [{"run_id": "big", "workload": "train.ddp8.w1024-l16", "max_steps": 1},
                                  {"run_id": "small", "workload": "other.idle.bare", "max_steps": 1}]}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-m", "trainsentry.workloads.worker", str(tmp_path / "plan.json"),
                           str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    big = json.loads((tmp_path / "out" / "big.truth.json").read_text())
    assert not big["ok"] and "needs at least 8 ranks" in big["errors"][0] and "has 1" in big["errors"][0]
    assert big["ground_truth"]["steps"] == 0
    assert json.loads((tmp_path / "out" / "small.truth.json").read_text())["ok"]


def test_h200x8_campaign_lists_the_issue_9_runs():
    from trainsentry.lab.campaign import Campaign

    c = Campaign.load(ROOT / "configs" / "campaigns" / "h200x8.yaml")
    assert (c.name, c.nproc) == ("h200x8", 8)
    names = {r["workload"] for r in c.expand()}
    for prefix in ("train.ddp8.", "train.fsdp8.", "train.tp4dp2.", "train.pp4.", "infer.tp8.",
                   "infer.disagg4x4.", "infer.replicas8."):
        assert any(n.startswith(prefix) for n in names), prefix
    assert all(WORKLOADS[n].min_ranks <= c.nproc for n in names)
