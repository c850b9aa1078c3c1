"""The evasion ranking: which strategies kept training hidden most cheaply.

Score = share of runs not detected in the last round the strategy was played, divided by the
GPU-hours it needed relative to benign training (1 + overhead). An evasion that is never caught but
doubles the bill scores like one caught half the time at no cost: both halve what the adversary
gets per GPU-hour of undetected training. The formula is the red team's own
(:func:`trainsentry.redteam.rounds.effectiveness`), so the report and docs/redteam.md rank alike.
"""

from __future__ import annotations

from ..redteam.rounds import effectiveness


def last_round_rows(redteam: dict) -> list[dict]:
    """Each (strategy, setting) as scored in the last round it was played."""
    last: dict[tuple, dict] = {}
    for i, rnd in enumerate(redteam["rounds"]):
        for j, s in enumerate(rnd["strategies"]):
            last[(s["name"], s.get("setting"))] = {**s, "round": rnd["round"], "_path": f"rounds/{i}/strategies/{j}"}
    return list(last.values())


def rank(redteam: dict) -> list[dict]:
    out = []
    for s in last_round_rows(redteam):
        score = effectiveness(s.get("run_detection"), s.get("gpu_hour_overhead"))
        if score is None:
            continue
        out.append({**s, "evasion": 1.0 - float(s["run_detection"]), "score": score})
    return sorted(out, key=lambda r: -r["score"])
