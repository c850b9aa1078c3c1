"""``trainsentry eval-transfer``: do detectors fitted on one dataset carry to another?

Made for the 8-GPU question of issue 9 (are detectors fitted on the 2 × H200 dataset right on an
8-GPU NVSwitch node?), and usable for any pair of datasets (another topology, GPU model or agent
rate). Two readings, each for every detector:

* ``frozen``: fitted once on every run of the base dataset, never on the target; every target run
  judged with the k-of-n alert rule over its whole trace. "Without retraining".
* ``added``: configuration-grouped splits of the *target* (2/3 of each class's configurations to
  fit, 1/3 to test, as ``trainsentry eval``); each split fits on the base plus the target's fitting
  side and is scored on the target's test side only. "With them added". A configuration is
  workload + overrides (``lab.summary.config_key``), not the number of GPUs: one that both datasets
  ran is held out of the base too while it is tested (``shared_configs`` lists them).

The metrics are `trainsentry eval`'s (``evaluate.run_metrics`` on the adapted reading of the rule,
``AlertRule.capped``), so the two files read the same way.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from .alert import AlertRule
from .dataset import Run, load_dataset
from .evaluate import RUN_KEYS, adapted_outcomes, config_splits, fit_and_score, per_family, run_metrics
from .pipeline import _json_default, _progress, dataset_summary, resolve_detectors

DEFAULT_DETECTORS = ("comm-rules", "comm-ml", "fused", "rt-baseline")


def _median_tta(outcomes) -> float | None:
    ttas = [o.time_to_alert_s for o in outcomes if o.cls == "training" and o.alerted and o.time_to_alert_s is not None]
    return float(np.median(ttas)) if ttas else None


def _metrics(outcomes) -> dict:
    m = run_metrics(outcomes)
    return {**{k: m[k] for k in RUN_KEYS}, "window_auc": m["window_auc"], "median_time_to_alert_s": _median_tta(outcomes)}


def frozen(factory, base: list[Run], target: list[Run], rule: AlertRule) -> dict:
    outcomes = adapted_outcomes(fit_and_score(factory, base, target, rule))
    return {**_metrics(outcomes), "per_family": per_family(outcomes),
            "per_run": [{"run_id": o.run_id, "class": o.cls, "family": o.family, "alerted": bool(o.alerted),
                         "time_to_alert_s": o.time_to_alert_s, "correct": bool(o.alerted) == (o.cls == "training"),
                         "p_in_run_median": float(np.median(o.p_in_run)) if o.p_in_run.size else None}
                        for o in outcomes]}


def added(factory, base: list[Run], target: list[Run], splits: list[tuple[set, set]], rule: AlertRule,
          advance=None) -> dict:
    per_split, pooled = [], []
    for train_c, test_c in splits:
        # a configuration is workload + overrides, not the number of GPUs: a 2-GPU config that also
        # runs on 8 is one configuration, and its base runs leave the fit when it is tested
        fit = [r for r in base if r.config not in test_c] + [r for r in target if r.config in train_c]
        test = [r for r in target if r.config in test_c]
        if not test:
            continue
        outcomes = adapted_outcomes(fit_and_score(factory, fit, test, rule))
        per_split.append(_metrics(outcomes))
        pooled.extend(outcomes)
        if advance:
            advance()
    mean = {k: (float(np.mean(v)) if (v := [s[k] for s in per_split if s[k] is not None]) else None)
            for k in (*RUN_KEYS, "window_auc")}
    return {**mean, "median_time_to_alert_s": _median_tta(pooled), "splits": len(per_split),
            "per_family": per_family(pooled)}


def run_transfer(base_root: str, target_root: str, out: Path, docs: Path | None, n_splits: int = 50,
                 detectors: list[str] | None = None, rt_trees: int = 400, seed: int = 0,
                 cache_dir: Path | None = None, command: str = "trainsentry eval-transfer") -> dict:
    rule = AlertRule()   # Rahman & Tajdari's 3 of 5 at 0.75, as `trainsentry eval`
    factories = resolve_detectors(detectors, rt_trees, DEFAULT_DETECTORS)
    names = list(factories)
    t0 = time.time()
    base = load_dataset(base_root, cache_dir)
    target = load_dataset(target_root, cache_dir)
    # one recording is one run id at one start time: a run id alone repeats across datasets (each
    # campaign names its runs workload-overrides-repeat), a copied run keeps both
    shared = {(r.run_id, r.start) for r in base} & {(r.run_id, r.start) for r in target}
    if shared:
        raise ValueError(f"{len(shared)} runs are in both datasets (e.g. {sorted(shared)[0][0]}): the target must be new")
    if len({r.is_training for r in base}) < 2:
        raise ValueError("the base dataset needs training and non-training runs")
    # a test side needs a class with two configurations or more (config_splits keeps a lone one for fitting)
    per_cls = {c: len({r.config for r in target if r.cls == c}) for c in {r.cls for r in target}}
    splits = config_splits(target, n_splits, seed) if n_splits and max(per_cls.values()) > 1 else []
    doc = {"command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "results_file": str(out), "base": dataset_summary(base_root, base),
           "target": dataset_summary(target_root, target),
           "protocol": {"alert_rule": rule.label() + " with k and n capped at the run's windows",
                        "frozen": "fitted on every base run, scored on every target run",
                        "added": f"{len(splits)} splits of the target's configurations (2/3 fit, 1/3 test, seed "
                                 f"{seed}); fitted on the base runs of every configuration not on the test side "
                                 "plus the target's fitting side"},
           "shared_configs": sorted({r.config for r in base} & {r.config for r in target}),
           "frozen": {}, "added": {}}
    with _progress() as prog:
        for name in names:
            task = prog.add_task(f"{name}: frozen + {len(splits)} splits", total=1 + len(splits))
            doc["frozen"][name] = frozen(factories[name], base, target, rule)
            prog.advance(task)
            if splits:
                doc["added"][name] = added(factories[name], base, target, splits, rule, lambda t=task: prog.advance(t))
    doc["elapsed_s"] = round(time.time() - t0, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    if docs is not None:
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(render(doc))
    return doc


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _s(x) -> str:
    return "–" if x is None else f"{x:.1f}"


def _f3(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def render(doc: dict) -> str:
    b, t = doc["base"], doc["target"]
    lines = ["# Transfer: detectors fitted on one dataset, judged on another", "",
             f"*Generated by `{doc['command']}` on {doc['date']} (results: `{doc['results_file']}`); "
             "do not edit by hand.*", "",
             f"Base `{b['root']}`: {b['runs']} runs, {b['configs']} configurations, by class {b['runs_by_class']}. "
             f"Target `{t['root']}`: {t['runs']} runs, {t['configs']} configurations, by class {t['runs_by_class']}. "
             f"Alert rule {doc['protocol']['alert_rule']}.", "",
             f"*Frozen*: {doc['protocol']['frozen']}. *Added*: {doc['protocol']['added']}; means over splits.", "",
             f"Configurations both datasets ran (workload and settings alike, GPU count aside; the frozen detectors "
             f"saw them on the base's GPUs): {', '.join(f'`{c}`' for c in doc.get('shared_configs', [])) or 'none'}.",
             "",
             "| detector | reading | run accuracy | training detection | inference FPR | other FPR | window AUC | "
             "median time to alert (s) |", "|---|---|---|---|---|---|---|---|"]
    for name in doc["frozen"]:
        for reading in ("frozen", "added"):
            r = doc[reading].get(name)
            if r is None:
                continue
            lines.append(f"| `{name}` | {reading} | {_pct(r['run_accuracy'])} | {_pct(r['training_detection'])} | "
                         f"{_pct(r['inference_fpr'])} | {_pct(r['other_fpr'])} | "
                         f"{_f3(r['window_auc'])} | "
                         f"{_s(r['median_time_to_alert_s'])} |")
    families = sorted({f for r in doc["frozen"].values() for f in r["per_family"]})
    names = list(doc["frozen"])
    lines += ["", "Per family, share of runs alerted (training: detection; others: false alerts), frozen / added:", "",
              "| family | class | " + " | ".join(f"`{n}`" for n in names) + " |",
              "|---|---|" + "---|" * len(names)]
    for f in families:
        cls = next(r["per_family"][f]["class"] for r in doc["frozen"].values() if f in r["per_family"])
        cells = []
        for n in names:
            fr = doc["frozen"][n]["per_family"].get(f, {}).get("alerted_frac")
            ad = doc["added"].get(n, {}).get("per_family", {}).get(f, {}).get("alerted_frac")
            cells.append(f"{_pct(fr)} / {_pct(ad)}")
        lines.append(f"| {f} | {cls} | " + " | ".join(cells) + " |")
    wrong = {n: [x["run_id"] for x in r["per_run"] if not x["correct"]] for n, r in doc["frozen"].items()}
    lines += ["", "Target runs judged wrong by the frozen detectors:", ""]
    lines += [f"* `{n}`: {', '.join(f'`{w}`' for w in ws) or 'none'}" for n, ws in wrong.items()]
    return "\n".join(lines) + "\n"
