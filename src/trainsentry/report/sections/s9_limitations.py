"""9. Limitations: what was not run and why. The missing inputs, the machines, run lengths and how
much of each campaign is recorded are computed from the inputs, the run manifests and the campaign
files, not typed."""

import html
import statistics
from pathlib import Path

from ..context import missing_html
from ..inputs import INPUTS as ALL_INPUTS, is_present

TITLE = "Limitations"
INPUTS: tuple[str, ...] = ("traces", "redteam_traces")
RUN_INPUTS = ("traces", "redteam_traces")


def _all_runs(ctx) -> list[tuple[str, Path, dict]]:
    return [(k, d, m) for k in RUN_INPUTS for d, m in ctx.runs(k)]


def _machines(ctx) -> str:
    runs = _all_runs(ctx)
    if not runs:
        return ""
    nodes = sorted({m["node"] for _, _, m in runs})
    gpus = [sum(1 for x in m.get("devices", []) if str(x).startswith("gpu")) for _, _, m in runs]
    ranks = [len(m["labels"]["ranks"]) for _, _, m in runs if m["labels"].get("ranks")]
    src = lambda what: [(k, what) for k in RUN_INPUTS]  # noqa: E731
    node_list = ", ".join(ctx.derived(n, "str", src("node")) for n in nodes)
    used = f"; the workloads ran on {ctx.spread(ranks, 'int', src('labels/ranks'))} of those GPUs" if ranks else ""
    return (f"<li><b>One node per run.</b> Every recorded run ran inside a single node (recorded on {node_list}, "
            f"with {ctx.spread(gpus, 'int', src('devices'), 'GPUs')}){used}. Multi-node training and the "
            f"network-only traffic it produces were studied with the simulator, not measured.</li>")


def _lengths(ctx) -> str:
    parts = []
    benign = [m["end"] - m["start"] for _, m in ctx.runs("traces")]
    if benign:
        src = [("traces", "end-start")]
        parts.append(f"benign runs ran their workload for a median of "
                     f"{ctx.derived(statistics.median(benign), 'f0', src, 's')} (from {ctx.spread(benign, 'f0', src, 's')})")
    rt = [m["end"] - m["start"] for _, m in ctx.runs("redteam_traces")]
    if rt:
        parts.append(f"red-team runs and their baselines for {ctx.spread(rt, 'f0', [('redteam_traces', 'end-start')], 's')}")
    if not parts:
        return ""
    return (f"<li><b>Short runs.</b> By the manifests, {' and '.join(parts)}, not the days or weeks of a real "
            f"training job; slow drifts and rare events of long jobs are not represented.</li>")


def campaign_progress(configs: Path, data: Path) -> list[dict]:
    """Per campaign name (the folder under data/ its runs land in): the campaign files that plan its
    runs, the distinct runs they plan together (a slice file repeats runs of a larger one; a file of
    hard negatives adds runs to the same dataset) and how many of those are recorded under
    data/<name>."""
    from ...lab.campaign import Campaign
    by_name: dict[str, dict] = {}
    for f in sorted(configs.glob("campaigns/*.yaml")) if configs.is_dir() else []:
        try:
            camp = Campaign.load(f)
        except (ValueError, TypeError):
            continue                        # not a campaign (no name or runs, other keys)
        ids = {r["run_id"] for r in camp.expand()}   # an unknown workload is an error, not a smaller plan
        c = by_name.setdefault(camp.name, {"name": camp.name, "files": [], "ids": set()})
        c["files"].append(f)
        c["ids"] |= ids
    out = []
    for name in sorted(by_name):
        c = by_name[name]
        recorded = sum((data / name / run_id / "manifest.json").is_file() for run_id in c["ids"])
        out.append({"name": name, "files": c["files"], "planned": len(c["ids"]), "recorded": recorded})
    return out


def campaign_sources(ctx, c: dict) -> list[str]:
    """Where a campaign's planned count comes from: every file's entries × repeats."""
    return [f"config:{f.relative_to(ctx.configs)}#runs/*/repeats" for f in c["files"]]


def _campaigns(ctx) -> str:
    rows = [c for c in campaign_progress(ctx.configs, ctx.data) if c["recorded"] < c["planned"]]
    if not rows:
        return ""
    items = ""
    for c in rows:
        recorded = ctx.derived(c["recorded"], "int", ["data:" + c["name"] + "/*/manifest.json#run_id (planned runs)"])
        planned = ctx.derived(c["planned"], "int", campaign_sources(ctx, c))
        files = ", ".join(f"<code>{html.escape(str(f))}</code>" for f in c["files"])
        items += (f"<li><code>{html.escape(c['name'])}</code> ({files}): {recorded} of {planned} planned runs "
                  "recorded</li>")
    return (f"<li><b>Campaigns not finished.</b> Runs are recorded on the GPU machines the project is lent, in "
            f"device calls of limited length; these campaigns are not fully recorded yet, and the results above "
            f"rest on the runs that are:<ul>{items}</ul></li>")


def _measured_limits(ctx) -> str:
    """Limits the results themselves show: targets missed, a baseline not evaluated, single runs."""
    from ..summary import detector_vs_targets, meets_detector_targets, primary_detector, sec
    items = []
    name = primary_detector(ctx)
    if name:
        if not meets_detector_targets(ctx, name):
            items.append(f"<li><b>Detector targets missed.</b> {html.escape(name)}: {detector_vs_targets(ctx, name)} "
                         f"({sec('s3_benign')}).</li>")
        if "rt-baseline" not in ctx.value("detector", "detectors"):
            shared = ctx.has("redteam") and "rt-baseline" in (
                (ctx.value("redteam", "rounds") or [{}])[0].get("benign") or {})
            items.append(f"<li><b>Thin comparison with the reproduced published classifier.</b> "
                         f"{ctx.term('rt-baseline')} is implemented but not in the main evaluation, and the "
                         f"recorded runs are too short for its windows and alert rule"
                         + ("; the only side-by-side is the red team's first round, on a few shared splits"
                            if shared else "; no side-by-side on our data exists yet")
                         + f" ({sec('s3_benign')}).</li>")
    if ctx.has("redteam"):
        doc = ctx.load("redteam")
        runs = {len(s.get("run_ids") or []) for r in doc["rounds"] for s in r["strategies"]}
        if runs == {1}:
            items.append(f"<li><b>One run per red-team setting.</b> Every detection rate in {sec('s5_redteam')} is "
                         f"one run detected or not; the rates and the ranking will move as repeats are recorded.</li>")
        for i, nr in enumerate(doc.get("not_run") or []):
            if "power" in str(nr.get("strategy", "")).lower():
                continue  # the power-capping item below says it, with the published finding
            items.append(f"<li><b>Not run: {ctx.num('redteam', f'not_run/{i}/strategy')}.</b> "
                         f"{ctx.num('redteam', f'not_run/{i}/why')}.</li>")
    if ctx.has("agent_real") and ctx.value("agent_real", "agent/real/meets_target") is False:
        real = ctx.value("agent_real", "agent/real")
        driver = (", nearly all of it in the driver's answers to the reads"
                  if real.get("sources_only_percent_of_one_core", 0) >= 0.9 * real["percent_of_one_core"] else "")
        items.append(f"<li><b>Agent cost above target on a real node.</b> The agent used "
                     f"{ctx.num('agent_real', 'agent/real/percent_of_one_core', 'f1', '% of one core')} against a "
                     f"target of {ctx.num('agent_real', 'agent/real/target_percent_of_one_core', 'g2', '%')}{driver} "
                     f"({sec('s2_monitor')}).</li>")
    return "".join(items)


def render(ctx, figs) -> str:
    missing = [i for i in ALL_INPUTS.values() if not i.optional and not is_present(i, ctx.results, ctx.data)]
    out = []
    if missing:
        items = "".join(f"<li>{missing_html(i, ctx.results, ctx.data)}</li>" for i in missing)
        out.append("<p><b>This is a draft.</b> These inputs were not measured when it was built, and the "
                   f"sections that need them say so in place of numbers:</p><ul>{items}</ul>")
    out.append(f"""<ul>
{_measured_limits(ctx)}
<li><b>No power capping or clock limits.</b> The GPUs were lent, shared machines; changing their power
limit or clocks is not allowed there (<code>configs/campaigns/redteam-r1.yaml</code> says so), so no
strategy that throttles the hardware was run. The published work found clock throttling largely
detectable once trained on {ctx.cite('rt')}, but we have not measured it on our signals.</li>
{_machines(ctx)}
{_campaigns(ctx)}
{_lengths(ctx)}
<li><b>No tampering.</b> The red team could reshape workloads but not forge counters or replace the agent;
that layer is protected by signing and would need attestation in practice.</li>
</ul>""")
    return "\n".join(out)
