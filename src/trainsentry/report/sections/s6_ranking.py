"""6. Which evasions were most effective: the computed ranking by evasion and cost."""

import html

from .. import figures as F
from ..ranking import rank

TITLE = "Which evasions worked best"
INPUTS = ("redteam",)


def render(ctx, figs) -> str:
    intro = ("<p>An evasion is worth something to the adversary only if it both hides the training and keeps it "
             "affordable. We rank each strategy, in the last round it was played, by the share of its runs the "
             "monitor missed divided by its GPU-hours relative to benign training.</p>")
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
                 f"<td>{ctx.num('redteam', f'{p}/run_detection', 'pct')}</td>"
                 f"<td>{ctx.num('redteam', f'{p}/gpu_hour_overhead', 'pct')}</td>"
                 f"<td>{ctx.derived(r['score'], 'f2', src)}</td></tr>")
    top = ranked[0]
    tp = top["_path"]
    setting = f" ({ctx.num('redteam', f'{tp}/setting')})" if top.get("setting") else ""
    why = (f"it left {ctx.num('redteam', f'{tp}/window_detection', 'pct')} of its windows flagged and paid a loss "
           f"penalty of {ctx.num('redteam', f'{tp}/loss_penalty_equal_gpu_hours', 'f3')} at equal GPU-hours "
           f"(the strategy's own subsection shows its telemetry)")
    return (intro + f"<table><tr><th>strategy</th><th>setting</th><th>runs detected</th><th>GPU-hour overhead</th><th>score</th></tr>"
            f"{rows}</table><p>The most effective was <b>{html.escape(top['name'])}</b>{setting}: {why}.</p>"
            + figs.embed(F.evasion_cost_figure(ranked), "evasion_cost",
                         "Share of runs undetected against GPU-hour overhead, last round per strategy."))
