"""8. Recommendations, each grounded in a result; where the result is not measured yet, the text says
which measurement decides it rather than assuming an outcome."""

from ..ranking import rank

TITLE = "Recommendations"
INPUTS = ("gpu_check", "detector", "redteam", "simulator")


def render(ctx, figs) -> str:
    c, t = ctx.cite, ctx.term
    items = []
    if ctx.has("gpu_check") and ctx.value("gpu_check", "within_1pct") and ctx.value("gpu_check", "send_direction_visible"):
        items.append(f"<li><b>Read interconnect counters, not only activity.</b> The NVLink counters matched "
                     f"the bytes handed to NCCL within {ctx.num('gpu_check', 'max_abs_rel_error', 'pctg')} and "
                     f"told the sending direction from the receiving one, so a regime can rely on them as a "
                     f"primary signal, which the activity-only classifier of {c('rt')} did not have.</li>")
    else:
        items.append("<li><b>Interconnect counters.</b> Whether they can be relied on depends on the counter "
                     "check. " + (ctx.missing("gpu_check") if not ctx.has("gpu_check") else
                                  "The check did not find them within a percent, or could not tell the sending "
                                  "direction; treat them as supporting evidence only.")
                     + "</li>")
    if ctx.has("detector"):
        dets = ctx.value("detector", "detectors")
        best = max(dets, key=lambda d: (dets[d].get("run_accuracy") or 0))
        rtb = dets.get("rt-baseline", {}).get("run_accuracy")
        better = rtb is not None and (dets[best].get("run_accuracy") or 0) > rtb
        items.append(f"<li><b>Deploy the {best} detector{' over an activity-only one' if better else ''}.</b> "
                     f"It reached {ctx.num('detector', f'detectors/{best}/run_accuracy', 'pct')} run accuracy at "
                     f"{ctx.num('detector', f'detectors/{best}/inference_fpr', 'pct')} inference false positives"
                     + (f", against {ctx.num('detector', 'detectors/rt-baseline/run_accuracy', 'pct')} for the "
                        f"reproduced baseline on the same splits" if rtb is not None else "") + ".</li>")
    else:
        items.append("<li><b>Which detector to deploy</b> is decided by the benign evaluation. "
                     + ctx.missing("detector") + "</li>")
    if ctx.has("redteam") and rank(ctx.load("redteam")):
        top = rank(ctx.load("redteam"))[0]
        items.append(f"<li><b>Close the cheapest hole first.</b> The highest-scoring evasion was "
                     f"<b>{top['name']}</b> ({ctx.num('redteam', top['_path'] + '/run_detection', 'pct')} of its "
                     f"runs detected in its last round); countermeasures should target its signature before "
                     f"strategies that cost the adversary more.</li>")
    else:
        items.append("<li><b>Which hole to close first</b> follows from the red-team ranking. "
                     + ctx.missing("redteam") + "</li>")
    if ctx.has("simulator"):
        rows = ctx.value("simulator", "traffic_free")
        net_only = [i for i, r in enumerate(rows) if r["seen_by"] == ["network"]]
        items.append(f"<li><b>Monitor the network as well as the node.</b> In "
                     f"{ctx.derived(len(net_only), 'int', [('simulator', 'traffic_free')])} of the "
                     f"{ctx.derived(len(rows), 'int', [('simulator', 'traffic_free')])} cheapest distributed "
                     f"configurations the simulator found, the most evasive in-node layout left only the "
                     f"wide-area traffic above our thresholds: a node-local monitor alone would miss them, so "
                     f"node verdicts should be joined with per-node network bytes across the fleet.</li>")
    else:
        items.append("<li><b>Fleet-level network monitoring</b> depends on the simulator. " + ctx.missing("simulator") + "</li>")
    items.append(f"<li><b>Protect the read path.</b> Our transport signs and chains every batch, but the "
                 f"counters themselves are read by software the operator controls. Attested monitor code, a "
                 f"tamper-resistant read path and wall-power metering, as {c('rt')} also recommend, are what "
                 f"makes the signals trustworthy; no detector can make up for forged inputs.</li>")
    items.append("<li><b>Several independent layers.</b> Judge NVLink, network, energy and "
                 f"{t('NVML')} activity together, so that an evasion has to shape all of them at once; the "
                 f"{c('seed')} drew the same conclusion for FLOP accounting.</li>")
    return "<ol class='recs'>" + "\n".join(items) + "</ol>"
