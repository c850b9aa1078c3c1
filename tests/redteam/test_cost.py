"""Cost scoring on synthetic ledgers whose answers are known in closed form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from trainsentry.redteam.cost import (compare, load_truth, loss_at, penalty_at_common_point, run_cost, score_costs,
                                      smooth, x_to_reach)


def truth(run_id, workload, steps, tokens_per_step, step_s, loss_of_tokens, ranks=2, wall_extra_s=0.0,
          baseline=None, val=None):
    tok = np.arange(1, steps + 1) * tokens_per_step
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
    # gaps are prorated over the steps: the last point carries all of it
    assert c.gpu_hours[-1] == pytest.approx(c.total_gpu_hours)
    assert c.gpu_hours[49] == pytest.approx(c.total_gpu_hours / 2)


def test_equal_tokens_and_equal_gpu_hours_penalties():
    # baseline: loss falls 1e-5 per token, 1000 tokens per 1 s step; adversary: half as fast per token
    # and twice as slow per step (throttled), 100 steps
    base = run_cost(truth("b", "train.ddp.x", 400, 1000, 1.0, linear(5, 1e-5)), smooth_steps=1)
    adv = run_cost(truth("a", "adv.x", 100, 1000, 2.0, linear(5, 0.5e-5), baseline="train.ddp.x"), smooth_steps=1)
    r = compare(adv, base)
    # at 100k tokens: adversary 4.5, baseline 4.0
    assert r["loss_penalty_equal_tokens"] == pytest.approx(0.5)
    # adversary used 2 ranks × 200 s; the baseline at 200 s has seen 200k tokens: loss 3.0
    assert r["loss_penalty_equal_gpu_hours"] == pytest.approx(1.5)
    # the baseline reached 4.5 after 50 s: 4× cheaper
    assert r["gpu_hour_multiplier"] == pytest.approx(4.0, rel=0.03)
    assert r["tokens_per_gpu_hour"] == pytest.approx(r["baseline_tokens_per_gpu_hour"] / 2)


def test_a_shorter_baseline_is_compared_at_its_own_end_never_extrapolated():
    # baseline: 10 steps of 1000 tokens, 1 s each; adversary: 100 steps, half the loss drop per token, 2 s steps
    base = run_cost(truth("b", "base", 10, 1000, 1.0, linear(5, 1e-5)), smooth_steps=1)
    adv = run_cost(truth("a", "adv", 100, 1000, 2.0, linear(5, 0.5e-5), baseline="base"), smooth_steps=1)
    r = compare(adv, base)
    # at the baseline's 10k tokens: adversary 4.95, baseline 4.90
    assert r["equal_tokens_at"] == pytest.approx(10_000)
    assert r["loss_penalty_equal_tokens"] == pytest.approx(0.05)
    # at the baseline's 2 × 10 s: the adversary has run 5 steps (5k tokens, 4.975); the baseline 4.90
    assert r["equal_gpu_hours_at"] == pytest.approx(2 * 10 / 3600)
    assert r["loss_penalty_equal_gpu_hours"] == pytest.approx(0.075)
    assert r["compared_at_adversary_end"] is False
    assert r["gpu_hour_multiplier"] is None           # the baseline never got as low as 4.5


def test_curves_that_do_not_overlap_give_no_penalty():
    assert penalty_at_common_point(np.array([5.0, 6.0]), np.array([3.0, 2.0]),
                                   np.array([1.0, 2.0]), np.array([3.0, 2.0])) == (None, None)
    assert penalty_at_common_point(np.array([]), np.array([]), np.array([1.0]), np.array([1.0])) == (None, None)


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
