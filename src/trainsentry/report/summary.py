"""The box at the top of the report: what was found, against which targets, on how much data, and
what is still preliminary. Every number goes through the context like the sections' numbers; every
"met" or "missed" is computed from the value and its target."""

from __future__ import annotations

import html

from .figures import flop_label
from ..targets import DETECTOR as PRIMARY, DETECTOR_DATASET, LIVE_DETECTOR, TARGETS, detector_targets, target_row


def sec(anchor: str) -> str:
    """A link to a section by its module name; the number is its place in SECTIONS, not a measurement."""
    from .sections import SECTIONS
    n = [s.__name__.rsplit(".", 1)[-1] for s in SECTIONS].index(anchor) + 1
    return f'<a href="#{anchor}">section <span class="secno">{n}</span></a>'


def verdict(met: bool | None) -> str:
    if met is None:
        return "not measured"
    return "<span class='met'>met</span>" if met else "<span class='missed'>missed</span>"


def target_clause(ctx, key: str, measured, fmt: str, unit: str = "") -> str:
    """"target ≥ 99 %: missed" for a target of trainsentry/targets.py."""
    t = TARGETS[key]
    return f"target {'≥' if t.at_least else '≤'} {ctx.target(key, fmt, unit)}: {verdict(t.met(measured))}"


def most_accurate_detector(ctx) -> str | None:
    """The detector of results/detector.json with the highest run accuracy (the first of equals)."""
    dets = ctx.value("detector", "detectors")
    return max(dets, key=lambda d: dets[d].get("run_accuracy") or 0) if dets else None


def primary_detector(ctx) -> str | None:
    """The detector judged against the targets: the live verdict's (``LIVE_DETECTOR``, fused with the
    single-device path, what the collector runs) when it was evaluated, else the one the targets are set
    for (fused), else the most accurate one."""
    if not ctx.has("detector"):
        return None
    dets = ctx.value("detector", "detectors")
    return next((n for n in (LIVE_DETECTOR, PRIMARY) if n in dets), None) or most_accurate_detector(ctx)


def target_path(ctx, name: str) -> str:
    """Where one detector's numbers against the targets are in results/detector.json: its row for the test
    runs of the dataset the targets are set on (``DETECTOR_DATASET``) when the evaluation read several
    datasets, else its row over every test run."""
    i = target_row(ctx.value("detector", f"detectors/{name}").get("per_dataset"))
    return f"detectors/{name}" if i is None else f"detectors/{name}/per_dataset/{i}"


def best_flop_estimator(ctx) -> str | None:
    """The FLOP estimator ``trainsentry flops-eval`` chose (results/flops.json ``best``: lowest median
    absolute error, failed splits counted as unbounded errors); None without FLOP results."""
    return ctx.value("flops", "best") if ctx.has("flops") else None


def meets_detector_targets(ctx, name: str) -> bool:
    """Whether one detector of results/detector.json meets every detector target (issue 4)."""
    d = ctx.value("detector", target_path(ctx, name))
    return all(t.met(d.get(k)) for k, t in detector_targets().items())


def detector_vs_targets(ctx, name: str) -> str:
    """The three issue-4 numbers of one detector, each with its target and whether it is met (on the
    target dataset's test runs where the evaluation read several datasets: ``target_path``)."""
    p = target_path(ctx, name)
    d = ctx.value("detector", p)
    where = (f"on the test runs of <code>{html.escape(DETECTOR_DATASET)}</code>: " if "/per_dataset/" in p else "")
    return (f"{where}run accuracy {ctx.num('detector', f'{p}/run_accuracy', 'pct')} "
            f"({target_clause(ctx, 'detector.run_accuracy', d.get('run_accuracy'), 'pct')}), "
            f"inference false-positive rate {ctx.num('detector', f'{p}/inference_fpr', 'pct')} "
            f"({target_clause(ctx, 'detector.inference_fpr', d.get('inference_fpr'), 'pct')}), "
            f"median time to alert {ctx.num('detector', f'{p}/median_time_to_alert_s', 'f0', 's')} "
            f"({target_clause(ctx, 'detector.median_time_to_alert_s', d.get('median_time_to_alert_s'), 'f0', 's')})")


def campaign_items(ctx) -> list[str]:
    from .sections.s9_limitations import campaign_progress, campaign_sources
    out = []
    for c in campaign_progress(ctx.configs, ctx.data):
        recorded = ctx.derived(c["recorded"], "int", ["data:" + c["name"] + "/*/manifest.json#run_id (planned runs)"])
        planned = ctx.derived(c["planned"], "int", campaign_sources(ctx, c))
        out.append(f"{recorded} of {planned} planned runs of <code>{html.escape(c['name'])}</code>")
    return out


def render(ctx) -> str:
    items = []
    camp = campaign_items(ctx)
    if camp:
        items.append("<li><b>Preliminary.</b> The GPU campaigns are not finished: this build rests on "
                     + "; ".join(camp) + ". Every rate below is an early estimate on that data and will change "
                     "as runs are added; the sections give each sample size.</li>")
    name = primary_detector(ctx)
    if name:
        doc = ctx.load("detector")
        size = (f"; mean over {ctx.num('detector', 'protocol/splits', 'int')} configuration-grouped splits of "
                f"{ctx.num('detector', 'dataset/runs', 'int')} runs"
                if "splits" in (doc.get("protocol") or {}) and "runs" in (doc.get("dataset") or {}) else "")
        live = (f" (the live verdict: {ctx.term('fused')} with the single-device check as a second path)"
                if name == LIVE_DETECTOR else "")
        alone = (f" {ctx.term('fused')} alone: {detector_vs_targets(ctx, PRIMARY)}."
                 if name != PRIMARY and PRIMARY in ctx.value("detector", "detectors") else "")
        items.append(f"<li><b>Detector.</b> {html.escape(name)}{live}: {detector_vs_targets(ctx, name)}{size}.{alone} "
                     + (f"The detector targets are not reached yet ({sec('s3_benign')})."
                        if not meets_detector_targets(ctx, name) else "The detector targets are reached on this data.")
                     + (f" The reproduced Rahman &amp; Tajdari classifier is not in this evaluation ({sec('s3_benign')} says why)."
                        if "rt-baseline" not in ctx.value("detector", "detectors") else "")
                     + "</li>")
    best = best_flop_estimator(ctx)
    if best:
        tgt = ctx.value("flops", "target_median_abs_pct_error") \
            if "target_median_abs_pct_error" in ctx.load("flops") else None
        clause = (f" (target ≤ {ctx.num('flops', 'target_median_abs_pct_error', 'pctv')}: "
                  f"{verdict(ctx.value('flops', f'estimators/{best}/median_abs_pct_error') <= tgt)})") \
            if tgt is not None else ""
        runs = (f", on {ctx.num('flops', 'protocol/runs', 'int')} training runs"
                if "runs" in (ctx.load("flops").get("protocol") or {}) else "")
        items.append(f"<li><b>FLOP estimation.</b> The best estimator, {html.escape(flop_label(best))}, had a "
                     f"median absolute error of {ctx.num('flops', f'estimators/{best}/median_abs_pct_error', 'pctv')}"
                     f"{clause}{runs} ({sec('s4_flops')}).</li>")
    if ctx.has("redteam"):
        from .ranking import rank
        doc = ctx.load("redteam")
        rows = rank(doc)
        evaded = [r for r in rows if r["run_detection"] < 1]
        n_rounds = len(doc["rounds"])
        text = (f"<li><b>Red team.</b> {ctx.derived(len(rows), 'int', [('redteam', 'rounds')])} strategy settings "
                f"scored over {ctx.derived(n_rounds, 'int', [('redteam', 'rounds')])} rounds")
        runs = {len(s.get("run_ids") or []) for r in doc["rounds"] for s in r["strategies"]}
        if runs == {1}:
            text += ", one recorded run each"
        text += ". "
        if not evaded:
            text += "Every setting was detected in its last round."
        for r in evaded:
            p = r["_path"]
            setting = f" ({ctx.num('redteam', f'{p}/setting')})" if r.get("setting") else ""
            text += (f"<b>{html.escape(r['name'])}</b>{setting} "
                     f"was detected in {ctx.num('redteam', f'{p}/run_detection', 'pct')} of its runs in its last "
                     f"round, at {ctx.derived(1 + r['gpu_hour_overhead'], 'x', [('redteam', f'{p}/gpu_hour_overhead')])} "
                     f"the GPU-hours per token of DDP training"
                     + (f" and a training-loss penalty of {ctx.num('redteam', f'{p}/loss_penalty_equal_gpu_hours', 's3')} "
                        f"at equal GPU-hours" if r.get("loss_penalty_equal_gpu_hours") is not None else "")
                     + ". ")
        others = len(rows) - len(evaded)
        if evaded and others:
            text += f"The other {ctx.derived(others, 'int', [('redteam', 'rounds')])} were detected in every run."
        items.append(text + f" ({sec('s5_redteam')}, {sec('s6_ranking')})</li>")
    if not items:
        return ""
    return ("<div class='summary'><b>Summary and status</b><ul>" + "".join(items) + "</ul></div>")
