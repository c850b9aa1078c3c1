"""The evasion ranking: which strategies kept training hidden most cheaply.

Score = share of runs not detected in the last round the strategy was played, divided by the
GPU-hours it needed relative to benign training (1 + overhead). An evasion that is never caught but
doubles the bill scores like one caught half the time at no cost: both halve what the adversary
gets per GPU-hour of undetected training. The ranking is the red team's own
(:func:`trainsentry.redteam.rounds.rank_strategies`, stored in results/redteam.json), read here, so
the report and docs/redteam.md rank alike.
"""

from __future__ import annotations

from ..redteam.rounds import rank_strategies


def last_round_rows(redteam: dict) -> list[dict]:
    """Each (strategy, setting) as scored in the last round it was played."""
    last: dict[tuple, dict] = {}
    for i, rnd in enumerate(redteam["rounds"]):
        for j, s in enumerate(rnd["strategies"]):
            last[(s["name"], s.get("setting"))] = {**s, "round": rnd["round"], "_path": f"rounds/{i}/strategies/{j}"}
    return list(last.values())


def rank(redteam: dict) -> list[dict]:
    """The red team's own ranking (results/redteam.json ``ranking``, computed by
    :func:`trainsentry.redteam.rounds.rank_strategies`), in its order, each row joined with its
    last-round entry so the report can cite where every number sits. Settings the red team left
    unranked (no cost, no loss penalty) are not here: it lists them under ``unranked``."""
    ranking = redteam["ranking"] if "ranking" in redteam else rank_strategies(redteam)[0]
    last = {(r["name"], r.get("setting")): r for r in last_round_rows(redteam)}
    out = []
    for r in ranking:
        row = last.get((r["name"], r.get("setting")))
        if row is None or r.get("score") is None:
            continue
        out.append({**row, "evasion": 1.0 - float(row["run_detection"]), "score": r["score"], "rank": r["rank"]})
    return out
