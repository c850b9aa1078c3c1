"""The evasion ranking: which strategies kept training hidden most cheaply.

Score = share of runs not detected in the last round the strategy was played, divided by the
GPU-hours it needed relative to benign training (1 + overhead). An evasion that is never caught but
doubles the bill scores like one caught half the time at no cost: both halve what the adversary
gets per GPU-hour of undetected training.
"""

from __future__ import annotations


def last_round_rows(redteam: dict) -> list[dict]:
    last: dict[str, dict] = {}
    for i, rnd in enumerate(redteam["rounds"]):
        for j, s in enumerate(rnd["strategies"]):
            last[s["name"]] = {**s, "round": rnd["round"], "_path": f"rounds/{i}/strategies/{j}"}
    return list(last.values())


def rank(redteam: dict) -> list[dict]:
    out = []
    for s in last_round_rows(redteam):
        det, over = s.get("run_detection"), s.get("gpu_hour_overhead")
        if det is None or over is None:
            continue
        evasion = 1.0 - float(det)
        out.append({**s, "evasion": evasion, "score": evasion / (1.0 + max(float(over), 0.0))})
    return sorted(out, key=lambda r: -r["score"])
