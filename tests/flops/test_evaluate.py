"""The grouped split protocol and the two commands, end to end on a small dataset."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from trainsentry.cli import app
from trainsentry.flops.dataset import load_runs
from trainsentry.flops.estimators import Estimator, FitFailure
from trainsentry.flops.evaluate import best_estimator, grouped_splits, quantile_with_failures, run_protocol
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
    r = runner.invoke(app, ["flops-eval", "--data", str(synth_root), "--splits", "6",
                            "--results", str(out / "flops.json"), "--figures", str(out / "fig"),
                            "--docs", str(out / "flops.md"), "--models", str(out / "models")])
    assert r.exit_code == 0, r.output
    res = json.loads((out / "flops.json").read_text())
    assert set(res["estimators"]) == {"three_input", "power_only", "mlp", "residual_mlp", "tensor", "fusion"}
    for v in res["estimators"].values():
        assert 0 <= v["median_abs_pct_error"] <= v["p90_abs_pct_error"]
        assert v["splits_attempted"] == 6 and v["splits_failed"] == 0 and v["failures"] == []
    assert res["protocol"]["common_splits"] == 6
    half = res["with_causal_half"]  # the same splits against FLOPs with causal attention counted as half
    assert half["runs"] == 12 and set(half["estimators"]) == set(res["estimators"])
    assert res["tensor_rate_check"]["causal_half"]["rate_flops_per_busy_s"] < \
        res["tensor_rate_check"]["counted"]["rate_flops_per_busy_s"]
    assert res["protocol"]["configurations"] == 6 and res["protocol"]["splits"] == 6
    seg = res["with_segmentation"]  # the same protocol over the detector's segmentation
    assert seg["runs"] == 12 and set(seg["estimators"]) == set(res["estimators"])
    assert seg["start_shift_s_max_abs"] < 2.0 and seg["end_shift_s_max_abs"] < 2.0
    assert (out / "fig" / "flops_est_vs_true.png").stat().st_size > 1000
    assert (out / "fig" / "flops_errors.png").exists() and (out / "fig" / "flops_tensor_rate.png").exists()
    doc = (out / "flops.md").read_text()
    assert f"{res['estimators'][res['best']]['median_abs_pct_error']:.1f} %" in doc and "15.1 %" in doc
    assert "No estimator failed a split." in doc and "12 training runs over 6 configurations" in doc
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
    assert mid["lo"] <= mid["flops"] <= mid["hi"] and 0 < mid["flops"] < full["flops"]


def test_commands_fail_clearly_on_bad_input(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["flops", str(tmp_path / "missing"), "--model", str(tmp_path / "m.json")])
    assert r.exit_code == 2 and "error" in r.output
    r = runner.invoke(app, ["flops-eval", "--data", str(tmp_path), "--splits", "2", "--results",
                            str(tmp_path / "r.json")])
    assert r.exit_code == 2 and "training runs with FLOP ground truth" in " ".join(r.output.split())
    assert not (tmp_path / "r.json").exists()


def test_quantile_with_failures_counts_them_as_unbounded():
    a = np.array([3.0, 1.0, 2.0])
    for q in (0.1, 0.5, 0.9):
        assert quantile_with_failures(a, 0, q) == pytest.approx(float(np.quantile(a, q)))
    assert quantile_with_failures(a, 1, 0.5) == pytest.approx(2.5)  # [1, 2, 3, ∞]
    assert quantile_with_failures(a, 1, 0.9) is None
    assert quantile_with_failures(a, 3, 0.5) is None
    assert quantile_with_failures(np.zeros(0), 0, 0.5) is None


def _flaky_make(monkeypatch, victim: str):
    """``victim`` cannot be calibrated on odd splits (``make`` gets the split index as its seed)."""
    import trainsentry.flops.evaluate as ev
    real = ev.make

    def make(name, seed=0):
        if name == victim and seed % 2:
            class Refuses(Estimator):
                def fit(self, X, y):
                    raise FitFailure("test: cannot calibrate", f"odd split {seed}")
            return Refuses()
        return real(name, seed=seed)
    monkeypatch.setattr(ev, "make", make)


def test_failed_splits_are_recorded_and_count_against_the_estimator(synth_root, monkeypatch):
    runs = load_runs(synth_root)
    _flaky_make(monkeypatch, "power_only")
    res = run_protocol(runs, ("tensor", "power_only"), n_splits=6)
    po, te = res["estimators"]["power_only"], res["estimators"]["tensor"]
    assert (po["splits_attempted"], po["splits_failed"], te["splits_failed"]) == (6, 3, 0)
    assert po["failures"] == [{"reason": "test: cannot calibrate", "splits": 3, "first_split": 1,
                               "example": "odd split 1"}]
    assert res["protocol"]["common_splits"] == 3
    # 4 held-out runs per split: common pools 3 splits for both, own pools 6 for tensor and 3 for power_only
    assert te["own"]["predictions"] == 24 and te["common"]["predictions"] == 12
    assert po["own"]["predictions"] == po["common"]["predictions"] == 12 and po["failed_predictions"] == 12
    # half its predictions are unbounded misses: no bounded median, and it cannot be the best
    assert po["median_abs_pct_error"] is None and po["own"]["median_abs_pct_error"] is not None
    assert te["median_abs_pct_error"] == te["own"]["median_abs_pct_error"]
    assert best_estimator(res) == "tensor"


def _eval_with_power_only_failing(synth_root, tmp_path, monkeypatch) -> None:
    """flops-eval on 4 splits with power only failing on odd splits; results, docs and models under tmp_path."""
    _flaky_make(monkeypatch, "power_only")
    r = CliRunner().invoke(app, ["flops-eval", "--data", str(synth_root), "--splits", "4", "--no-segmentation",
                                 "--results", str(tmp_path / "flops.json"), "--figures", str(tmp_path / "fig"),
                                 "--docs", str(tmp_path / "flops.md"), "--models", str(tmp_path / "models")])
    assert r.exit_code == 0, r.output


def test_failures_and_reasons_reach_the_results_and_the_docs(synth_root, tmp_path, monkeypatch):
    _eval_with_power_only_failing(synth_root, tmp_path, monkeypatch)
    res = json.loads((tmp_path / "flops.json").read_text())
    po = res["estimators"]["power_only"]
    assert po["splits_failed"] == 2 and po["failures"][0]["reason"] == "test: cannot calibrate"
    doc = (tmp_path / "flops.md").read_text()
    assert "| power only | 2 / 4 | unbounded |" in doc
    assert "failed 2 of 4 splits" in doc and "*test: cannot calibrate*" in doc and "odd split 1" in doc


def _runset(X, y):
    from trainsentry.flops.dataset import RunSet
    n = y.size
    ids = [f"run{i}" for i in range(n)]
    return RunSet({k: np.asarray(v, dtype=float) for k, v in X.items()}, y, ids, [f"cfg{i}" for i in range(n)],
                  ["w"] * n, ["fam"] * n)


def test_references_say_whether_energy_knows_more_than_time():
    """At the power limit a regression of FLOPs on energy and time, which cannot fail, is no better than time
    alone; below the limit, where the joules follow the FLOPs, it is far better."""
    from trainsentry.flops.evaluate import reference_pass
    from flops.test_estimators import _capped_runs
    X, y = _capped_runs(n=15)
    X["gpus"] = np.full(y.size, 2.0)
    capped = reference_pass(_runset(X, y), n_splits=30)
    fe, gs = capped["flops_on_energy"], capped["gpu_seconds"]
    assert fe["splits"] == gs["splits"] == 30 and fe["predictions"] == gs["predictions"]
    assert fe["median_abs_pct_error"] > 0.8 * gs["median_abs_pct_error"] > 5.0
    X["net_energy_J"] = 0.4 * y / 1e12 + 300.0 * X["duration_s"]
    below = reference_pass(_runset(X, y), n_splits=30)
    assert below["flops_on_energy"]["median_abs_pct_error"] < 0.2 * below["gpu_seconds"]["median_abs_pct_error"]


def test_refusal_evidence_and_data_needed_reach_the_docs(synth_root, tmp_path, monkeypatch):
    _eval_with_power_only_failing(synth_root, tmp_path, monkeypatch)
    res = json.loads((tmp_path / "flops.json").read_text())
    chk = res["power_only_check"]
    assert chk["all_runs"]["runs"] == 12 and chk["all_runs"]["E_per_TFLOP_J"] > 0
    assert set(chk["references"]) == set(chk["references_causal_half"]) == {"flops_on_energy", "gpu_seconds"}
    assert chk["all_runs_causal_half"]["E_per_TFLOP_J"] > 0
    d = res["energy_diagnostics"]
    assert d["runs_at_power_limit"] + d["runs_below_power_limit"] == 12
    assert len(d["below_limit_runs"]) == d["runs_below_power_limit"]
    doc = " ".join((tmp_path / "flops.md").read_text().split())
    assert "### Refusal, or a defect of the fit?" in doc
    fe = chk["references"]["flops_on_energy"]
    assert f"{fe['median_abs_pct_error']:.1f} % median absolute error (p90 {fe['p90_abs_pct_error']:.1f} %)" in doc
    assert "## What data would make power alone well-posed" in doc
    assert "*Runs below the power limit.*" in doc and "*Runs of varied length.*" in doc
    assert "| power only | (b) |" in doc and "| tensor + three-input fusion | (e) |" in doc
