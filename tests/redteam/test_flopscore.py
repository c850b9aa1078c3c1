"""The frozen FLOP estimators against red-team runs, on the flops tests' synthetic runs (real H200 probe
samples, ground truth proportional to load × duration)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from flops.fixtures.probe_traces import synthetic_runs
from trainsentry.flops.dataset import load_runs
from trainsentry.redteam.flopscore import flop_scores, held_out_errors


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
    return flop_scores([root / "benign"], runs, seed=0), root


def test_every_benign_configuration_is_held_out_once(scored):
    _, root = scored
    runs = load_runs(root / "benign")
    errs = held_out_errors(runs, ("power_only", "tensor"), seed=0, folds=4)
    assert {n: e.size for n, e in errs.items()} == {"power_only": len(runs), "tensor": len(runs)}
    # the synthetic truth is proportional to tensor activity: held out, tensor stays within a few %
    assert np.median(np.abs(errs["tensor"])) < 10


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
