"""The demo's verdict report: each node's timeline as runs of one state, the evidence behind it,
its alerts, the jobs, and how the verdicts compare with what actually ran."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table


def state_runs(verdicts: list[dict]) -> list[dict]:
    """Consecutive windows of one state merged: start, end, state, windows, P range."""
    runs: list[dict] = []
    for v in verdicts:
        p = v["p_training"]
        if runs and runs[-1]["state"] == v["state"]:
            r = runs[-1]
            r["end"], r["windows"] = v["t_end"], r["windows"] + 1
            if p is not None:
                r["p"] = (min(r["p"][0], p), max(r["p"][1], p)) if r["p"] else (p, p)
        else:
            runs.append({"start": v["t_start"], "end": v["t_end"], "state": v["state"], "windows": 1,
                         "p": (p, p) if p is not None else None, "last": v})
        runs[-1]["last"] = v
    return runs


def timeline_table(node: str, verdicts: list[dict], t0: float) -> Table:
    t = Table(title=f"node {node}: live verdicts ({len(verdicts)} windows of 8 s every 2 s)")
    for c in ("from s", "to s", "state", "windows", "P(training)"):
        t.add_column(c)
    for r in state_runs(verdicts):
        p = "—" if r["p"] is None else f"{r['p'][0]:.2f}–{r['p'][1]:.2f}"
        t.add_row(f"{r['start'] - t0:.0f}", f"{r['end'] - t0:.0f}", r["state"], str(r["windows"]), p)
    return t


def expected_state(v: dict, spans: list[tuple[float, float, str]], margin_s: float = 0.0) -> str | None:
    """The true state of a window: the class of the run that holds it whole; None if it straddles."""
    for a, b, cls in spans:
        if v["t_start"] >= a - margin_s and v["t_end"] <= b + margin_s:
            return cls
        if v["t_end"] > a and v["t_start"] < b:
            return None  # partly inside a run: no single truth
    return "idle"


def agreement(verdicts: list[dict], spans: list[tuple[float, float, str]]) -> dict[str, dict]:
    """Per true state: windows wholly of that state, and how many the verdict got right."""
    out: dict[str, dict] = {}
    for v in verdicts:
        truth = expected_state(v, spans)
        if truth is None:
            continue
        o = out.setdefault(truth, {"windows": 0, "right": 0, "said": {}})
        o["windows"] += 1
        o["right"] += int(v["state"] == truth)
        o["said"][v["state"]] = o["said"].get(v["state"], 0) + 1
    return out


def print_node(console: Console, node: str, verdicts: list[dict], alerts: list[dict],
               spans: list[tuple[float, float, str]] | None, note: str) -> dict:
    """Print one node's verdicts, evidence and alerts; return the agreement with the truth."""
    if not verdicts:
        console.print(f"node {node}: no verdicts (fewer than 8 s of samples)")
        return {}
    t0 = verdicts[0]["t_start"]
    console.print(timeline_table(node, verdicts, t0))
    telling = [v for v in verdicts if v["state"] != "idle"] or verdicts
    why = max(telling, key=lambda v: v["p_training"] if v["p_training"] is not None else -1.0)
    console.print(f"[bold]why[/] (window {why['t_start'] - t0:.0f}–{why['t_end'] - t0:.0f} s, state "
                  f"[bold]{why['state']}[/], the most training-like window):")
    for line in why["evidence"]:
        console.print(f"  · {line}", soft_wrap=True)
    if alerts:
        for a in alerts:
            cleared = "open" if a["open"] else f"cleared at {a['cleared_t'] - t0:.0f} s"
            console.print(f"[red]alert[/] training ({a['rule']['k']} of {a['rule']['n']} windows at P >= "
                          f"{a['rule']['threshold']}) raised at {a['raised_t'] - t0:.0f} s, {cleared}, "
                          f"max P {a['p_max']:.2f}")
    else:
        console.print("no training alert")
    result: dict = {}
    if spans is not None:
        result = agreement(verdicts, spans)
        parts = [f"{truth}: {o['right']}/{o['windows']} windows right (said {o['said']})"
                 for truth, o in sorted(result.items())]
        console.print(f"[bold]truth[/] ({note}): " + "; ".join(parts), soft_wrap=True)
    return result
