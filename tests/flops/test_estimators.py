"""Each estimator fits, predicts held-out runs, gives intervals, and survives a JSON round trip."""

import json

import numpy as np
import pytest

from trainsentry.flops.dataset import load_runs
from trainsentry.flops.estimators import ENERGY_UNCONSTRAINED, ESTIMATORS, FitFailure, from_dict, make


@pytest.fixture(scope="module")
def runs(synth_root):
    return load_runs(synth_root)


def _halves(runs):
    cfgs = sorted(set(runs.configs))
    cal_cfgs = set(cfgs[::2] + cfgs[1:2])  # 4 of 6 configurations calibrate
    cal = np.array([i for i, c in enumerate(runs.configs) if c in cal_cfgs])
    ev = np.array([i for i, c in enumerate(runs.configs) if c not in cal_cfgs])
    return runs.subset(cal), runs.subset(ev)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_fit_predict_interval_roundtrip(runs, name):
    cal, ev = _halves(runs)
    est = make(name).fit(cal.X, cal.flops)
    pred = est.predict(ev.X)
    assert pred.shape == ev.flops.shape and np.all(pred > 0)
    lo, hi = est.predict_interval(ev.X)
    assert np.all(lo <= pred) and np.all(pred <= hi)
    rel = np.abs(pred - ev.flops) / ev.flops
    # the synthetic set's FLOPs follow energy and tensor activity closely; the MLP with 8 calibration
    # runs is the loosest and is held to a loose bound
    assert np.median(rel) < (0.6 if name == "mlp" else 0.1), (name, rel)
    again = from_dict(json.loads(json.dumps(est.to_dict())))
    np.testing.assert_allclose(again.predict(ev.X), pred, rtol=1e-9)
    np.testing.assert_allclose(again.predict_interval(ev.X)[1], hi, rtol=1e-9)


def test_tensor_rate_is_the_measured_flops_per_busy_second(runs):
    est = make("tensor").fit(runs.X, runs.flops)
    ratio = runs.flops / runs.X["tensor_cycles_s"]
    assert est.rate_flops_per_s == pytest.approx(float(np.exp(np.mean(np.log(ratio)))))


def test_energy_model_constants_are_physical(runs):
    est = make("three_input").fit(runs.X, runs.flops)
    c = est.params()["coef"]
    assert c["E_per_TFLOP_J"] > 0 and all(v >= 0 for v in c.values())


def test_fit_rejects_missing_or_bad_truth(runs):
    with pytest.raises(ValueError):
        make("power_only").fit(runs.X, np.zeros(len(runs)))
    with pytest.raises(KeyError):
        make("tensor").fit({"duration_s": runs.X["duration_s"]}, runs.flops)
    with pytest.raises(KeyError):
        make("nope")
    with pytest.raises(ValueError):
        from_dict({"name": "something_else"})


def test_held_out_errors_set_the_saved_interval(runs):
    est = make("power_only").fit(runs.X, runs.flops)
    est.set_interval_from_errors(np.array([-20.0, -10.0, 0.0, 10.0, 30.0] * 20))
    pred = est.predict(runs.X)
    lo, hi = est.predict_interval(runs.X, 0.9)
    # an estimate 30 % high means truth = ŷ / 1.3: the lower bound reaches down to it
    assert np.all(lo < pred / 1.25) and np.all(hi > pred / 0.85)
    again = from_dict(json.loads(json.dumps(est.to_dict())))
    assert again.interval_source == "held-out"
    np.testing.assert_allclose(again.predict_interval(runs.X)[0], lo)


def _capped_runs(n=12, seed=0, energy_per_tflop=0.0, noise_J=1500.0):
    """Runs of one length at the power limit: net energy ≈ constant whatever the FLOPs (the H200 campaign)."""
    rng = np.random.default_rng(seed)
    flops = np.geomspace(1.6e16, 4.4e16, n)
    tb = 160e12 - 2.4e-3 * flops  # the joules not spent on FLOPs go to memory traffic
    t = np.full(n, 38.3)
    e = 41_000.0 + energy_per_tflop * (flops / 1e12 - 30_000.0) + noise_J * rng.standard_normal(n)
    X = {"net_energy_J": e, "duration_s": t, "busy_gpu_s": 2 * t, "dram_bytes": tb, "nvlink_bytes": np.full(n, 1e12),
         "mean_power_W": (e + 490.0 * t) / t, "gpus": np.full(n, 2.0), "energy_J": e + 490.0 * t,
         "tensor_cycles_s": flops / 1.0e15}
    return X, flops


def test_power_only_refuses_when_energy_does_not_follow_flops():
    X, y = _capped_runs()
    with pytest.raises(FitFailure) as err:
        make("power_only").fit(X, y)
    assert err.value.reason == ENERGY_UNCONSTRAINED
    msg = str(err.value)
    assert "12/12 calibration runs average ≥ 90% of the 700 W power limit" in msg
    assert "energy measures time, not work" in msg
    # what is built on it fails with it, naming the part
    with pytest.raises(FitFailure) as err:
        make("residual_mlp").fit(X, y)
    assert err.value.reason == f"base power_only: {ENERGY_UNCONSTRAINED}"


def test_energy_per_tflop_must_stand_above_its_noise():
    # a weak true slope lost in 1.5 kJ of noise: refused; the same slope with little noise: fitted
    X, y = _capped_runs(energy_per_tflop=0.05)
    with pytest.raises(FitFailure, match="standard errors above 0"):
        make("power_only").fit(X, y)
    X, y = _capped_runs(energy_per_tflop=0.05, noise_J=10.0)
    assert make("power_only").fit(X, y).coef["E_per_TFLOP_J"] == pytest.approx(0.05, rel=0.1)
    # an exact fit (no residual at all) has a zero standard error and is kept
    est = make("power_only").fit({**X, "net_energy_J": y / 1e12 * 0.4}, y)
    assert est.coef["E_per_TFLOP_J"] == pytest.approx(0.4)


def test_three_input_and_fusion_still_calibrate_at_the_power_limit():
    # at the limit the joules split between FLOPs and memory traffic; the three-input model separates them
    X, y = _capped_runs(noise_J=100.0)
    rng = np.random.default_rng(1)
    X["dram_bytes"] = rng.uniform(60e12, 160e12, y.size)  # memory traffic set by the model shape, not the FLOPs
    X["net_energy_J"] = 0.44 * y / 1e12 + 120.0 * X["dram_bytes"] / 1e12 + 50.0 * rng.standard_normal(y.size)
    three = make("three_input").fit(X, y)
    assert three.coef["E_per_TFLOP_J"] == pytest.approx(0.44, rel=0.05)
    fused = make("fusion").fit(X, y)
    assert np.median(np.abs(fused.predict(X) / y - 1)) < 0.02


def test_energy_diagnostics_split_the_correlation_at_the_power_limit():
    from trainsentry.flops.estimators import energy_diagnostics
    X, y = _capped_runs(n=12)
    d = energy_diagnostics(X, y)
    assert d["runs_at_power_limit"] == 12 and d["runs_below_power_limit"] == 0
    assert d["corr_net_energy_flops_below_limit"] is None and abs(d["corr_net_energy_flops_at_limit"]) < 0.7
    # three runs well below the limit whose joules follow their FLOPs
    X["mean_power_W"][:3] = 2 * 400.0
    X["net_energy_J"][:3] = 0.5 * y[:3] / 1e12
    d = energy_diagnostics(X, y)
    assert (d["runs_at_power_limit"], d["runs_below_power_limit"]) == (9, 3)
    assert d["corr_net_energy_flops_below_limit"] > 0.99


def test_the_energy_models_overhead_is_paid_per_busy_gpu():
    """Calibrated on two-GPU jobs only, the three-input model measures a one-GPU job of the same physics
    (each working GPU pays the overhead power): its time base is busy GPU-seconds, not the duration
    (with the duration, as the seed study wrote it, the one-GPU job's overhead counted twice)."""
    rng = np.random.default_rng(1)

    def runs(n, gpus):
        flops = np.geomspace(2e15, 6e16, n) * rng.uniform(0.9, 1.1, n)
        t = rng.uniform(30, 90, n)
        tb, nvl = flops * 2e-3 * rng.uniform(0.5, 1.5, n), (gpus - 1) * flops * 5e-4 * rng.uniform(0.5, 1.5, n)
        busy = gpus * t
        e = 0.5 * flops / 1e12 + 30.0 * tb / 1e12 + 10.0 * nvl / 1e12 + 150.0 * busy
        return {"net_energy_J": e, "duration_s": t, "busy_gpu_s": busy, "dram_bytes": tb, "nvlink_bytes": nvl}, flops
    X2, y2 = runs(30, 2)
    X1, y1 = runs(10, 1)
    est = make("three_input").fit(X2, y2)
    assert est.coef["P_overhead_W"] == pytest.approx(150.0, rel=1e-3)
    assert np.max(np.abs(est.predict(X1) / y1 - 1)) < 1e-3


def test_a_model_saved_before_the_busy_time_base_is_refused_with_the_fix(tmp_path):
    """A /1 file's overhead power is per node-second; read with busy GPU-seconds it would be misapplied."""
    from trainsentry.flops.live import MODEL_FORMAT, load_model, save_model
    X = {"net_energy_J": np.array([1e4, 2e4, 3.1e4, 3.9e4]), "busy_gpu_s": np.array([10.0, 12.0, 9.0, 11.0]),
         "duration_s": np.array([5.0, 6.0, 4.5, 5.5])}
    path = save_model(make("power_only").fit(X, np.array([1e16, 2e16, 3e16, 4e16])), tmp_path / "m.json", {})
    assert load_model(path).name == "power_only" and MODEL_FORMAT.endswith("/2")
    old = tmp_path / "old.json"      # another file: load_model caches by path and mtime
    old.write_text(json.dumps({**json.loads(path.read_text()), "format": "trainsentry.flops-model/1"}))
    with pytest.raises(ValueError, match=r"flops-model/1.*refit it with `trainsentry flops-eval`"):
        load_model(old)


def test_fusion_leaves_out_a_part_that_read_nothing(runs):
    """A run whose energy above the overhead is not positive puts the three-input model at the floor; the
    fused estimate is then tensor activity's alone, not a log-space mean dragged to the floor."""
    from trainsentry.flops.estimators import FLOPS_FLOOR
    cal, ev = _halves(runs)
    fused = make("fusion").fit(cal.X, cal.flops)
    tensor, three = fused.parts
    X = {k: np.asarray(v, dtype=np.float64).copy() for k, v in ev.X.items()}
    both = fused.predict(X)
    assert np.all(three.predict(X) > FLOPS_FLOOR) and 0 < fused.weights[1] < 1
    X["net_energy_J"][0] = -1.0                           # the first run: no energy above the overhead
    quiet = fused.predict(X)
    assert three.predict(X)[0] == FLOPS_FLOOR
    assert quiet[0] == pytest.approx(tensor.predict(X)[0], rel=1e-12)
    np.testing.assert_allclose(quiet[1:], both[1:], rtol=1e-12)   # the other runs are untouched
    X["tensor_cycles_s"][0] = 0.0                         # both parts at the floor: the floor
    assert fused.predict(X)[0] == FLOPS_FLOOR
