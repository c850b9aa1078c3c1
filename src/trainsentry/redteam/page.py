"""docs/redteam.md and its figures, written from results/redteam.json alone: the ranking is the one the
file stores (computed once, by :func:`trainsentry.redteam.rounds.rank_strategies`), the figures are
:mod:`trainsentry.redteam.figures` (the report draws the same)."""

from __future__ import annotations

import json
from pathlib import Path

from ..detect.alert import AlertRule
from .coverage import BEYOND_MARK
from .figures import write as write_figures
from .rounds import (EFFECTIVENESS, TARGETS, ZERO_ALERT_ALPHA, effectiveness, inference_runs_to_resolve, json_default,
                     not_run_yet)


def _f(x, pct: bool = False, digits: int = 1) -> str:
    if x is None:
        return "–"
    return f"{100 * x:.{digits}f} %" if pct else f"{x:.{digits}f}"


def _coverage(doc: dict) -> list[str]:
    """What the campaign planned, what is recorded, and what is not run at all."""
    cov = doc.get("campaign")
    lines = ["## What was recorded", ""]
    if cov is None:
        lines += ["No campaign file was given (`--campaign`): the tables cover the recorded runs only, and which "
                  "planned strategies are missing is not known here.", ""]
    else:
        files = cov.get("campaigns") or [cov["campaign"]]
        lines += [f"Campaign {' + '.join(f'`{c}`' for c in files)}: {cov['planned_runs']} planned runs, **{cov['recorded_runs']} recorded**, "
                  f"{cov['failed_runs']} failed to record, {cov['not_recorded_runs']} not recorded yet. Only recorded "
                  "runs are scored below: a strategy that is not recorded is neither an evasion nor a failure, it is "
                  "simply not measured yet.", "",
                  "| # | issue strategy | recorded (scored) | not recorded yet | failed to record |", "|---|---|---|---|---|"]
        for s in cov["issue_strategies"]:
            cell = lambda xs: ", ".join(f"`{x}`" for x in xs) or "–"  # noqa: E731
            lines.append(f"| {s['issue_strategy']} | {s['title']} | {cell(s['recorded'])} | "
                         f"{cell(s['not_recorded_yet'])} | {cell(s['failed_to_record'])} |")
        names = [b["workload"] for b in cov["baselines"]]
        # a workload run in several settings (its overrides) is named by run: the workload alone repeats
        label = lambda b: b.get("run_id") if names.count(b["workload"]) > 1 and b.get("run_id") else b["workload"]  # noqa: E731
        lines += ["", "Baseline runs of the campaign: " + ("; ".join(f"`{label(b)}` ({b['status']})"
                                                                 for b in cov["baselines"]) or "none planned") + "."]
        if cov["recorded_outside_campaign"]:
            lines += ["", "Recorded but not in the campaign: " + ", ".join(f"`{r}`" for r in cov["recorded_outside_campaign"])
                      + "."]
        lines.append("")
    for n in doc.get("not_run", []):
        lines.append(f"**Not run: {n['strategy']}** — {n['why']}.")
    return lines + [""]


def _flops(doc: dict) -> list[str]:
    f = doc.get("flop_estimator")
    lines = ["## The frozen FLOP estimator", ""]
    if f is None:
        return lines + ["Not scored in this run of the command.", ""]
    if "error" in f:
        return lines + [f"Not scored: {f['error']}.", ""]
    cal, head = f["calibrated_on"], f["headline"]
    lines += [f"Every estimator of `trainsentry.flops` calibrated on the {cal['runs']} benign training runs "
              f"({cal['configurations']} configurations) of {', '.join(f'`{d}`' for d in cal['dirs'])}, then frozen "
              "and applied to each red-team run. Error = estimate / ground truth − 1 (negative: compute "
              "under-reported). *True interval*: integrated over the run's manifest start → end; *segmented*: "
              "summed over the jobs the detector's segmentation finds overlapping the run (what a monitor that does "
              "not know the interval counts). A setting moves the estimator only when its error leaves the range "
              f"of the estimator's own held-out errors on benign configurations ({f.get('held_out_folds', '?')} folds of "
              "configurations, each predicted by a fit on the others).", "",
              "| estimator | benign held-out median \\|error\\| | benign held-out range | failed folds |",
              "|---|---|---|---|"]
    for n, b in f["benign_held_out"].items():
        failed = b.get("failed_folds", 0)
        med = (f"{_f(b['median_abs_pct_error'])} %" if b["median_abs_pct_error"] is not None
               else "unbounded (failed folds reach the median)")
        rng = (f"{_f(b['min_pct_error'])} % to {_f(b['max_pct_error'])} %" if b.get("min_pct_error") is not None
               else "–")
        why = "; ".join(f"{x['reason']} ({x['folds']})" for x in b.get("failures", []))
        folds = f"{failed} of {b.get('folds', '?')}" + (f": {why}" if failed else "")
        done = " (completed folds)" if failed and b.get("min_pct_error") is not None else ""
        lines.append(f"| `{n}`{' (headline)' if n == head else ''} | {med} | {rng}{done} | {folds} |")
    failed_any = {n: b for n, b in f["benign_held_out"].items() if b.get("failed_folds")}
    if failed_any:
        lines += ["", "Failed folds are counted, not skipped: an estimator that cannot be calibrated on a fold's "
                  "runs predicts nothing for them, and those runs count as unbounded errors in its median "
                  "(the rule of `trainsentry flops-eval`); its range covers the folds it completed."]
    for n, why in (f.get("not_calibrated") or {}).items():
        lines += ["", f"`{n}` could not be calibrated on all benign training runs and scores no red-team run: {why}."]
    names = f["estimators"]
    source = f.get("headline_source", "lowest held-out median |error|, failed folds counted as unbounded errors")
    lines += ["", (f"Headline estimator: `{head}` ({source})." if head else f"No headline estimator ({source}).")
              + " Errors per setting (median over "
              "its runs; control rows are benign runs recorded beside the strategies):", "",
              "| role | strategy | setting | runs | jobs found | headline, true interval | headline, segmented | "
              "outside benign range | " + " | ".join(f"`{n}`" for n in names) + " |",
              "|---|---|---|---|---|---|---|---|" + "---|" * len(names)]
    for r in f["settings"]:
        out = ("yes" if r.get("outside_benign_range") else "no") + (
            " (segmented: yes)" if r.get("outside_benign_range_segmented") and not r.get("outside_benign_range") else "")
        lines.append(f"| {r['role']} | {r['name']} | {r['setting']} | {r['runs']} | {_f(r['segmented_jobs'], digits=0)} | "
                     f"{_f(r.get('headline_pct_error'))} % | {_f(r.get('headline_pct_error_segmented'))} % | {out} | "
                     + " | ".join(f"{_f(r['pct_error'][n])} %" for n in names) + " |")
    for r in f.get("runs_not_scored") or []:
        lines += ["", f"Not scored by the FLOP estimators: `{r['run_id']}` ({r['name']} {r['setting']}): {r['error']}."]
    controls_out = [r for r in f["settings"] if r["role"] == "control" and r.get("outside_benign_range")]
    if controls_out:
        lines += ["", f"**Caution:** {len(controls_out)} benign control run(s) recorded beside the strategies "
                  f"({', '.join(r['name'] for r in controls_out)}) also fall outside the headline estimator's benign "
                  f"held-out range: with {f['calibrated_on']['runs']} calibration runs that range understates the "
                  "estimator's spread on new runs, so *outside* is a flag to look at, not a finding on its own."]
    return lines + ["", "The FLOP estimator is not hardened between rounds: these numbers hold for every round.", ""]


def _costs(doc: dict) -> list[str]:
    proto = doc["protocol"]
    lines = ["## Cost to the adversary", "",
             f"GPU-hour overhead = {proto['gpu_hour_overhead']}. Loss penalties: {proto['loss_basis']}. "
             "Training loss is the loss on each step's own batch (random windows of the training split), so it is "
             "not held-out text.", "",
             "| strategy | setting | GPU-hours | tokens (M) | baseline run | penalty at equal tokens | at tokens (M) | "
             "penalty at equal GPU-hours | at GPU-hours | validation loss (at M tokens) | baseline validation loss "
             "(at M tokens) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in doc["rounds"][-1]["strategies"]:
        m = lambda x: None if x is None else x / 1e6  # noqa: E731
        base = f"`{s['baseline_run_dir']}`" if s.get("baseline_run_dir") else "–"
        lines.append(f"| {s['name']} | {s['setting']} | {_f(s.get('gpu_hours'), digits=4)} | {_f(m(s.get('tokens')), digits=2)} | "
                     f"{base} | "
                     f"{_f(s['loss_penalty_equal_tokens'], digits=3)} | {_f(m(s.get('equal_tokens_at')), digits=2)} | "
                     f"{_f(s['loss_penalty_equal_gpu_hours'], digits=3)} | {_f(s.get('equal_gpu_hours_at'), digits=4)} | "
                     f"{_f(s.get('val_loss'), digits=3)} ({_f(m(s.get('val_loss_tokens')), digits=2)}) | "
                     f"{_f(s.get('baseline_val_loss'), digits=3)} ({_f(m(s.get('baseline_val_loss_tokens')), digits=2)}) |")
    notes = [(s["name"], s["setting"], s["cost_note"]) for s in doc["rounds"][-1]["strategies"] if s.get("cost_note")]
    if notes:
        lines += ["", "Cost notes:", ""] + [f"* {n} {st}: {why}" for n, st, why in notes]
    return lines + [""]


def _benign(rnd: dict, proto: dict, alt_names: list[str], capped: set[str] = frozenset()) -> list[str]:
    """The round's re-measured benign numbers against the detector targets."""
    tgt = proto.get("detector_targets") or {}
    mark = lambda t: "" if not t or t.get("met") is None else (" ✓" if t["met"] else " ✗")  # noqa: E731
    head = (f"run accuracy (target {tgt['run_accuracy']})" if "run_accuracy" in tgt else "run accuracy",
            f"inference FPR, runs (target {tgt['inference_fpr']})" if "inference_fpr" in tgt else "inference FPR (runs)",
            f"median time to alert, s (target {tgt['median_time_to_alert_s']})"
            if "median_time_to_alert_s" in tgt else "median time to alert, s")
    lines = ["", f"Benign runs, re-measured this round ({proto['benign_splits']} configuration-grouped splits, "
             "mean over test sides; median time to alert over the held-out training runs of every split)"
             + (f", against {proto['detector_targets_source']} (✓ met, ✗ not met)" if tgt else "") + ":", "",
             f"| detector | {head[0]} | {head[1]} | {head[2]} | other FPR (runs) | training detection | "
             + " | ".join(f"inference FPR {a}" for a in alt_names) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(alt_names)]
    for n, b in rnd["benign"].items():
        t = b.get("targets") or {}
        lines.append(f"| `{n}`{' †' if n in capped else ''} | {_f(b['run_accuracy'], True)}{mark(t.get('run_accuracy'))} | "
                     f"{_f(b['inference_fpr'], True)}{mark(t.get('inference_fpr'))} | "
                     f"{_f(b.get('median_time_to_alert_s'))}{mark(t.get('median_time_to_alert_s'))} | "
                     f"{_f(b['other_fpr'], True)} | {_f(b['training_detection'], True)} | " + " | ".join(
                         _f(b["alternative_alert_rules"][a]["inference_fpr"], True) for a in alt_names) + " |")
    bounds = {b["inference_runs_held_out"]: b["inference_fpr_bound_at_zero_alerts"] for b in rnd["benign"].values()
              if b.get("inference_fpr_bound_at_zero_alerts") is not None}
    fpr = TARGETS["inference_fpr"]
    for k, bound in bounds.items():
        if not fpr.met(bound):
            lines += ["", f"{k} distinct inference runs were held out: even with none alerting, a "
                      f"{100 * (1 - ZERO_ALERT_ALPHA):.0f} % upper bound on the inference FPR would be "
                      f"{100 * bound:.0f} %, so the {'≥' if fpr.at_least else '≤'} {fpr.value_text()} target cannot "
                      f"be shown on this data (that needs about {round(inference_runs_to_resolve(), -1):.0f} held-out "
                      "inference runs); a ✓ there is a point estimate."]
    return lines + [""]


def _capped_rules(rnd: dict, dets: list[str], main: str) -> dict[str, list[str]]:
    """Per detector, the capped rules its verdicts used this round (adversarial and benign runs), when
    any differs from the main rule: a trace too short for n of the detector's windows."""
    out = {}
    for n in dets:
        rules = {r for s in rnd["strategies"] for r in s["by_detector"].get(n, {}).get("rules_applied", [])}
        rules |= set((rnd.get("benign", {}).get(n) or {}).get("rules_applied", []))
        if rules - {main}:
            out[n] = sorted(rules)
    return out


def _not_run(doc: dict) -> list[str]:
    """Campaign entries without a recorded run, each named: not scored, so neither ranked nor unranked."""
    if doc.get("campaign") is None:
        lines = ["No campaign file was given: which planned strategies are not run yet is not known here."]
    else:
        missing = doc.get("not_run_yet")
        missing = not_run_yet(doc) if missing is None else missing
        lines = ["Not run yet, so not ranked (campaign entries without a recorded run: nothing was measured, "
                 "neither an evasion nor a catch):" if missing else "Every campaign entry has a recorded run.", ""]
        groups: dict[tuple, list] = {}
        for m in missing:
            groups.setdefault((m["issue_strategy"], m["title"], m["status"]), []).append(m["workload"])
        for (no, title, status), ws in groups.items():
            names = ", ".join(f"`{w}`" for w in ws if w)
            what = title if no == BEYOND_MARK else f"issue strategy {no} ({title})"
            lines.append(f"* {what}: {status}" + (f": {names}" if names else ""))
    lines += [""] + [f"* Not run at all: {n['strategy']}: {n['why']}." for n in doc.get("not_run", [])]
    return lines + [""]


def _results_file(doc: dict) -> str:
    return doc.get("results_file") or "results/redteam.json"   # written before the key existed: the default


def render(doc: dict) -> str:
    """docs/redteam.md from the results document, its stored ranking included."""
    d, proto = doc["data"], doc["protocol"]
    rule, primary = proto["alert_rule"], proto["primary_detector"]
    alt_names = list(proto["alternative_alert_rules"])
    lines = ["# Red-team rounds: evasion and its cost", "",
             f"*Generated by `{doc['command']}` on {doc['generated_at']} from `{_results_file(doc)}`; "
             "do not edit by hand.*", ""]
    lines += _coverage(doc)
    lines += ["## Data and scoring", "",
              f"Benign data {', '.join(f'`{x}`' for x in d['benign_dirs'])}: {d['benign_runs']} runs of "
              f"{d['benign_configs']} configurations ({d['benign_runs_by_class']}). Adversarial data "
              f"{', '.join(f'`{x}`' for x in d['adversarial_dirs'])}: {d['adversarial_runs']} runs of "
              f"{len(d['strategies'])} strategies in {d['strategy_settings']} settings "
              f"({d['adversarial_runs_by_strategy']}); {len(d['cost_baselines_only'])} benign runs recorded beside "
              "them serve as cost baselines (and FLOP controls) only.", "",
              f"Detection columns are the `{primary}` detector's. A run is detected when P(training) ≥ "
              f"{rule['threshold']} in {rule['k']} of {rule['n']} consecutive windows over its whole trace; window "
              "detection is the share of its in-run windows at or above the threshold; time to alert is from the "
              f"true start (manifest `start`). Columns {', '.join(f'`{a}`' for a in alt_names)} are run detection "
              "under the looser rules `trainsentry eval` reports.", ""]
    head = ("| strategy | setting | runs | windows detected | runs detected | " + " | ".join(alt_names)
            + " | median time to alert (s) | GPU-hour overhead | loss penalty, equal tokens | "
            "loss penalty, equal GPU-hours | FLOP error (headline) | effectiveness |")
    for rnd in doc["rounds"]:
        dets = rnd.get("detectors", proto["detectors"])
        fv = rnd.get("feature_version")
        lines += [f"## Round {rnd['round']}", "", f"Monitor: {rnd['hardening']}"
                  + (f"; window features version {fv}" if fv is not None else "") + "."]
        if rnd["round"] == 1 and proto.get("round_1_as_delivered") is False:
            lines += ["", f"**Round 1 is not the detector as delivered:** the detectors were delivered on window "
                      f"features version {proto['delivered_feature_version']}, this round ran on version {fv} (the "
                      "hardened features replace the delivered ones in the code). Score round 1 with the delivered "
                      "code for the as-delivered numbers."]
        if rnd["round"] == 1:
            for e in proto.get("earlier_deliveries", []):
                lines += ["", f"Earlier delivery: the detectors on window features version {e['feature_version']} "
                          f"(code {e['code']}); their rounds {', '.join(map(str, e['rounds']))} on these same recorded "
                          f"runs are in `{e['results']}` (docs/detector.md says what changed)."]
        lines += ["", head,
                  "|---|---|---|---|---|" + "---|" * len(alt_names) + "---|---|---|---|---|---|"]
        for s in rnd["strategies"]:
            alts = " | ".join(_f(s["alternative_alert_rules"][a]["run_detection"], True, 0) for a in alt_names)
            flop = s.get("flop_error_pct")
            lines.append(f"| {s['name']} | {s['setting']} | {s['runs']} | {_f(s['window_detection'], True)} | "
                         f"{_f(s['run_detection'], True, 0)} | {alts} | {_f(s['median_time_to_alert_s'])} | "
                         f"{_f(s['gpu_hour_overhead'], True)} | {_f(s['loss_penalty_equal_tokens'], digits=3)} | "
                         f"{_f(s['loss_penalty_equal_gpu_hours'], digits=3)} | "
                         f"{'–' if flop is None else f'{flop:+.1f} %'} | "
                         f"{_f(effectiveness(s['run_detection'], s['gpu_hour_overhead']), digits=2)} |")
        notes = [n for s in rnd["strategies"] for n in s.get("notes", [])]
        if notes:
            lines += [""] + [f"* Note: {n}" for n in notes]
        main = AlertRule(**rule).label()
        capped = _capped_rules(rnd, dets, main)
        lines += ["", f"Runs detected by every detector evaluated this round ({main}"
                  + (", capped where marked †" if capped else "") + "):", "",
                  "| strategy | setting | " + " | ".join(f"`{n}`{' †' if n in capped else ''}" for n in dets) + " |",
                  "|---|---|" + "---|" * len(dets)]
        for s in rnd["strategies"]:
            lines.append(f"| {s['name']} | {s['setting']} | " + " | ".join(
                _f(s["by_detector"][n]["run_detection"], True, 0) for n in dets) + " |")
        for n, rules in capped.items():
            lines += ["", f"† `{n}`: its windows are too few per run for {main} (traces shorter than {rule['n']} of "
                      f"its windows, adversarial or benign); as in `trainsentry eval`, k and n are capped at each "
                      f"run's windows ({', '.join(rules)}): an adaptation, not the published rule."]
        lines += _benign(rnd, proto, alt_names, set(capped))
    ranked, unranked = doc["ranking"], doc["unranked"]
    lines += ["## Ranking", "", f"Effectiveness = {EFFECTIVENESS}: the share of runs the monitor missed per GPU-hour "
              "relative to benign training. Computed from the table of the last round, over the recorded settings "
              "only; the loss penalties are shown beside it (an evasion that wrecks training is not a threat).", "",
              "| rank | strategy | setting | runs detected | windows detected | GPU-hour overhead | "
              "loss penalty, equal tokens | loss penalty, equal GPU-hours | effectiveness |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in ranked:
        lines.append(f"| {r['rank']} | {r['name']} | {r['setting']} | {_f(r['run_detection'], True, 0)} | "
                     f"{_f(r['window_detection'], True)} | {_f(r['gpu_hour_overhead'], True)} | "
                     f"{_f(r.get('loss_penalty_equal_tokens'), digits=3)} | "
                     f"{_f(r.get('loss_penalty_equal_gpu_hours'), digits=3)} | {_f(r['score'], digits=2)} |")
    if unranked:
        lines += ["", "Recorded but not ranked:", ""] + [f"* {r['name']} {r['setting']}: {r['why']}" for r in unranked]
    lines += [""] + _not_run(doc)
    lines += [""] + _flops(doc) + _costs(doc)
    lines += ["## Method", "",
              "* **Round 1** scores every adversarial run with each detector fitted on the benign runs only, "
              "through the detector factories and cached window features of `trainsentry eval`, frozen "
              "(`trainsentry.redteam.evasion.score_evasion`).",
              "* **Rounds 2 and later**: leave one strategy out. The detector that scores a strategy (`labels.family`) "
              "was fitted on the benign runs plus the adversarial runs of every other strategy of the issue: the "
              "families of one issue strategy (PowerSGD and top-k; cover traffic and shaping; pipeline and online "
              "learning) are left out together, so no sibling setting is seen either; what each was "
              f"fitted on is in `{_results_file(doc)}` (`trained_on`). Hardening per round: "
              + "; ".join(f"{k}: {v}" for k, v in proto["hardening"].items()) + ". Detectors hardened: "
              + ", ".join(f"`{n}`" for n in proto.get("hardened_detectors", proto["detectors"])) + ".",
              "* **Benign metrics** are re-measured every round on configuration-grouped splits of the benign runs "
              "(`trainsentry.detect.evaluate.config_splits`), the round's adversarial runs added to every fitting side.",
              "* **Cost** (`trainsentry.redteam.cost`): see *Cost to the adversary*. Medians over a setting's runs.",
              "", "## Limits of these rounds", ""]
    lines += [f"* What the blue side changes: {proto.get('blue_side_changes', '–')}."]
    lines += [f"* {x}" for x in proto.get("limits", [])]
    lines += ["", "Figures: " + ", ".join(f"`{p}`" for p in doc.get("figures", [])) + ".",
              "", "## Reproduce", "", "```", doc["command"], "```", ""]
    if doc.get("elapsed_s") is not None:
        stages = ", ".join(f"{k} {v:.0f} s" for k, v in (doc.get("elapsed_s_by_stage") or {}).items())
        lines += [f"It took {doc['elapsed_s']:.0f} s here ({stages}); the features stage reads each run's window "
                  "features from the feature cache and reads and windows the runs not in it first.", ""]
    return "\n".join(lines)


def write_outputs(doc: dict, out: Path, docs: Path | None, figures_dir: Path | None) -> dict:
    """results JSON, figures and the generated page (figures first: the JSON and page list them)."""
    doc["figures"] = [str(p) for p in write_figures(doc, figures_dir)] if figures_dir is not None else []
    doc["results_file"] = str(out)   # the page names the file it was written from
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, default=json_default) + "\n")
    if docs is not None:
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(render(doc))
    return doc
