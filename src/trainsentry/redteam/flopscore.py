"""The FLOP estimator against the red team: does a strategy make the frozen estimator under-report compute?

The seed study froze its estimator and let the red team try to move its error (splitting, throttling,
atypical head counts, batch-size inflation). Here every estimator of :mod:`trainsentry.flops` is
calibrated on the benign training runs (those of ``--benign``, as ``trainsentry flops-eval`` calibrates
its saved models on every run of its dataset), then frozen and applied to each recorded red-team run:

* over the run's true interval (the manifest's start → end: the estimator's own error), and
* over the jobs the detector's segmentation finds overlapping the run, summed (what a monitor that
  does not know the run's interval integrates); the number of jobs is reported too, because a run
  cut into several jobs may stay under a per-job threshold even when their sum is right.

Error = 100 · (estimate − ground truth) / ground truth; negative = under-reported. A strategy only
counts as moving the estimator when its error lies outside the range of the estimator's own errors on
benign configurations it was not calibrated on (configurations dealt into 8 folds, each fold predicted
by a fit on the others). The headline estimator is the one ``trainsentry flops-eval`` names best
(results/flops.json ``best``, chosen on its 200 random splits, the estimator of ``models/flops.json``),
read, not chosen again here: the folds above give each estimator's benign range, not a second choice.
A saved model (``--flops-model``, e.g. ``models/flops.json``) is scored beside them as ``saved``.

Failures are counted, never skipped (as ``trainsentry flops-eval`` does,
:mod:`trainsentry.flops.evaluate`): a held-out fold an estimator cannot be calibrated on (a
:class:`~trainsentry.flops.estimators.FitFailure` or any other ValueError) is recorded with its
reason and its runs count as unbounded errors in the estimator's median (``None`` when they reach
it, and such an estimator cannot be the headline); its range is over the folds it completed. An
estimator that cannot be calibrated on all benign runs is listed in ``not_calibrated``; a red-team
run that cannot be scored is in ``runs_not_scored``, with the error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..flops.dataset import RunSet, load_runs
from ..flops.evaluate import quantile_with_failures
from ..flops.estimators import ESTIMATORS, Estimator, make
from ..flops.features import interval_features, stack
from ..traces.io import read_trace


def _merge(sets: list[RunSet]) -> RunSet:
    if len(sets) == 1:
        return sets[0]
    X = {k: np.concatenate([s.X[k] for s in sets]) for k in sets[0].X}
    cat = lambda a: [x for s in sets for x in getattr(s, a)]  # noqa: E731
    return RunSet(X, np.concatenate([s.flops for s in sets]), cat("run_ids"), cat("configs"), cat("workloads"),
                  cat("families"), cat("features"), cat("skipped"))


def calibration_set(benign_dirs: list[Path]) -> RunSet:
    sets = []
    for d in benign_dirs:
        try:
            sets.append(load_runs(d))
        except ValueError:
            continue                   # a benign directory without training runs calibrates nothing
    if not sets:
        raise ValueError("no benign training runs with FLOP ground truth to calibrate the estimators on")
    return _merge(sets)


FOLDS = 8


@dataclass
class HeldOut:
    """One estimator's held-out % errors over the folds it completed, and the folds it failed."""
    errors: np.ndarray
    folds: int
    failures: list[dict] = field(default_factory=list)   # {"fold", "runs", "reason", "message"}

    @property
    def failed_predictions(self) -> int:
        return int(sum(f["runs"] for f in self.failures))


def held_out_errors(runs: RunSet, names: tuple[str, ...], seed: int, folds: int = FOLDS) -> dict[str, HeldOut]:
    """Held-out % errors per estimator: configurations (sorted) dealt round-robin into ``folds``
    groups; each group predicted by a fit on all the others (every configuration held out once).
    A fold whose fit or prediction raises ValueError is recorded as a failure with its reason."""
    configs = sorted(set(runs.configs))
    fold_of = {c: i % max(1, min(folds, len(configs))) for i, c in enumerate(configs)}
    fold = np.asarray([fold_of[c] for c in runs.configs])
    ks = sorted(set(fold.tolist()))
    errs: dict[str, list[float]] = {n: [] for n in names}
    failed: dict[str, list[dict]] = {n: [] for n in names}
    for k in ks:
        test, train = np.flatnonzero(fold == k), np.flatnonzero(fold != k)
        Xtr = {c: v[train] for c, v in runs.X.items()}
        Xte = {c: v[test] for c, v in runs.X.items()}
        for n in names:
            try:
                pred = make(n, seed=seed).fit(Xtr, runs.flops[train]).predict(Xte)
            except ValueError as e:
                failed[n].append({"fold": int(k), "runs": int(test.size),
                                  "reason": getattr(e, "reason", None) or str(e), "message": str(e)})
                continue
            errs[n] += (100.0 * (pred - runs.flops[test]) / runs.flops[test]).tolist()
    return {n: HeldOut(np.asarray(errs[n]), len(ks), failed[n]) for n in names}


def benign_summary(h: HeldOut) -> dict:
    """Median |error| with failed predictions counted as unbounded (None when they reach it), range
    over completed predictions, and the failures grouped by reason."""
    e = h.errors
    by_reason: dict[str, list[dict]] = {}
    for f in h.failures:
        by_reason.setdefault(f["reason"], []).append(f)
    return {"median_abs_pct_error": quantile_with_failures(np.abs(e), h.failed_predictions, 0.5),
            "min_pct_error": float(np.min(e)) if e.size else None,
            "max_pct_error": float(np.max(e)) if e.size else None,
            "held_out_predictions": int(e.size), "failed_predictions": h.failed_predictions,
            "folds": h.folds, "failed_folds": len(h.failures),
            "failures": [{"reason": r, "folds": len(v), "runs": sum(x["runs"] for x in v), "example": v[0]["message"]}
                         for r, v in sorted(by_reason.items(), key=lambda kv: -len(kv[1]))]}


def _pct(est: float, truth: float) -> float:
    return 100.0 * (est - truth) / truth


def score_run(run_dir: Path, estimators: dict[str, Estimator]) -> dict:
    """Estimates over the true interval and over the segmentation's jobs, with % errors."""
    from ..detect.segment import segment_stream
    table, m = read_trace(run_dir)
    truth = float((m.get("ground_truth") or {}).get("flops") or 0.0)
    start, end = float(m["start"]), float(m["end"])
    row = {"run_id": m["run_id"], "workload": m["labels"]["workload"], "true_flops": truth}
    if not truth > 0:
        return {**row, "error": "no positive ground_truth.flops"}
    X = stack([interval_features(table, start, end)])
    jobs = [j for res in segment_stream(table).values() for j in res["jobs"]
            if float(j["end"]) > start and float(j["start"]) < end]
    Xj = stack([interval_features(table, float(j["start"]), float(j["end"]))
                for j in jobs if float(j["end"]) > float(j["start"])]) if jobs else None
    row["segmented_jobs"] = len(jobs)
    row["segmented_s"] = float(sum(float(j["end"]) - float(j["start"]) for j in jobs))
    row["run_s"] = end - start
    row["pct_error"], row["pct_error_segmented"] = {}, {}
    for name, est in estimators.items():
        row["pct_error"][name] = _pct(float(est.predict(X)[0]), truth)
        row["pct_error_segmented"][name] = (_pct(float(np.sum(est.predict(Xj))), truth) if Xj is not None
                                            else -100.0)        # no job found: nothing is counted
    return row


def _median(xs: list[float]) -> float | None:
    return float(np.median(xs)) if xs else None


def headline_of(best: str | None, estimators: dict) -> tuple[str | None, str]:
    """The headline estimator, ``best`` as the FLOP evaluation names it, and where it came from (or why
    there is none: no evaluation result, or that estimator could not be calibrated here)."""
    if best is None:
        return None, "none: no FLOP evaluation result (results/flops.json, trainsentry flops-eval) names a best estimator"
    if best not in estimators:
        return None, f"none: {best}, the best of trainsentry flops-eval, could not be calibrated on the benign runs"
    return best, "the best estimator of trainsentry flops-eval (results/flops.json best)"


def flop_scores(benign_dirs: list[Path], scored: list[dict], seed: int = 0, saved_model: Path | None = None,
                best: str | None = None, cal: RunSet | None = None,
                held: dict[str, HeldOut] | None = None) -> dict:
    """``scored``: [{"dir", "name", "setting", "role"}] with role "strategy" or "control" (a benign run
    recorded beside the strategies); ``best``: the estimator ``trainsentry flops-eval`` names best
    (results/flops.json), the headline. Returns the calibration, the benign held-out error range per
    estimator, the headline estimator, one row per run and medians per (name, setting). ``cal`` and
    ``held``: the calibration set of ``benign_dirs`` and its ``held_out_errors`` over ESTIMATORS with
    ``seed``, where the caller has them already (used as given, not recomputed)."""
    if cal is None:
        try:
            cal = calibration_set(benign_dirs)
        except ValueError as e:
            return {"error": str(e)}
    if held is None:
        held = held_out_errors(cal, ESTIMATORS, seed)
    estimators: dict[str, Estimator] = {}
    not_calibrated: dict[str, str] = {}
    for n in ESTIMATORS:
        try:
            estimators[n] = make(n, seed=seed).fit(cal.X, cal.flops)
        except ValueError as e:
            not_calibrated[n] = str(e)
    if saved_model is not None:
        from ..flops.live import load_model
        estimators["saved"] = load_model(saved_model)
    benign = {n: benign_summary(h) for n, h in held.items()}
    headline, headline_source = headline_of(best, estimators)
    rows = []
    for s in scored:
        try:
            r = score_run(Path(s["dir"]), estimators)
        except (ValueError, KeyError, OSError) as e:
            r = {"run_id": Path(s["dir"]).name, "error": str(e)}
        rows.append({**r, "name": s["name"], "setting": s["setting"], "role": s["role"]})
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in rows:
        if "error" not in r:
            groups.setdefault((r["role"], r["name"], r["setting"]), []).append(r)
    settings = []
    for (role, name, setting), rs in sorted(groups.items()):
        e = {n: _median([r["pct_error"][n] for r in rs]) for n in estimators}
        seg = {n: _median([r["pct_error_segmented"][n] for r in rs]) for n in estimators}
        row = {"role": role, "name": name, "setting": setting, "runs": len(rs), "pct_error": e,
               "pct_error_segmented": seg, "segmented_jobs": _median([r["segmented_jobs"] for r in rs])}
        if headline:
            lo, hi = (benign[headline]["min_pct_error"], benign[headline]["max_pct_error"]) if headline in benign \
                else (None, None)   # the saved model has no held-out folds here
            row["headline_pct_error"], row["headline_pct_error_segmented"] = e[headline], seg[headline]
            row["outside_benign_range"] = None if lo is None else bool(e[headline] < lo or e[headline] > hi)
            row["outside_benign_range_segmented"] = None if lo is None else bool(seg[headline] < lo or seg[headline] > hi)
        settings.append(row)
    return {"calibrated_on": {"dirs": [str(d) for d in benign_dirs], "runs": len(cal),
                              "configurations": len(set(cal.configs)), "skipped": cal.skipped},
            "estimators": list(estimators), "benign_held_out": benign, "headline": headline,
            "headline_source": headline_source, "not_calibrated": not_calibrated,
            "failed_folds": {n: b["failed_folds"] for n, b in benign.items() if b["failed_folds"]},
            "runs_not_scored": [{k: r.get(k) for k in ("run_id", "name", "setting", "role", "error")}
                                for r in rows if "error" in r],
            "held_out_folds": min(FOLDS, len(set(cal.configs))),
            "saved_model": str(saved_model) if saved_model else None, "settings": settings, "runs": rows}
