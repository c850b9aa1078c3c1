"""Every red-team strategy at toy size: one torchrun launch of the real worker with 2 gloo ranks runs
them all; one 8-rank launch runs DiLoCo and PowerSGD to exercise N > 2. The tests read the truth
files: the run trained (loss falls), and its traffic has the shape the strategy claims."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import pytest
from torchrun_plan import run_plan

from trainsentry.workloads import adversarial
from trainsentry.workloads.adversarial_sync import powersgd_bytes_per_step
from trainsentry.workloads.base import WORKLOADS

HERE = Path(__file__).parent
STEPS = 6
FALLS = ["adv.diloco.h10", "adv.diloco.h50-int8", "adv.diloco.streaming-h50", "adv.kvdisguise.step-p2k",
         "adv.kvdisguise.h20-p2k", "adv.powersgd.r4", "adv.topk.k1pct", "adv.hostsync.pcie", "adv.hostsync.net",
         "adv.online.lora-k4", "adv.whitebox.proxy-lora", "adv.split.processes", "adv.split.gap6", "adv.accum.k8",
         "adv.throttle.lowutil", "adv.shape.pid", "adv.cover.flatten", "adv.cover.tp-decoy", "adv.pp.1f1b-mb8",
         "adv.offload.t1-x8"]


def _launch(out: Path, nproc: int, names: list[str], steps: int, more: list[dict] = ()) -> dict[str, dict]:
    runs = [{"run_id": n, "workload": n, "max_steps": steps, "seconds": 120} for n in names]
    runs += [{"max_steps": steps, "seconds": 120, **m} for m in more]
    return run_plan(out, runs, nproc, [str(HERE / "adv_worker.py")], timeout=400)


# A surrogate as `trainsentry redteam surrogate` writes it (JSON trees), reduced to one split: P(training)
# is high once more than half of the last 0.25 s was training. Passed as the campaign passes it: overrides.
SURROGATE = {"format": "trainsentry-surrogate-trees/1", "features": ["train_frac"], "baseline": 0.0, "window_s": 0.25,
             "trees": [{"feature": [0, 0, 0], "threshold": [0.5, 0.0, 0.0], "left": [1, 0, 0], "right": [2, 0, 0],
                        "leaf": [0, 1, 1], "value": [0.0, -5.0, 5.0]}]}


@pytest.fixture(scope="module")
def truths(tmp_path_factory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("adv2")
    (out / "surrogate.json").write_text(json.dumps(SURROGATE))
    more = [{"run_id": "surrogate-from-file", "workload": "adv.whitebox.surrogate-lora",
             "overrides": {"surrogate_path": str(out / "surrogate.json")}},
            {"run_id": "throttle-exp", "workload": "adv.throttle.pause50ms", "overrides": {"pause_dist": "exp"}}]
    return _launch(out, 2, adversarial.names(), STEPS, more)


@pytest.fixture(scope="module")
def truths8(tmp_path_factory) -> dict[str, dict]:
    return _launch(tmp_path_factory.mktemp("adv8"), 8, ["adv.diloco.h50", "adv.powersgd.r4"], 4)


def gt(t: dict) -> dict:
    return t["ground_truth"]


def ex(t: dict, rank: int = 0) -> dict:
    return gt(t)["extra"][str(rank)]


def coll(t: dict, rank: int = 0) -> dict:
    return gt(t)["collective_bytes_per_rank"][str(rank)]


def cfg(name: str) -> dict:
    return WORKLOADS[name].resolve(toy=True)


def param_bytes(t: dict) -> int:
    return ex(t)["params_trainable_local"] * 4          # fp32 on CPU


# --- every strategy ran, trained, and filled the ledger ---------------------------------------------

@pytest.mark.parametrize("name", adversarial.names())
def test_strategy_ran_and_ledger_filled(truths, name):
    t = truths[name]
    assert t["ok"], t["errors"]
    assert t["class"] == "training" and t["family"] == name.split(".")[1]
    g = gt(t)
    assert g["steps"] == STEPS and len(g["step_times_s"]) == STEPS and g["tokens"] > 0 and g["flops"] > 0
    assert all(math.isfinite(l) for _, l in g["loss_curve"]) and g["loss_curve"]
    vals = [e["val_loss"] for e in g["extra"].values() if e.get("val_loss") is not None]
    assert vals and all(0 < v < 8 for v in vals)
    e = ex(t)
    assert e["baseline"] in WORKLOADS and WORKLOADS[e["baseline"]].cls == "training"
    if name.split(".")[1] != "pp":
        assert e["strategy"] == name.split(".")[1] and isinstance(e["strategy_params"], dict)


@pytest.mark.parametrize("name", FALLS)
def test_loss_falls(truths, name):
    losses = [l for _, l in gt(truths[name])["loss_curve"]]
    assert losses[-1] < losses[0] - 0.2, losses
    vals = [e["val_loss"] for e in gt(truths[name])["extra"].values() if e.get("val_loss") is not None]
    assert min(vals) < losses[0] - 0.1


def test_registry_names_and_baselines():
    names = adversarial.names()
    assert len(names) >= 35
    families = {WORKLOADS[n].family for n in names}
    assert families >= {"diloco", "split", "throttle", "kvdisguise", "powersgd", "topk", "accum", "cover", "shape",
                        "hostsync", "pp", "online", "whitebox", "flops", "offload"}
    for n in names:
        assert WORKLOADS[n].cls == "training" and WORKLOADS[n].config["baseline"] in WORKLOADS


# --- communication signatures ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["adv.diloco.h10", "adv.diloco.streaming-h50", "adv.cover.flatten"])
def test_diloco_all_reduce_is_param_bytes_over_h(truths, name):
    t, h = truths[name], cfg(name)["h"]
    per_step = coll(t)["all_reduce"] / STEPS
    synced = len(ex(t)["syncs"])
    # syncs happen at whole fragments; over the run the link carries param_bytes once per H steps
    assert synced >= 1
    assert per_step == pytest.approx(param_bytes(t) / h, rel=0.5)
    frag = ex(t)["strategy_params"]["fragment_values"]
    assert coll(t)["all_reduce"] == 4 * sum(frag[f] for _, f in ex(t)["syncs"])
    assert coll(t, 1)["all_reduce"] == coll(t)["all_reduce"]                 # symmetric


def test_diloco_syncs_every_h_steps(truths):
    t = truths["adv.diloco.h10"]
    assert [s for s, _ in ex(t)["syncs"]] == list(range(2, STEPS + 1, 2))     # toy H = 2
    assert set(coll(t)) == {"all_reduce"}


def test_streaming_staggers_fragments(truths):
    syncs = ex(truths["adv.diloco.streaming-h50"])["syncs"]                   # toy H = 4, 2 fragments
    assert syncs == [[2, 1], [4, 0], [6, 1]]


def test_int8_moves_a_quarter(truths):
    t = truths["adv.diloco.h50-int8"]
    syncs = len(ex(t)["syncs"])
    n = ex(t)["params_trainable_local"]
    blocks = -(-n // 4096)
    assert coll(t)["all_gather"] == syncs * (blocks * 4096 + 4 * blocks)
    assert "all_reduce" not in coll(t)


def test_topk_moves_k_indices_and_values(truths):
    t = truths["adv.topk.k1pct"]
    k = ex(t)["strategy_params"]["k"]
    assert k == math.ceil(ex(t)["params_trainable_local"] * 0.01)
    assert coll(t)["all_gather"] == STEPS * k * 8                             # int32 index + fp32 value


def test_kv_disguise_is_one_way_send_recv_alternating(truths):
    for name in ("adv.kvdisguise.step-p2k", "adv.kvdisguise.h20-p2k"):
        t = truths[name]
        assert set(coll(t)) == {"send", "recv"} and set(coll(t, 1)) == {"send", "recv"}
        d0, d1 = ex(t, 0)["kv_directions"], ex(t, 1)["kv_directions"]
        assert d0 and all(a != b for a, b in zip(d0, d0[1:]))                 # direction alternates
        assert d0 == ["in", "out"] * (len(d0) // 2) and d1 == ["out", "in"] * (len(d1) // 2)
        assert coll(t, 0)["recv"] == coll(t, 1)["send"] and coll(t, 0)["send"] == coll(t, 1)["recv"]
    # per-step: bf16 gradients each way every step
    t = truths["adv.kvdisguise.step-p2k"]
    assert coll(t, 1)["send"] == STEPS * ex(t)["params_trainable_local"] * 2
    assert ex(t)["decode_tokens"] > 0


def test_powersgd_bytes_match_rank_times_m_plus_n(truths):
    for name in ("adv.powersgd.r1", "adv.powersgd.r4", "adv.powersgd.r8"):
        t, c = truths[name], cfg(name)
        shapes = [tuple(s) for s in ex(t)["grad_shapes"]]
        full = param_bytes(t)
        compressed = powersgd_bytes_per_step(shapes, c["psgd_rank"], 4)
        start = c["psgd_start_iter"]
        assert coll(t)["all_reduce"] == start * full + (STEPS - start) * compressed
        assert compressed < full / 3
    r1, r8 = (powersgd_bytes_per_step([(64, 256)], r, 4) for r in (1, 8))
    assert r1 == (64 + 256) * 4 and r8 == 8 * r1


def test_host_sync_moves_no_collective_bytes_on_the_gpu_path(truths):
    pcie, net = truths["adv.hostsync.pcie"], truths["adv.hostsync.net"]
    assert set(coll(pcie)) == {"host_write", "host_read"}
    assert coll(pcie)["host_write"] == STEPS * param_bytes(pcie)
    assert coll(pcie)["host_read"] == 2 * coll(pcie)["host_write"]          # both slots read
    assert set(coll(net)) == {"gloo_all_reduce"} and coll(net)["gloo_all_reduce"] == STEPS * param_bytes(net)


def test_accumulation_all_reduces_once_per_step(truths):
    t = truths["adv.accum.k8"]
    assert coll(t)["all_reduce"] == STEPS * param_bytes(t)
    assert gt(t)["tokens"] == 2 * STEPS * cfg("adv.accum.k8")["accum"] * 4 * 64


def test_tp_decoy_adds_small_symmetric_all_reduces(truths):
    t, c = truths["adv.cover.tp-decoy"], cfg("adv.cover.tp-decoy")
    per_step = 2 * c["n_layers"] * c["decoy_tokens"] * c["decoy_batch"] * c["d_model"] * 2
    assert coll(t)["all_reduce_decoy"] == STEPS * per_step
    assert coll(t, 1)["all_reduce_decoy"] == coll(t)["all_reduce_decoy"]


def test_split_pauses_between_parts(truths):
    t = truths["adv.split.gap6"]
    assert ex(t)["part_boundaries_steps"] == [2, 4]                         # toy parts of 2 steps
    assert t["end"] - t["start"] >= 2 * cfg("adv.split.gap6")["gap_s"]
    p = truths["adv.split.processes"]
    assert len(ex(p)["part_process_wall_s"]) == cfg("adv.split.processes")["parts"]
    losses = [l for _, l in gt(p)["loss_curve"]]
    half = STEPS // 2
    assert losses[half] < losses[0] - 0.2                                     # part 2 resumed, not restarted


def test_throttle_and_shaping_insert_idle(truths):
    t = truths["adv.throttle.pause50ms"]
    assert ex(t)["phase_s_total"]["pause"] >= STEPS * cfg("adv.throttle.pause50ms")["pause_s"] * 0.99
    low = truths["adv.throttle.lowutil"]
    compute, pause = ex(low)["phase_s_total"]["compute"], ex(low)["phase_s_total"]["pause"]
    assert compute / (compute + pause) == pytest.approx(0.3, abs=0.1)
    shape = ex(truths["adv.shape.pid"])
    assert len(shape["duty_target_measured"]) == STEPS and shape["phase_s_total"]["pause"] > 0
    # exponential pauses of the same mean: recorded as such, and the gaps are drawn, not the fixed length
    const, drawn = ex(t), ex(truths["throttle-exp"])
    assert const["strategy_params"]["pause_dist"] == "const" and drawn["strategy_params"]["pause_dist"] == "exp"
    fixed, gaps = const["phase_s_per_step"]["pause"], drawn["phase_s_per_step"]["pause"]
    assert len(gaps) == STEPS and min(gaps) > 0
    assert max(fixed) - min(fixed) < 0.02                               # a fixed pause (plus sleep jitter)
    assert max(gaps) > 2 * min(gaps)                                    # drawn gaps vary (exponential)
    losses = [l for _, l in gt(truths["throttle-exp"])["loss_curve"]]
    assert losses[-1] < losses[0]


def test_throttle_trains_a_diffusion_transformer_too(truths):
    """``arch: dit``: the throttled trainer is train.diffusion's DiT (its parameters, its patch tokens per
    step), wrapped in DDP like the GPT (the two toy ranks all-reduce its gradients every step), paused
    after each step, and costed against the unthrottled DiT trainer of its shape."""
    import dataclasses

    from trainsentry.workloads import parallel as par
    from trainsentry.workloads.infer_diffusion import DiT
    for name in ("adv.throttle.dit-b-pause200ms", "adv.throttle.dit-b-exp1s", "adv.throttle.dit-b-lowutil"):
        t, c = truths[name], cfg(name)
        e = ex(t)
        dit = DiT(dataclasses.replace(par.model_config(c), seq_len=c["tokens"], causal=False), c["latent_ch"] * c["patch"] ** 2)
        assert e["params_local"] == sum(p.numel() for p in dit.parameters()), name
        ranks = len(gt(t)["extra"])
        assert ranks == 2 and e["image_px"] == 8 * 2 * 4, name
        # each rank draws its own samples and noise (the same distribution), as each GPT replica its batches
        assert ex(t, 0)["sample_stream_seed"] != ex(t, 1)["sample_stream_seed"], name
        assert e["collective_method"] == "ddp-comm-hook" and coll(t)["all_reduce"] >= STEPS * e["params_local"] * 4, name
        assert e["baseline"] == "train.diffusion.b-256" and e["phase_s_total"]["pause"] > 0, name
    low = ex(truths["adv.throttle.dit-b-lowutil"])["phase_s_total"]
    assert low["compute"] / (low["compute"] + low["pause"]) < 0.45


def test_online_and_whitebox_serve_real_tokens(truths):
    assert ex(truths["adv.online.lora-k4"])["served_tokens"] > 0
    assert ex(truths["adv.online.lora-k4"])["lora_params"] == ex(truths["adv.online.lora-k4"])["params_trainable_local"]
    wb = ex(truths["adv.whitebox.proxy-lora"])
    assert wb["gate_history"] and wb["strategy_params"]["scorer"] == "proxy"
    assert coll(truths["adv.whitebox.proxy-lora"])["all_reduce"] == STEPS * wb["lora_params"] * 4


def test_offload_updates_on_the_host_threads_it_names_against_a_bf16_baseline(truths):
    for name, threads in (("adv.offload.t1", 1), ("adv.offload.t2", 2), ("adv.offload.t1-x8", 1),
                          ("adv.offload.t1-x4-1b", 1)):
        x = ex(truths[name])
        assert x["host_threads"] == threads and x["strategy_params"]["host_threads"] == threads, name
        assert x["host_updates"] == STEPS and x["offload_bytes_d2h"] == x["offload_bytes_h2d"] > 0, name
        assert x["baseline_config"] == {"param_dtype": "bf16"} and x["baseline"].startswith("train.single."), name
    assert ex(truths["adv.offload.t1-x8"])["strategy_params"]["accum"] == 8
    assert ex(truths["adv.offload.t1-x4-1b"])["strategy_params"]["accum"] == 4


def test_whitebox_gate_uses_the_surrogate_file_the_campaign_passes(truths):
    t = truths["surrogate-from-file"]
    assert t["ok"], t["errors"]
    params = ex(t)["strategy_params"]
    assert params["scorer"] == "trees" and params["surrogate_path"].endswith("surrogate.json")
    assert params["surrogate_sha1"] == hashlib.sha1(Path(params["surrogate_path"]).read_bytes()).hexdigest()
    # the gate measured over the window the surrogate was fitted for, not the workload's own
    assert params["window_s"] == SURROGATE["window_s"] and params["window_s_config"] == cfg(
        "adv.whitebox.surrogate-lora")["window_s"]
    history = ex(t)["gate_history"]
    assert history and all(ok == (p < params["threshold"]) for _, p, ok in history)
    assert {round(p, 3) for _, p, _ in history} <= {0.007, 0.993}         # only the two leaves of the file
    # without the file the same workload falls back to the proxy scorer, which the results flag
    assert ex(truths["adv.whitebox.surrogate-lora"])["strategy_params"]["scorer"] == "proxy"


# --- N > 2 ------------------------------------------------------------------------------------------

def test_eight_ranks(truths8):
    d, p = truths8["adv.diloco.h50"], truths8["adv.powersgd.r4"]
    for t in (d, p):
        assert t["ok"], t["errors"]
        assert t["world_size"] == 8 and len(gt(t)["collective_bytes_per_rank"]) == 8
        losses = [l for _, l in gt(t)["loss_curve"]]
        assert losses[-1] < losses[0]
    assert {c["all_reduce"] for c in gt(d)["collective_bytes_per_rank"].values()} == {2 * param_bytes(d)}
    shapes = [tuple(s) for s in ex(p)["grad_shapes"]]
    expected = 2 * param_bytes(p) + 2 * powersgd_bytes_per_step(shapes, 4, 4)
    assert {c["all_reduce"] for c in gt(p)["collective_bytes_per_rank"].values()} == {expected}
