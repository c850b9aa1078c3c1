"""5. Each red-team experiment: what it does, telemetry beside its benign counterpart, detection by
round, cost to the adversary.

What was recorded comes from the red-team runs' manifests (data/redteam-r1); how the rounds were
played, what they detected and what each strategy cost from results/redteam.json, including the
hardening of each round as that file states it. Nothing here says how the rounds went unless the
results say so.
"""

import html
from pathlib import Path

from .. import figures as F
from ...redteam.rounds import _setting  # the setting name the red team's results use
from ..inputs import INPUTS as ALL_INPUTS, input_path

TITLE = "Red-team experiments"
INPUTS = ("redteam", "traces", "redteam_traces")

# What each strategy family changes, in words (docs/redteam-strategies.md has the full table, with the
# settings). Its measured parameters are printed from the run manifests, never from here.
WHAT = {
    "diloco": "trains each replica alone for H inner steps, then averages the parameters in one all-reduce: "
              "rare, parameter-sized, symmetric bursts instead of one all-reduce per step",
    "split": "cuts one training run into parts with idle gaps between them",
    "throttle": "pauses after every step, or holds a low duty cycle, so utilisation and power dip",
    "kvdisguise": "exchanges gradients as one-way point-to-point bursts the size of a prefill-to-decode "
                  "KV-cache hand-off, with real decode steps between them and no collective operation",
    "powersgd": "compresses every gradient all-reduce to low-rank factors",
    "topk": "all-gathers only the largest gradient values every step, keeping the rest as residual",
    "accum": "accumulates gradients over several micro-batches and all-reduces once per accumulation: the same "
             "bytes per synchronisation, rarer",
    "cover": "adds decoy traffic shaped like tensor-parallel decoding, or pads a streamed synchronisation to a "
             "flat byte stream",
    "shape": "steers its duty cycle along a serving-like profile by inserting idle time after steps",
    "hostsync": "averages gradients through host memory or host sockets instead of NVLink",
    "pp": "trains with pipeline parallelism: activations one way, gradients the other",
    "online": "serves real inference batches and takes a training step every few batches",
    "whitebox": "trains only while a copy of the monitor says the recent telemetry looks benign, and decodes "
                "otherwise",
    "flops": "changes the model's shape or batch to mislead the FLOP estimator",
}


def _extra(m: dict) -> dict:
    """Rank 0's extra ground truth (strategy, parameters, the baseline it names)."""
    extra = (m.get("ground_truth") or {}).get("extra") or {}
    return extra.get("0") or next(iter(extra.values()), {}) if isinstance(extra, dict) else {}


def recorded(ctx) -> tuple[dict[str, list[tuple[Path, dict]]], list[tuple[Path, dict]]]:
    """The recorded red-team runs: adversarial runs by strategy (labels.family), and the rest
    (benign baselines recorded beside them)."""
    adv: dict[str, list[tuple[Path, dict]]] = {}
    base = []
    for d, m in ctx.runs("redteam_traces"):
        if m["labels"]["workload"].startswith("adv."):
            adv.setdefault(m["labels"]["family"], []).append((d, m))
        else:
            base.append((d, m))
    return adv, base


def _durations(ctx, runs: list[tuple[Path, dict]]) -> str:
    """How long the runs ran their workload (manifest end - start)."""
    return ctx.spread([m["end"] - m["start"] for _, m in runs], "f0", [("redteam_traces", "end-start")], "s")


def _runs_table(ctx, adv: dict, base: list) -> str:
    rows = ""
    for fam, runs in sorted(adv.items()):
        for d, m in runs:
            rows += (f"<tr><td><code>{html.escape(m['run_id'])}</code></td><td>{html.escape(fam)}</td>"
                     f"<td><code>{html.escape(_extra(m).get('baseline') or '—')}</code></td>"
                     f"<td>{_durations(ctx, [(d, m)])}</td></tr>")
    for d, m in base:
        rows += (f"<tr><td><code>{html.escape(m['run_id'])}</code></td><td>benign baseline</td><td>—</td>"
                 f"<td>{_durations(ctx, [(d, m)])}</td></tr>")
    return ("<table><tr><th>run</th><th>strategy</th><th>benign baseline it names</th><th>workload time</th></tr>"
            f"{rows}</table>")


def _same_runs_every_round(rounds: list) -> bool:
    seen = [{(s["name"], s.get("setting")): sorted(s.get("run_ids") or []) for s in r["strategies"]} for r in rounds]
    return all(x == seen[0] for x in seen[1:]) and all(seen[0].values())


def _intro(ctx, adv: dict, base: list) -> str:
    out = ["<p>The red team trains real models on the same machines under strategies built to look like inference "
           "or idle. Each strategy is a workload that trains the same model as a benign data-parallel run, which it "
           "names as its baseline; detection is scored on the recorded runs, and cost against that baseline.</p>"]
    if adv:
        n_adv = sum(len(v) for v in adv.values())
        every = [r for v in adv.values() for r in v] + base
        root = input_path(ALL_INPUTS["redteam_traces"], ctx.results, ctx.data)
        out.append(f"<p>Recorded so far under <code>{html.escape(str(root))}</code>: "
                   f"{ctx.derived(n_adv, 'int', [('redteam_traces', 'labels/workload')])} adversarial runs of "
                   f"{ctx.derived(len(adv), 'int', [('redteam_traces', 'labels/family')])} strategies and "
                   f"{ctx.derived(len(base), 'int', [('redteam_traces', 'labels/workload')])} benign baseline "
                   f"run(s), each running its workload for {_durations(ctx, every)}.</p>"
                   + _runs_table(ctx, adv, base))
    if not ctx.has("redteam"):
        out.append("<p>How many rounds the detectors played against these runs, how each round hardened them, what "
                   "each strategy was detected at and what it cost are read from the red team's results:</p>"
                   + ctx.missing("redteam", "detection by round and cost per strategy"))
        return "\n".join(out)
    rounds = ctx.value("redteam", "rounds")
    items = "".join(f"<li>round {ctx.num('redteam', f'rounds/{i}/round', 'int')}: "
                    f"{ctx.num('redteam', f'rounds/{i}/hardening')}</li>"
                    for i, r in enumerate(rounds) if r.get("hardening"))
    text = (f"<p>The detectors then played {ctx.derived(len(rounds), 'int', [('redteam', 'rounds')])} round(s) against "
            f"the recorded runs, each hardening them as <code>{html.escape(str(ctx.results / 'redteam.json'))}</code> "
            f"records:</p><ul>{items}</ul>")
    proto = ctx.value("redteam", "protocol") if "protocol" in ctx.load("redteam") else {}
    text += "<p>"
    scoring = proto.get("scoring_rounds_2_plus")
    if len(rounds) > 1 and scoring:
        text += f"From the second round on, each strategy is scored {ctx.num('redteam', 'protocol/scoring_rounds_2_plus')}"
        text += (": the detector that scores a strategy was never fitted on that strategy's runs."
                 if scoring == "leave one strategy out" else ".")
    if len(rounds) > 1 and _same_runs_every_round(rounds):
        text += (" Every round scored the same recorded runs: the strategies did not adapt to the detectors between "
                 "rounds; only the detectors changed.")
    if proto.get("primary_detector"):
        text += f" Detection below is that of the {ctx.num('redteam', 'protocol/primary_detector')} detector."
    if proto.get("gpu_hour_overhead"):
        text += (f" Cost: the GPU-hour overhead is {ctx.num('redteam', 'protocol/gpu_hour_overhead')}; the loss "
                 f"penalties compare the adversary's loss with the baseline's at equal tokens and at equal GPU-hours.")
    out.append(text + "</p>")
    return "\n".join(out)


def _pair(ctx, runs: list[tuple[Path, dict]], entry: dict | None) -> tuple[Path, Path] | None:
    """One adversarial run and its benign counterpart: as results/redteam.json names them when it does,
    else the first recorded run and a recorded run of the baseline workload its manifest names."""
    if entry and entry.get("example_run_dir") and entry.get("baseline_run_dir"):
        a, b = Path(entry["example_run_dir"]), Path(entry["baseline_run_dir"])
        if (a / "manifest.json").is_file() and (b / "manifest.json").is_file():
            return a, b
    d, m = runs[0]
    want = _extra(m).get("baseline")
    for bd, bm in ctx.runs("redteam_traces") + ctx.runs("traces"):
        if want and bm["labels"]["workload"] == want:
            return d, bd
    return None


def _rows(ctx, rounds: list, name: str) -> tuple[str, dict | None]:
    rows, last = "", None
    for i, rnd in enumerate(rounds):
        for j, s in enumerate(rnd["strategies"]):
            if s["name"] != name:
                continue
            p = f"rounds/{i}/strategies/{j}"
            last = s
            rows += (f"<tr><td>{ctx.num('redteam', f'rounds/{i}/round', 'int')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/setting')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/window_detection', 'pct')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/run_detection', 'pct')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/median_time_to_alert_s', 'f0')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/gpu_hour_overhead', 'pct')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/loss_penalty_equal_tokens', 'f3')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/loss_penalty_equal_gpu_hours', 'f3')}</td></tr>")
    if not rows:
        return "", None
    return ("<table><tr><th>round</th><th>setting</th><th>windows detected</th><th>runs detected</th>"
            "<th>median time to alert (s)</th><th>GPU-hour overhead</th><th>loss penalty, equal tokens</th>"
            f"<th>loss penalty, equal GPU-hours</th></tr>{rows}</table>"), last


def _strategy(ctx, figs, name: str, runs: list, rounds: list | None) -> str:
    out = [f"<h3>{html.escape(name)}</h3>"]
    table, entry = _rows(ctx, rounds, name) if rounds else ("", None)
    what = (entry or {}).get("description") or WHAT.get(name)
    text = f"The strategy {html.escape(what)}." if what else ""
    if runs:
        settings = sorted({_setting(m["labels"]["workload"], name) for _, m in runs})
        text += (" Recorded setting(s): " + ", ".join(ctx.derived(x, "str", [("redteam_traces", "labels/workload")])
                                                      for x in settings) + ".")
    if text:
        out.append(f"<p>{text}</p>")
    if runs:
        pair = _pair(ctx, runs, entry)
        if pair:
            adv_dir, base_dir = pair
            out.append(figs.embed(F.telemetry_pair_figure(adv_dir, base_dir), f"telemetry_{name}",
                                  f"{html.escape(name)}: NVLink bytes and power of <code>{html.escape(adv_dir.name)}"
                                  f"</code> (left) beside its benign counterpart <code>{html.escape(base_dir.name)}"
                                  f"</code> (right), from the recorded traces."))
        else:
            want = _extra(runs[0][1]).get("baseline") or "its baseline"
            out.append(f"<p class='note'>No benign run of <code>{html.escape(want)}</code> is recorded, so its "
                       f"telemetry is not shown beside one.</p>")
    return f"<div class='keep'>{''.join(out)}</div>{table}"  # heading, text and figure on one page


def render(ctx, figs) -> str:
    adv, base = recorded(ctx)
    intro = _intro(ctx, adv, base)
    rounds = ctx.value("redteam", "rounds") if ctx.has("redteam") else None
    names = list(adv)
    for rnd in rounds or []:
        names += [s["name"] for s in rnd["strategies"] if s["name"] not in names]
    if rounds:  # embedded before the strategies' figures, so figures number in page order
        intro += figs.embed(F.detection_by_round_figure(ctx.load("redteam")), "detection_by_round",
                            "Share of each strategy's runs detected, by round (results/redteam.json).")
    body = [_strategy(ctx, figs, n, adv.get(n, []), rounds) for n in sorted(names)]
    return intro + "\n".join(body)
