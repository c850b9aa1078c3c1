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
    rows, failed = "", []
    for name, e in est.items():
        seed = ctx.pub(SEED[name], "pctv") if name in SEED else "—"
        splits = (f"{ctx.num('flops', f'estimators/{name}/splits_failed', 'int')} of "
                  f"{ctx.num('flops', f'estimators/{name}/splits_attempted', 'int')}"
                  if "splits_failed" in e and "splits_attempted" in e else "—")
        rows += (f"<tr><td>{html.escape(name)}</td>"
                 f"<td>{ctx.num('flops', f'estimators/{name}/median_abs_pct_error', 'pctv')}</td>"
                 f"<td>{ctx.num('flops', f'estimators/{name}/p90_abs_pct_error', 'pctv')}</td><td>{splits}</td>"
                 f"<td>{seed}</td></tr>")
        if e.get("median_abs_pct_error") is None:
            why = "; ".join(ctx.num("flops", f"estimators/{name}/failures/{i}/reason")
                            for i, f in enumerate(e.get("failures") or []) if isinstance(f, dict) and f.get("reason"))
            failed.append(f"<b>{html.escape(name)}</b>" + (f" ({why})" if why else ""))
    scored = {k: v["median_abs_pct_error"] for k, v in est.items() if v.get("median_abs_pct_error") is not None}
    best = min(scored, key=scored.get) if scored else None
    lead = (f"<p>The most accurate was <b>{html.escape(best)}</b>, with a median absolute error of "
            f"{ctx.num('flops', f'estimators/{best}/median_abs_pct_error', 'pctv')}.</p>") if best else ""
    fails = (f"<p>A split an estimator cannot be calibrated on is a failure, and its predictions count as "
             f"unbounded errors; an error that falls among them is unbounded (n/a above). The median is unbounded "
             f"for {', '.join(failed)}.</p>") if failed else ""
    out = [intro, lead, "<table><tr><th>estimator</th><th>median abs. error (ours)</th><th>upper-decile abs. error (ours)</th>"
           f"<th>splits failed</th><th>median abs. error, {ctx.cite('seed')}</th></tr>{rows}</table>", fails,
           "<p class='note'>The seed study's figures are from two NVLink-connected "
           f"{ctx.term('V100')} GPUs and its own workloads; ours from {ctx.term('H200')} runs.</p>"]
    for name, cap in (("flops_est_vs_true.png", "Estimated against true FLOPs, held-out runs."),
                      ("flops_errors.png", "Error distribution per estimator."),
                      ("flops_tensor_rate.png", "FLOPs per tensor-busy GPU-second per run, against the tensor "
                                                "cores' peak.")):
        out.append(figs.embed(F.existing(ctx.results, name), name, html.escape(cap + f" (results/figures/{name})")))
    return "\n".join(out)
