"""Cost scoring on synthetic ledgers whose answers are known in closed form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainsentry.redteam.cost import (RunCost, closest, compare, load_truth, loss_at, penalty_at_common_point, run_cost, score_costs,
                                      smooth, smooth_span, x_to_reach)


def truth(run_id, workload, steps, tokens_per_step, step_s, loss_of_tokens, ranks=2, wall_extra_s=0.0,
          baseline=None, val=None):
    tok = np.arange(0, steps) * tokens_per_step        # the loss of step i is taken after i - 1 updates
    extra = {"0": {k: v for k, v in (("baseline", baseline), ("val_loss", val)) if v is not None}}
    return {"run_id": run_id, "workload": workload, "ranks": list(range(ranks)), "start": 1000.0,
            "end": 1000.0 + steps * step_s + wall_extra_s,
            "ground_truth": {"steps": steps, "tokens": steps * tokens_per_step, "step_times_s": [step_s] * steps,
                             "loss_curve": [[i + 1, float(loss_of_tokens(t))] for i, t in enumerate(tok)],
                             "extra": extra}}


def linear(a, b):
    return lambda t: a - b * t


def test_gpu_hours_are_ranks_times_wall():
    c = run_cost(truth("a", "w", 100, 1000, 1.8, linear(5, 1e-5), ranks=2, wall_extra_s=20))
    assert c.total_gpu_hours == pytest.approx(2 * 200 / 3600)
    # gaps are prorated over the steps; a step's loss sits where its update had not happened yet
    assert c.gpu_hours[-1] == pytest.approx(c.total_gpu_hours * 99 / 100)
    assert c.gpu_hours[50] == pytest.approx(c.total_gpu_hours / 2)
    assert c.gpu_hours[0] == 0.0 and c.tokens[0] == 0.0 and c.tokens[-1] == 99_000


def test_equal_tokens_and_equal_gpu_hours_penalties():
    # baseline: loss falls 1e-5 per token, 1000 tokens per 1 s step; adversary: half as fast per token
    # and twice as slow per step (throttled), 100 steps
    base = run_cost(truth("b", "train.ddp.x", 400, 1000, 1.0, linear(5, 1e-5)), smooth_steps=1)
    adv = run_cost(truth("a", "adv.x", 100, 1000, 2.0, linear(5, 0.5e-5), baseline="train.ddp.x"), smooth_steps=1)
    r = compare(adv, base)
    # the adversary's last loss point after 99 steps (99k tokens): 4.505; the baseline there 4.01
    assert r["loss_penalty_equal_tokens"] == pytest.approx(0.495)
    assert r["compared_at_adversary_end"] is True and r["equal_tokens_at"] == pytest.approx(99_000)
    # that point is after 99 steps of 2 s; the baseline at 198 s has trained 198k tokens: 3.02
    assert r["loss_penalty_equal_gpu_hours"] == pytest.approx(1.485)
    # the baseline's loss was 4.505 after 49.5 s of training against the adversary's 198 s: 4x cheaper
    assert r["gpu_hour_multiplier"] == pytest.approx(4.0)
    assert r["tokens_per_gpu_hour"] == pytest.approx(r["baseline_tokens_per_gpu_hour"] / 2)


def test_a_shorter_baseline_is_compared_at_its_own_end_never_extrapolated():
    # baseline: 10 steps of 1000 tokens, 1 s each; adversary: 100 steps, half the loss drop per token, 2 s steps
    base = run_cost(truth("b", "base", 10, 1000, 1.0, linear(5, 1e-5)), smooth_steps=1)
    adv = run_cost(truth("a", "adv", 100, 1000, 2.0, linear(5, 0.5e-5), baseline="base"), smooth_steps=1)
    r = compare(adv, base)
    # the baseline's last loss point is at 9k tokens trained (step 10): adversary 4.955 there, baseline 4.91
    assert r["equal_tokens_at"] == pytest.approx(9_000)
    assert r["loss_penalty_equal_tokens"] == pytest.approx(0.045)
    # at the baseline's 2 × 9 s: the adversary has trained 4.5 steps (4.5k tokens, 4.9775); the baseline 4.91
    assert r["equal_gpu_hours_at"] == pytest.approx(2 * 9 / 3600)
    assert r["loss_penalty_equal_gpu_hours"] == pytest.approx(0.0675)
    assert r["compared_at_adversary_end"] is False
    assert r["gpu_hour_multiplier"] is None           # the baseline never got as low as 4.5


def test_curves_that_do_not_overlap_give_no_penalty():
    assert penalty_at_common_point(np.array([5.0, 6.0]), np.array([3.0, 2.0]),
                                   np.array([1.0, 2.0]), np.array([3.0, 2.0])) == (None, None)
    assert penalty_at_common_point(np.array([]), np.array([]), np.array([1.0]), np.array([1.0])) == (None, None)


def test_a_run_with_one_loss_point_gives_no_penalty():
    """An online-learning run on one GPU logged one loss (step 1, 0 tokens trained): both curves start at
    the untrained model, so a penalty of 0 there would read as an evasion that costs no loss."""
    base = (np.array([0.0, 1e3, 2e3]), np.array([5.5, 4.0, 3.0]))
    assert penalty_at_common_point(np.array([0.0]), np.array([5.5]), *base) == (None, None)
    assert penalty_at_common_point(np.array([0.0, 500.0]), np.array([5.5, 5.0]), *base) == (pytest.approx(0.25), 500.0)


def test_helpers():
    x = np.array([0.0, 1.0, 2.0])
    assert loss_at(x, np.array([3.0, 2.0, 1.0]), 1.5) == pytest.approx(1.5)
    assert loss_at(x, np.array([3.0, 2.0, 1.0]), 2.5) is None
    assert x_to_reach(x, np.array([3.0, 2.0, 1.0]), 1.25) == pytest.approx(1.75)
    assert x_to_reach(x, np.array([3.0, 2.0, 1.0]), 0.5) is None
    assert smooth(np.array([1.0, 3.0, 5.0]), 2).tolist() == [1.0, 2.0, 4.0]


def test_score_costs_pairs_runs_with_their_named_baseline(tmp_path):
    b = truth("b", "train.ddp.w1536-l24", 400, 1000, 1.0, linear(5, 1e-5), val=3.2)
    a = truth("a", "adv.diloco.h50", 100, 1000, 1.0, linear(5, 0.8e-5), baseline="train.ddp.w1536-l24", val=4.3)
    orphan = truth("o", "adv.x", 10, 1000, 1.0, linear(5, 1e-5), baseline="train.ddp.missing")
    for t in (a, b, orphan):
        (tmp_path / f"{t['run_id']}.truth.json").write_text(json.dumps(t))
    trace = tmp_path / "trace_a"
    trace.mkdir()
    (trace / "manifest.json").write_text(json.dumps({**a, "labels": {"workload": a["workload"], "ranks": [0, 1]}}))
    rows = score_costs([tmp_path / "a.truth.json", trace, tmp_path / "o.truth.json"], [tmp_path / "b.truth.json"])
    # validation loss only at each run's end: both reported with where they were measured, not differenced
    assert rows[0]["val_loss"] == 4.3 and rows[0]["baseline_val_loss"] == 3.2
    assert rows[0]["val_loss_tokens"] == 100_000 and rows[0]["baseline_val_loss_tokens"] == 400_000
    assert "val_loss_penalty" not in rows[0]
    assert rows[0]["loss_penalty_equal_tokens"] == rows[1]["loss_penalty_equal_tokens"]
    assert rows[2]["error"] == "no baseline run of this workload"


def test_a_named_baseline_configuration_picks_among_runs_of_one_workload(tmp_path):
    # the GPU-only workload was recorded in fp32 (longer) and in bf16: a bf16 adversary names bf16
    fp32 = {**truth("fp32", "train.single.w1024-l16", 400, 1000, 1.0, linear(5, 1e-5)),
            "config": {"param_dtype": "fp32", "batch": 32}}
    bf16 = {**truth("bf16", "train.single.w1024-l16", 200, 1000, 1.0, linear(5, 1e-5)),
            "config": {"param_dtype": "bf16", "batch": 32}}
    # and in bf16 with another batch, longer still
    bf16_b64 = {**truth("bf16_b64", "train.single.w1024-l16", 600, 1000, 1.0, linear(5, 1e-5)),
                "config": {"param_dtype": "bf16", "batch": 64}}
    adv = {**truth("a", "adv.offload.t1", 50, 1000, 4.0, linear(5, 1e-5), baseline="train.single.w1024-l16"),
           "config": {"param_dtype": "bf16", "batch": 32, "offload": True}}
    adv["ground_truth"]["extra"]["0"]["baseline_config"] = {"param_dtype": "bf16"}
    plain = truth("p", "adv.x", 50, 1000, 4.0, linear(5, 1e-5), baseline="train.single.w1024-l16")
    for t in (fp32, bf16, bf16_b64, adv, plain):
        (tmp_path / f"{t['run_id']}.truth.json").write_text(json.dumps(t))
    bases = [tmp_path / "fp32.truth.json", tmp_path / "bf16.truth.json", tmp_path / "bf16_b64.truth.json"]
    rows = score_costs([tmp_path / "a.truth.json", tmp_path / "p.truth.json"], bases)
    # bf16 as named, and of the two bf16 runs the one with the adversary's batch; unknown configurations: the longest
    assert rows[0]["baseline_run"] == "bf16" and rows[1]["baseline_run"] == "bf16_b64"
    # naming nothing, the closest configuration still wins: one whose configuration is unknown (the
    # longest here) is the worst match, a key only one side sets counts, and between equals the run id decides
    unknown = truth("unknown", "train.single.w1024-l16", 900, 1000, 1.0, linear(5, 1e-5))
    twin = {**bf16, "run_id": "bf16-twin"}
    free = {**adv, "run_id": "free"}
    free["ground_truth"] = {**adv["ground_truth"], "extra": {"0": {"baseline": "train.single.w1024-l16"}}}
    for t in (unknown, twin, free):
        (tmp_path / f"{t['run_id']}.truth.json").write_text(json.dumps(t))
    no_dtype = {**fp32, "run_id": "no-dtype", "config": {"batch": 32}}   # the adversary's bf16 against nothing
    (tmp_path / "no-dtype.truth.json").write_text(json.dumps(no_dtype))
    rows = score_costs([tmp_path / "free.truth.json"], [tmp_path / "unknown.truth.json", tmp_path / "bf16-twin.truth.json",
                                                        tmp_path / "no-dtype.truth.json", *bases])
    assert rows[0]["baseline_run"] == "bf16"
    # no run holds what the adversary names: an error that says which configuration was missing
    rows = score_costs([tmp_path / "a.truth.json"], bases[:1])   # fp32 only
    assert rows[0]["error"] == 'no baseline run of this workload with {"param_dtype": "bf16"}'


def test_closest_baseline_fewest_disagreements_then_longest_then_run_id():
    """One rule for both users: the red team's scoring (any disagreement allowed, fewest wins) and the
    host study's ZeRO-Offload costs (keys that make it ZeRO-Offload ignored, an exact match required)."""
    def run(rid, tokens, **config):
        z = np.zeros(1)
        return RunCost(rid, "w", None, 1, 1.0, z, z, z, z, 1, tokens, config=config)

    a, b, c = run("a", 10, batch=16, dtype="bf16"), run("b", 20, batch=32, dtype="bf16"), run("c", 20, batch=32, dtype="bf16")
    assert closest([a, b, c], {"batch": 16, "dtype": "bf16"}) is a            # no disagreement beats length
    assert closest([a, b, c], {"batch": 64, "dtype": "bf16"}) is b            # a tie: the longest, then the run id
    assert closest([a, b], {"batch": 64, "dtype": "bf16"}, exact=True) is None
    offloaded = {"batch": 16, "dtype": "bf16", "offload": True, "host_threads": 1}
    assert closest([a, b], offloaded, ("offload", "host_threads"), exact=True) is a
    assert closest([run("u", 99)], {"batch": 16}) is not None and closest([], {}) is None
    unknown = RunCost("x", "w", None, 1, 1.0, *[np.zeros(1)] * 4, 1, 99)   # no configuration recorded: the worst match
    assert closest([unknown, a], {"batch": 64}) is a


def test_bad_input_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_truth(tmp_path / "missing")
    (tmp_path / "x.json").write_text(json.dumps({"run_id": "x", "start": 0, "end": 1}))
    with pytest.raises(ValueError, match="no ground_truth"):
        load_truth(tmp_path / "x.json")
    t = truth("z", "w", 3, 10, 1.0, linear(5, 0))
    t["ground_truth"]["loss_curve"] = []
    with pytest.raises(ValueError, match="no steps or no loss curve"):
        run_cost(t)


def test_runs_with_larger_steps_are_smoothed_over_the_same_tokens():
    # gradient accumulation: 8x the tokens per step, the same loss per token as the baseline. Smoothed
    # over 10 of its own steps the adversary would average 8x the tokens of the baseline and lag on the
    # falling curve; over the same token span the two agree
    base = run_cost(truth("b", "base", 800, 1000, 1.0, linear(5, 1e-6)))
    adv = run_cost(truth("a", "adv", 80, 8000, 8.0, linear(5, 1e-6), baseline="base"))
    r = compare(adv, base)
    assert r["smoothing_tokens"] == pytest.approx(80_000)
    assert r["loss_penalty_equal_tokens"] == pytest.approx(0.0, abs=0.0041)
    lagged = float(adv.loss[-1]) - float(base.loss[np.searchsorted(base.tokens, adv.tokens[-1])])
    assert lagged > 0.03                               # what per-run step smoothing would have reported
    assert smooth_span(np.arange(5.0), np.array([1.0, 2, 3, 4, 5]), 2.0).tolist() == [1.0, 1.5, 2.5, 3.5, 4.5]


def test_a_resized_trainer_has_no_baseline_of_another_model(tmp_path):
    """A throttled trainer resized to a service's shape (d 768, 12 layers) names the 680 M DDP run as
    its workload's baseline; tokens per GPU-hour of another model are no cost: refused with the model
    named, and accepted once a run of that model is among the baselines."""
    from trainsentry.redteam.cost import MODEL_KEYS, same_model
    big = {**truth("big", "train.ddp.w1536-l24", 400, 1000, 1.0, linear(5, 1e-5)),
           "config": {"d_model": 1536, "n_layers": 24, "seq_len": 1024, "batch": 16}}
    small = {**truth("small", "adv.throttle.pause200ms", 50, 1000, 2.0, linear(5, 1e-5), baseline="train.ddp.w1536-l24"),
             "config": {"d_model": 768, "n_layers": 12, "seq_len": 1024, "batch": 32, "pause_s": 1.0}}
    same = {**truth("same", "train.ddp.w1536-l24", 300, 1000, 1.0, linear(5, 1e-5)),
            "config": {"d_model": 768, "n_layers": 12, "seq_len": 1024, "batch": 16}}
    for t in (big, small, same):
        (tmp_path / f"{t['run_id']}.truth.json").write_text(json.dumps(t))
    rows = score_costs([tmp_path / "small.truth.json"], [tmp_path / "big.truth.json"])
    assert rows[0]["error"] == ("no baseline run of this model (d_model=768, n_layers=12, seq_len=1024) among the "
                                "runs of train.ddp.w1536-l24")
    rows = score_costs([tmp_path / "small.truth.json"], [tmp_path / "big.truth.json", tmp_path / "same.truth.json"])
    assert rows[0]["baseline_run"] == "same"
    # head count and batch may differ (the attacks on the FLOP estimator change them); unknown configurations pass
    assert "n_heads" not in MODEL_KEYS and "batch" not in MODEL_KEYS
    assert same_model({"d_model": 8, "n_heads": 2}, {"d_model": 8, "n_heads": 128}) and same_model(None, {"d_model": 8})


def test_a_one_rank_adversary_takes_single_gpu_runs_of_its_model(tmp_path):
    """DDP on one rank is single-GPU training: a one-rank throttled trainer naming the DDP workload is
    costed against a single-GPU run of its model; a two-rank adversary is not, and a single-GPU run of
    another model stays refused."""
    single = {**truth("single", "train.single.w1024-l16", 300, 1000, 1.0, linear(5, 1e-5), ranks=1),
              "config": {"d_model": 768, "n_layers": 12, "seq_len": 1024, "batch": 32}}
    other = {**truth("other", "train.single.w2048-l24", 300, 1000, 1.0, linear(5, 1e-5), ranks=1),
             "config": {"d_model": 2048, "n_layers": 24, "seq_len": 1024, "batch": 16}}
    lora = {**truth("lora", "train.lora.single-r8-w1536", 300, 1000, 1.0, linear(5, 1e-5), ranks=1),
            "config": {"d_model": 768, "n_layers": 12, "seq_len": 1024, "batch": 32}}
    cfg = {"d_model": 768, "n_layers": 12, "seq_len": 1024, "batch": 32, "pause_s": 1.0}
    one = {**truth("one", "adv.throttle.pause200ms", 50, 1000, 2.0, linear(5, 1e-5), ranks=1,
                   baseline="train.ddp.w1536-l24"), "config": cfg}
    two = {**truth("two", "adv.throttle.pause200ms", 50, 1000, 2.0, linear(5, 1e-5), ranks=2,
                   baseline="train.ddp.w1536-l24"), "config": cfg}
    for t in (single, other, lora, one, two):
        (tmp_path / f"{t['run_id']}.truth.json").write_text(json.dumps(t))
    bases = [tmp_path / f"{n}.truth.json" for n in ("single", "other", "lora")]
    rows = score_costs([tmp_path / "one.truth.json", tmp_path / "two.truth.json"], bases)
    assert rows[0]["baseline_run"] == "single"
    # the same throttled trainer: one rank, 1 s steps against the baseline's 1 s steps of as many tokens, but
    # 2 s per step: twice the GPU-hours per token
    assert rows[0]["tokens_per_gpu_hour"] == pytest.approx(rows[0]["baseline_tokens_per_gpu_hour"] / 2)
    assert rows[1]["error"] == "no baseline run of this workload"
    rows = score_costs([tmp_path / "one.truth.json"], bases[1:])
    assert rows[0]["error"] == ("no baseline run of this model (d_model=768, n_layers=12, seq_len=1024) among the "
                                "runs of train.ddp.w1536-l24 or its single-GPU counterpart")
