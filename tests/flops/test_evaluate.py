"""The grouped split protocol and the two commands, end to end on a small dataset."""

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from trainsentry.cli import app
from trainsentry.flops.evaluate import grouped_splits
from trainsentry.flops.live import estimate_so_far, load_model
from trainsentry.traces.io import iter_runs, read_trace


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=3, max_size=60), st.integers(1, 20), st.integers(0, 10_000))
def test_splits_never_put_one_configuration_on_both_sides(groups, n_splits, seed):
    configs = [f"cfg{g}" for g in groups]
    if len(set(configs)) < 3:
        with pytest.raises(ValueError):
            grouped_splits(configs, n_splits, seed=seed)
        return
    splits = grouped_splits(configs, n_splits, seed=seed)
    assert len(splits) == n_splits
    for cal, ev in splits:
        assert len(cal) and len(ev)
        assert sorted(np.concatenate([cal, ev]).tolist()) == list(range(len(configs)))
        assert not {configs[i] for i in cal} & {configs[i] for i in ev}
        n_cfg = len(set(configs))
        assert len({configs[i] for i in cal}) == min(n_cfg - 1, max(2, round(2 * n_cfg / 3)))


def test_splits_are_seeded_and_vary():
    configs = [f"c{i % 9}" for i in range(27)]
    a, b = grouped_splits(configs, 5, seed=1), grouped_splits(configs, 5, seed=1)
    assert all((x[0] == y[0]).all() for x, y in zip(a, b))
    assert len({tuple(s[0]) for s in a}) > 1


def test_eval_and_estimate_commands_end_to_end(synth_root, tmp_path):
    runner = CliRunner()
    out = tmp_path
    t0 = time.time()
    r = runner.invoke(app, ["flops-eval", "--data", str(synth_root), "--splits", "6",
                            "--results", str(out / "flops.json"), "--figures", str(out / "fig"),
                            "--docs", str(out / "flops.md"), "--models", str(out / "models")])
    assert r.exit_code == 0, r.output
    assert time.time() - t0 < 60
    res = json.loads((out / "flops.json").read_text())
    assert set(res["estimators"]) == {"three_input", "power_only", "mlp", "residual_mlp", "tensor", "fusion"}
    for v in res["estimators"].values():
        assert 0 <= v["median_abs_pct_error"] <= v["p90_abs_pct_error"]
    assert res["protocol"]["configurations"] == 6 and res["protocol"]["splits"] == 6
    seg = res["with_segmentation"]  # the same protocol over the detector's segmentation
    assert seg["runs"] == 12 and set(seg["estimators"]) == set(res["estimators"])
    assert seg["start_shift_s_max_abs"] < 2.0 and seg["end_shift_s_max_abs"] < 2.0
    assert (out / "fig" / "flops_est_vs_true.png").stat().st_size > 1000
    assert (out / "fig" / "flops_errors.png").exists()
    doc = (out / "flops.md").read_text()
    assert f"{res['estimators'][res['best']]['median_abs_pct_error']:.1f} %" in doc and "15.1 %" in doc
    saved = json.loads((out / "models" / "flops.json").read_text())
    assert saved["estimator"]["name"] == res["best"] and "flops-eval" in saved["provenance"]["command"]

    run = iter_runs(synth_root)[0]
    r = runner.invoke(app, ["flops", str(run), "--model", str(out / "models" / "flops.json"), "--json"])
    assert r.exit_code == 0, r.output
    est = json.loads(r.output)
    assert est["lo"] <= est["flops"] <= est["hi"]
    assert abs(est["flops"] - est["true_flops"]) / est["true_flops"] < 0.2

    r = runner.invoke(app, ["flops", str(run), "--model", str(out / "models" / "flops.json"), "--json", "--segment"])
    assert r.exit_code == 0, r.output
    seg_est = json.loads(r.output)
    assert abs(seg_est["start"] - est["start"]) < 2.0 and abs(seg_est["flops"] - est["flops"]) / est["flops"] < 0.1

    # live path: FLOPs so far grow with time and stay below the whole run's estimate
    table, m = read_trace(run)
    model = load_model(out / "models" / "flops_power_only.json")
    mid = estimate_so_far(table, m["start"], (m["start"] + m["end"]) / 2, model=model)
    full = estimate_so_far(table, m["start"], m["end"], model=model)
    assert mid[1] <= mid[0] <= mid[2] and 0 < mid[0] < full[0]


def test_commands_fail_clearly_on_bad_input(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["flops", str(tmp_path / "missing"), "--model", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "error" in r.output
    r = runner.invoke(app, ["flops-eval", "--data", str(tmp_path), "--splits", "2", "--results",
                            str(tmp_path / "r.json")])
    assert r.exit_code == 2 and "training runs with FLOP ground truth" in " ".join(r.output.split())
    assert not (tmp_path / "r.json").exists()
