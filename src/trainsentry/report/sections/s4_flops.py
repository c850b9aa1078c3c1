"""4. FLOP estimation: every estimator beside the seed study's published errors."""

import html

from .. import figures as F

TITLE = "FLOP estimation"
INPUTS = ("flops",)
SEED = {"three_input": "seed.three_input", "power_only": "seed.power_only", "mlp": "seed.mlp",
        "residual_mlp": "seed.mlp"}


def render(ctx, figs) -> str:
    intro = (f"<p>Beyond training or not, a verifier may want to know how much compute a job used. We "
             f"reproduced the estimators of the {ctx.cite('seed')} (energy above idle corrected for memory and "
             f"NVLink traffic, power alone, and small neural networks on log features) and added estimators that "
             f"use the tensor-pipe activity our agent records, all on the same grouped splits: "
             f"configurations used for calibration are never evaluated.</p>")
    if not ctx.has("flops"):
        return intro + ctx.missing("flops", "FLOP estimator errors")
    est = ctx.value("flops", "estimators")
    proto = ctx.load("flops").get("protocol") or {}
    if {"splits", "configurations", "runs", "cal_fraction"} <= set(proto):
        intro += (f"<p>The splits: {ctx.num('flops', 'protocol/splits', 'int')} random divisions of the "
                  f"{ctx.num('flops', 'protocol/configurations', 'int')} configurations "
                  f"({ctx.num('flops', 'protocol/runs', 'int')} runs), calibrating on "
                  f"{ctx.num('flops', 'protocol/cal_fraction', 'pct')} of them and evaluating on the rest.</p>")
    rows = ""
    for name in est:
        seed = ctx.pub(SEED[name], "pctv") if name in SEED else "—"
        rows += (f"<tr><td>{html.escape(name)}</td>"
                 f"<td>{ctx.num('flops', f'estimators/{name}/median_abs_pct_error', 'pctv')}</td>"
                 f"<td>{ctx.num('flops', f'estimators/{name}/p90_abs_pct_error', 'pctv')}</td><td>{seed}</td></tr>")
    scored = {k: v["median_abs_pct_error"] for k, v in est.items() if v.get("median_abs_pct_error") is not None}
    best = min(scored, key=scored.get) if scored else None
    lead = (f"<p>The most accurate was <b>{html.escape(best)}</b>, with a median absolute error of "
            f"{ctx.num('flops', f'estimators/{best}/median_abs_pct_error', 'pctv')}.</p>") if best else ""
    out = [intro, lead, "<table><tr><th>estimator</th><th>median abs. error (ours)</th><th>upper-decile abs. error (ours)</th>"
           f"<th>median abs. error, {ctx.cite('seed')}</th></tr>{rows}</table>",
           "<p class='note'>The seed study's figures are from two NVLink-connected "
           f"{ctx.term('V100')} GPUs and its own workloads; ours from {ctx.term('H200')} runs.</p>"]
    for name, cap in (("flops_est_vs_true.png", "Estimated against true FLOPs, held-out runs."),
                      ("flops_errors.png", "Error distribution per estimator.")):
        out.append(figs.embed(F.existing(ctx.results, name), name, html.escape(cap + f" (results/figures/{name})")))
    return "\n".join(out)
