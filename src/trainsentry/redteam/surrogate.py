"""A white-box surrogate for ``adv.whitebox.surrogate-lora``: the detector's verdict, predicted from what the
workload can see of itself.

The white-box adversary knows the public method. It fits its own copy of the detector (the same
code, on its own benign runs: those of ``--benign``), lets that copy judge every window of its
recorded runs, and learns to predict the copy's verdict from the quantities its gate measures live
(:class:`trainsentry.workloads.adversarial_serve.SelfMonitor`: training and serving shares of the last
``window_s``, bytes its gradient exchanges moved per second, training steps per second). The result
is a small boosted-tree classifier, saved as plain JSON trees (``models/redteam-surrogate.json``,
:data:`~trainsentry.workloads.adversarial_serve.TREES_FORMAT`) that the workload's ``TreeScorer``
evaluates without scikit-learn (the GPU machine runs its own package versions, where a pickled model
may not load), or with joblib when ``--out`` ends in ``.joblib`` (``SklearnScorer``). Pass it to the
workload with the campaign override ``{surrogate_path: FILE}``.

The window: by default the detector copy's own window (8 s for the window features the learned
detectors read, 30 s for rt-baseline): a gate that averages over a longer window than the detector
lets a whole detector window fill with training. The JSON file records it, and the workload's gate
then measures over it.

What each run did second by second is rebuilt from its manifest's ground truth, not from telemetry:

* training runs: steps laid back to back from ``start`` with their recorded durations; within a step,
  the shares recorded in ``extra.phase_s_per_step`` (serve, pause and decoy time are not training;
  serve time is serving); the collective bytes of rank 0 spread evenly over the steps;
* inference runs: serving from ``start`` to ``end``; other runs: neither.

Labels: 1 when the detector copy's P(training) for the window ending at the same time is at or above
the alert threshold. A verdict the surrogate gets wrong is a window the gate misjudges, so the
held-out agreement (folds grouped by run) is written beside the model.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..workloads.adversarial_serve import FEATURES, TREES_FORMAT

NOT_TRAINING = ("serve", "pause", "decoy")


def _extra0(m: dict) -> dict:
    extra = (m.get("ground_truth") or {}).get("extra") or {}
    return extra.get("0") or next(iter(extra.values()), {}) or {}


def activity(m: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Intervals of one run: (starts, ends, training share, serving share) per interval, and bytes per
    training step. Inference: one serving interval; other: none."""
    start, end, cls = float(m["start"]), float(m["end"]), m["labels"]["class"]
    g = m.get("ground_truth") or {}
    if cls == "inference":
        return np.array([start]), np.array([end]), np.zeros((1, 2)) + [0.0, 1.0], 0.0
    steps = int(g.get("steps") or 0)
    if cls != "training" or steps <= 0:
        return np.zeros(0), np.zeros(0), np.zeros((0, 2)), 0.0
    dur = np.asarray(g.get("step_times_s") or [(end - start) / steps] * steps, dtype=np.float64)[:steps]
    t1 = start + np.cumsum(dur)
    t0 = t1 - dur
    phases = _extra0(m).get("phase_s_per_step") or {}
    share = np.zeros((dur.size, 2))
    share[:, 0] = 1.0
    if phases:
        tot = np.zeros(dur.size)
        per = {k: np.asarray(v[:dur.size], dtype=np.float64) for k, v in phases.items() if len(v) >= dur.size}
        for v in per.values():
            tot += v
        tot = np.where(tot > 0, tot, 1.0)
        serve = per.get("serve", np.zeros(dur.size))
        idle = sum((per[k] for k in NOT_TRAINING if k in per), np.zeros(dur.size))
        share[:, 0] = np.clip(1.0 - idle / tot, 0.0, 1.0)
        share[:, 1] = np.clip(serve / tot, 0.0, 1.0)
    by_rank = g.get("collective_bytes_per_rank") or {}
    rank0 = by_rank.get("0") or next(iter(by_rank.values()), {}) or {}
    return t0, t1, share, float(sum(rank0.values())) / steps


def self_features(m: dict, t_ends: np.ndarray, window_s: float) -> pd.DataFrame:
    """SelfMonitor features of a run at each ``t_end`` over the last ``window_s`` seconds."""
    t0, t1, share, bytes_per_step = activity(m)
    rows = []
    for now in np.asarray(t_ends, dtype=np.float64):
        lo = now - window_s
        overlap = np.clip(np.minimum(t1, now) - np.maximum(t0, lo), 0.0, None)
        train = float(np.sum(overlap * share[:, 0])) if overlap.size else 0.0
        serve = float(np.sum(overlap * share[:, 1])) if overlap.size else 0.0
        # SelfMonitor counts a step's bytes and the step itself when the step ends inside the window
        n_steps = int(np.sum((t1 >= lo) & (t1 <= now) & (share[:, 0] > 0))) if t1.size else 0
        rows.append({"train_frac": train / window_s, "serve_frac": serve / window_s,
                     "busy_frac": (train + serve) / window_s,
                     "log10_bytes_per_s": math.log10(1.0 + n_steps * bytes_per_step / window_s),
                     "train_steps_per_s": n_steps / window_s})
    return pd.DataFrame(rows, columns=list(FEATURES))


def training_table(runs: list, detector, run_dirs: list[Path], threshold: float, window_s: float) -> pd.DataFrame:
    """One row per detector window of every run: SelfMonitor features, the copy's verdict, the run."""
    parts = []
    for run, d in zip(runs, run_dirs):
        df = run.windows[detector.feature_set]
        if df.empty:
            continue
        m = json.loads((Path(d) / "manifest.json").read_text())
        feats = self_features(m, df["t_end"].to_numpy(), window_s)
        p = np.asarray(detector.predict_proba(df), dtype=np.float64)
        parts.append(feats.assign(label=(p >= threshold).astype(int), run=run.run_id))
    if not parts:
        raise ValueError("no windows to learn from")
    return pd.concat(parts, ignore_index=True)


def fit_surrogate(table: pd.DataFrame, seed: int = 0, folds: int = 5):
    """A small boosted-tree classifier on the SelfMonitor features, and its held-out agreement with the
    detector copy (folds grouped by run)."""
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.model_selection import GroupKFold
    y = table["label"].to_numpy()
    if len(set(y.tolist())) < 2:
        raise ValueError(f"the detector copy judged every window {'training' if y[0] else 'not training'}: "
                         "nothing for a surrogate to learn")
    X = table[list(FEATURES)]
    make = lambda: HistGradientBoostingClassifier(max_iter=100, max_leaf_nodes=15, learning_rate=0.1,  # noqa: E731
                                                  early_stopping=False, random_state=seed)
    groups = table["run"].to_numpy()
    n = min(folds, len(set(groups.tolist())))
    agree = []
    if n >= 2:
        for tr, te in GroupKFold(n_splits=n).split(X, y, groups):
            if len(set(y[tr].tolist())) < 2:
                continue
            agree += (make().fit(X.iloc[tr], y[tr]).predict(X.iloc[te]) == y[te]).tolist()
    model = make().fit(X, y)
    return model, {"windows": int(len(y)), "detector_positive_windows": int(y.sum()),
                   "runs": int(len(set(groups.tolist()))), "held_out_agreement": float(np.mean(agree)) if agree else None,
                   "in_sample_agreement": float(np.mean(model.predict(X) == y)), "folds": n}


def to_trees(model) -> dict:
    """A fitted binary HistGradientBoostingClassifier as plain trees (TREES_FORMAT, without the report):
    exported from its predictors here, where scikit-learn's version is the project's; the workload
    evaluates them with no scikit-learn (TreeScorer). Numerical splits only (left when x <= threshold)."""
    if list(getattr(model, "classes_", [])) != [0, 1]:
        raise ValueError("the surrogate must be a binary classifier of classes 0 and 1")
    trees = []
    for per_iteration in model._predictors:
        (pred,) = per_iteration                          # binary: one tree per iteration
        n = pred.nodes
        if n["is_categorical"].any():
            raise ValueError("categorical splits cannot be exported")
        trees.append({"feature": n["feature_idx"].astype(int).tolist(), "threshold": n["num_threshold"].tolist(),
                      "left": n["left"].astype(int).tolist(), "right": n["right"].astype(int).tolist(),
                      "leaf": n["is_leaf"].astype(int).tolist(), "value": n["value"].tolist()})
    return {"format": TREES_FORMAT, "features": [str(c) for c in model.feature_names_in_],
            "baseline": float(np.ravel(model._baseline_prediction)[0]), "trees": trees}


def detector_window_s(detector) -> float:
    """The window (s) of the detector's feature set: what the gate should average over."""
    from ..features import DEFAULT_WINDOW_S
    from ..features.rt import RT_WINDOW_S
    return float(RT_WINDOW_S if detector.feature_set == "rt" else DEFAULT_WINDOW_S)


def build(benign_dirs: list[Path], extra_dirs: list[Path], detector_name: str, out: Path, cache_dir: Path,
          window_s: float | None = None, seed: int = 0, rt_trees: int = 400, command: str = "") -> dict:
    """Fit the detector copy on the benign runs, label every window of benign and extra runs, fit and
    save the surrogate: ``out`` ending in ``.joblib`` gets the model (joblib) and its report beside it
    (``.json``); any other ``out`` is one JSON file, the trees (TREES_FORMAT, checked to give the
    model's own probabilities) with the report in it. ``window_s`` None: the detector copy's window."""
    from ..detect.evaluate import detector_factories
    from ..workloads.adversarial_serve import TreeScorer
    from .rounds import RULE, _load, _runs_under, fit
    factories = detector_factories(rt_trees)
    if detector_name not in factories:
        raise ValueError(f"unknown detector {detector_name!r}; choose from {list(factories)}")
    if window_s is None:
        window_s = detector_window_s(factories[detector_name]())
    benign_paths = [d for root in benign_dirs for d in _runs_under(root)]
    extra_paths = [d for root in extra_dirs for d in _runs_under(root)]
    benign = [_load(d, cache_dir) for d in benign_paths]
    if not benign:
        raise ValueError("no benign runs to fit the detector copy on")
    copy = fit(factories[detector_name], [r for r, d in zip(benign, benign_paths)
                                          if not r.workload.startswith("adv.")])
    extra = [_load(d, cache_dir) for d in extra_paths]
    table = training_table(benign + extra, copy, benign_paths + extra_paths, RULE.threshold, window_s)
    model, report = fit_surrogate(table, seed)
    from ..features import FEATURE_VERSION
    report.update({"command": command, "detector_copy": detector_name, "feature_version": FEATURE_VERSION,
                   "threshold": RULE.threshold,
                   "window_s": window_s, "features": list(FEATURES), "benign_dirs": [str(d) for d in benign_dirs],
                   "extra_dirs": [str(d) for d in extra_dirs], "model": str(out),
                   "labels": "1 when the detector copy's P(training) for the window ending then is at or above the "
                             "alert threshold",
                   "use": f"campaign entry overrides: {{surrogate_path: {out}}} for adv.whitebox.surrogate-lora"})
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix == ".joblib":
        import joblib
        joblib.dump(model, out)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        return report
    doc = {**to_trees(model), "window_s": window_s, "report": report}
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    X = table[list(FEATURES)]
    mine = np.asarray([TreeScorer(str(out))(row) for row in X.to_dict("records")])
    theirs = model.predict_proba(X)[:, 1]
    if not np.allclose(mine, theirs, atol=1e-6):
        out.unlink()
        raise ValueError(f"the exported trees disagree with the model (max |dP| {np.max(np.abs(mine - theirs)):.2g})")
    return report
