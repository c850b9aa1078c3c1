"""The frozen FLOP estimators against red-team runs, on the flops tests' synthetic runs (real H200 probe
samples, ground truth proportional to load × duration)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from flops.fixtures.probe_traces import synthetic_runs
from trainsentry.flops.dataset import load_runs
from trainsentry.flops.estimators import FitFailure
from trainsentry.flops.estimators import make as real_make
from trainsentry.redteam import flopscore
from trainsentry.redteam.flopscore import benign_summary, flop_scores, held_out_errors


def _adversarial_copy(src, dst, workload, flops_factor):
    """The same telemetry as a benign run, relabelled as a red-team run whose true FLOPs are scaled:
    a factor 3 is compute the telemetry does not show (what a FLOP attack aims for)."""
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["run_id"] = dst.name
    m["labels"].update(workload=workload, family=workload.split(".")[1])
    m["ground_truth"]["flops"] *= flops_factor
    (dst / "manifest.json").write_text(json.dumps(m))
    return dst


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    root = tmp_path_factory.mktemp("flopscore")
    dirs = synthetic_runs(root / "benign")
    adv = root / "adv"
    adv.mkdir()
    hidden = _adversarial_copy(dirs[4], adv / "adv.flops.hidden-r0", "adv.flops.hidden", 3.0)
    plain = _adversarial_copy(dirs[5], adv / "adv.accum.k8-r0", "adv.accum.k8", 1.0)
    runs = [{"dir": hidden, "name": "flops", "setting": "hidden", "role": "strategy"},
            {"dir": plain, "name": "accum", "setting": "k8", "role": "strategy"}]
    return flop_scores([root / "benign"], runs, seed=0, best="tensor"), root


def test_the_headline_is_the_flop_evaluations_best(scored):
    """The headline is the estimator flops-eval names best (results/flops.json), never chosen again here."""
    doc, root = scored
    assert doc["headline"] == "tensor" and "flops-eval" in doc["headline_source"]
    runs = [{"dir": root / "adv" / "adv.accum.k8-r0", "name": "accum", "setting": "k8", "role": "strategy"}]
    other = flop_scores([root / "benign"], runs, seed=0, best="three_input")
    assert other["headline"] == "three_input"
    row = other["settings"][0]
    assert row["headline_pct_error"] == row["pct_error"]["three_input"]
    none = flop_scores([root / "benign"], runs, seed=0)
    assert none["headline"] is None and "no FLOP evaluation result" in none["headline_source"]
    assert "headline_pct_error" not in none["settings"][0]


def test_every_benign_configuration_is_held_out_once(scored):
    _, root = scored
    runs = load_runs(root / "benign")
    errs = held_out_errors(runs, ("power_only", "tensor"), seed=0, folds=4)
    assert {n: h.errors.size for n, h in errs.items()} == {"power_only": len(runs), "tensor": len(runs)}
    assert all(h.failures == [] and h.folds == 4 for h in errs.values())
    # the synthetic truth is proportional to tensor activity: held out, tensor stays within a few %
    assert np.median(np.abs(errs["tensor"].errors)) < 10


def test_hidden_compute_is_under_reported_beyond_the_benign_range(scored):
    doc, _ = scored
    assert doc["headline"] in doc["benign_held_out"]
    rows = {(r["name"], r["setting"]): r for r in doc["settings"]}
    hidden, plain = rows[("flops", "hidden")], rows[("accum", "k8")]
    # 3x the FLOPs with the same telemetry: every estimator reads about a third
    assert hidden["headline_pct_error"] == pytest.approx(-66.7, abs=5)
    assert hidden["outside_benign_range"] is True
    assert abs(plain["headline_pct_error"]) < 10 and plain["outside_benign_range"] is False
    # one job per run: the segmented sum agrees with the true interval
    assert plain["segmented_jobs"] == 1
    assert plain["headline_pct_error_segmented"] == pytest.approx(plain["headline_pct_error"], abs=10)
    assert doc["calibrated_on"]["runs"] == 12 and doc["held_out_folds"] == 6


def test_no_benign_training_runs_is_reported_not_raised(tmp_path):
    (tmp_path / "empty").mkdir()
    assert "error" in flop_scores([tmp_path / "empty"], [])


def test_page_flags_a_benign_control_outside_the_range(scored):
    import copy

    from trainsentry.redteam.page import _flops
    doc, _ = scored
    text = "\n".join(_flops({"flop_estimator": doc}))
    assert "| strategy | flops | hidden | 1 |" in text and "Caution" not in text
    flipped = copy.deepcopy(doc)
    for r in flipped["settings"]:
        r["role"] = "control"                 # the hidden-compute run, read as a benign run beside the strategies
    text = "\n".join(_flops({"flop_estimator": flipped}))
    assert "**Caution:** 1 benign control run(s)" in text and "(flops)" in text


class _Refuses:
    """An estimator whose calibration refuses, as an energy model does without a resolved slope."""

    def fit(self, X, y):
        raise FitFailure("energy per TFLOP not resolved", "t = 0.4 < 2")


def _flaky(calls):
    """``make`` where estimator "flaky" (tensor activity underneath) refuses every other fit."""
    def make(name, seed=0):
        if name != "flaky":
            return real_make(name, seed=seed)
        calls.append(name)
        return _Refuses() if len(calls) % 2 else real_make("tensor", seed=seed)
    return make


def test_failed_folds_are_counted_not_skipped(scored, monkeypatch):
    _, root = scored
    runs = load_runs(root / "benign")
    monkeypatch.setattr(flopscore, "make", _flaky([]))
    h = held_out_errors(runs, ("tensor", "flaky"), seed=0, folds=4)["flaky"]
    # folds 0 and 2 refused: their runs are failures with the reason, the others predicted
    assert [f["fold"] for f in h.failures] == [0, 2]
    assert {f["reason"] for f in h.failures} == {"energy per TFLOP not resolved"}
    assert h.errors.size + h.failed_predictions == len(runs) and h.failed_predictions > 0
    b = benign_summary(h)
    assert (b["failed_folds"], b["folds"], b["failed_predictions"]) == (2, 4, h.failed_predictions)
    assert b["failures"] == [{"reason": "energy per TFLOP not resolved", "folds": 2, "runs": h.failed_predictions,
                              "example": "energy per TFLOP not resolved: t = 0.4 < 2"}]
    # half the runs unpredicted: the median lies among the unbounded errors
    assert b["median_abs_pct_error"] is None and b["min_pct_error"] is not None


def test_an_estimator_with_failed_folds_is_reported_and_not_calibrated_is_no_headline(scored, monkeypatch):
    import copy

    from trainsentry.redteam.page import _flops
    _, root = scored
    monkeypatch.setattr(flopscore, "make", _flaky([]))
    monkeypatch.setattr(flopscore, "ESTIMATORS", ("tensor", "flaky"))
    runs = [{"dir": root / "adv" / "adv.accum.k8-r0", "name": "accum", "setting": "k8", "role": "strategy"},
            {"dir": root / "adv" / "missing-r0", "name": "accum", "setting": "k32", "role": "strategy"}]
    doc = flop_scores([root / "benign"], runs, seed=0, best="tensor")
    assert doc["headline"] == "tensor"
    assert doc["failed_folds"] == {"flaky": 3} and doc["benign_held_out"]["tensor"]["failed_folds"] == 0
    # the 7th call (calibration on every benign run) refused too: named, with the reason, scoring nothing
    assert "energy per TFLOP not resolved" in doc["not_calibrated"]["flaky"] and doc["estimators"] == ["tensor"]
    assert [(r["run_id"], r["setting"]) for r in doc["runs_not_scored"]] == [("missing-r0", "k32")]
    text = "\n".join(_flops({"flop_estimator": copy.deepcopy(doc)}))
    assert "| 3 of 6: energy per TFLOP not resolved (3) |" in text and "unbounded" in text
    assert "`flaky` could not be calibrated" in text and "Not scored by the FLOP estimators: `missing-r0`" in text
    # the evaluation's best, when it cannot be calibrated here, is no headline, and the results say why
    monkeypatch.setattr(flopscore, "make", _flaky([]))
    doc = flop_scores([root / "benign"], runs, seed=0, best="flaky")
    assert doc["headline"] is None and "flaky, the best of trainsentry flops-eval, could not be calibrated" in \
        doc["headline_source"]
    assert "No headline estimator (none: flaky" in "\n".join(_flops({"flop_estimator": doc}))


def test_a_caller_s_calibration_and_held_out_errors_are_used_as_given(scored):
    """flops_one_gpu computes the calibration set and its held-out errors itself (it also needs their
    bands); handed to flop_scores they give the same scores, and they are what it reports."""
    from trainsentry.flops.estimators import ESTIMATORS
    from trainsentry.redteam.flopscore import calibration_set, held_out_errors

    doc, root = scored
    runs = [{"dir": root / "adv" / "adv.accum.k8-r0", "name": "accum", "setting": "k8", "role": "strategy"}]
    cal = calibration_set([root / "benign"])
    held = held_out_errors(cal, ESTIMATORS, 0)
    given = flop_scores([root / "benign"], runs, seed=0, best="tensor", cal=cal, held=held)
    own = flop_scores([root / "benign"], runs, seed=0, best="tensor")
    assert given["benign_held_out"] == own["benign_held_out"] and given["settings"] == own["settings"]
    held["tensor"].errors = held["tensor"].errors * 0 + 1.0       # not recomputed: the given errors are read
    again = flop_scores([root / "benign"], runs, seed=0, best="tensor", cal=cal, held=held)
    assert again["benign_held_out"]["tensor"]["median_abs_pct_error"] == 1.0
