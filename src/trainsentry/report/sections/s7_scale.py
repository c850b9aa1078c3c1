"""7. Distributed evasion at scale: the simulator's results and what each monitor layer would see."""

import html

from .. import figures as F

TITLE = "Distributed evasion at scale"
INPUTS = ("simulator",)


def render(ctx, figs) -> str:
    intro = (f"<p>Our experiments ran inside one node. To ask what an adversary could do across many nodes, we "
             f"reimplemented the efficiency and cost model of {ctx.cite('rahman-dist')}: low-communication "
             f"training over wide-area links, with compression, hierarchical and pipelined layouts, priced in "
             f"hardware and time. We check it against the paper's headline table, then ask, for each cheapest "
             f"configuration, which traffic each monitoring layer would see.</p>")
    if not ctx.has("simulator"):
        return intro + ctx.missing("simulator", "the simulator's results")
    rows = ""
    for i, h in enumerate(ctx.value("simulator", "headline")):
        rows += (f"<tr><td>{ctx.num('simulator', f'headline/{i}/target_c_local', 'sci')}</td>"
                 f"<td>{ctx.num('simulator', f'headline/{i}/published/node_type')}</td>"
                 f"<td>{ctx.num('simulator', f'headline/{i}/forward/n_nodes', 'int')}</td>"
                 f"<td>{ctx.num('simulator', f'headline/{i}/published/cost_usd', 'usd')}</td>"
                 f"<td>{ctx.num('simulator', f'headline/{i}/forward/cost_usd', 'usd')}</td>"
                 f"<td>{ctx.num('simulator', f'headline/{i}/max_relative_error', 'pct2')}</td></tr>")
    seen = ""
    for i, t in enumerate(ctx.value("simulator", "traffic_free")):
        p = f"traffic_free/{i}"
        seen += (f"<tr><td>{ctx.num('simulator', f'{p}/mode_label')}</td><td>{ctx.num('simulator', f'{p}/n_nodes', 'int')}</td>"
                 f"<td>{ctx.num('simulator', f'{p}/params', 'sci')}</td><td>{ctx.num('simulator', f'{p}/wan/pattern')}</td>"
                 f"<td>{ctx.num('simulator', f'{p}/wan/mean_bytes_per_s', 'bytes')}/s</td>"
                 f"<td>{html.escape(t['evasive_strategy'])}</td><td>{html.escape(', '.join(t['seen_by']))}</td></tr>")
    errs = [h["max_relative_error"] for h in ctx.value("simulator", "headline")]
    worst = max(range(len(errs)), key=errs.__getitem__)
    check = (f"<p>Over the {ctx.derived(len(errs), 'int', [('simulator', 'headline')])} rows of the headline table, "
             f"the largest relative error of our model against the published figures is "
             f"{ctx.num('simulator', f'headline/{worst}/max_relative_error', 'pct2')}.</p>") if errs else ""
    thr = (ctx.value("simulator", "traffic_free") or [{}])[0].get("thresholds") or {}
    thr_text = ""
    if {"interconnect_min_bytes_per_s_per_chip", "network_min_burst_bytes"} <= set(thr):
        thr_text = (f" A layer sees the traffic when it crosses the simulator's thresholds: at least "
                    f"{ctx.num('simulator', 'traffic_free/0/thresholds/interconnect_min_bytes_per_s_per_chip', 'bytes')}/s "
                    f"per chip on the in-node interconnect (NVLink), or wide-area bursts of at least "
                    f"{ctx.num('simulator', 'traffic_free/0/thresholds/network_min_burst_bytes', 'bytes')} on the "
                    f"network. These are the simulator's own settings, not thresholds fitted on our runs.")
    src = (ctx.load("detector") or {}).get("simulator_visibility_source") if ctx.has("detector") else None
    if src and src.get("not_exported"):
        thr_text += (f" (The evaluation did not hand the simulator a fitted threshold: "
                     f"{ctx.num('detector', 'simulator_visibility_source/not_exported')}.)")
    out = [intro, check, "<table><tr><th>target (FLOP)</th><th>node type</th><th>nodes</th><th>published cost</th>"
           f"<th>our model's cost</th><th>largest relative error</th></tr>{rows}</table>"
           "<p class='note'>Node type and nodes are the published configuration; our model recomputes its cost.</p>",
           "<div class='keep'><h3>What each layer would see</h3><p>For the cheapest configuration our own search found at "
           "each target (it can differ from the published one in the table above): how "
           "the nodes are arranged (Flat: every node synchronises with every other; Hier: regional groups, then their "
           "leaders; PP: pipeline stages across nodes), the wide-area traffic pattern, the in-node layout that keeps "
           "the least traffic on the interconnect, and the layers of our monitor that would still see it."
           f"{thr_text}</p>"
           "<table class='wide'><tr><th>layout</th><th>nodes</th><th>parameters</th><th>wide-area pattern</th>"
           f"<th>mean wide-area rate</th><th>in-node layout</th><th>seen by</th></tr>{seen}</table></div>"]
    out.append(F.existing_pair(figs, ctx.results, [
        ("simulator_cost_vs_target.png", "Cheapest capital cost of reaching a compute target "
                       "(C_local: the training compute, in FLOP, of an equivalent local run), our search against "
                       "the published table."),
                      ("simulator_cost_vs_bandwidth.png", "Cheapest cost of one compute target against the wide-area "
                       "bandwidth per direction.")]))
    name = "simulator_eta_breakdown.png"
    out.append(figs.embed(F.existing(ctx.results, name), name, html.escape(
        "Where efficiency is lost in each published configuration: the factors (sync interval, compression, "
        f"replicas, activations, overtraining) whose product is the overall efficiency (results/figures/{name}).")))
    return "\n".join(out)
