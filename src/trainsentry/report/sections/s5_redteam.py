"""5. Each red-team experiment: what it does, telemetry beside its benign counterpart, detection by
round, cost to the adversary."""

import html
from pathlib import Path

from .. import figures as F

TITLE = "Red-team experiments"
INPUTS = ("redteam", "traces")


def _telemetry(ctx, figs, s) -> str:
    # `trainsentry redteam rounds` names the run directories (adversarial runs live in their
    # campaign's directory, e.g. data/redteam-r1, beside the benign baselines they name)
    run, base = s.get("example_run_dir"), s.get("baseline_run_dir")
    if not (run and base):
        return ""
    adv_dir, base_dir = Path(run), Path(base)
    if not ((adv_dir / "manifest.json").is_file() and (base_dir / "manifest.json").is_file()):
        return ctx.missing("traces", f"telemetry of {adv_dir.name}")
    return figs.embed(F.telemetry_pair_figure(adv_dir, base_dir), f"telemetry_{s['name']}",
                      f"{html.escape(s['name'])}: NVLink bytes and power of one run (left) beside its benign "
                      f"counterpart (right), from the recorded traces.")


def render(ctx, figs) -> str:
    intro = ("<p>The red team trained real models on the same machines under strategies built to look like "
             "inference or idle, in rounds: after each round the monitor was refitted on what it had seen, and "
             "the next round's strategies were tuned against it. Detection is scored by a detector frozen before "
             "the round; cost is measured against benign data-parallel training of the same model: extra "
             "GPU-hours, and loss penalty at equal tokens and at equal GPU-hours.</p>")
    if not ctx.has("redteam"):
        return intro + ctx.missing("redteam", "detection by round and cost per strategy")
    rt = ctx.value("redteam", "rounds")
    out = [intro, figs.embed(F.detection_by_round_figure(ctx.load("redteam")), "detection_by_round",
                             "Share of each strategy's runs detected, by round (results/redteam.json).")]
    names = []
    for i, rnd in enumerate(rt):
        for j, s in enumerate(rnd["strategies"]):
            if s["name"] not in names:
                names.append(s["name"])
    for name in names:
        rows, desc, example = "", "", None
        for i, rnd in enumerate(rt):
            for j, s in enumerate(rnd["strategies"]):
                if s["name"] != name:
                    continue
                p = f"rounds/{i}/strategies/{j}"
                desc = s.get("description", desc)
                example = s if s.get("example_run_dir") else example
                rows += (f"<tr><td>{ctx.num('redteam', f'rounds/{i}/round', 'int')}</td>"
                         f"<td>{ctx.num('redteam', f'{p}/setting')}</td>"
                         f"<td>{ctx.num('redteam', f'{p}/window_detection', 'pct')}</td>"
                         f"<td>{ctx.num('redteam', f'{p}/run_detection', 'pct')}</td>"
                         f"<td>{ctx.num('redteam', f'{p}/median_time_to_alert_s', 'f0')}</td>"
                         f"<td>{ctx.num('redteam', f'{p}/gpu_hour_overhead', 'pct')}</td>"
                         f"<td>{ctx.num('redteam', f'{p}/loss_penalty_equal_tokens', 'f3')}</td>"
                         f"<td>{ctx.num('redteam', f'{p}/loss_penalty_equal_gpu_hours', 'f3')}</td></tr>")
        out.append(f"<h3>{ctx.derived(name, 'str', [('redteam', 'rounds')])}</h3>")
        if desc:
            out.append(f"<p>{html.escape(desc)}</p>")
        out.append(_telemetry(ctx, figs, example) if example else "")
        out.append("<table><tr><th>round</th><th>setting</th><th>windows detected</th><th>runs detected</th>"
                   "<th>median time to alert (s)</th><th>GPU-hour overhead</th><th>loss penalty, equal tokens</th>"
                   f"<th>loss penalty, equal GPU-hours</th></tr>{rows}</table>")
    return "\n".join(out)
