"""The seed study's protocol: random splits of configurations, 2/3 to calibrate, 1/3 to evaluate.

All repeats of a configuration (same workload and config, :func:`trainsentry.lab.summary.config_key`)
fall on one side of a split, so an estimator is always scored on configurations it never saw.
Every estimator is fitted and scored on the *same* splits. The headline number per estimator is
the median absolute percentage error over all held-out predictions of all splits (each run
counted once per split in which it was held out), with the 90th percentile beside it.
"""

from __future__ import annotations

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
            "max_abs_pct_error": float(np.max(a))}


def run_protocol(runs: RunSet, names: tuple[str, ...] = ESTIMATORS, n_splits: int = 200, seed: int = 0,
                 level: float = LEVEL, progress=None) -> dict:
    splits = grouped_splits(runs.configs, n_splits, seed=seed)
    n = len(runs)
    y = runs.flops
    per = {name: {"err": [], "idx": [], "covered": [], "split_medians": [], "failed": 0,
                  "log_pred_sum": np.zeros(n), "held_out": np.zeros(n, dtype=int), "fit_s": 0.0}
           for name in names}
    for s, (cal, ev) in enumerate(splits):
        Xc = {k: v[cal] for k, v in runs.X.items()}
        Xe = {k: v[ev] for k, v in runs.X.items()}
        for name in names:
            p = per[name]
            t0 = time.perf_counter()
            try:
                est = make(name, seed=s).fit(Xc, y[cal])
                pred = est.predict(Xe)
                lo, hi = est.predict_interval(Xe, level)
            except ValueError:  # e.g. a degenerate calibration set for a linear model: scored as failed
                p["failed"] += 1
                continue
            finally:
                p["fit_s"] += time.perf_counter() - t0
            err = 100.0 * (pred - y[ev]) / y[ev]
            p["err"].append(err)
            p["idx"].append(ev)
            p["covered"].append((y[ev] >= lo) & (y[ev] <= hi))
            p["split_medians"].append(float(np.median(np.abs(err))))
            p["log_pred_sum"][ev] += np.log(pred)
            p["held_out"][ev] += 1
        if progress and (s + 1) % 50 == 0:
            progress(f"split {s + 1}/{n_splits}")
    result = {"protocol": {"splits": n_splits, "cal_fraction": CAL_FRACTION, "seed": seed,
                           "configurations": len(set(runs.configs)), "runs": n, "interval_level": level},
              "estimators": {}, "per_run": []}
    held_out_errors: dict[str, np.ndarray] = {}
    for name in names:
        p = per[name]
        if not p["err"]:
            result["estimators"][name] = {"failed_splits": p["failed"], "median_abs_pct_error": None,
                                          "p90_abs_pct_error": None}
            continue
        err = np.concatenate(p["err"])
        fam = np.asarray(runs.families)[np.concatenate(p["idx"])]
        sm = np.asarray(p["split_medians"])
        held_out_errors[name] = err
        result["estimators"][name] = {
            **_summary(err), "interval_coverage": float(np.mean(np.concatenate(p["covered"]))),
            "split_median_p25": float(np.quantile(sm, 0.25)), "split_median_p50": float(np.median(sm)),
            "split_median_p75": float(np.quantile(sm, 0.75)), "predictions": int(err.size),
            "failed_splits": p["failed"], "fit_seconds_total": round(p["fit_s"], 2),
            "by_family": {f: {"median_abs_pct_error": float(np.median(np.abs(err[fam == f]))),
                              "median_signed_pct_error": float(np.median(err[fam == f])),
                              "predictions": int(np.sum(fam == f))} for f in sorted(set(fam.tolist()))}}
    for i in range(n):
        row = {"run_id": runs.run_ids[i], "config": runs.configs[i], "workload": runs.workloads[i],
               "family": runs.families[i], "true_flops": float(y[i])}
        for name in names:
            k = per[name]["held_out"][i]
            # geometric mean of the estimates made while this run was held out
            row[name] = float(np.exp(per[name]["log_pred_sum"][i] / k)) if k else None
        result["per_run"].append(row)
    result["_held_out_pct_errors"] = held_out_errors  # for the saved models' intervals; not written out
    return result


def best_estimator(result: dict) -> str:
    scored = {k: v["median_abs_pct_error"] for k, v in result["estimators"].items()
              if v.get("median_abs_pct_error") is not None}
    if not scored:
        raise ValueError("no estimator produced held-out predictions")
    return min(scored, key=scored.get)
