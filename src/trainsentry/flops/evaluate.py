"""The seed study's protocol: random splits of configurations, 2/3 to calibrate, 1/3 to evaluate.

All repeats of a configuration (same workload and config, :func:`trainsentry.lab.summary.config_key`)
fall on one side of a split, so an estimator is always scored on configurations it never saw.
Every estimator is fitted and scored on the *same* splits.

A split where an estimator cannot be calibrated (:class:`~trainsentry.flops.estimators.FitFailure`
or any other ValueError) is a recorded failure, with its reason; it is never skipped silently.
Each estimator reports three error pools:

- headline (``median_abs_pct_error``, ``p90_abs_pct_error``): over all held-out predictions of all
  splits, a failed split's predictions counted as unbounded errors. A quantile that falls among
  them is ``None`` (unbounded); with no failures this is the estimator's own pool. The best
  estimator is chosen on it, so failing counts against an estimator.
- ``common``: only the splits every estimator completed, the like-for-like comparison.
- ``own``: the splits this estimator completed.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .dataset import RunSet
from .estimators import ESTIMATORS, LEVEL, make

CAL_FRACTION = 2.0 / 3.0


def grouped_splits(configs: list[str], n_splits: int, cal_fraction: float = CAL_FRACTION,
                   seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    """(calibration run indices, evaluation run indices) per split; configurations never straddle."""
    uniq = sorted(set(configs))
    if len(uniq) < 3:
        raise ValueError(f"need at least 3 configurations for calibration/evaluation splits, have {len(uniq)}")
    n_cal = min(len(uniq) - 1, max(2, int(round(cal_fraction * len(uniq)))))
    index = {c: i for i, c in enumerate(uniq)}
    group = np.asarray([index[c] for c in configs])
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_splits):
        cal_groups = rng.permutation(len(uniq))[:n_cal]
        is_cal = np.isin(group, cal_groups)
        out.append((np.flatnonzero(is_cal), np.flatnonzero(~is_cal)))
    return out


def _summary(err_pct: np.ndarray) -> dict:
    a = np.abs(err_pct)
    return {"median_abs_pct_error": float(np.median(a)), "p90_abs_pct_error": float(np.quantile(a, 0.9)),
            "mean_abs_pct_error": float(np.mean(a)), "median_signed_pct_error": float(np.median(err_pct)),
            "max_abs_pct_error": float(np.max(a)), "predictions": int(a.size)}


def quantile_with_failures(abs_err: np.ndarray, n_failed: int, q: float) -> float | None:
    """The q-quantile (numpy's linear rule) of ``abs_err`` plus ``n_failed`` unbounded errors; None if unbounded."""
    a = np.sort(np.asarray(abs_err, dtype=np.float64))
    n = a.size + int(n_failed)
    if n == 0:
        return None
    pos = q * (n - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    if hi >= a.size:
        return None
    return float(a[lo] + (a[hi] - a[lo]) * (pos - lo))


def _pool(done: dict, splits) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(errors, run indices, covered) concatenated over the given splits of one estimator."""
    if not splits:
        return np.zeros(0), np.zeros(0, dtype=int), np.zeros(0, dtype=bool)
    return tuple(np.concatenate([done[s][k] for s in splits]) for k in range(3))


def _failures(failed: dict) -> list[dict]:
    by_reason: dict[str, list] = {}
    for s, (reason, message) in sorted(failed.items()):
        by_reason.setdefault(reason, []).append((s, message))
    return [{"reason": r, "splits": len(v), "first_split": v[0][0], "example": v[0][1]}
            for r, v in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))]


def run_protocol(runs: RunSet, names: tuple[str, ...] = ESTIMATORS, n_splits: int = 200, seed: int = 0,
                 level: float = LEVEL, progress=None) -> dict:
    splits = grouped_splits(runs.configs, n_splits, seed=seed)
    n = len(runs)
    y = runs.flops
    # per estimator: split → (errors %, eval run indices, interval covered) or split → (reason, details)
    done: dict[str, dict] = {name: {} for name in names}
    failed: dict[str, dict] = {name: {} for name in names}
    fit_s = dict.fromkeys(names, 0.0)
    log_pred_sum = {name: np.zeros(n) for name in names}  # for each run's geometric-mean held-out estimate
    held = {name: np.zeros(n, dtype=int) for name in names}
    for s, (cal, ev) in enumerate(splits):
        Xc = {k: v[cal] for k, v in runs.X.items()}
        Xe = {k: v[ev] for k, v in runs.X.items()}
        for name in names:
            t0 = time.perf_counter()
            try:
                est = make(name, seed=s).fit(Xc, y[cal])
                pred = est.predict(Xe)
                lo, hi = est.predict_interval(Xe, level)
            except ValueError as e:
                failed[name][s] = (getattr(e, "reason", None) or str(e), getattr(e, "detail", None) or str(e))
                continue
            finally:
                fit_s[name] += time.perf_counter() - t0
            done[name][s] = (100.0 * (pred - y[ev]) / y[ev], ev, (y[ev] >= lo) & (y[ev] <= hi))
            log_pred_sum[name][ev] += np.log(pred)
            held[name][ev] += 1
        if progress and (s + 1) % 50 == 0:
            progress(f"split {s + 1}/{n_splits}")
    common = [s for s in range(n_splits) if all(s in done[name] for name in names)]
    result = {"protocol": {"splits": n_splits, "cal_fraction": CAL_FRACTION, "seed": seed,
                           "configurations": len(set(runs.configs)), "runs": n, "interval_level": level,
                           "common_splits": len(common)},
              "estimators": {}, "per_run": []}
    held_out_errors: dict[str, np.ndarray] = {}
    families = np.asarray(runs.families)
    for name in names:
        own = sorted(done[name])
        err, idx, covered = _pool(done[name], own)
        n_failed_pred = sum(len(splits[s][1]) for s in failed[name])
        e = {"median_abs_pct_error": quantile_with_failures(np.abs(err), n_failed_pred, 0.5),
             "p90_abs_pct_error": quantile_with_failures(np.abs(err), n_failed_pred, 0.9),
             "splits_attempted": n_splits, "splits_failed": len(failed[name]), "failures": _failures(failed[name]),
             "failed_predictions": n_failed_pred, "fit_seconds_total": round(fit_s[name], 2),
             "own": None, "common": None}
        if own:
            held_out_errors[name] = err
            sm = np.asarray([np.median(np.abs(done[name][s][0])) for s in own])
            fam = families[idx]
            e["own"] = {**_summary(err), "splits": len(own), "interval_coverage": float(np.mean(covered)),
                        "split_median_p25": float(np.quantile(sm, 0.25)), "split_median_p50": float(np.median(sm)),
                        "split_median_p75": float(np.quantile(sm, 0.75)),
                        "by_family": {f: {"median_abs_pct_error": float(np.median(np.abs(err[fam == f]))),
                                          "median_signed_pct_error": float(np.median(err[fam == f])),
                                          "predictions": int(np.sum(fam == f))} for f in sorted(set(fam.tolist()))}}
        if common:
            e["common"] = {**_summary(_pool(done[name], common)[0]), "splits": len(common)}
        result["estimators"][name] = e
    for i in range(n):
        row = {"run_id": runs.run_ids[i], "config": runs.configs[i], "workload": runs.workloads[i],
               "family": runs.families[i], "true_flops": float(y[i])}
        for name in names:
            k = held[name][i]  # geometric mean of the estimates made while this run was held out
            row[name] = float(np.exp(log_pred_sum[name][i] / k)) if k else None
        result["per_run"].append(row)
    result["_held_out_pct_errors"] = held_out_errors  # for the saved models' intervals; not written out
    return result


def best_estimator(result: dict) -> str:
    """Lowest headline median (failed splits counted as unbounded errors)."""
    scored = {k: v["median_abs_pct_error"] for k, v in result["estimators"].items()
              if v.get("median_abs_pct_error") is not None}
    if not scored:
        raise ValueError("no estimator has a bounded median error (each failed on half the splits or more)")
    return min(scored, key=scored.get)


# -- references for power alone: what energy and time can say when the energy model cannot be inverted --------

def _flops_on_energy(Xc: dict, yc: np.ndarray, Xe: dict) -> np.ndarray:
    """FLOPs = α·E_net + β·t, least squares weighted by 1/FLOPs² (relative errors), no sign constraints;
    ``t`` the busy GPU-seconds, power only's own time base.

    The regression the other way round from power only's: FLOPs on the inputs, not energy on FLOPs,
    so there is no energy per TFLOP to divide by and it is well-posed whenever E_net and t are not
    proportional (β < 0 is power only's overhead, −P_overhead / E_per_TFLOP). When the joules do not
    follow the FLOPs it shrinks α and predicts from time."""
    A = lambda X: np.column_stack([X["net_energy_J"], X["busy_gpu_s"]])  # noqa: E731
    sw = 1.0 / yc
    scale = np.maximum(np.abs(A(Xc)).max(axis=0), 1e-30)
    coef = np.linalg.lstsq(A(Xc) * sw[:, None] / scale, yc * sw, rcond=None)[0] / scale
    return A(Xe) @ coef


def _gpu_seconds(Xc: dict, yc: np.ndarray, Xe: dict) -> np.ndarray:
    """FLOPs = R × busy GPU-seconds, R the calibration runs' geometric-mean FLOPs per busy GPU-second: time
    alone (the time base of power only's overhead)."""
    g = lambda X: np.maximum(X["busy_gpu_s"], 1e-9)  # noqa: E731
    return float(np.exp(np.mean(np.log(yc / g(Xc))))) * g(Xe)


REFERENCES = {
    "flops_on_energy": ("FLOPs regressed on net energy and busy GPU-seconds", _flops_on_energy),
    "gpu_seconds": ("the calibration runs' FLOPs per busy GPU-second × busy GPU-seconds (time alone)", _gpu_seconds),
}


def reference_pass(runs: RunSet, n_splits: int = 200, seed: int = 0) -> dict:
    """Held-out errors of the REFERENCES on the protocol's splits (same seed, so the same splits).

    Not estimators of the comparison: they say whether a power-only fit that cannot fail would know
    more about FLOPs than time alone does."""
    splits = grouped_splits(runs.configs, n_splits, seed=seed)
    out = {}
    for key, (description, predict) in REFERENCES.items():
        errs = []
        for cal, ev in splits:
            Xc = {k: v[cal] for k, v in runs.X.items()}
            Xe = {k: v[ev] for k, v in runs.X.items()}
            pred = np.maximum(predict(Xc, runs.flops[cal], Xe), 1e9)
            errs.append(100.0 * (pred - runs.flops[ev]) / runs.flops[ev])
        out[key] = {"description": description, **_summary(np.concatenate(errs)), "splits": n_splits}
    return out
