"""The detector contract, on windows of the probe-replayed tiny dataset."""

import numpy as np
import pandas as pd
import pytest

from trainsentry.detect.base import load_detector, save_detector
from trainsentry.detect.dataset import load_dataset, stack
from trainsentry.detect.evaluate import detector_factories
from trainsentry.features.rt import RT_FEATURE_NAMES


@pytest.fixture(scope="module")
def runs(tiny_dataset, feature_cache):
    return load_dataset(tiny_dataset, feature_cache)


def test_rt_baseline_has_166_features(runs):
    assert len(RT_FEATURE_NAMES) == 166
    X, _, _, _ = stack(runs, "rt")
    assert set(RT_FEATURE_NAMES) <= set(X.columns)


@pytest.mark.parametrize("name", ["comm-rules", "comm-ml", "fused", "rt-baseline"])
def test_contract(runs, name, tmp_path):
    det = detector_factories(rt_trees=20)[name]()
    X, y, classes, ids = stack(runs, det.feature_set)
    assert det.columns(X), "a detector declares which features it reads"
    if name.startswith("comm"):
        assert all(c.startswith("comm.") for c in det.columns(X))
    det.fit(X, y, groups=ids, classes=classes)
    p = det.predict_proba(X)
    assert p.shape == (len(X),) and np.all((p >= 0) & (p <= 1))
    if name != "rt-baseline":   # easy: DDP vs one-way send vs idle (edge windows straddle the idle margin)
        assert np.mean(p[y == 1] > 0.5) > 0.9 and np.mean(p[y == 0] < 0.5) > 0.95
    evidence = det.explain(X.iloc[int(np.argmax(y))].to_dict())
    assert evidence and all(isinstance(s, str) and s for s in evidence)
    # A window lacking every feature still gets a probability (missing metrics are normal).
    assert 0 <= det.predict_proba(pd.DataFrame([{"node": "n"}]))[0] <= 1
    path = save_detector(det, tmp_path / f"{name}.joblib", "pytest")
    assert np.allclose(load_detector(path).predict_proba(X), p)
    assert path.with_suffix(".json").exists()


def test_comm_rules_explains_one_way_traffic(runs):
    det = detector_factories()["comm-rules"]()
    X, y, _, _ = stack(runs, "trainsentry")
    ev = " ".join(det.explain(X[y == 0].iloc[len(X[y == 0]) // 2].to_dict()))
    assert "symmetry" in ev


def test_fit_refuses_bad_labels(runs):
    det = detector_factories()["fused"]()
    X, y, _, _ = stack(runs, "trainsentry")
    with pytest.raises(ValueError):
        det.fit(X, y[:-1])
    with pytest.raises(ValueError):
        det.fit(X, y * 2)


def test_balanced_rows_give_both_classes_the_same_count():
    from trainsentry.detect.learned import balanced_rows
    for n1, n0 in ((7, 30), (30, 7), (10, 10), (3, 100), (1, 2)):
        y = np.array([1] * n1 + [0] * n0)
        rows = balanced_rows(y)
        c1, c0 = int((y[rows] == 1).sum()), int((y[rows] == 0).sum())
        assert abs(c1 - c0) <= 1 and max(c1, c0) == max(n1, n0), (n1, n0, c1, c0)
        assert set(rows) == set(range(len(y)))          # every window is used
    assert list(balanced_rows(np.zeros(4, int))) == [0, 1, 2, 3]


def test_a_learned_detector_knows_windows_without_a_sensor_it_always_had():
    from trainsentry.detect.learned import fused
    rng = np.random.default_rng(0)
    n = 60
    X = pd.DataFrame({"comm.nvlink.Bps.min": rng.uniform(0, 1e10, n), "act.power_W.mean.mean": rng.uniform(80, 700, n),
                      "comm.net.Bps": np.where(np.arange(n) % 3 == 0, np.nan, 1e6)})
    y = (X["act.power_W.mean.mean"] > 400).astype(int).to_numpy()
    det = fused().fit(X, y)
    assert det.groups_seen_ == ["act", "comm.nvlink"]          # net: only 2/3 of the windows had it
    cpu_node = pd.DataFrame({"comm.net.Bps": [5e8], "comm.nvlink.Bps.min": [np.nan], "act.power_W.mean.mean": [np.nan]})
    no_net = pd.DataFrame({"comm.nvlink.Bps.min": [1e9], "act.power_W.mean.mean": [650.0]})
    assert list(det.out_of_domain(cpu_node)) == [True]
    assert list(det.out_of_domain(no_net)) == [False]
    assert list(det.out_of_domain(X)) == [False] * n
    assert det.describe()["sensors_always_seen"] == ["act", "comm.nvlink"]
