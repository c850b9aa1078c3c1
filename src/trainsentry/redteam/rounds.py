"""Monitor–evader rounds from recorded runs: results/redteam.json, figures and docs/redteam.md.

* Round 1: every detector as delivered — fitted on the benign runs only, through the same factories
  and window features as ``trainsentry eval`` (detect.evaluate, detect.dataset) — scores every
  adversarial run frozen (:func:`trainsentry.redteam.evasion.score_evasion`).
* Round r ≥ 2: the blue side adds recorded adversarial runs to its fitting data, scored leave one
  strategy out: the detector that scores strategy S was fitted on the benign runs and on the runs of
  every strategy but S (strategy = ``labels.family``; ``adv.<strategy>.<setting>`` workloads label
  themselves so). Round 2 adds the runs as recorded; round 3 also repeats each strategy's runs so
  that every strategy weighs about as much as all benign training together (the detectors take no
  sample weights; repeating a run is the same weight); each later round doubles that repeat.
* Every round re-measures benign run accuracy and false-positive rates on configuration-grouped
  splits of the benign runs (detect.evaluate.config_splits), with that round's adversarial data in
  every fitting side.
* Cost per strategy and setting from the manifests' ground truth (:mod:`trainsentry.redteam.cost`)
  against the benign DDP run each adversarial run names as its baseline.

Runs under an adversarial directory whose workload is not ``adv.*`` (the campaign records the
benign baselines beside the strategies) serve only as cost baselines; ``adv.*`` runs under a benign
directory are left out of the benign data (both are listed in the provenance).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from ..detect.alert import AlertRule
from ..detect.base import Detector
from ..detect.dataset import Run, load_run, stack
from ..detect.evaluate import (ALTERNATIVE_RULES, RunOutcome, adapted_outcomes, config_splits,
                               fit_and_score, run_metrics)
from ..features import FEATURE_VERSION
from ..targets import DETECTOR as TARGET_DETECTOR, detector_targets
from ..traces.io import iter_runs
from .cost import LOSS_BASIS, load_truth, median_or_none, run_cost, score_costs
from .coverage import NOT_RUN, campaign_coverage, held_out_unit
from .evasion import by_family, score_evasion
from .flopscore import flop_scores

RULE = AlertRule()          # the rule `trainsentry eval` scores runs with (its defaults: 0.75 in 3 of 5)
PRIMARY = "fused"                     # the detector the live path prefers (collector.live.PREFERENCE)
MAX_BALANCE, MAX_REPEAT = 8, 16      # bound the fitting data (and time) the repeats add
HARDENING = {1: "as delivered: fitted on the benign runs only",
             2: "adds the recorded adversarial runs of every other strategy to the fitting data",
             3: "as round 2, with each strategy's runs repeated so that its windows weigh about as much as all "
                f"benign training windows together (at most {MAX_BALANCE}x)"}
# The detector issue's targets (issue 4, "Done when"; defined once, in trainsentry.targets), held out by
# configuration; every round's re-measured benign numbers are reported against them.
TARGETS = detector_targets()
TARGETS_SOURCE = (f"the detector issue's targets for `{TARGET_DETECTOR}` on held-out configurations: "
                  + ", ".join(t.text() for t in TARGETS.values()))
# The upper bound on the inference FPR when no held-out inference run alerts: 1 - ALPHA^(1/n), 95 % confidence.
ZERO_ALERT_ALPHA = 0.05
# The window-feature code the detectors of this series of rounds were delivered with. Round 1 is "as
# delivered" only when it runs on these features: hardened features that replace them in place (a new
# FEATURE_VERSION) make round 1 a benign-only fit of the hardened features instead, and the results say so
# (protocol.round_1_as_delivered). The detectors were first delivered on version 1; the blue side then
# hardened the features against benign errors (version 3: TP serving, disaggregated serving, power-keyed
# fits; its PCIe channel in comm-rules was added knowing the host-sync strategy) and delivered again.
# Version 4 (2026-12-03) adds the tensor cores' share of SM activity (features.activity.tensor_per_sm),
# chosen on data/h200's benign errors (tensor-parallel decode read as training, tensor- and
# pipeline-parallel training missed); it was checked on data/redteam-r1 only after it was chosen (the
# same three trainers missed with it as without). Round 1 of each earlier delivery, on the same recorded
# runs, is kept in EARLIER_DELIVERIES.
DELIVERED_FEATURE_VERSION = 4
# ``adversarial``: the directory name of the recorded runs that delivery was scored on; a page scoring
# other runs does not cite it.
EARLIER_DELIVERIES = ({"feature_version": 1, "code": "8b4aad8", "results": "results/redteam-v1-round1.json",
                       "rounds": [1], "adversarial": "redteam-r1"},
                      {"feature_version": 3, "code": "f536ad7", "results": "results/redteam-v3-round1.json",
                       "rounds": [1], "adversarial": "redteam-r1"},
                      {"feature_version": 3, "code": "f536ad7", "results": "results/redteam-x1-v3-round1.json",
                       "rounds": [1], "adversarial": "redteam-x1"})
EFFECTIVENESS = "(1 - run_detection) / (1 + max(gpu_hour_overhead, 0)), in the last round"
BLUE_SIDE = ("training data only: each round refits the same detectors (same features, same alert rule, same "
             "thresholds) with more adversarial runs in the fitting data; no feature, rule or threshold changes")


def blue_side(feature_version: int = FEATURE_VERSION) -> str:
    """What the blue side changed between rounds, as far as this command can tell."""
    if feature_version == DELIVERED_FEATURE_VERSION:
        return BLUE_SIDE
    return (f"training data (each round refits with more adversarial runs), on window features of version "
            f"{feature_version} where the detectors were delivered on version {DELIVERED_FEATURE_VERSION}: the "
            "feature change applies to every round, round 1 included, so round 1 is not the detector as delivered "
            "but the hardened features fitted on benign runs only; alert rule and thresholds unchanged")


SURROGATE_WORKLOAD = "adv.whitebox.surrogate-lora"
LIMITS = ["The evader does not adapt between rounds: every round re-scores the same recorded runs, so rounds 2 "
          "and later measure how a detector hardened with other strategies' runs generalises to a strategy it never "
          "saw, not an arms race. An adaptive evader would record new runs against the hardened detector.",
          f"{SURROGATE_WORKLOAD} gates its training with a saved surrogate only when the campaign passes "
          "overrides {surrogate_path: FILE} (`trainsentry redteam surrogate` writes one: models/redteam-surrogate.json, "
          "the fused detector's copy fitted on data/h200 judging the windows of data/h200 and data/redteam-r1, "
          "learned from what the workload measures of itself over the detector's 8 s window); without it the workload "
          "falls back to the proxy scorer and the run is flagged in its setting's notes."]


def earlier_deliveries(adversarial_dirs) -> list[dict]:
    """The earlier deliveries scored on these recorded runs (by directory name), none for other runs."""
    names = {Path(d).name for d in adversarial_dirs}
    return [dict(e) for e in EARLIER_DELIVERIES if e["adversarial"] in names]


def campaign_files(campaign: list[Path] | Path | None) -> list[Path]:
    """``--campaign`` as a list of files: none, one, or several that extend one plan."""
    if campaign is None:
        return []
    return [Path(campaign)] if isinstance(campaign, (str, Path)) else [Path(c) for c in campaign]


def limits(adv: list["AdvRun"], campaign: list[Path] | Path | None) -> list[str]:
    """LIMITS that concern these runs: the surrogate's only where its workload was recorded or planned."""
    workloads = {a.run.workload for a in adv}
    if campaign:
        from ..lab.campaign import Campaign
        workloads |= {e["workload"] for c in campaign_files(campaign) for e in Campaign.load(c).runs}
    return [t for t in LIMITS if not t.startswith(SURROGATE_WORKLOAD) or SURROGATE_WORKLOAD in workloads]


# Why a loss penalty can be null (redteam.cost.penalty_at_common_point): the cost note says it, and an
# unranked setting's reason says the same words once.
NO_COMMON_TRAINING = "the two loss curves share no training (no overlap beyond a first point)"


class InputError(ValueError):
    """Input the command refuses with a message and exit code 2 (missing directories, no runs)."""


@dataclass
class AdvRun:
    run: Run
    dir: Path
    strategy: str
    setting: str

    @property
    def unit(self) -> str:
        """What rounds 2+ leave out together with this run (coverage.held_out_unit)."""
        return held_out_unit(self.strategy)


def hardening(round_no: int) -> str:
    return HARDENING.get(round_no, f"as round 3, with the repeat doubled {round_no - 3} more time(s) "
                                   f"(at most {MAX_REPEAT}x)")


def adversarial_repeat(round_no: int, benign_training_windows: int, strategy_windows: int) -> int:
    """How many times one strategy's runs enter the fitting data in a round (their weight)."""
    if round_no <= 2 or strategy_windows <= 0:
        return 1
    balance = min(MAX_BALANCE, max(1, round(benign_training_windows / strategy_windows)))
    return int(min(MAX_REPEAT, balance * 2 ** (round_no - 3)))


def hardened(adv: list[AdvRun], round_no: int, benign_training_windows: int, feature_set: str) -> tuple[list[Run], dict]:
    """The adversarial runs a round adds to the fitting data, repeated per strategy, and the repeats."""
    runs, repeat = [], {}
    for s in sorted({a.strategy for a in adv}):
        mine = [a.run for a in adv if a.strategy == s]
        repeat[s] = adversarial_repeat(round_no, benign_training_windows, _windows(mine, feature_set))
        runs += mine * repeat[s]
    return runs, repeat


def _manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def _runs_under(root: Path) -> list[Path]:
    if not root.is_dir():
        raise InputError(f"{root}: no such directory")
    return iter_runs(root)


def _setting(workload: str, strategy: str, manifest: dict | None = None) -> str:
    """The setting's name: the workload's suffix (``adv.online.full-k8`` → ``full-k8``), plus every
    config key a campaign override changed from the registered workload (``full-k8 decode_len=16 k=2``),
    so runs of one workload with different overrides are scored as the different settings they are.
    Runs recorded since the manifest keeps the overrides (``labels.overrides``) are named from them
    alone; for older ones the config is compared with the registry's, except for a run without
    overrides (run id ``<workload>-base-r<n>``), never renamed even if a registered default changed
    after it was recorded. (Five older runs with their own length and no overrides carry a hashed tag:
    they keep their names only while the registry's defaults do.)"""
    name = workload
    for prefix in (f"adv.{strategy}.", "adv."):
        if workload.startswith(prefix):
            name = workload[len(prefix):]
            break
    labels = (manifest or {}).get("labels") or {}
    if isinstance(labels.get("overrides"), dict):   # recorded since 2026-12-01: the overrides as written
        return " ".join([name] + [f"{k}={v}" for k, v in sorted(labels["overrides"].items())])
    run_id = str((manifest or {}).get("run_id", ""))
    if run_id.startswith(f"{workload}-base-r"):   # the campaign gave no overrides (lab.campaign names it so)
        return name
    from ..workloads.base import WORKLOADS
    from ..workloads import registry  # noqa: F401  (registers every workload)
    if workload not in WORKLOADS or not isinstance(labels.get("config"), dict):
        return name
    registered = WORKLOADS[workload].resolve(toy=bool((manifest or {}).get("toy")))
    changed = {k: v for k, v in labels["config"].items() if k in registered and registered[k] != v}
    return " ".join([name] + [f"{k}={v}" for k, v in sorted(changed.items())])


def discover(benign_dirs: list[Path], adversarial_dirs: list[Path], cache_dir: Path, advance=None) -> dict:
    """Benign runs, adversarial runs and cost-baseline directories, with what was left out and why."""
    benign_paths, adv_paths, base_paths, excluded = [], [], [], []
    # with several benign roots a run's id is prefixed by its root, as detect.dataset.load_dataset does:
    # two nodes' campaigns reuse run ids, and an id names one run (fit groups, held-out counts)
    prefix: dict[Path, str] = {}
    for root in benign_dirs:
        for d in _runs_under(root):
            if _manifest(d)["labels"]["workload"].startswith("adv."):
                excluded.append({"run": str(d), "why": "adversarial workload under a benign directory"})
            else:
                benign_paths.append(d)
                prefix[d] = f"{str(root).rstrip('/')}/" if len(benign_dirs) > 1 else ""
    if not benign_paths:
        raise InputError(f"no benign runs (manifest.json) under {', '.join(map(str, benign_dirs))}")
    for root in adversarial_dirs:
        for d in _runs_under(root):
            (adv_paths if _manifest(d)["labels"]["workload"].startswith("adv.") else base_paths).append(d)
    if not adv_paths:
        raise InputError(f"no adversarial runs (workload adv.*) under {', '.join(map(str, adversarial_dirs))}")
    benign, adv = [], []
    for d in benign_paths:
        r = _load(d, cache_dir)
        benign.append(replace(r, run_id=prefix[d] + r.run_id) if prefix[d] else r)
        if advance:
            advance()
    for d in adv_paths:
        r = _load(d, cache_dir)
        adv.append(AdvRun(r, d, r.family, _setting(r.workload, r.family, _manifest(d))))
        if advance:
            advance()
    if len({r.is_training for r in benign}) < 2:
        raise InputError("the benign runs need training and non-training runs to fit a detector")
    return {"benign": benign, "adversarial": adv, "cost_baselines": base_paths + benign_paths, "excluded": excluded,
            "baselines_only": [str(d) for d in base_paths]}


def _load(d: Path, cache_dir: Path) -> Run:
    try:
        return load_run(d, cache_dir)
    except (ValueError, KeyError, OSError) as e:
        raise InputError(f"{d}: {e}") from e


def fit(factory: Callable[[], Detector], runs: list[Run]) -> Detector:
    det = factory()
    X, y, classes, ids = stack(runs, det.feature_set)
    det.fit(X, y, groups=ids, classes=classes)
    return det


def _windows(runs: list[Run], feature_set: str) -> int:
    return int(sum(int(r.windows[feature_set]["in_run"].sum())
                   for r in runs if not r.windows[feature_set].empty))


def score_runs(det: Detector, runs: list[AdvRun], cache_dir: Path) -> list[dict]:
    """Per run: window share, alert and time to alert under the main rule and eval's alternatives."""
    dirs = [a.dir for a in runs]
    rows = score_evasion(dirs, det, RULE, cache_dir, ALTERNATIVE_RULES)
    return [{**row, "family": a.strategy, "setting": a.setting, "dir": str(a.dir)} for row, a in zip(rows, runs)]


def summarise(rows: list[dict]) -> dict:
    """One strategy setting's detection (evasion.by_family over its runs), main and alternative rules."""
    fam = by_family(rows)[rows[0]["family"]]
    alts = {}
    for k in ALTERNATIVE_RULES:
        fam_k = by_family([{**r, "alerted": r["alternatives"][k]["alerted"],
                            "time_to_alert_s": r["alternatives"][k]["time_to_alert_s"]} for r in rows])
        alts[k] = {"run_detection": fam_k[rows[0]["family"]]["run_detection"],
                   "median_time_to_alert_s": fam_k[rows[0]["family"]]["median_time_to_alert_s"]}
    return {"window_detection": fam["window_detection"], "run_detection": fam["run_detection"],
            "median_time_to_alert_s": fam["median_time_to_alert_s"], "alternative_alert_rules": alts,
            # the main rule as applied: RULE itself, or RULE capped at a trace too short for it
            "rules_applied": sorted({r.get("rule_applied", RULE.label()) for r in rows})}


def _mean(xs: list) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def benign_metrics(factory: Callable[[], Detector], benign: list[Run], extra: list[Run],
                   splits: list[tuple[set, set]], advance=None) -> dict:
    """Run accuracy and false-positive rates on the test sides of configuration-grouped splits;
    ``extra`` (this round's adversarial runs, repeated) joins every fitting side. Also the median time
    to alert of the held-out benign training runs (pooled over splits), how many distinct inference
    runs were held out, and each number against the detector targets (:data:`TARGETS`)."""
    per, ttas, inference_runs, rules_applied = [], [], set(), set()
    for train_c, test_c in splits:
        train = [r for r in benign if r.config in train_c] + extra
        test = [r for r in benign if r.config in test_c]
        given = fit_and_score(factory, train, test, RULE)
        # `trainsentry eval`'s adapted reading: k and n capped at a run's windows (rt-baseline's 30 s
        # windows are too few per benign run for 3 of 5); the alternatives are the rules as given
        outcomes = adapted_outcomes(given)
        m = run_metrics(outcomes)
        rules_applied |= {RULE.capped(o.n_windows).label() for o in given if o.n_windows}
        for k in ALTERNATIVE_RULES:
            alt = run_metrics([RunOutcome(o.run_id, o.cls, o.family, o.config, o.alternatives[k]["alerted"],
                                          o.alternatives[k]["time_to_alert_s"], np.zeros(0)) for o in outcomes])
            m[k] = {"run_accuracy": alt["run_accuracy"], "inference_fpr": alt["inference_fpr"]}
        per.append(m)
        ttas += [o.time_to_alert_s for o in outcomes if o.cls == "training" and o.time_to_alert_s is not None]
        inference_runs |= {o.run_id for o in outcomes if o.cls == "inference"}
        if advance:
            advance()
    out = {k: _mean([m[k] for m in per]) for k in
           ("run_accuracy", "inference_fpr", "other_fpr", "training_detection", "window_auc")}
    out["alternative_alert_rules"] = {k: {q: _mean([m[k][q] for m in per])
                                          for q in ("run_accuracy", "inference_fpr")} for k in ALTERNATIVE_RULES}
    out["median_time_to_alert_s"] = float(np.median(ttas)) if ttas else None
    out["splits"] = len(per)
    out["rules_applied"] = sorted(rules_applied)
    out["inference_runs_held_out"] = len(inference_runs)
    # with n distinct inference runs and none alerting, a 95 % upper bound on the FPR is 1 - 0.05^(1/n)
    out["inference_fpr_bound_at_zero_alerts"] = (1.0 - ZERO_ALERT_ALPHA ** (1.0 / len(inference_runs))
                                                 if inference_runs else None)
    out["targets"] = against_targets(out)
    return out


def against_targets(b: dict) -> dict:
    """Each target number of the detector issue: value, target, met (None when not measured)."""
    out = {k: {"value": b.get(k), "target": target_text(t), "met": t.met(b.get(k))} for k, t in TARGETS.items()}
    bound = b.get("inference_fpr_bound_at_zero_alerts")
    out["inference_fpr"]["resolvable"] = bool(bound is not None and bound <= TARGETS["inference_fpr"].value)
    return out


def target_text(t) -> str:
    """A target as results/redteam.json writes it: ">= 0.99"."""
    return f"{t.op} {t.value:g}"


def inference_runs_to_resolve() -> int:
    """How many distinct held-out inference runs, none alerting, put the zero-alert upper bound on the
    inference FPR at or below its target."""
    return math.ceil(math.log(ZERO_ALERT_ALPHA) / math.log(1.0 - TARGETS["inference_fpr"].value))


def costs(adv: list[AdvRun], baseline_dirs: list[Path]) -> dict[tuple[str, str], dict]:
    """Cost per (strategy, setting): medians over its runs of cost.compare's numbers, or null and why."""
    bases = []
    for d in baseline_dirs:
        try:
            m = _manifest(d)
            if m["labels"]["class"] == "training" and m.get("ground_truth") and run_cost(load_truth(d)):
                bases.append(d)
        except (ValueError, KeyError, FileNotFoundError):
            continue          # a run without steps or loss curve cannot be a baseline
    base_dir = {_manifest(d)["run_id"]: d for d in bases}
    per: dict[tuple[str, str], list[dict]] = {}
    for a in adv:
        try:
            row = score_costs([a.dir], bases)[0]
        except (ValueError, KeyError, FileNotFoundError) as e:
            row = {"error": f"no cost: {e}"}
        per.setdefault((a.strategy, a.setting), []).append(row)
    out = {}
    for key, rows in per.items():
        ok = [r for r in rows if "error" not in r]
        over = [r["baseline_tokens_per_gpu_hour"] / r["tokens_per_gpu_hour"] - 1.0
                for r in ok if r["tokens_per_gpu_hour"] > 0]
        med = lambda k: median_or_none([r.get(k) for r in ok], digits=None)  # noqa: E731
        notes = sorted({f"{r.get('workload') or key[1]}: {r['error']}"
                        + (f" ({r['baseline']})" if r.get("baseline") else "") for r in rows if "error" in r})
        c = {"gpu_hour_overhead": median_or_none(over, digits=None), "loss_penalty_equal_tokens": med("loss_penalty_equal_tokens"),
             "equal_tokens_at": med("equal_tokens_at"),
             "loss_penalty_equal_gpu_hours": med("loss_penalty_equal_gpu_hours"),
             "equal_gpu_hours_at": med("equal_gpu_hours_at"),
             "gpu_hour_multiplier_same_loss": med("gpu_hour_multiplier"),
             **{k: med(k) for k in ("gpu_hours", "tokens", "final_loss", "val_loss", "val_loss_tokens",
                                    "baseline_val_loss", "baseline_val_loss_tokens")},
             "baseline_runs": sorted({r["baseline_run"] for r in ok})}
        # (a penalty that could not be taken at all is the next note's, not a short baseline)
        if any(not r["compared_at_adversary_end"] and r["equal_tokens_at"] is not None for r in ok):
            notes.append("the baseline run is shorter than the adversary's: loss penalties are taken at the "
                         "baseline's last tokens (GPU-hours), not at the adversary's end")
        if ok and (c["loss_penalty_equal_tokens"] is None or c["loss_penalty_equal_gpu_hours"] is None):
            notes.append("a loss penalty is null: " + NO_COMMON_TRAINING)
        c["cost_note"] = "; ".join(notes) or None
        c["baseline_run_dir"] = str(base_dir[c["baseline_runs"][0]]) if c["baseline_runs"] else None
        out[key] = c
    return out


def effectiveness(run_detection: float | None, gpu_hour_overhead: float | None) -> float | None:
    """Share of runs undetected per GPU-hour relative to benign training (report/ranking.py's score)."""
    if run_detection is None or gpu_hour_overhead is None:
        return None
    return (1.0 - float(run_detection)) / (1.0 + max(float(gpu_hour_overhead), 0.0))


def rank_strategies(doc: dict) -> tuple[list[dict], list[dict]]:
    """Strategy settings of the last round ordered by effectiveness (computed here from the numbers),
    and those that cannot be ranked with the reason: no GPU-hour overhead (no baseline run, no cost
    data), no run detection, or no loss penalty at all (the loss curves give no common point: whether
    the strategy still trains is not known, so its evasion is not counted as a threat)."""
    last = doc["rounds"][-1]
    ranked, unranked = [], []
    for s in last["strategies"]:
        score = effectiveness(s["run_detection"], s["gpu_hour_overhead"])
        row = {"name": s["name"], "setting": s["setting"], "round": last["round"],
               "run_detection": s["run_detection"], "window_detection": s["window_detection"],
               "gpu_hour_overhead": s["gpu_hour_overhead"], "score": score,
               "loss_penalty_equal_tokens": s.get("loss_penalty_equal_tokens"),
               "loss_penalty_equal_gpu_hours": s.get("loss_penalty_equal_gpu_hours")}
        no_loss = row["loss_penalty_equal_tokens"] is None and row["loss_penalty_equal_gpu_hours"] is None
        if score is None or no_loss:
            why = (f"no GPU-hour overhead: {s.get('cost_note') or 'no cost'}" if s["gpu_hour_overhead"] is None
                   else "no run detection" if s["run_detection"] is None
                   else "no loss penalty: " + NO_COMMON_TRAINING)
            unranked.append({**row, "score": None, "why": why})
        else:
            ranked.append(row)
    ranked.sort(key=lambda r: (-r["score"], r["window_detection"] if r["window_detection"] is not None else 1.0,
                               r["name"], r["setting"]))
    return [{"rank": i + 1, **r} for i, r in enumerate(ranked)], unranked


def not_run_yet(doc: dict) -> list[dict]:
    """Campaign workloads with no recorded run (not run yet, or failed to record), each named with its
    issue strategy, and issue strategies the campaign plans no run for: neither ranked nor unranked,
    since nothing was measured. Empty without a campaign file (what is missing is then not known)."""
    cov = doc.get("campaign")
    if not cov:
        return []
    out = []
    for s in cov["issue_strategies"]:
        recorded = set(s["recorded"])
        for status, key in (("not run yet", "not_recorded_yet"), ("failed to record", "failed_to_record")):
            out += [{"issue_strategy": s["issue_strategy"], "title": s["title"], "workload": w, "status": status}
                    for w in s[key] if w not in recorded]
        if not s["planned"]:
            out.append({"issue_strategy": s["issue_strategy"], "title": s["title"], "workload": None,
                        "status": "no run planned in the campaign"})
    return out


def play_round(r: int, names: list[str], factories: dict, benign: list[Run], adv: list[AdvRun],
               splits: list[tuple[set, set]], cache_dir: Path, step) -> tuple[dict, dict, dict]:
    """One round for every detector in ``names``: per (strategy, setting) detection, what each
    strategy's detector was fitted on, and the benign metrics. Rounds 2+ leave out one issue strategy
    at a time (:func:`coverage.held_out_unit`): all its families, so a sibling setting is not seen."""
    units = sorted({a.unit for a in adv})
    detection, trained_on, bench = {}, {}, {}
    for name in names:
        fs = factories[name]().feature_set
        benign_train_w = _windows([b for b in benign if b.is_training], fs)
        fits = 1 if r == 1 else len(units)
        advance = step(f"round {r}, {name}: {fits} fit(s) + {len(splits)} benign splits", fits + len(splits))
        rows, trained_on[name] = [], {}
        if r == 1:
            rows = score_runs(fit(factories[name], benign), adv, cache_dir)
            trained_on[name] = {a.strategy: {"strategies": [], "adversarial_runs": 0, "repeat": {},
                                             "held_out": sorted({b.strategy for b in adv if b.unit == a.unit}),
                                             "held_out_unit": a.unit} for a in adv}
            advance()
            extra_all: list[Run] = []
        else:
            for u in units:                          # leave one strategy out
                mine = [a for a in adv if a.unit == u]
                others = [a for a in adv if a.unit != u]
                extra, repeat = hardened(others, r, benign_train_w, fs)
                held = sorted({a.strategy for a in mine})
                assert not set(held) & set(repeat), "a strategy would be fitted on its own runs"
                rows += score_runs(fit(factories[name], benign + extra), mine, cache_dir)
                for f in held:
                    trained_on[name][f] = {"strategies": sorted(repeat), "adversarial_runs": len(others),
                                           "repeat": repeat, "held_out": held, "held_out_unit": u}
                advance()
            extra_all = hardened(adv, r, benign_train_w, fs)[0]
        bench[name] = benign_metrics(factories[name], benign, extra_all, splits, advance)
        by_group: dict[tuple[str, str], list[dict]] = {}
        for row in rows:
            by_group.setdefault((row["family"], row["setting"]), []).append(row)
        detection[name] = {g: {**summarise(rs), "runs": len(rs)} for g, rs in by_group.items()}
    return detection, trained_on, bench


def run_notes(runs: list[AdvRun]) -> list[str]:
    """What a setting's runs did differently from what their name says (from the manifests)."""
    notes = set()
    for a in runs:
        extra = _manifest(a.dir).get("ground_truth", {}).get("extra") or {}
        params = next((e.get("strategy_params") for e in extra.values() if isinstance(e, dict)
                       and e.get("strategy_params")), None) or {}
        if params.get("gate") == "surrogate" and params.get("scorer") not in ("sklearn", "trees"):
            notes.add(f"{a.run.run_id}: no surrogate file was given, so the gate fell back to the "
                      f"{params.get('scorer')} scorer: a proxy-gated run, not a white-box surrogate run")
    return sorted(notes)


def strategy_entries(adv: list[AdvRun], detection: dict, trained_on: dict, cost: dict, primary: str,
                     flops: dict | None = None) -> list[dict]:
    """The round's rows: the primary detector's detection, every detector's beside it, the cost, the
    frozen FLOP estimator's error (headline estimator; the same in every round)."""
    flop_rows = {(f["name"], f["setting"]): f for f in (flops or {}).get("settings", []) if f["role"] == "strategy"}
    entries = []
    for g in sorted({(a.strategy, a.setting) for a in adv}):
        p = detection[primary][g]
        runs = [a for a in adv if (a.strategy, a.setting) == g]
        f = flop_rows.get(g, {})
        entries.append({"name": g[0], "setting": g[1], "workload": runs[0].run.workload,
                        "flop_error_pct": f.get("headline_pct_error"),
                        "flop_error_pct_segmented": f.get("headline_pct_error_segmented"),
                        "notes": run_notes(runs),
                        "window_detection": p["window_detection"], "run_detection": p["run_detection"],
                        "median_time_to_alert_s": p["median_time_to_alert_s"], **cost[g],
                        "effectiveness": effectiveness(p["run_detection"], cost[g]["gpu_hour_overhead"]),
                        "detector": primary, "alternative_alert_rules": p["alternative_alert_rules"],
                        "by_detector": {n: d[g] for n, d in detection.items()},
                        "trained_on": trained_on[primary][g[0]],
                        "runs": len(runs), "run_ids": [a.run.run_id for a in runs], "example_run_dir": str(runs[0].dir)})
    return entries


def run_rounds(benign_dirs: list[Path], adversarial_dirs: list[Path], n_rounds: int = 3,
               detectors: list[str] | None = None, primary: str = PRIMARY, n_splits: int = 20, seed: int = 0,
               rt_trees: int = 400, cache_dir: Path | None = None, command: str = "trainsentry redteam rounds",
               factories: dict[str, Callable[[], Detector]] | None = None, progress=None,
               campaign: list[Path] | Path | None = None, harden: list[str] | None = None,
               flops_model: Path | None = None, score_flops: bool = True, flops_results: Path | None = None) -> dict:
    """Every round's detection per strategy setting, its benign metrics, and the cost; the JSON document.
    ``progress(description, total)`` returns the callable that advances one task. ``harden``: the
    detectors the blue side hardens and re-scores in rounds 2 and later (default: all evaluated);
    ``campaign``: the campaign file(s) whose planned runs are reported as recorded or not; ``flops_results``:
    the FLOP evaluation's results (results/flops.json), whose best estimator is the FLOP headline."""
    if n_rounds < 1:
        raise InputError("--rounds must be at least 1")
    if factories is None:   # the four of `trainsentry eval`, or any named, variants included (as eval takes them)
        from ..detect.pipeline import resolve_detectors
        try:
            factories = resolve_detectors(detectors, rt_trees)
        except ValueError as e:
            raise InputError(str(e)) from None
    names = detectors or list(factories)
    unknown = set(names) - set(factories)
    if unknown:
        raise InputError(f"unknown detectors {sorted(unknown)}; choose from {list(factories)}")
    if primary not in names:
        raise InputError(f"the primary detector {primary!r} is not among those evaluated ({names})")
    hardened_names = [n for n in names if n in harden] if harden else names
    if harden and (set(harden) - set(names) or primary not in harden):
        raise InputError(f"--harden must name detectors that are evaluated ({names}) and include the primary "
                         f"detector {primary!r}")
    campaign = campaign_files(campaign)
    for c in campaign:
        if not c.is_file():
            raise InputError(f"{c}: no such campaign file")
    if campaign:   # every file must plan, and several must extend one plan (one name, one data directory)
        from ..lab.campaign import Campaign
        plan_names = {}
        for c in campaign:
            try:
                camp = Campaign.load(c)
                camp.expand()
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                raise InputError(f"{c}: not a campaign that plans: {e}") from None
            plan_names[str(c)] = camp.name
        if len(set(plan_names.values())) > 1:
            raise InputError(f"--campaign files extend one plan only when they share its name: {plan_names}")
    if cache_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            return run_rounds(benign_dirs, adversarial_dirs, n_rounds, names, primary, n_splits, seed, rt_trees,
                              Path(tmp), command, factories, progress, campaign, harden, flops_model, score_flops,
                              flops_results)
    with _one_thread():
        return _run_rounds(benign_dirs, adversarial_dirs, n_rounds, names, hardened_names, primary, n_splits, seed,
                           rt_trees, cache_dir, command, factories, progress, campaign, flops_model, score_flops,
                           flops_results)


@contextmanager
def _one_thread():
    """Fit with one native thread where the OpenMP runtime honours a run-time limit. Not a copy of
    :func:`trainsentry.threads.one_native_thread`, which the commands call first (environment, before
    numpy and scikit-learn load, the limit that held under load): this covers callers of
    :func:`run_rounds` that did not go through a command (tests, notebooks), where those libraries are
    already loaded and only a run-time limit can still apply."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:                 # scikit-learn depends on it; without it, run as is
        yield
        return
    with threadpool_limits(1):
        yield


def _run_rounds(benign_dirs, adversarial_dirs, n_rounds, names, hardened_names, primary, n_splits, seed, rt_trees,
                cache_dir, command, factories, progress, campaign, flops_model, score_flops, flops_results) -> dict:
    t0 = time.time()
    step = progress or (lambda desc, total: (lambda: None))
    benign_dirs, adversarial_dirs = [Path(d) for d in benign_dirs], [Path(d) for d in adversarial_dirs]
    n_dirs = sum(len(_runs_under(d)) for d in [*benign_dirs, *adversarial_dirs])
    data = discover(benign_dirs, adversarial_dirs, cache_dir, step("features (cached per run)", n_dirs))
    stages = {"features": round(time.time() - t0, 1)}
    benign, adv = data["benign"], data["adversarial"]
    splits = config_splits(benign, n_splits, seed)
    t1 = time.time()
    cost = costs(adv, data["cost_baselines"])
    stages["cost"] = round(time.time() - t1, 1)
    flops = None
    if score_flops:
        scored = [{"dir": a.dir, "name": a.strategy, "setting": a.setting, "role": "strategy"} for a in adv]
        scored += [{"dir": Path(d), "name": _manifest(Path(d))["labels"]["workload"], "setting": "-", "role": "control"}
                   for d in data["baselines_only"]]
        advance = step("FLOP estimators: calibrate on benign training runs, score red-team runs", 1)
        t1 = time.time()
        best = (json.loads(Path(flops_results).read_text()).get("best")
                if flops_results is not None and Path(flops_results).is_file() else None)
        flops = flop_scores(benign_dirs, scored, seed, flops_model, best)
        stages["flop_estimators"] = round(time.time() - t1, 1)
        advance()
    rounds = []
    for r in range(1, n_rounds + 1):
        dets = names if r == 1 else hardened_names
        t1 = time.time()
        detection, trained_on, bench = play_round(r, dets, factories, benign, adv, splits, cache_dir, step)
        stages[f"round_{r}"] = round(time.time() - t1, 1)
        rounds.append({"round": r, "hardening": hardening(r), "detectors": dets, "benign": bench,
                       "feature_version": FEATURE_VERSION,
                       "strategies": strategy_entries(adv, detection, trained_on, cost, primary, flops)})
    recorded_ids = {_manifest(Path(d))["run_id"] for d in [*data["baselines_only"]]} | {a.run.run_id for a in adv}
    coverage = campaign_coverage(campaign, adversarial_dirs, recorded_ids) if campaign else None
    doc = {"command": command, "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "data": {"benign_dirs": [str(d) for d in benign_dirs], "adversarial_dirs": [str(d) for d in adversarial_dirs],
                    "benign_runs": len(benign), "benign_configs": len({b.config for b in benign}),
                    "benign_runs_by_class": dict(Counter(b.cls for b in benign)),
                    "adversarial_runs": len(adv), "strategies": sorted({a.strategy for a in adv}),
                    "strategy_settings": len({(a.strategy, a.setting) for a in adv}),
                    "adversarial_runs_by_strategy": dict(sorted(Counter(a.strategy for a in adv).items())),
                    "cost_baselines_only": data["baselines_only"], "excluded": data["excluded"]},
           "campaign": coverage, "not_run": NOT_RUN, "flop_estimator": flops,
           "protocol": {"detectors": names, "hardened_detectors": hardened_names, "primary_detector": primary,
                        "alert_rule": {"threshold": RULE.threshold, "k": RULE.k, "n": RULE.n},
                        "alternative_alert_rules": {k: {"threshold": a.threshold, "k": a.k, "n": a.n}
                                                    for k, a in ALTERNATIVE_RULES.items()},
                        "benign_splits": len(splits), "grouping": "labels.config", "seed": seed, "rt_trees": rt_trees,
                        "strategy_label": "labels.family",
                        "scoring_rounds_2_plus": "leave one strategy out (an issue strategy's families together)",
                        "held_out_units": {a.strategy: a.unit for a in adv},
                        "feature_version": FEATURE_VERSION, "delivered_feature_version": DELIVERED_FEATURE_VERSION,
                        "round_1_as_delivered": FEATURE_VERSION == DELIVERED_FEATURE_VERSION,
                        "earlier_deliveries": earlier_deliveries(adversarial_dirs),
                        "detector_targets": {k: target_text(t) for k, t in TARGETS.items()},
                        "detector_targets_source": TARGETS_SOURCE,
                        "hardening": {str(r): hardening(r) for r in range(1, n_rounds + 1)},
                        "gpu_hour_overhead": "baseline tokens per GPU-hour / adversary's - 1 (GPU-hours per token "
                                             "against the DDP baseline it names; for a one-rank adversary, a "
                                             "single-GPU run of its model may stand for it)",
                        "loss_basis": LOSS_BASIS, "evader_adapts": False, "blue_side_changes": blue_side(),
                        "limits": limits(adv, campaign),
                        "effectiveness": EFFECTIVENESS},
           "rounds": rounds}
    doc["ranking"], doc["unranked"] = rank_strategies(doc)
    doc["not_run_yet"] = not_run_yet(doc)
    doc["elapsed_s"] = round(time.time() - t0, 1)
    doc["elapsed_s_by_stage"] = stages
    return doc


def json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.bool_):
        return bool(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")
