"""5. Each red-team experiment: what it does, telemetry beside its benign counterpart, detection by
round, cost to the adversary; and, when results/redteam-x1.json is there (an optional input), the
red team on a one-GPU node.

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
from ..ranking import last_round_rows
from ..summary import sec, verdict

TITLE = "Red-team experiments"
INPUTS = ("redteam", "traces", "redteam_traces")
ONE_GPU = "redteam_x1"   # optional (inputs.py): the subsection "On a one-GPU node" shows only when it is there
SINGLE = "fused+single-device"  # the single-device trees: a lead beside the live verdict, never the verdict

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


def plural(n: int, one: str, many: str | None = None) -> str:
    return one if n == 1 else (many or one + "s")


def _counterparts(ctx) -> dict[str, str]:
    """Run id of an adversarial run -> the benign run directory its cost and figure were set against, as
    results/redteam.json records it (last round that names one)."""
    out: dict[str, str] = {}
    if not ctx.has("redteam"):
        return out
    for rnd in ctx.value("redteam", "rounds"):
        for s in rnd["strategies"]:
            for rid in s.get("run_ids") or []:
                if s.get("baseline_run_dir"):
                    out[rid] = s["baseline_run_dir"]
    return out


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
    cp = _counterparts(ctx)
    rows = ""
    for fam, runs in sorted(adv.items()):
        for d, m in runs:
            named = _extra(m).get("baseline") or "—"
            used = cp.get(m["run_id"])
            against = (f"<code>{html.escape(used)}</code>" if used else
                       f"<code>{html.escape(named)}</code> (named; no recorded run used)")
            rows += (f"<tr><td><code>{html.escape(m['run_id'])}</code></td><td>{html.escape(fam)}</td>"
                     f"<td>{against}</td><td>{_durations(ctx, [(d, m)])}</td></tr>")
    used_dirs = {Path(v).name for v in cp.values()}
    for d, m in base:
        note = ("benign baseline" if m["run_id"] in used_dirs else
                "benign baseline, recorded for strategy settings not recorded yet")
        rows += (f"<tr><td><code>{html.escape(m['run_id'])}</code></td><td>{note}</td><td>—</td>"
                 f"<td>{_durations(ctx, [(d, m)])}</td></tr>")
    return ("<table class='wide'><tr><th>run</th><th>strategy</th><th>benign counterpart (cost and figure)</th>"
            f"<th>workload time</th></tr>{rows}</table>")


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
        camp = (ctx.load("redteam") or {}).get("campaign") or {} if ctx.has("redteam") else {}
        progress = (f" That is {ctx.num('redteam', 'campaign/recorded_runs', 'int')} of the "
                    f"{ctx.num('redteam', 'campaign/planned_runs', 'int')} runs the red-team campaign plans: most "
                    f"strategies and settings are not recorded yet, and each recorded setting has a single run, so "
                    f"every detection rate below is all or nothing of a single run. These are first results, not a "
                    f"measured evasion rate.") if {"recorded_runs", "planned_runs"} <= set(camp) else ""
        out.append(f"<p>Recorded so far under <code>{html.escape(str(root))}</code>: "
                   f"{ctx.derived(n_adv, 'int', [('redteam_traces', 'labels/workload')])} adversarial "
                   f"{plural(n_adv, 'run')} of {ctx.derived(len(adv), 'int', [('redteam_traces', 'labels/family')])} "
                   f"{plural(len(adv), 'strategy', 'strategies')} and "
                   f"{ctx.derived(len(base), 'int', [('redteam_traces', 'labels/workload')])} benign baseline "
                   f"{plural(len(base), 'run')}, each running its workload for {_durations(ctx, every)}.{progress} "
                   f"The benign counterpart of each run is a recorded data-parallel (DDP) run of the same model.</p>"
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
    text = (f"<p>The detectors then played {ctx.derived(len(rounds), 'int', [('redteam', 'rounds')])} "
            f"{plural(len(rounds), 'round')} against "
            f"the recorded runs, each hardening them as <code>{html.escape(str(ctx.results / 'redteam.json'))}</code> "
            f"records:</p><ul>{items}</ul>")
    proto = ctx.value("redteam", "protocol") if "protocol" in ctx.load("redteam") else {}
    text += "<p>"
    scoring = proto.get("scoring_rounds_2_plus")
    if len(rounds) > 1 and scoring:
        text += f"From the second round on, each strategy is scored {ctx.num('redteam', 'protocol/scoring_rounds_2_plus')}"
        text += (": the detector that scores a strategy was never fitted on that strategy's runs."
                 if scoring.startswith("leave one strategy out") else ".")
    if len(rounds) > 1 and _same_runs_every_round(rounds):
        text += (" Every round scored the same recorded runs: the strategies did not adapt to the detectors between "
                 "rounds; only the detectors changed.")
    if proto.get("primary_detector"):
        text += f" Detection below is that of the {ctx.num('redteam', 'protocol/primary_detector')} detector."
    if proto.get("gpu_hour_overhead"):
        text += (f" <b>Cost.</b> The GPU-hour overhead is {ctx.num('redteam', 'protocol/gpu_hour_overhead')}; the "
                 f"tables show it as GPU-hours per token relative to DDP (one plus the overhead: below one the strategy was "
                 f"cheaper per token than its DDP counterpart, two means twice the GPU-hours). The loss penalties are the "
                 f"adversary's training loss minus its counterpart's (cross-entropy; positive: the adversary learned "
                 f"less) at equal tokens and at equal GPU-hours.")
    out.append(text + "</p>")
    out.append(_benign_by_round(ctx, rounds, proto))
    return "\n".join(x for x in out if x)


def _benign_by_round(ctx, rounds: list, proto: dict) -> str:
    """The hardened detector's benign accuracy and false-positive rate, re-measured in every round, each
    met or missed as the red team judged it against the targets (results/redteam.json ``targets``)."""
    name = proto.get("primary_detector")
    if not name:
        return ""
    rows = ""
    for i, r in enumerate(rounds):
        b = (r.get("benign") or {}).get(name)
        if not b:
            continue
        p = f"rounds/{i}/benign/{name}"
        splits = ctx.num("redteam", f"{p}/splits", "int") if "splits" in b else "—"
        met = {k: v.get("met") for k, v in (b.get("targets") or {}).items()}
        cells = "".join(f"<td>{ctx.num('redteam', f'{p}/{k}', 'pct') if b.get(k) is not None else '—'} "
                        f"({verdict(met.get(k))})</td>" for k in ("run_accuracy", "inference_fpr"))
        rows += f"<tr><td>{ctx.num('redteam', f'rounds/{i}/round', 'int')}</td>{cells}<td>{splits}</td></tr>"
    if not rows:
        return ""
    return (f"<div class='keep'><p>Hardening must not cost benign accuracy. Each round re-measured the {html.escape(name)} detector "
            f"on the benign runs, on fewer splits than the evaluation of {sec('s3_benign')} (so its numbers are noisier), against "
            f"the targets of run accuracy ≥ {ctx.target('detector.run_accuracy', 'pct')} and inference "
            f"false-positive rate ≤ {ctx.target('detector.inference_fpr', 'pct')}:</p>"
            "<table><tr><th>round</th><th>benign run accuracy</th><th>inference false-positive rate</th>"
            f"<th>splits</th></tr>{rows}</table></div>")


def run_dir(ctx, p: str) -> Path:
    """A run directory as results/redteam.json writes it (relative to the repository, ``data/...``), found
    under this build's data root when the build runs elsewhere."""
    d = Path(p)
    if not (d / "manifest.json").is_file() and d.parts and d.parts[0] == "data":
        d = ctx.data.joinpath(*d.parts[1:])
    return d


def data_source(ctx, d: Path, what: str) -> str:
    """How a value computed from one run's samples names its source: ``data:<run under data>/samples.parquet#...``."""
    try:
        rel = d.resolve().relative_to(ctx.data.resolve())
    except ValueError:
        rel = Path(d.name)
    return f"data:{rel.as_posix()}/samples.parquet#{what}"


def _pair(ctx, runs: list[tuple[Path, dict]], entry: dict | None) -> tuple[Path, Path] | None:
    """One adversarial run and its benign counterpart: as results/redteam.json names them when it does,
    else the first recorded run and a recorded run of the baseline workload its manifest names."""
    if entry and entry.get("example_run_dir") and entry.get("baseline_run_dir"):
        a, b = run_dir(ctx, entry["example_run_dir"]), run_dir(ctx, entry["baseline_run_dir"])
        if (a / "manifest.json").is_file() and (b / "manifest.json").is_file():
            return a, b
    d, m = runs[0]
    want = _extra(m).get("baseline")
    for bd, bm in ctx.runs("redteam_traces") + ctx.runs("traces"):
        if want and bm["labels"]["workload"] == want:
            return d, bd
    return None


def _per_token(ctx, s: dict, p: str, key: str = "redteam") -> str:
    """GPU-hours per token relative to DDP (one plus the overhead) of one strategy entry at ``p``."""
    over = s.get("gpu_hour_overhead")
    return ctx.derived(1 + over, "x", [(key, f"{p}/gpu_hour_overhead")]) if over is not None else "n/a"


def _runs_detected(ctx, s: dict, p: str, key: str = "redteam") -> str:
    """"1 of 1": runs detected of the strategy entry at ``p``, or its share when it names no runs."""
    n = len(s.get("run_ids") or [])
    det = s.get("run_detection")
    if n and det is not None:
        return (f"{ctx.derived(round(det * n), 'int', [(key, f'{p}/run_detection'), (key, f'{p}/run_ids')])}"
                f" of {ctx.derived(n, 'int', [(key, f'{p}/run_ids')])}")
    return ctx.num(key, f"{p}/run_detection", "pct")


def _rows(ctx, rounds: list, name: str) -> tuple[str, dict | None]:
    rows, last, notes = "", None, []
    for i, rnd in enumerate(rounds):
        for j, s in enumerate(rnd["strategies"]):
            if s["name"] != name:
                continue
            p = f"rounds/{i}/strategies/{j}"
            last = s
            rows += (f"<tr><td>{ctx.num('redteam', f'rounds/{i}/round', 'int')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/setting')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/window_detection', 'pct')}</td>"
                     f"<td>{_runs_detected(ctx, s, p)}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/median_time_to_alert_s', 'f0')}</td>"
                     f"<td>{_per_token(ctx, s, p)}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/loss_penalty_equal_tokens', 's3')}</td>"
                     f"<td>{ctx.num('redteam', f'{p}/loss_penalty_equal_gpu_hours', 's3')}</td></tr>")
            if s.get("cost_note") and s["cost_note"] not in notes:
                notes.append(s["cost_note"])
    if not rows:
        return "", None
    foot = "".join(f"<p class='note'>Cost note from the results: {html.escape(n)}.</p>" for n in notes)
    return ("<table class='wide'><tr><th>round</th><th>setting</th><th>windows detected</th><th>runs detected</th>"
            "<th>median time to alert (s)</th><th>GPU-hours per token (× DDP)</th><th>loss penalty, equal tokens</th>"
            f"<th>loss penalty, equal GPU-hours</th></tr>{rows}</table>{foot}"), last


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
                                  f"{html.escape(name)}: NVLink bytes per second (sent plus received, per GPU) and "
                                  f"board power of <code>{html.escape(adv_dir.name)}</code> (left) beside its benign "
                                  f"counterpart <code>{html.escape(base_dir.name)}</code> (right), on the same axes, "
                                  f"from the recorded traces."))
        else:
            want = _extra(runs[0][1]).get("baseline") or "its baseline"
            out.append(f"<p class='note'>No benign run of <code>{html.escape(want)}</code> is recorded, so its "
                       f"telemetry is not shown beside one.</p>")
    return f"<div class='keep'>{''.join(out)}</div>{table}"  # heading, text and figure on one page


def _round1_by_detector(ctx, rounds: list) -> str:
    """Round 1 scored every detector as delivered: runs (windows) each one detected, per strategy setting."""
    if not rounds:
        return ""
    strat = rounds[0]["strategies"]
    dets: list[str] = []
    for st in strat:
        dets += [d for d in (st.get("by_detector") or {}) if d not in dets]
    if len(dets) < 2:
        return ""
    rows = ""
    for j, st in enumerate(strat):
        p = f"rounds/0/strategies/{j}"
        by = st.get("by_detector") or {}
        label = html.escape(st["name"]) + (f" {ctx.num('redteam', f'{p}/setting')}" if st.get("setting") else "")
        cells = ""
        for d in dets:
            v = by.get(d)
            if not v or v.get("run_detection") is None:
                cells += "<td>—</td>"
                continue
            w = (f" ({ctx.num('redteam', f'{p}/by_detector/{d}/window_detection', 'pct')})"
                 if v.get("window_detection") is not None else "")
            cells += f"<td>{ctx.num('redteam', f'{p}/by_detector/{d}/run_detection', 'pct')}{w}</td>"
        rows += f"<tr><td>{label}</td>{cells}</tr>"
    head = "".join(f"<th>{html.escape(d)}</th>" for d in dets)
    later = sorted({d for r in rounds[1:] for d in (r.get("detectors") or [])})
    then = (f" The later rounds scored only {ctx.derived(', '.join(later), 'str', [('redteam', 'rounds')])}."
            if later and len(later) < len(dets) else "")
    return ("<div class='keep'><p>In the first round every detector, as delivered, scored every strategy setting: share "
            f"of runs detected, with the share of windows judged training in brackets.{then}</p>"
            f"<table class='wide'><tr><th>strategy setting</th>{head}</tr>{rows}</table></div>")


def one_gpu_missed(ctx) -> list[dict]:
    """The strategy settings of results/redteam-x1.json that its primary detector missed in the last
    round each was played (last-round entries, each with its ``_path``); empty without that file."""
    if not ctx.has(ONE_GPU):
        return []
    return [r for r in last_round_rows(ctx.load(ONE_GPU))
            if r.get("run_detection") is not None and r["run_detection"] < 1]


def _one_gpu_node(ctx) -> str:
    """The red team on a one-GPU node (results/redteam-x1.json): per strategy setting, runs detected by
    the primary detector in round 1 and in the last round, and the cost; then what that detector is live."""
    if not ctx.has(ONE_GPU):
        return ""
    doc = ctx.load(ONE_GPU)
    rounds = doc.get("rounds") or []
    if not rounds:
        return ""
    k, last = ONE_GPU, len(rounds) - 1
    primary = (doc.get("protocol") or {}).get("primary_detector")
    first = {(s["name"], s.get("setting")): j for j, s in enumerate(rounds[0]["strategies"])}
    rows = ""
    for r in last_round_rows(doc):
        p = r["_path"]
        j = first.get((r["name"], r.get("setting")))
        r1 = _runs_detected(ctx, rounds[0]["strategies"][j], f"rounds/0/strategies/{j}", k) if j is not None else "—"
        label = ctx.num(k, f"{p}/setting") if r.get("setting") else "—"
        # none where the curves share no training (redteam.cost: a run that logged one loss)
        loss = ctx.num(k, f"{p}/loss_penalty_equal_gpu_hours", "s3") \
            if r.get("loss_penalty_equal_gpu_hours") is not None else "—"
        rows += (f"<tr><td>{html.escape(r['name'])}</td><td>{label}</td><td>{r1}</td>"
                 f"<td>{_runs_detected(ctx, r, p, k)}</td><td>{_per_token(ctx, r, p, k)}</td><td>{loss}</td></tr>")
    round_no = lambda i: ctx.num(k, f"rounds/{i}/round", "int")  # noqa: E731
    bases = sorted({r["baseline_run_dir"] for r in last_round_rows(doc) if r.get("baseline_run_dir")})
    note = ("<p class='note'>Costs and loss penalties are set against "
            + ", ".join(f"<code>{html.escape(b)}</code>" for b in bases)
            + (", the DDP run" if len(bases) == 1 else ", the DDP runs") + " the results name, per GPU-hour "
            "whatever its GPU count; — where the run logged too few losses to compare.</p>") if bases else ""
    table = ("<table class='wide'><tr><th>strategy</th><th>setting</th>"
             f"<th>runs detected, round {round_no(0)}</th><th>runs detected, round {round_no(last)}</th>"
             "<th>GPU-hours per token (× DDP)</th><th>loss penalty, equal GPU-hours</th></tr>"
             f"{rows}</table>{note}")
    scored = f" scored by the {html.escape(primary)} detector" if primary else ""
    text = (f"The red team also played {ctx.num(k, 'data/strategy_settings', 'int')} strategy settings of "
            f"{ctx.derived(len(doc['data']['strategies']), 'int', [(k, 'data/strategies')])} strategies on a node "
            f"with one GPU, where no gradient exchange crosses an interconnect "
            f"(<code>{html.escape(str(ctx.results / 'redteam-x1.json'))}</code>), over "
            f"{ctx.derived(len(rounds), 'int', [(k, 'rounds')])} {plural(len(rounds), 'round')}{scored}"
            + (": fused, and where its exchange gate is closed, trees on the busiest GPU's activity (after the "
               "first round also fitted on the other strategies' runs)." if primary == SINGLE else ".")
            + " ")
    missed = one_gpu_missed(ctx)
    if missed:
        each = [f"{html.escape(r['name'])} {ctx.num(k, r['_path'] + '/setting')} at "
                f"{_per_token(ctx, r, r['_path'], k)}" for r in missed]
        text += (f"In the last round the detector missed {ctx.derived(len(missed), 'int', [(k, 'rounds')])} of them: "
                 f"{', '.join(each[:-1]) + ' and ' + each[-1] if len(each) > 1 else each[0]} the GPU-hours per "
                 f"token of DDP. ")
        # a missed setting the red team could not rank (no loss penalty) is not shown to be an evasion that trains
        why = {(u["name"], u.get("setting")): u.get("why") for u in doc.get("unranked") or []}
        for r in missed:
            if why.get((r["name"], r.get("setting"))):
                text += (f"{html.escape(r['name'])} {ctx.num(k, r['_path'] + '/setting')} is not ranked "
                         f"({html.escape(why[(r['name'], r.get('setting'))])}): undetected, not shown to train. ")
    else:
        text += "It detected every setting in the last round. "
    if primary == SINGLE:
        text += ("Trees of this kind (the live ones also fitted on the red team's one-GPU trainers, docs/duty-cycle.md) "
                 "are the live verdict's single-device path: where the live check speaks (a GPU busy above its "
                 "floor, inside the trees' domain) and reads more training than fused, whose exchange gate stays "
                 "closed without traffic between devices, the verdict takes the check's P, so a setting they catch "
                 "raises the live alert as well (docs/collector.md).")
    return (f"<div class='keep'><h3>On a one-GPU node</h3><p>{text}{_leads(ctx)}{_hardened(ctx)}{_fp8_leads(ctx)}{_vision_leads(ctx)}{_decode_leads(ctx)}</p>"
            f"{_below_floor(ctx)}</div>{table}")


def _below_floor(ctx) -> str:
    """What the collector says about a GPU kept under the lead's busy floor: a bound on its work
    (results/below-floor.json, optional; docs/below-floor.md)."""
    if not ctx.has("below_floor"):
        return ""
    doc, k = ctx.load("below_floor"), "below_floor"
    ledgers = doc.get("ledgers") or []
    if not ledgers:
        return ""
    src, fp8, bf16 = [(k, "ledgers")], ctx.term("FP8"), ctx.term("bf16")
    burns = [q for q in doc.get("precision") or [] if q["precision"] == "fp8"]
    fp8_text = (f" It is taken at the {fp8} peak because the GPU's tensor-activity counter counts an {fp8} matmul's "
                f"busy cycles as a {bf16} one's: an {fp8} burn did up to "
                f"{ctx.derived(max(q['recorded_over_bf16_bound'] for q in burns), 'x', [(k, 'precision')])} "
                f"the work its activity holds at the {bf16} peak." if burns else "")
    # 2:4-sparse burns: what they executed against the bound of their own precision (an FP8 one's is twice
    # the BF16 one), and the dense count they stand for
    from ...flops.features import FP8_OVER_BF16
    own = [q["executed_over_bf16_bound"] / (FP8_OVER_BF16 if q["precision"].startswith("fp8") else 1.0)
           for q in doc.get("precision") or [] if q["precision"].endswith("_sparse24")]
    if own:
        fp8_text += (f" A {ctx.term('2:4-sparse')} product keeps the tensor cores busy half as long for the dense product it stands "
                     f"for: what the sparse burns executed came to at most "
                     f"{ctx.derived(max(own), 'x', [(k, 'precision')])} of the bound of their precision (the bound is "
                     "tight at full clock, not loose), and counted as the dense product, twice that.")
    return (f"<p>Below its busy floor (the busiest GPU running kernels at most "
            f"{ctx.num(k, 'floor_pct', 'pctv')} of a window) the lead judges nothing, and a trainer throttled "
            f"that far is not found by it. The collector bounds such a window's work instead: its tensor-core "
            f"activity times the peak rate. On the {ctx.num(k, 'runs', 'int')} recorded runs no window below the "
            f"floor showed more than {ctx.num(k, 'max_tensor_pct_below_floor', 'pctv')} tensor activity, at which a GPU "
            f"kept there can compute at most {ctx.derived(doc['max_rate_flops_per_s'] / 1e12, 'int', [(k, 'max_rate_flops_per_s')])} "
            f"TFLOP/s counted at the {fp8} peak; at that rate {ctx.num(k, 'scale_flop', 'sci')} FLOP of training takes "
            f"{ctx.num(k, 'scale_gpu_years_at_max_rate', 'int')} GPU-years. Against the ledgers of "
            f"{ctx.derived(sum(d['runs'] for d in ledgers), 'int', src)} training runs the bound held: the work "
            f"their tensor cores did was at most {ctx.derived(max(d['work_over_bound_max'] for d in ledgers), 'x', src)} "
            f"of its {bf16} half.{fp8_text} A node kept under the floor thus shows a bounded amount of compute, "
            "summed per node and per job by the collector, rather than silence (docs/below-floor.md).</p>")


def _hardened(ctx) -> str:
    """The live lead hardened with the red team's trainers, on the runs recorded after it
    (results/leads-hardened.json, optional: its revision is the file's first)."""
    if not ctx.has("leads_hardened"):
        return ""
    doc, k = ctx.load("leads_hardened"), "leads_hardened"
    revs = doc.get("revisions") or []
    if not revs or not doc.get("runs"):
        return ""
    count = lambda cls, what: _lead_count(ctx, k, revs[0], cls, what)  # noqa: E731
    # the red team's trainers (adv.*) hide; the lab's single-GPU runs without gaps are their cost
    # baselines; any other lab training family (a diffusion transformer since the twenty-eighth session)
    # is benign training the lead never saw
    train = [r for r in doc["runs"] if r["class"] == "training"]
    hiding = [r for r in train if r["run_id"].startswith("adv.")]
    plain = [r for r in train if not r["run_id"].startswith("adv.") and r["family"] == "single-gpu"]
    other = [r for r in train if not r["run_id"].startswith("adv.") and r["family"] != "single-gpu"]
    other_kinds = ", ".join(html.escape(f) for f in sorted({r["family"] for r in other}))
    found = lambda rs: ctx.derived(sum(r["leads"][revs[0]]["alerted"] for r in rs), "int", [(k, "runs")])  # noqa: E731
    n = lambda rs: ctx.derived(len(rs), "int", [(k, "runs")])  # noqa: E731
    # the services since the lead's fit: gapped ones, and since the twenty-eighth session batched decode
    # and image generation too, so the families are named rather than assumed
    kinds = ", ".join(html.escape(f) for f in sorted({r["family"] for r in doc["runs"] if r["class"] == "inference"}))
    return (f" Hardened with the red team's throttled, offloaded, split and shaped trainers, the lead committed "
            f"at <code>{ctx.num(k, 'revisions/0')}</code> judged the "
            f"{ctx.derived(len(doc['runs']), 'int', [(k, 'runs')])} runs recorded after it: it alerted on "
            f"{count('inference', 'alerted')} of {count('inference', 'runs')} services ({kinds}) and found "
            f"{found(hiding)} of {n(hiding)} throttled trainers"
            + (f", {found(plain)} of {n(plain)} single-GPU training runs without gaps (their cost baselines)"
               if plain else "")
            + (f" and {found(other)} of {n(other)} runs of lab training it had never seen ({other_kinds})"
               if other else "") + ".")


def _lead_tally(ctx, k: str, cls: str, recipe: str | None = None) -> tuple[str, str, list[dict]]:
    """A prospective check's (input ``k``) runs of class ``cls`` (and ``recipe``): how many the
    single-device lead alerted on and how many there are, each traced to the check's runs, and the runs
    (``detect.docs.lead_tally``)."""
    from ...detect.docs import lead_tally
    found, n, runs = lead_tally(ctx.load(k), cls, recipe)
    return ctx.derived(found, "int", [(k, "per_run")]), ctx.derived(n, "int", [(k, "per_run")]), runs


def _rev(ctx, k: str) -> str:
    """The revision of the lead a prospective check (input ``k``) read, traced."""
    return f"<code>{ctx.num(k, 'model/rev')}</code>"


def _fp8_leads(ctx) -> str:
    """Training in FP8 against the single-device lead: the lead fitted before any FP8 run, and the latest
    one refitted with them, each on the FP8 runs recorded after it (results/prospective-*-h200x1-fp8.json,
    optional inputs ``fp8_first`` and ``fp8_latest``)."""
    if not (ctx.has("fp8_first") and ctx.has("fp8_latest")):
        return ""
    fp8 = ctx.term("FP8")
    a, n, _ = _lead_tally(ctx, "fp8_first", "training", "dynamic")
    b, m, _ = _lead_tally(ctx, "fp8_first", "training", "bf16")
    c, p, _ = _lead_tally(ctx, "fp8_latest", "training", "delayed")
    d, q, served = _lead_tally(ctx, "fp8_latest", "inference")
    kinds = ", ".join(html.escape(f) for f in sorted({r["family"] for r in served}))
    rev = lambda k: _rev(ctx, k)  # noqa: E731
    return (f" Training in {fp8} on one GPU is a recipe any trainer may choose, not an engineered evasion "
            f"(<code>docs/fp8-training.md</code>). The lead committed at {rev('fp8_first')}, fitted before any "
            f"{fp8} run, found {a} of {n} trainers whose products ran in {fp8} with the quantisation in separate "
            f"kernels, and {b} of {m} of the same models trained in {ctx.term('bf16')}: those kernels make a "
            f"training GPU look memory-bound. Refitted round by round with the {fp8} runs, the lead committed at "
            f"{rev('fp8_latest')} found {c} of {p} trainers of the recipe production libraries run (scales from "
            f"recent maxima, each operand cast in one pass) recorded after it, and alerted on {d} of {q} services "
            f"served in {fp8} ({kinds}). These are prospective rounds of a few runs each (<code>docs/lab.md</code>): "
            "a lead, not a rate.")


def _vision_leads(ctx) -> str:
    """Convolutional networks against the single-device lead: the lead fitted before any of them, and the
    one refitted with the first two rounds, each on the runs recorded after it
    (results/prospective-*-h200x1-vision.json, optional inputs ``vision_first`` and ``vision_latest``)."""
    if not (ctx.has("vision_first") and ctx.has("vision_latest")):
        return ""
    a, n, _ = _lead_tally(ctx, "vision_first", "training")
    b, m, _ = _lead_tally(ctx, "vision_first", "inference")
    c, p, _ = _lead_tally(ctx, "vision_latest", "training")
    d, q, _ = _lead_tally(ctx, "vision_latest", "inference")
    rev = lambda k: _rev(ctx, k)  # noqa: E731
    return (" Nor is every trainer a transformer. A convolutional network trained on images on one GPU "
            "keeps its tensor cores and memory about as busy as the same network classifying images does "
            f"(<code>docs/lab.md</code>): the lead committed at {rev('vision_first')}, fitted before any such "
            f"network, found {a} of {n} convolutional trainers and alerted on {b} of {m} image-classification "
            f"services; refitted with the first two rounds of residual networks, the lead committed at "
            f"{rev('vision_latest')} found {c} of {p} trainers recorded after it (new networks, MobileNet and "
            f"VGG, and repeats of a residual one it had seen) and alerted on {d} of {q} services of the new "
            "networks. On one GPU, convolutional training is an open gap in what these counters show.")


def _decode_leads(ctx) -> str:
    """Language-model decoding against the single-device lead, where a held-out configuration of it was
    the lead's false positive on the 2-GPU node: the live lead on decode configurations no run had and
    on small-batch single-GPU trainers (results/prospective-*-h200x1-decode.json, optional input
    ``decode_first``), and the lead refitted round by round on the later rounds (``decode_second``,
    ``decode_third``, where they exist)."""
    if not ctx.has("decode_first"):
        return ""
    rev = lambda k: _rev(ctx, k)  # noqa: E731
    a, n, _ = _lead_tally(ctx, "decode_first", "training")
    b, m, _ = _lead_tally(ctx, "decode_first", "inference")
    text = (" Decoding is where a service comes nearest single-device training: held out of the fit, the "
            "largest model decoding for a few users drew some of the lead's false alerts on grouped splits "
            f"(<code>docs/lab.md</code>). On decode configurations no run had (from one user to hundreds, long "
            f"prompts, smaller models at very wide batches) the lead committed at {rev('decode_first')}, live when they "
            "were recorded, "
            f"alerted on {b} of {m}, and found {a} of {n} single-GPU trainers at small batches recorded with them")
    later = [k for k in ("decode_second", "decode_third") if ctx.has(k)]
    for i, k in enumerate(later):
        c, p, _ = _lead_tally(ctx, k, "training")
        d, q, served = _lead_tally(ctx, k, "inference")
        hit = sorted({r["family"] for r in served if r.get("single-device_alerted_capped_rule")})
        quiet = sorted({r["family"] for r in served} - set(hit))
        text += ("; refitted with them" if i == 0 else "; refitted again") + (
            f", the lead committed at {rev(k)} found {c} of {p} trainers recorded after it and alerted on {d} "
            f"of {q} services")
        if hit:
            text += (f" (alerted: {html.escape(', '.join(hit))}; quiet: {html.escape(', '.join(quiet)) or 'none'}"
                     + ("; input attribution runs a backward pass through frozen weights, as low-rank "
                        "fine-tuning does" if "attribute" in hit else "") + ")")
        elif quiet:
            text += f" ({html.escape(', '.join(quiet))})"
    return text + "."


def _lead_count(ctx, k: str, rev: str, cls: str, what: str) -> str:
    """One count of a compare_leads results file (``counts/<rev>/<class>/<runs|alerted>``), traced."""
    return ctx.num(k, f"counts/{rev}/{cls}/{what}", "int")


def _leads(ctx) -> str:
    """The committed single-device leads on the runs recorded after all of them (results/leads-s26.json):
    gapped services and throttled trainers, the duty cycle's two sides (docs/duty-cycle.md)."""
    if not ctx.has("leads"):
        return ""
    doc, k = ctx.load("leads"), "leads"
    revs = doc.get("revisions") or []
    if len(revs) < 2 or not doc.get("runs"):
        return ""
    count = lambda i, cls, what: _lead_count(ctx, k, revs[i], cls, what)  # noqa: E731
    rev = lambda i: f"<code>{ctx.num(k, f'revisions/{i}')}</code>"  # noqa: E731
    earlier = " and ".join(f"{rev(i)}'s {count(i, 'inference', 'alerted')}" for i in range(1, len(revs)))
    found = " and ".join(f"{rev(i)}'s {count(i, 'training', 'alerted')}" for i in range(1, len(revs)))
    return (" A service that idles between batches averages its GPU's activity down into the levels single-GPU "
            "training shows, and a throttled trainer does the same from the other side; the lead now reads activity "
            "per unit of busy time and leaves the power levels out (docs/duty-cycle.md). On the "
            f"{ctx.derived(len(doc['runs']), 'int', [(k, 'runs')])} runs recorded after the committed leads were "
            f"fitted, the lead of {rev(0)} alerted on {count(0, 'inference', 'alerted')} of "
            f"{count(0, 'inference', 'runs')} gapped services (against {earlier}) and found "
            f"{count(0, 'training', 'alerted')} of {count(0, 'training', 'runs')} throttled trainers (against "
            f"{found}).")


def render(ctx, figs) -> str:
    adv, base = recorded(ctx)
    intro = _intro(ctx, adv, base)
    rounds = ctx.value("redteam", "rounds") if ctx.has("redteam") else None
    names = list(adv)
    for rnd in rounds or []:
        names += [s["name"] for s in rnd["strategies"] if s["name"] not in names]
    if rounds:  # embedded before the strategies' figures, so figures number in page order
        intro += figs.embed(F.detection_by_round_figure(ctx.load("redteam")), "detection_by_round",
                            "Detection by round: for each strategy setting, the share of its runs that alerted and "
                            "of its windows judged training, by the detector each round used (results/redteam.json).")
        intro += _round1_by_detector(ctx, rounds)
    body = [_strategy(ctx, figs, n, adv.get(n, []), rounds) for n in sorted(names)]
    return intro + "\n".join(body) + _one_gpu_node(ctx)
