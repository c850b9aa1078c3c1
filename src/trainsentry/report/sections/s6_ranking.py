"""6. Which evasions were most effective: the computed ranking by evasion and cost, and why the top
ones worked, from what their recorded telemetry shows beside their benign counterparts."""

import html

from .. import figures as F
from ..ranking import rank
from ..summary import sec
from .s5_redteam import data_source, run_dir

TITLE = "Which evasions worked best"
CHEAP = 0.10  # issue 6: "an evasion that costs 10 % more GPU-hours is" a threat; one that wrecks training is not
INPUTS = ("redteam",)


def _label(ctx, r: dict) -> str:
    return html.escape(r["name"]) + (f" {ctx.num('redteam', r['_path'] + '/setting')}" if r.get("setting") else "")


def _why(ctx, r: dict) -> str:
    """Why one evading setting was not caught, and what it paid: its telemetry means against its counterpart's,
    the detectors that missed it, and its cost."""
    p = r["_path"]
    out = []
    if r.get("example_run_dir") and r.get("baseline_run_dir"):
        a, b = run_dir(ctx, r["example_run_dir"]), run_dir(ctx, r["baseline_run_dir"])
        if (a / "samples.parquet").is_file() and (b / "samples.parquet").is_file():
            la, lb = F.mean_levels(a), F.mean_levels(b)
            nv = "mean per GPU of nvlink_tx_Bps+nvlink_rx_Bps over the workload"
            pw = "mean per GPU of power_mw over the workload"
            out.append(f"Its GPUs moved {ctx.derived(la['nvlink_Bps'], 'bytes', [data_source(ctx, a, nv)])}/s over "
                       f"NVLink on average, against {ctx.derived(lb['nvlink_Bps'], 'bytes', [data_source(ctx, b, nv)])}/s "
                       f"for its DDP counterpart, and drew {ctx.derived(la['power_W'], 'f0', [data_source(ctx, a, pw)], 'W')} "
                       f"against {ctx.derived(lb['power_W'], 'f0', [data_source(ctx, b, pw)], 'W')} per GPU: "
                       + ("with no gradient exchange on NVLink and little power, the window features the detectors "
                          "rely on look like an idle or lightly loaded node."
                          if la["nvlink_Bps"] < 0.01 * max(lb["nvlink_Bps"], 1.0) and la["power_W"] < 0.5 * lb["power_W"]
                          else "almost no gradient exchange on NVLink while the GPUs stay as busy as in training: the "
                               "detectors read training from the exchange, and there is too little of it to see."
                          if la["nvlink_Bps"] < 0.01 * max(lb["nvlink_Bps"], 1.0) else
                          "its synchronisation traffic differs from the per-step exchange the detectors learned."))
    first = next(((i, j) for i, rnd in enumerate(ctx.value("redteam", "rounds"))
                  for j, s in enumerate(rnd["strategies"])
                  if s["name"] == r["name"] and s.get("setting") == r.get("setting")), None)
    if first:
        i, j = first
        dets = ctx.value("redteam", f"rounds/{i}/strategies/{j}").get("by_detector") or {}
        missed = [d for d, v in dets.items() if v.get("run_detection") == 0]
        if missed:
            out.append(f"In round {ctx.num('redteam', f'rounds/{i}/round', 'int')} no run of it was detected by "
                       + ", ".join(html.escape(d) for d in missed) + ".")
    cost = f"It paid for it: {ctx.derived(1 + r['gpu_hour_overhead'], 'x', [('redteam', f'{p}/gpu_hour_overhead')])} the GPU-hours per token of DDP training"
    if r.get("loss_penalty_equal_gpu_hours") is not None:
        cost += (f", and a training-loss penalty of {ctx.num('redteam', f'{p}/loss_penalty_equal_gpu_hours', 's3')} "
                 f"at equal GPU-hours")
    if r.get("gpu_hour_multiplier_same_loss") is not None:
        cost += (f"; reaching the counterpart's loss would take "
                 f"{ctx.num('redteam', f'{p}/gpu_hour_multiplier_same_loss', 'x')} its GPU-hours")
    cheap = r["gpu_hour_overhead"] <= CHEAP
    out.append(cost + (". At that cost it is a practical threat: the detectors must learn its signature."
                       if cheap else ". It hid training largely by doing much less of it per GPU-hour: an adversary "
                       "pays for this evasion in compute, which a regime that also bounds compute can count."))
    return " ".join(out)


def render(ctx, figs) -> str:
    intro = ("<p>An evasion is worth something to the adversary only if it both hides the training and keeps it "
             "affordable. We rank each strategy setting, in the last round it was played, by the share of its runs "
             "the monitor missed divided by its GPU-hours per token relative to DDP training (never less than one: "
             "being cheaper than DDP earns no bonus). A score of one would be an evasion never caught at no extra "
             "cost; zero means every run was caught.</p>")
    if not ctx.has("redteam"):
        return intro + ctx.missing("redteam", "the evasion ranking")
    ranked = rank(ctx.load("redteam"))
    if not ranked:
        return intro + "<p>No strategy in the results has both a detection rate and a cost.</p>"
    rows = ""
    for r in ranked:
        p = r["_path"]
        src = [("redteam", f"{p}/run_detection"), ("redteam", f"{p}/gpu_hour_overhead")]
        rows += (f"<tr><td>{html.escape(r['name'])}</td><td>{ctx.num('redteam', f'{p}/setting') if r.get('setting') else ''}</td>"
                 f"<td>{ctx.num('redteam', p.split('/strategies/')[0] + '/round', 'int')}</td>"
                 f"<td>{ctx.num('redteam', f'{p}/run_detection', 'pct')}</td>"
                 f"<td>{ctx.derived(1 + r['gpu_hour_overhead'], 'x', [('redteam', f'{p}/gpu_hour_overhead')])}</td>"
                 f"<td>{ctx.derived(r['score'], 'f2', src)}</td></tr>")
    table = ("<table><tr><th>strategy</th><th>setting</th><th>round</th><th>runs detected</th>"
             f"<th>GPU-hours per token (× DDP)</th><th>score</th></tr>{rows}</table>")
    evaded = [r for r in ranked if r["score"] > 0]
    if not evaded:
        text = ("<p>No strategy setting evaded: every run of every setting was detected in its last round, so all "
                "score zero and the order among them carries no information.</p>")
    else:
        text = ""
        for r in evaded:
            text += f"<p><b>Why {_label(ctx, r)} scored.</b> {_why(ctx, r)}</p>"
        caught = len(ranked) - len(evaded)
        if caught:
            text += (f"<p>The other {ctx.derived(caught, 'int', [('redteam', 'rounds')])} settings were detected in "
                     f"every run of their last round and score zero, whatever they cost; their subsections in "
                     f"{sec('s5_redteam')} show why their traffic still looked like training.</p>")
    return (intro + table + text
            + figs.embed(F.evasion_cost_figure(ranked), "evasion_cost",
                         "Share of runs undetected in the last round against GPU-hours per token relative to DDP "
                         "(log axis; dotted: the same cost as DDP), one point per strategy setting."))
