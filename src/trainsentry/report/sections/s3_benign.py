"""3. Benign validation: dataset, accuracy, false positives, time to alert, per family, beside the
reproduced Rahman & Tajdari classifier on the same splits (or, when results/detector.json does not
hold it, why it is missing and what would produce it)."""

import html
import statistics

from ...detect.alert import AlertRule
from .. import figures as F
from ..inputs import INPUTS as ALL_INPUTS
from ..published import PUBLISHED
from ...targets import DETECTOR as PRIMARY, LIVE_DETECTOR
from ..summary import detector_vs_targets, most_accurate_detector, primary_detector

TITLE = "Benign validation"
INPUTS = ("dataset", "detector")
COLUMNS = (("run_accuracy", "run accuracy", "pct"), ("training_detection", "training runs detected", "pct"),
           ("inference_fpr", "inference false-positive rate", "pct"), ("other_fpr", "other false-positive rate", "pct"),
           ("median_time_to_alert_s", "median time to alert (s)", "f0"), ("window_auc", "window AUC", "f3"),
           ("lofo_min_family_detection", "worst held-out training family", "pct"))


def _dataset(ctx) -> str:
    if not ctx.has("dataset"):
        return ctx.missing("dataset", "the benign dataset")
    rows = "".join(f"<tr><td>{html.escape(c)}</td><td>{ctx.num('dataset', f'by_class/{c}', 'int')}</td>"
                   f"<td>{ctx.num('dataset', f'configs_by_class/{c}', 'int')}</td>"
                   f"<td>{html.escape(', '.join(ctx.value('dataset', 'families_by_class').get(c, [])))}</td></tr>"
                   for c in sorted(ctx.value("dataset", "by_class")))
    return (f"<p>The dataset holds {ctx.num('dataset', 'runs', 'int')} recorded runs on {ctx.term('H200')} "
            f"nodes, labelled by what actually ran: training, inference, or other GPU work that is neither "
            f"(idle, matrix multiplications, memory copies, collective benchmarks). A configuration is one workload "
            f"with one set of parameters; repeats of a configuration are always on the same side of a split.</p>"
            f"<table><tr><th>class</th><th>runs</th><th>configurations</th><th>families</th></tr>{rows}</table>")


def _cell(ctx, name: str, key: str, fmt: str) -> str:
    if key not in ctx.value("detector", f"detectors/{name}"):
        return "—"
    return ctx.num("detector", f"detectors/{name}/{key}", fmt)


def _protocol(ctx) -> str:
    proto = ctx.load("detector").get("protocol") or {}
    if "splits" not in proto or "dataset" not in ctx.load("detector"):
        return ""
    frac = (f"{ctx.num('detector', 'protocol/train_fraction_of_configs', 'pct')} of each class's configurations"
            if "train_fraction_of_configs" in proto else "part of the configurations")
    return (f"<p><b>Protocol.</b> Every detector was fitted on {frac} and scored on the rest, over "
            f"{ctx.num('detector', 'protocol/splits', 'int')} random splits of the "
            f"{ctx.num('detector', 'dataset/runs', 'int')} runs ({ctx.num('detector', 'dataset/configs', 'int')} "
            f"configurations in {ctx.num('detector', 'dataset/families', 'int')} families{_roots(ctx)}); no "
            f"configuration is on both sides of a split. Run-level numbers are means over the splits' test sides, each holding "
            f"{_test_share(ctx, proto)} the configurations, so one run more or less correct moves a split's accuracy by several points. "
            f"Each family was also scored by a model fitted without any run of that family "
            f"(leave one family out; for inference and other families, correct means not alerted). Times to alert are in seconds from the true start of the workload.</p>")


def _roots(ctx) -> str:
    """Where the evaluation read several datasets: which, and that the table pools their test runs."""
    roots = str((ctx.load("detector").get("dataset") or {}).get("root") or "").split(" + ")
    if len(roots) < 2:
        return ""
    return (", from the datasets " + ", ".join(f"<code>{html.escape(r)}</code>" for r in roots)
            + "; the table pools every dataset's test runs, and each detector is fitted on every dataset's "
            "training side")


def _test_share(ctx, proto: dict) -> str:
    """The share of the configurations on the test side of a split, in words, from the protocol's training share."""
    if "train_fraction_of_configs" not in proto:
        return "part of"
    share = ctx.derived(1 - proto["train_fraction_of_configs"], "frac", [("detector", "protocol/train_fraction_of_configs")])
    return f"about {share} of"


def _targets(ctx) -> str:
    name = primary_detector(ctx)
    if not name:
        return ""
    if name == LIVE_DETECTOR:
        dets = ctx.value("detector", "detectors")
        head = (f"<p><b>Against the targets.</b> The project set its targets for the {ctx.term('fused')} detector on "
                f"the committed two-GPU {ctx.term('H200')} dataset. What the collector runs is {ctx.term('fused')} with "
                f"the single-device check as a second path (where the check speaks, the larger of the two "
                f"P(training)), evaluated as {html.escape(name)}: {detector_vs_targets(ctx, name)}."
                + (f" {ctx.term('fused')} alone: {detector_vs_targets(ctx, PRIMARY)}; its exchange gate holds it "
                   f"silent on training that exchanges nothing, such as a run on one GPU." if PRIMARY in dets else ""))
    else:
        head = (f"<p><b>Against the targets.</b> The project set targets for the {html.escape(name)} detector; on this "
                f"data it reaches {detector_vs_targets(ctx, name)}.")
    return (head
            + (f" These numbers are preliminary: they rest on {ctx.num('detector', 'dataset/runs', 'int')} runs, and "
               f"a detector fitted on about {ctx.num('detector', 'protocol/train_fraction_of_configs', 'frac')} of "
               f"their configurations has seen few examples of each family."
               if "dataset" in ctx.load("detector") and "train_fraction_of_configs" in (ctx.load("detector").get("protocol") or {})
               else "") + _unseen_family(ctx) + "</p>")


# benign families held out of every fit (optional inputs from scripts/unseen_family.py): input key, what the
# family is, its page
UNSEEN = (("unseen_diffusion", "image generation with a diffusion transformer (tens of identical dense forward "
           "passes per request, compute-bound as training is)", "docs/unseen-diffusion.md"),
          ("unseen_video", "video generation with the same transformer (full attention over every frame's patches, "
           "a sequence several times an image's)", "docs/unseen-video.md"))


def _unseen_family(ctx) -> str:
    """Benign families held out of every fit (optional inputs ``UNSEEN``: scripts/unseen_family.py), each
    detector's alerts on their runs; the first present is introduced, the others follow it."""
    out = []
    for k, what, page in UNSEEN:
        if not ctx.has(k):
            continue
        parts = [f"{html.escape(name)} alerted on {ctx.num(k, f'detectors/{name}/alerted', 'int')}"
                 for name in ctx.value(k, "detectors")]
        if not parts:
            continue
        head = (f" A benign family added after the detectors were designed, {what}, recorded on one GPU, where "
                f"fused's exchange gate stays closed and the single-device paths decide, was held out of every fit "
                f"(the same network's training runs stay in it)" if not out else
                f" So was a second one, {what}")
        out.append(f"{head}: fitted on the other {ctx.num(k, 'runs_fitted', 'int')} runs and judging its "
                   f"{ctx.num(k, 'runs_judged', 'int')}, {'; '.join(parts)} ({page}).")
    return "".join(out)


def _rt_missing(ctx) -> str:
    """Why the reproduced baseline has no row, from the results and the runs, and what produces it."""
    cmd = ctx.value("detector", "command") if "command" in ctx.load("detector") else None
    evaluated = ", ".join(ctx.term(n) if n in ("comm-rules", "comm-ml", "fused") else html.escape(n)
                          for n in ctx.value("detector", "detectors"))
    out = (f"<p><b>The reproduced Rahman &amp; Tajdari classifier is missing from this table.</b> "
           f"{ctx.term('rt-baseline')} is implemented, but <code>results/detector.json</code> was produced "
           + (f"by <code>{html.escape(cmd)}</code>, " if cmd else "")
           + f"which evaluated {evaluated} only. ")
    windows = (ctx.load("detector").get("dataset") or {}).get("windows") or {}
    lengths = [m["end"] - m["start"] for _, m in ctx.runs("traces")]
    if "rt" in windows and lengths:
        first = (PUBLISHED["rt.window_s"].value + (PUBLISHED["rt.alert_k"].value - 1) * PUBLISHED["rt.stride_s"].value)
        out += (f"On these runs it could not be compared fairly at run level anyway: it reads "
                f"{ctx.pub('rt.window_s', 'int', 's')} windows every {ctx.pub('rt.stride_s', 'int', 's')} "
                f"{ctx.cite('rt')}, so the {ctx.num('detector', 'dataset/runs', 'int')} runs give "
                f"{ctx.num('detector', 'dataset/windows/rt', 'int')} of its windows in all (our detectors: "
                f"{ctx.num('detector', 'dataset/windows/trainsentry', 'int')}), and its "
                f"{ctx.pub('rt.alert_k', 'int')}-of-{ctx.pub('rt.alert_n', 'int')} alert rule cannot fire before "
                f"{ctx.derived(first, 'int', ['published:rt.window_s', 'published:rt.stride_s', 'published:rt.alert_k'], 's')} "
                f"while the benign runs last a median of "
                f"{ctx.derived(statistics.median(lengths), 'f0', [('traces', 'end-start')], 's')}. ")
    shared = ctx.has("redteam") and "rt-baseline" in ((ctx.value("redteam", "rounds") or [{}])[0].get("benign") or {})
    out += (f"A full comparison needs longer runs and <code>{html.escape(ALL_INPUTS['detector'].command)}</code>, "
            f"which evaluates every detector on the same splits. "
            + ("Meanwhile, a like-for-like comparison on fewer splits follows below."
               if shared else "Until then the published row below is the only reference, and it is not on our data.")
            + "</p>")
    return out


SAME_SPLIT_COLUMNS = (("run_accuracy", "run accuracy"), ("training_detection", "training runs detected"),
                      ("inference_fpr", "inference false-positive rate"), ("other_fpr", "other false-positive rate"),
                      ("window_auc", "window AUC"))


def _same_splits(ctx) -> str:
    """All detectors, the reproduced baseline included, on the red team's shared benign splits (round 1 of
    results/redteam.json: every detector as delivered), when that file holds them."""
    if not ctx.has("redteam"):
        return ""
    rounds = ctx.value("redteam", "rounds")
    bench = (rounds[0].get("benign") or {}) if rounds else {}
    if "rt-baseline" not in bench:
        return ""
    alt = next((k for k in ("1of1@0.5",) if all(k in (v.get("alternative_alert_rules") or {}) for v in bench.values())),
               None)
    head = "".join(f"<th>{h}</th>" for _, h in SAME_SPLIT_COLUMNS)
    proto = ctx.load("redteam").get("protocol") or {}
    if alt and "threshold" in ((proto.get("alternative_alert_rules") or {}).get(alt) or {}):
        head += (f"<th>run accuracy, alert on one window with P(training) ≥ "
                 f"{ctx.num('redteam', f'protocol/alternative_alert_rules/{alt}/threshold', 'g2')}</th>")
    elif alt:
        head += "<th>run accuracy, alert on one window</th>"
    rows = ""
    for n, v in bench.items():
        p = f"rounds/0/benign/{n}"
        cells = "".join(f"<td>{ctx.num('redteam', f'{p}/{k}', 'f3' if k == 'window_auc' else 'pct') if k in v else '—'}</td>"
                        for k, _ in SAME_SPLIT_COLUMNS)
        if alt:
            cells += f"<td>{ctx.num('redteam', f'{p}/alternative_alert_rules/{alt}/run_accuracy', 'pct')}</td>"
        rows += f"<tr><td>{html.escape(n)}</td>{cells}</tr>"
    splits = [v["splits"] for v in bench.values() if v.get("splits") is not None]
    n_splits = ctx.spread(splits, "int", [("redteam", "rounds/0/benign")]) if splits else "several"
    rt = bench["rt-baseline"]
    note = ""
    main = AlertRule(**proto["alert_rule"]).label() if "alert_rule" in proto else None
    capped = [r for r in rt.get("rules_applied") or [] if r != main]
    if capped:
        note = (f" Its runs hold fewer of its {ctx.pub('rt.window_s', 'int', 's')} windows than its alert rule needs, so, as in the evaluation above, "
                f"its row applies the rule with k and n capped at each run's windows (all of them, on a run of "
                f"fewer windows than n): an adaptation, not the published rule.")
    elif rt.get("training_detection") == 0 and (rt.get("window_auc") or 0) > 0.5:
        note = (f" The reproduction separates windows well (window AUC "
                f"{ctx.num('redteam', 'rounds/0/benign/rt-baseline/window_auc', 'f3')}) but detects no training run "
                f"under its own alert rule, because the runs end before the rule can fire; alerting on any single "
                f"window instead (last column) shows what its windows are worth on runs this short.")
    return (f"<div class='keep'><h3>Side by side with the reproduced classifier, on shared splits</h3><p>The red team's first round "
            f"(detectors as delivered, before any hardening) fitted and scored "
            f"{ctx.derived(len(bench), 'int', [('redteam', 'rounds/0/benign')])} detectors, "
            f"{ctx.term('rt-baseline')} included, on the same {n_splits} configuration-grouped splits of the benign "
            f"runs. Far fewer splits than above, so each number is rough, but the comparison is like for like.{note}</p>"
            f"<table class='wide'><tr><th>detector</th>{head}</tr>{rows}</table></div>")


def _family_table(ctx, dets: dict) -> str:
    fams = F.families_in_order(dets)
    if not fams:
        return ""
    runs = (ctx.load("detector").get("dataset") or {}).get("runs_by_family") or {}
    head = "".join(f"<th>{html.escape(n)}: alerted / held out</th>" for n in dets)
    rows = ""
    for fam in fams:
        cls = F.family_class(dets, fam)
        cells = ""
        for n, d in dets.items():
            pf = (d.get("per_family") or {}).get(fam)
            lofo = (d.get("lofo") or {}).get(fam)
            a = ctx.num("detector", f"detectors/{n}/per_family/{fam}/alerted_frac", "pct") if pf else "—"
            b = ctx.num("detector", f"detectors/{n}/lofo/{fam}/correct_frac", "pct") if lofo else "—"
            cells += f"<td>{a} / {b}</td>"
        nruns = ctx.num("detector", f"dataset/runs_by_family/{fam}", "int") if fam in runs else "—"
        rows += f"<tr><td>{html.escape(fam)}</td><td>{html.escape(cls)}</td><td>{nruns}</td>{cells}</tr>"
    return ("<h3>Per family</h3><p>For each family: its runs in the dataset; then, per detector, the share of "
            "its test runs that alerted, pooled over every split in which they were on the test side (for "
            "training: detected; for inference and other: a false alarm), and the share of its runs classified "
            "correctly when the whole family was left out of fitting."
            + (f" With {ctx.spread(list(runs.values()), 'int', [('detector', 'dataset/runs_by_family')])} runs per "
               "family, each share rests on very few runs." if runs else "") + "</p>"
            f"<table class='wide'><tr><th>family</th><th>class</th><th>runs</th>{head}</tr>{rows}</table>")


def _worst_families(ctx, dets: dict) -> str:
    parts = []
    for n, d in dets.items():
        lofo = d.get("lofo") or {}
        train = {f: v["correct_frac"] for f, v in lofo.items() if v.get("class") == "training"}
        if not train:
            continue
        lo = min(train.values())
        worst = sorted(f for f, v in train.items() if v == lo)
        parts.append(f"{ctx.term(n) if n in ('comm-rules', 'comm-ml', 'fused') else html.escape(n)}: "
                     + ", ".join(html.escape(f) for f in worst)
                     + f" ({ctx.num('detector', f'detectors/{n}/lofo_min_family_detection', 'pct')} detected)")
    if not parts:
        return ""
    return ("<p>The last column is the weakest point: a training family none of whose runs were seen in fitting "
            "can go entirely undetected. Worst held-out training families: " + "; ".join(parts)
            + ". A new kind of training is exactly what an adversary would bring, so this column matters more than "
            "the mean accuracy.</p>")


def _detectors(ctx, figs) -> str:
    if not ctx.has("detector"):
        return ctx.missing("detector", "detector accuracy, false-positive rate and time to alert")
    dets = ctx.value("detector", "detectors")
    head = "".join(f"<th>{h}</th>" for _, h, _ in COLUMNS)
    body = ""
    for name in dets:
        cells = "".join(f"<td>{_cell(ctx, name, k, f)}</td>" for k, _, f in COLUMNS)
        body += f"<tr><td>{html.escape(name)}</td>{cells}</tr>"
    pub = (f"<tr class='pub'><td>published {ctx.cite('rt')}</td><td>{ctx.pub('rt.accuracy', 'pct')} (window "
           f"accuracy)</td><td>—</td><td>{ctx.pub('rt.fpr', 'pct')}</td><td>—</td>"
           f"<td>{ctx.pub('rt.tta_median_s', 'int')}</td><td>—</td><td>—</td></tr>")
    best = most_accurate_detector(ctx)
    has_rt = "rt-baseline" in dets
    out = [_protocol(ctx),
           f"<p>The most accurate by run was <b>{html.escape(best)}</b> at "
           f"{ctx.num('detector', f'detectors/{best}/run_accuracy', 'pct')}, with an inference false-positive rate of "
           f"{ctx.num('detector', f'detectors/{best}/inference_fpr', 'pct')}.</p>",
           _targets(ctx),
           "" if has_rt else _rt_missing(ctx),
           f"<table class='wide'><tr><th>detector</th>{head}</tr>{body}{pub}</table>",
           "<p class='note'>The published row is the paper's own corpus and protocol, not our splits"
           + (f"; the {ctx.term('rt-baseline')} row is our reproduction on our splits, which is the fair comparison."
              if has_rt else f"; it reports window accuracy, not run accuracy, on their corpus of "
                             f"{ctx.pub('rt.runs', 'int')} runs.") + "</p>",
           _worst_families(ctx, dets), _same_splits(ctx)]
    out.append(F.existing_pair(figs, ctx.results, [
        ("detector_roc.png", "Window-level ROC of every detector, test sides of all splits pooled: "
                                           "share of training windows detected against share of other windows "
                                           "flagged."),
                      ("detector_time_to_alert.png", "Time to alert of the training runs that alerted, per detector "
                                                     "(cumulative share; n: alerted test runs pooled over splits).")]))
    if any(d.get("per_family") for d in dets.values()):
        out.append(figs.embed(F.detector_families_figure(ctx.load("detector")), "detector_families",
                              "Share of each family's test runs that alerted, per detector, pooled over splits; "
                              "training families above the line (higher is better), inference and other below "
                              "(lower is better). From results/detector.json."))
    out.append(_family_table(ctx, dets))
    return "\n".join(x for x in out if x)


def render(ctx, figs) -> str:
    return _dataset(ctx) + _detectors(ctx, figs)
