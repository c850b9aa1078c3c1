"""``trainsentry eval``: every detector on the same configuration-grouped splits.

Protocol (held out by configuration: no window of a run, nor any repeat of a configuration, is
on both sides):
* 200 random splits, 2/3 of each class's configurations to fit, 1/3 to test;
* leave-one-family-out: fit on every other family, test on the held-out one;
* run level: the k-of-n alert rule over every window of each test run, time to alert from the
  true start; window level: ROC AUC, accuracy at P >= 0.5 and false-positive rates at a fixed
  detection rate.

Two run-level readings of the same predictions, both in the results:
* ``faithful``: the k-of-n rule as published (Rahman & Tajdari's 3 of 5 at 0.75), scored only on the
  test runs whose trace holds at least n windows of the detector ("long enough"); a run with fewer
  windows cannot complete the vote, and counting it as "not alerted" would score a training run as
  missed and a benign one as right for a reason unrelated to the detector;
* ``adapted``: every test run, with k and n capped at the run's number of windows
  (``AlertRule.capped``). The headline numbers are the adapted reading; for a detector every test
  run of which is long enough (ours: 8 s windows every 2 s, 18 windows per 38 s run) the two are
  the same numbers, and ``headline_rule`` says which it is. rt-baseline (30 s windows every 15 s)
  has one or two windows per run of the H200 dataset: its headline is the adapted rule (1 of 1 or
  2 of 2 at 0.75), and its faithful rule has no run to score yet.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from .alert import AlertRule
from .base import Detector
from .dataset import Run, stack
from .learned import comm_ml, fused
from .rt_baseline import RTBaseline
from .rules import CommRules

RUN_KEYS = ("run_accuracy", "training_detection", "inference_fpr", "other_fpr")
DETECTION_RATE = 0.95   # window-level FPR is read at the threshold that catches this share of training windows
# Looser run-level rules reported beside the main one: with 30 s windows every 15 s, 3 of 5 needs a
# run of more than a minute, so short runs say nothing about rt-baseline's windows under it.
ALTERNATIVE_RULES = {"2of3@0.75": AlertRule(0.75, 2, 3), "1of1@0.5": AlertRule(0.5, 1, 1)}


def detector_factories(rt_trees: int = 400) -> dict[str, Callable[[], Detector]]:
    return {"comm-rules": CommRules, "comm-ml": comm_ml, "fused": fused,
            "rt-baseline": lambda: RTBaseline(n_trees=rt_trees)}


def config_splits(runs: list[Run], n_splits: int, seed: int = 0, train_frac: float = 2 / 3) -> list[tuple[set, set]]:
    """(train configs, test configs) per split, drawn per class so both sides hold every class."""
    by_cls: dict[str, list[str]] = {}
    for r in runs:
        if r.config not in by_cls.setdefault(r.cls, []):
            by_cls[r.cls].append(r.config)
    rng = np.random.default_rng(seed)
    splits = []
    for _ in range(n_splits):
        train, test = set(), set()
        for cls in sorted(by_cls):
            configs = sorted(by_cls[cls])
            perm = list(rng.permutation(configs))
            n_train = min(len(perm) - 1, max(1, round(train_frac * len(perm)))) if len(perm) > 1 else 1
            train |= set(perm[:n_train])
            test |= set(perm[n_train:])
        # a configuration is one workload+config identity (lab.summary.config_key): never both sides
        assert train.isdisjoint(test), "a configuration landed on both sides of a split"
        splits.append((train, test))
    return splits


@dataclass
class RunOutcome:
    run_id: str
    cls: str
    family: str
    config: str
    alerted: bool
    time_to_alert_s: float | None
    p_in_run: np.ndarray
    alternatives: dict | None = None
    # ``alerted``/``time_to_alert_s`` above: the rule as given, over every window of the trace (what
    # the red-team rounds score); the adapted reading (k and n capped at the run's windows):
    n_windows: int = 0
    long_enough: bool = True        # the trace holds at least n windows: the faithful rule applies
    adapted_alerted: bool | None = None
    adapted_time_to_alert_s: float | None = None


def fit_and_score(factory: Callable[[], Detector], train: list[Run], test: list[Run], rule: AlertRule) -> list[RunOutcome]:
    det = factory()
    X, y, classes, ids = stack(train, det.feature_set)
    det.fit(X, y, groups=ids, classes=classes)
    frames = [r.windows[det.feature_set] for r in test]
    sizes = [len(f) for f in frames]
    allX = pd.concat(frames, ignore_index=True) if sum(sizes) else pd.DataFrame()
    p_all = det.predict_proba(allX) if len(allX) else np.zeros(0)
    out, i = [], 0
    for r, df, n in zip(test, frames, sizes):
        p = p_all[i: i + n]
        i += n
        none = {"alerted": False, "time_to_alert_s": None}
        t_end = df["t_end"].to_numpy() if n else None
        a = rule.evaluate(t_end, p, r.start) if n else none
        adapted = rule.capped(n).evaluate(t_end, p, r.start) if n else none
        alts = {k: (alt.evaluate(t_end, p, r.start) if n else none) for k, alt in ALTERNATIVE_RULES.items()}
        mask = df["in_run"].to_numpy(dtype=bool) if n else np.zeros(0, bool)
        out.append(RunOutcome(r.run_id, r.cls, r.family, r.config, a["alerted"], a["time_to_alert_s"], p[mask], alts,
                              n_windows=n, long_enough=n >= rule.n, adapted_alerted=adapted["alerted"],
                              adapted_time_to_alert_s=adapted["time_to_alert_s"]))
    return out


def faithful_outcomes(outcomes: list[RunOutcome]) -> list[RunOutcome]:
    """The runs long enough for the published rule, with its verdicts."""
    return [o for o in outcomes if o.long_enough]


def adapted_outcomes(outcomes: list[RunOutcome]) -> list[RunOutcome]:
    """Every run, with the verdict of the rule capped at its number of windows."""
    return [replace(o, alerted=bool(o.adapted_alerted), time_to_alert_s=o.adapted_time_to_alert_s)
            for o in outcomes]


def _rate(xs: list[bool]) -> float | None:
    return float(np.mean(xs)) if xs else None


def run_metrics(outcomes: list[RunOutcome]) -> dict:
    correct = [o.alerted == (o.cls == "training") for o in outcomes]
    m = {"run_accuracy": _rate(correct),
         "training_detection": _rate([o.alerted for o in outcomes if o.cls == "training"]),
         "inference_fpr": _rate([o.alerted for o in outcomes if o.cls == "inference"]),
         "other_fpr": _rate([o.alerted for o in outcomes if o.cls == "other"])}
    y = np.concatenate([np.full(o.p_in_run.size, int(o.cls == "training")) for o in outcomes]) if outcomes else []
    p = np.concatenate([o.p_in_run for o in outcomes]) if outcomes else []
    m["window_auc"] = window_auc(np.asarray(y), np.asarray(p))
    m["window_accuracy"] = float(np.mean((np.asarray(p) >= 0.5) == (np.asarray(y) == 1))) if len(p) else None
    cls = np.concatenate([np.full(o.p_in_run.size, o.cls, dtype=object) for o in outcomes]) if outcomes else []
    m["window_fpr_at_detection"] = fpr_at_detection(np.asarray(cls), np.asarray(p))
    return m


def window_auc(y: np.ndarray, p: np.ndarray) -> float | None:
    from sklearn.metrics import roc_auc_score
    if y.size == 0 or len(set(y.tolist())) < 2:
        return None
    return float(roc_auc_score(y, p))


def fpr_at_detection(cls: np.ndarray, p: np.ndarray, rate: float = DETECTION_RATE) -> dict:
    train = p[cls == "training"]
    if train.size == 0:
        return {}
    thr = float(np.quantile(train, 1 - rate))
    return {c: float(np.mean(p[cls == c] >= thr)) for c in ("inference", "other") if (cls == c).any()}


def _summary(values: list) -> dict:
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size == 0:
        return {"mean": None, "std": None, "min": None, "n": 0}
    return {"mean": float(v.mean()), "std": float(v.std()), "min": float(v.min()), "n": int(v.size)}


def _tta_summary(ttas: list[float], n_training: int) -> dict:
    v = np.array(ttas, dtype=float)
    q = (lambda x: float(np.percentile(v, x))) if v.size else (lambda x: None)
    return {"p10": q(10), "p50": q(50), "p90": q(90), "max": float(v.max()) if v.size else None,
            "alerted_training_runs": int(v.size), "training_runs": n_training}


def fit_split(factory: Callable[[], Detector], runs: list[Run], split: tuple[set, set], rule: AlertRule) -> list[RunOutcome]:
    """One split: fitted on its training configurations' runs, scored on its test configurations' runs
    (here, or in a worker process of ``detect.parallel``)."""
    train_c, test_c = split
    return fit_and_score(factory, [r for r in runs if r.config in train_c], [r for r in runs if r.config in test_c], rule)


def evaluate_detector(name: str, factory: Callable[[], Detector], runs: list[Run], splits: list[tuple[set, set]],
                      rule: AlertRule, lofo: bool = True, advance: Callable[[], None] | None = None,
                      scored=None, lofo_scored=None) -> dict:
    """``scored``: the splits' outcomes in split order, fitted elsewhere (an iterator such as
    ``detect.parallel.SplitPool.outcomes``); else each split is fitted here. ``lofo_scored``: the same
    for the leave-one-family-out folds (``leave_one_family_out``)."""
    per_split, pooled, ttas = [], [], []
    roc_y, roc_p, by_split = [], [], []
    root = {r.run_id: str(Path(r.path).parent) for r in runs}
    several_roots = len(set(root.values())) > 1
    by_root: dict[str, list[dict]] = {}
    if scored is None:
        scored = (fit_split(factory, runs, split, rule) for split in splits)
    for i, given in enumerate(scored):
        outcomes = adapted_outcomes(given)
        m = run_metrics(outcomes)
        long_enough = faithful_outcomes(given)
        fm = run_metrics(long_enough) if long_enough else {}
        per_split.append({"split": i, **{k: v for k, v in m.items()}, "n_test_runs": len(given),
                          "faithful": {"runs_long_enough": len(long_enough),
                                       **{k: fm.get(k) for k in RUN_KEYS}}})
        pooled.extend(outcomes)
        by_split.append(outcomes)
        for d in sorted({root[o.run_id] for o in outcomes}) if several_roots else ():
            mine = [o for o in outcomes if root[o.run_id] == d]
            by_root.setdefault(d, []).append(
                {**{k: v for k, v in run_metrics(mine).items() if k in RUN_KEYS},
                 "tta": [o.time_to_alert_s for o in mine if o.cls == "training" and o.alerted]})
        ttas += [o.time_to_alert_s for o in outcomes if o.cls == "training" and o.alerted]
        for o in outcomes:
            roc_y.append(np.full(o.p_in_run.size, int(o.cls == "training")))
            roc_p.append(o.p_in_run)
        if advance:
            advance()
    fam = per_family(pooled)
    per_run = {}
    for rid in sorted({o.run_id for o in pooled}):
        os_ = [o for o in pooled if o.run_id == rid]
        per_run[rid] = {"class": os_[0].cls, "family": os_[0].family, "test_instances": len(os_),
                        "alerted_frac": _rate([o.alerted for o in os_]),
                        "wrong_frac": _rate([o.alerted != (o.cls == "training") for o in os_])}
    lofo_res = leave_one_family_out(factory, runs, rule, lofo_scored) if lofo else {}
    alternatives = {}
    for k in ALTERNATIVE_RULES:
        alt = [RunOutcome(o.run_id, o.cls, o.family, o.config, o.alternatives[k]["alerted"],
                          o.alternatives[k]["time_to_alert_s"], np.zeros(0)) for o in pooled]
        tt = [o.time_to_alert_s for o in alt if o.cls == "training" and o.alerted]
        m = run_metrics(alt)
        alternatives[k] = {"run_accuracy_pooled": m["run_accuracy"], "inference_fpr_pooled": m["inference_fpr"],
                           "other_fpr_pooled": m["other_fpr"], "training_detection_pooled": m["training_detection"],
                           "median_time_to_alert_s": float(np.median(tt)) if tt else None}
    training_fams = [v["correct_frac"] for v in lofo_res.values() if v["class"] == "training"]
    n_training = sum(1 for o in pooled if o.cls == "training")
    splitm = {k: _summary([s[k] for s in per_split]) for k in
              ("run_accuracy", "training_detection", "inference_fpr", "other_fpr", "window_auc", "window_accuracy")}
    pooled_faithful = faithful_outcomes(pooled)
    tt_faithful = [o.time_to_alert_s for o in pooled_faithful if o.cls == "training" and o.alerted]
    windows = sorted({o.n_windows for o in pooled})
    all_long = all(o.long_enough for o in pooled)
    capped = sorted({rule.capped(o.n_windows).label() for o in pooled if o.n_windows})
    run_rules = {
        "faithful": {"rule": rule.label(), "runs_long_enough_pooled": len(pooled_faithful), "test_runs_pooled": len(pooled),
                     "note": "scored only on test runs whose trace holds at least n windows",
                     **{k: _summary([s["faithful"][k] for s in per_split])["mean"] for k in RUN_KEYS},
                     "median_time_to_alert_s": float(np.median(tt_faithful)) if tt_faithful else None},
        "adapted": {"rule": f"{rule.label()} with k and n capped at the run's number of windows",
                    "rules_applied": capped, "windows_per_test_run": windows,
                    **{k: splitm[k]["mean"] for k in RUN_KEYS},
                    "median_time_to_alert_s": _tta_summary(ttas, n_training)["p50"]}}
    wf = {c: _summary([s["window_fpr_at_detection"].get(c) for s in per_split]) for c in ("inference", "other")}
    return {
        "headline_rule": (f"{rule.label()} (faithful: every test run long enough)" if all_long else
                          f"adapted: {rule.label()} with k and n capped at the run's windows "
                          f"({', '.join(capped)} on these runs); the faithful rule scores "
                          f"{len(pooled_faithful)} of {len(pooled)} pooled test runs"),
        "run_accuracy": splitm["run_accuracy"]["mean"],
        "inference_fpr": splitm["inference_fpr"]["mean"],
        "median_time_to_alert_s": _tta_summary(ttas, n_training)["p50"],
        "window_auc": splitm["window_auc"]["mean"],
        "lofo_min_family_detection": min(training_fams) if training_fams else None,
        "other_fpr": splitm["other_fpr"]["mean"],
        "training_detection": splitm["training_detection"]["mean"],
        "over_splits": splitm,
        "window_accuracy": splitm["window_accuracy"]["mean"],
        "run_level_rules": run_rules,
        "window_fpr_at_detection_rate": {"detection_rate": DETECTION_RATE, **wf},
        "time_to_alert_s": _tta_summary(ttas, n_training),
        "alternative_alert_rules": alternatives,
        "per_family": fam,
        "per_run": per_run,
        "per_dataset": [{"dataset": d, **per_dataset(rows)} for d, rows in sorted(by_root.items())],
        "lofo": lofo_res,
        "splits": per_split,
        "detector": factory().describe(),
        "_outcomes": by_split,
        "_curves": {"roc_y": np.concatenate(roc_y) if roc_y else np.zeros(0), "roc_p": np.concatenate(roc_p) if roc_p else
                    np.zeros(0), "tta": ttas},
    }


def per_dataset(rows: list[dict]) -> dict:
    """One dataset's share of a several-dataset evaluation: the run metrics over that dataset's test runs
    of each split (the detector fitted on every dataset's training side), averaged over the splits that
    held any of its runs on the test side, as the headline averages every split."""
    tta = [t for r in rows for t in r["tta"]]
    return {**{k: _summary([r[k] for r in rows])["mean"] for k in RUN_KEYS},
            "median_time_to_alert_s": float(np.median(tta)) if tta else None, "splits_with_test_runs": len(rows)}


def per_family(outcomes: list[RunOutcome]) -> dict:
    """Per workload family: its class, test appearances and the share of them that alerted."""
    fam = {}
    for f in sorted({o.family for o in outcomes}):
        os_ = [o for o in outcomes if o.family == f]
        fam[f] = {"class": os_[0].cls, "test_instances": len(os_), "alerted_frac": _rate([o.alerted for o in os_])}
    return fam


def either_alert(a: list[list[RunOutcome]], b: list[list[RunOutcome]]) -> dict:
    """Run-level OR of two detectors evaluated on the same splits: a run alerts when either alerts,
    at the earlier of their alert times. Each detector keeps its own windows and alert rule (the
    verdicts, not the window probabilities, are combined: two detectors with different window
    lengths share no window grid). Window metrics and leave-one-family-out are not defined here."""
    if len(a) != len(b):
        raise ValueError("the two detectors were not evaluated on the same splits")
    per_split, pooled, ttas = [], [], []
    for sa, sb in zip(a, b):
        if [o.run_id for o in sa] != [o.run_id for o in sb]:
            raise ValueError("the two detectors' test runs differ within a split")
        both = []
        for x, y in zip(sa, sb):
            times = [o.time_to_alert_s for o in (x, y) if o.alerted and o.time_to_alert_s is not None]
            both.append(replace(x, alerted=x.alerted or y.alerted, time_to_alert_s=min(times) if times else None,
                                p_in_run=np.zeros(0), alternatives=None))
        m = run_metrics(both)
        per_split.append({k: m[k] for k in RUN_KEYS})
        pooled.extend(both)
        ttas += [o.time_to_alert_s for o in both if o.cls == "training" and o.alerted and o.time_to_alert_s is not None]
    fam = per_family(pooled)
    n_training = sum(1 for o in pooled if o.cls == "training")
    splitm = {k: _summary([s[k] for s in per_split]) for k in RUN_KEYS}
    return {**{k: splitm[k]["mean"] for k in RUN_KEYS}, "over_splits": splitm,
            "median_time_to_alert_s": _tta_summary(ttas, n_training)["p50"],
            "time_to_alert_s": _tta_summary(ttas, n_training), "per_family": fam}


def lofo_folds(runs: list[Run]) -> list[tuple[str, tuple[set, set] | None]]:
    """Per family (sorted), the leave-one-family-out fold as a split of configurations (every other
    family's to fit, the family's own to test), or None where the other families hold one class. A
    configuration belongs to one workload and so to one family; one that did not would be on both
    sides, which this refuses."""
    out = []
    for f in sorted({r.family for r in runs}):
        train = {r.config for r in runs if r.family != f}
        test = {r.config for r in runs if r.family == f}
        if not train.isdisjoint(test):
            raise ValueError(f"family {f} shares configurations with other families: no leave-one-family-out fold")
        both = len({r.is_training for r in runs if r.family != f}) == 2
        out.append((f, (train, test) if both else None))
    return out


def leave_one_family_out(factory: Callable[[], Detector], runs: list[Run], rule: AlertRule, scored=None) -> dict:
    """``scored``: the outcomes of ``lofo_folds``' fittable folds in their order, fitted elsewhere
    (``detect.parallel.SplitPool.lofo_outcomes``); else each fold is fitted here."""
    out = {}
    scored = iter(scored) if scored is not None else None
    for f, fold in lofo_folds(runs):
        test = [r for r in runs if r.family == f]
        if fold is None:
            out[f] = {"class": test[0].cls, "runs": len(test), "correct_frac": None,
                      "note": "the other families hold a single class; nothing to fit"}
            continue
        outcomes = adapted_outcomes(next(scored) if scored is not None else fit_split(factory, runs, fold, rule))
        out[f] = {"class": test[0].cls, "runs": len(test),
                  "correct_frac": _rate([o.alerted == (o.cls == "training") for o in outcomes]),
                  "alerted_frac": _rate([o.alerted for o in outcomes])}
    return out
