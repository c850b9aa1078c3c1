"""Evasion against a frozen detector: per window, per run with the alert rule, time to alert.

Runs are trace directories (samples + manifest, as the campaign writes them); their windows are
extracted with the same code the detectors were evaluated with (trainsentry.detect.dataset), and
the detector is used as saved — never refitted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..detect.alert import AlertRule
from ..detect.base import Detector
from ..detect.dataset import load_run


def score_evasion(run_dirs: list[str | Path], detector: Detector, rule: AlertRule | None = None,
                  cache_dir: Path | None = None, alternatives: dict[str, AlertRule] | None = None) -> list[dict]:
    """One row per run: share of its in-run windows at or above the rule's threshold, whether the
    rule alerted (over every window of the trace, idle margins included, as a live monitor), and
    the time to alert from the run's start. ``alternatives``: more rules applied to the same
    probabilities (one prediction per run), each row then holds ``alternatives[name]`` =
    {"alerted", "time_to_alert_s"}.

    The verdict is `trainsentry eval`'s adapted reading: the rule with k and n capped at the trace's
    windows (``AlertRule.capped``; ``rule_applied`` names it), so a detector whose windows are longer
    than the trace allows five of (rt-baseline: 30 s every 15 s) is scored on the windows that exist
    rather than counted as missing every run. ``faithful_alerted`` is the rule as given, None where
    the trace holds fewer than n windows. For a trace long enough both are the same."""
    rule = rule or AlertRule()
    alternatives = alternatives or {}
    rows = []
    for d in run_dirs:
        run = load_run(Path(d), cache_dir)
        df = run.windows[detector.feature_set]
        if df.empty:
            none = {"alerted": False, "time_to_alert_s": None}
            rows.append({"run_id": run.run_id, "family": run.family, "workload": run.workload, "windows": 0,
                         "window_detection": None, **none, "rule_applied": rule.label(), "faithful_alerted": None,
                         **({"alternatives": {k: dict(none) for k in alternatives}} if alternatives else {})})
            continue
        p = np.asarray(detector.predict_proba(df), dtype=np.float64)
        inside = df["in_run"].to_numpy(dtype=bool)
        t_end = df["t_end"].to_numpy()
        applied = rule.capped(len(df))
        alert = applied.evaluate(t_end, p, run.start)
        row = {"run_id": run.run_id, "family": run.family, "workload": run.workload,
               "windows": int(inside.sum()),
               "window_detection": float(np.mean(p[inside] >= rule.threshold)) if inside.any() else None,
               "p_mean": float(np.mean(p[inside])) if inside.any() else None,
               "alerted": alert["alerted"], "time_to_alert_s": alert["time_to_alert_s"],
               "rule_applied": applied.label(),
               "faithful_alerted": alert["alerted"] if applied == rule else None}
        if alternatives:
            row["alternatives"] = {}
            for k, alt in alternatives.items():
                a = alt.evaluate(t_end, p, run.start)
                row["alternatives"][k] = {"alerted": a["alerted"], "time_to_alert_s": a["time_to_alert_s"]}
        rows.append(row)
    return rows


def by_family(rows: list[dict]) -> dict[str, dict]:
    """Run detection rate, mean window detection and median time to alert per strategy family."""
    out: dict[str, dict] = {}
    for fam in sorted({r["family"] for r in rows}):
        rs = [r for r in rows if r["family"] == fam]
        wins = [r["window_detection"] for r in rs if r["window_detection"] is not None]
        ttas = [r["time_to_alert_s"] for r in rs if r["time_to_alert_s"] is not None]
        out[fam] = {"runs": len(rs), "run_detection": float(np.mean([r["alerted"] for r in rs])),
                    "window_detection": float(np.mean(wins)) if wins else None,
                    "median_time_to_alert_s": float(np.median(ttas)) if ttas else None}
    return out
