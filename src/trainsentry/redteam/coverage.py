"""Which strategies of the campaign are recorded, which failed to record and which are not run yet.

The round tables score only recorded runs. A strategy of the issue whose runs are not on disk is
listed here as "not recorded" — never as an evasion (nothing was missed) nor as a failure (nothing
was caught). A run the campaign log lists as failed (crashed or hung) was not recorded either; it
says so, apart from those not attempted yet. Strategies the project does not run at all (power
capping, clock limits) are listed with the reason.
"""

from __future__ import annotations

from pathlib import Path

# The issue's strategy list (issue 6), each with the workload families (adv.<family>.<setting>) that build it.
ISSUE_STRATEGIES: list[tuple[int, str, tuple[str, ...]]] = [
    (1, "DiLoCo (H, int8, top-k, streaming)", ("diloco",)),
    (2, "Run splitting (idle gaps, separate processes)", ("split",)),
    (3, "Throttling (micro-pauses, low utilisation)", ("throttle",)),
    (4, "KV-cache disguise", ("kvdisguise",)),
    (5, "Per-step gradient compression (PowerSGD, top-k)", ("powersgd", "topk")),
    (6, "Gradient accumulation", ("accum",)),
    (7, "Cover traffic and shaping", ("cover", "shape")),
    (8, "Host-path synchronisation (PCIe, network)", ("hostsync",)),
    (9, "Pipeline-parallel training; online learning in a server", ("pp", "online")),
    (10, "White-box surrogate gating; window straddling", ("whitebox",)),
    (11, "Attacks on the FLOP estimator (head counts, batch inflation; splitting and throttling above)", ("flops",)),
]

# Families the red team added beyond the issue's list, each with what it builds; a family in neither list is
# still shown (under its own name), so no recorded run is left out of the coverage table.
BEYOND_ISSUE: dict[str, str] = {
    "offload": "ZeRO-Offload with the AdamW update on one or two host threads (hidden from the host witness)",
}
BEYOND_MARK = "+"   # the "#" column of a row beyond the issue's list

NOT_RUN = [{"strategy": "power capping and clock limits (issue strategy 11)",
            "why": "not run: changing power limits or clocks is not allowed on the shared GPU machines"}]


def issue_strategy(family: str) -> int | None:
    """The issue's strategy number a workload family builds (None for a family the issue does not list)."""
    return next((no for no, _, fams in ISSUE_STRATEGIES if family in fams), None)


def held_out_unit(family: str) -> str:
    """What rounds 2+ leave out together: every family of one issue strategy ("issue strategy 5":
    powersgd and topk), so the hardened detector never saw the strategy it scores, not even in a
    sibling setting; a family the issue does not list is its own unit."""
    no = issue_strategy(family)
    return f"issue strategy {no}" if no is not None else f"family {family}"


def family_of(workload: str) -> str | None:
    """``adv.<family>.<setting>`` → family; None for a benign workload."""
    parts = workload.split(".")
    return parts[1] if len(parts) >= 3 and parts[0] == "adv" else None


def campaign_coverage(campaign_paths: list[Path] | Path, adversarial_dirs: list[Path],
                      recorded_run_ids: set[str]) -> dict:
    """The campaigns' planned runs split into recorded / failed / not yet run, per issue strategy. Several
    files are one plan (a campaign extended by a later file into the same directory): their runs are
    pooled, a run id planned twice counted once."""
    from ..lab.campaign import Campaign
    from ..lab.summary import campaign_failures
    paths = [Path(campaign_paths)] if isinstance(campaign_paths, (str, Path)) else [Path(p) for p in campaign_paths]
    camps = [Campaign.load(p) for p in paths]
    planned = list({r["run_id"]: r for c in camps for r in c.expand()}.values())
    failed = {}
    for d in adversarial_dirs:
        for f in campaign_failures(d):
            if not f["written_later"]:
                failed[f["run_id"]] = f.get("note") or "crashed or hung while recording"
    runs = []
    for r in sorted(planned, key=lambda r: r["run_id"]):
        status = ("recorded" if r["run_id"] in recorded_run_ids
                  else "failed to record" if r["run_id"] in failed else "not recorded yet")
        runs.append({"run_id": r["run_id"], "workload": r["workload"], "family": family_of(r["workload"]),
                     "seconds": r["seconds"], "status": status,
                     **({"why": failed[r["run_id"]]} if status == "failed to record" else {})})
    def row(no, title: str, families) -> dict:
        mine = [r for r in runs if r["family"] in families]
        return {"issue_strategy": no, "title": title, "families": list(families),
                **{key: sorted({r["workload"] for r in mine if r["status"] == status})
                   for key, status in (("recorded", "recorded"), ("failed_to_record", "failed to record"),
                                       ("not_recorded_yet", "not recorded yet"))},
                "planned": len(mine)}
    per_issue = [row(no, title, families) for no, title, families in ISSUE_STRATEGIES]
    listed = {f for _, _, fams in ISSUE_STRATEGIES for f in fams}
    per_issue += [row(BEYOND_MARK, f"beyond the issue's list: {BEYOND_ISSUE.get(fam, fam)}", (fam,))
                  for fam in sorted({r["family"] for r in runs if r["family"] is not None} - listed)]
    baselines = [r for r in runs if r["family"] is None]
    extra = sorted(recorded_run_ids - {r["run_id"] for r in planned})
    return {"campaign": ", ".join(str(p) for p in paths), "campaigns": [str(p) for p in paths],
            "name": ", ".join(dict.fromkeys(c.name for c in camps)), "planned_runs": len(runs),
            "recorded_runs": sum(r["status"] == "recorded" for r in runs),
            "failed_runs": sum(r["status"] == "failed to record" for r in runs),
            "not_recorded_runs": sum(r["status"] == "not recorded yet" for r in runs),
            "baselines": [{k: r[k] for k in ("run_id", "workload", "status")} for r in baselines],
            "issue_strategies": per_issue, "runs": runs, "recorded_outside_campaign": extra,
            "reading": "only recorded runs are scored; a strategy not recorded is neither an evasion nor a failure"}
