"""The white-box surrogate: SelfMonitor features rebuilt from manifests, and a model the workload's gate loads."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from trainsentry.redteam.surrogate import fit_surrogate, self_features, to_trees
from trainsentry.workloads.adversarial_serve import FEATURES, SklearnScorer, TreeScorer, load_scorer


def manifest(cls, steps=10, step_s=1.0, phases=None, nbytes=4_000_000):
    extra = {"0": {"phase_s_per_step": phases}} if phases else {"0": {}}
    return {"start": 100.0, "end": 100.0 + steps * step_s, "labels": {"class": cls},
            "ground_truth": {"steps": steps, "step_times_s": [step_s] * steps, "extra": extra,
                             "collective_bytes_per_rank": {"0": {"all_reduce": nbytes * steps}}}}


def test_training_steps_back_to_back_from_the_start():
    f = self_features(manifest("training"), np.array([110.0, 120.0, 130.0]), window_s=5.0)
    assert f["train_frac"].tolist() == pytest.approx([1.0, 0.0, 0.0])
    # steps ending at 105..110 are in the last 5 s (SelfMonitor counts a step by its end)
    assert f["train_steps_per_s"][0] == pytest.approx(6 / 5)
    assert f["log10_bytes_per_s"][0] == pytest.approx(np.log10(1 + 6 * 4e6 / 5))
    assert list(f.columns) == list(FEATURES)


def test_serve_and_pause_phases_are_not_training():
    ph = {"compute": [0.25] * 10, "comm": [0.25] * 10, "serve": [0.25] * 10, "pause": [0.25] * 10}
    f = self_features(manifest("training", phases=ph), np.array([108.0]), window_s=4.0)
    assert f["train_frac"][0] == pytest.approx(0.5) and f["serve_frac"][0] == pytest.approx(0.25)
    assert f["busy_frac"][0] == pytest.approx(0.75)


def test_inference_serves_and_other_does_nothing():
    inf = self_features(manifest("inference"), np.array([105.0, 140.0]), window_s=10.0)
    assert inf["serve_frac"].tolist() == pytest.approx([0.5, 0.0]) and inf["train_frac"].sum() == 0
    other = self_features(manifest("other"), np.array([105.0]), window_s=10.0)
    assert other.iloc[0].sum() == 0


def test_the_saved_surrogate_loads_in_the_workload_gate(tmp_path):
    import joblib
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(0, 1, size=(400, len(FEATURES))), columns=list(FEATURES))
    table = X.assign(label=(X["train_frac"] > 0.5).astype(int), run=[f"r{i % 8}" for i in range(400)])
    model, rep = fit_surrogate(table)
    assert rep["held_out_agreement"] > 0.9 and rep["folds"] == 5 and rep["runs"] == 8
    joblib.dump(model, tmp_path / "s.joblib")
    scorer = SklearnScorer(str(tmp_path / "s.joblib"))
    base = {k: 0.5 for k in FEATURES}
    assert scorer({**base, "train_frac": 0.9}) > 0.5 > scorer({**base, "train_frac": 0.1})
    with pytest.raises(ValueError, match="nothing for a surrogate to learn"):
        fit_surrogate(table.assign(label=1))


def test_exported_trees_give_the_models_probabilities_without_sklearn(tmp_path):
    import json
    rng = np.random.default_rng(1)
    X = pd.DataFrame(rng.uniform(0, 1, size=(600, len(FEATURES))), columns=list(FEATURES))
    X["log10_bytes_per_s"] *= 10
    label = ((X["train_frac"] > 0.4) & (X["log10_bytes_per_s"] > 4)).astype(int)
    model, _ = fit_surrogate(X.assign(label=label, run=[f"r{i % 6}" for i in range(600)]))
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**to_trees(model), "window_s": 8.0}))
    scorer, kind = load_scorer(str(path))
    assert kind == "trees" and isinstance(scorer, TreeScorer) and scorer.window_s == 8.0
    mine = np.array([scorer(r) for r in X.to_dict("records")])
    assert np.allclose(mine, model.predict_proba(X)[:, 1], atol=1e-9)
    with pytest.raises(ValueError, match="not the configured"):
        TreeScorer(str(path), ["train_frac"])
    path.write_text(json.dumps({**to_trees(model), "format": "something-else"}))
    with pytest.raises(ValueError, match="not a trainsentry-surrogate-trees/1 file"):
        TreeScorer(str(path))
