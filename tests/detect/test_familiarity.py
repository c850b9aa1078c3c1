"""detect.familiarity on the tiny probe dataset: a new setting of a known workload is familiar, a kind
of workload never fitted is not, and the artifact round-trips."""

import numpy as np
import pytest

from trainsentry.detect.dataset import load_dataset, stack
from trainsentry.detect.base import save_detector
from trainsentry.detect.familiarity import Familiarity, load


def _windows(runs):
    X, _, _, ids = stack(runs, "trainsentry")
    config = {r.run_id: r.config for r in runs}
    return X, [config[i] for i in ids]


def test_a_new_length_of_a_known_workload_is_familiar_and_an_unseen_kind_is_not(tiny_dataset, feature_cache, tmp_path):
    runs = load_dataset(tiny_dataset, feature_cache)
    fit_runs = [r for r in runs if r.family != "idle" and not r.config.endswith("-42")]
    fam = Familiarity().fit(*_windows(fit_runs))
    assert fam.threshold_ > 0 and fam.cols_
    new_length = [r for r in runs if r.family == "ddp" and r.config.endswith("-42")]
    never_seen = [r for r in runs if r.family == "idle"]
    assert fam.unfamiliar(_windows(new_length)[0]).mean() <= 0.2
    assert fam.unfamiliar(_windows(never_seen)[0]).mean() >= 0.8
    d = fam.distance(_windows(never_seen)[0])
    assert fam.line(float(d.max())).startswith("unfamiliar workload") and fam.line(0.0).startswith("familiar workload")
    # a window lacking a sensor every fitting window had is not judged (its features would sit at the
    # median and pull it towards familiar): NaN distance, never unfamiliar, and the line says why
    X = _windows(never_seen)[0]
    no_act = X.drop(columns=[c for c in X.columns if c.startswith("act.")])
    assert "act" in fam.groups_seen_ and np.isnan(fam.distance(no_act)).all() and not fam.unfamiliar(no_act).any()
    assert all(line.startswith("familiarity not judged") and "(act)" in line for line in fam.lines(no_act))
    assert [line.split(":")[0] for line in fam.lines(X)] == [fam.line(float(d)).split(":")[0] for d in fam.distance(X)]
    path = save_detector(fam, tmp_path / "familiarity.joblib", "test", {"runs": len(fit_runs)})
    again = load(path)
    assert np.allclose(again.distance(_windows(new_length)[0]), fam.distance(_windows(new_length)[0]))
    assert (tmp_path / "familiarity.json").exists()


def test_familiarity_needs_two_configurations(tiny_dataset, feature_cache):
    runs = [r for r in load_dataset(tiny_dataset, feature_cache) if r.config.endswith("ddp-36")]
    with pytest.raises(ValueError, match="two configurations"):
        Familiarity().fit(*_windows(runs))
