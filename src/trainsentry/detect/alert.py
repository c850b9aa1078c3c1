"""Run-level alerting: P(training) ≥ threshold in k of n consecutive windows.

Rahman & Tajdari's setting is 3 of 5 at 0.75. The alert time is the end of the window that
completes the k-th vote (the earliest moment a live monitor could raise it); time to alert is
measured from the run's true start (manifest ``start``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AlertRule:
    threshold: float = 0.75
    k: int = 3
    n: int = 5

    def __post_init__(self):
        if not (1 <= self.k <= self.n):
            raise ValueError("alert rule needs 1 <= k <= n")
        if not (0.0 <= self.threshold <= 1.0):
            raise ValueError("alert threshold must be a probability")

    def capped(self, n_windows: int) -> "AlertRule":
        """The rule adapted to a run with only ``n_windows`` windows: k and n capped at that count
        (3 of 5 becomes 1 of 1 on a run with one window, 2 of 2 with two); the rule itself when the
        run is long enough. An adaptation, not the published rule: ``trainsentry eval`` reports both."""
        if n_windows >= self.n or n_windows < 1:
            return self
        return AlertRule(self.threshold, min(self.k, n_windows), n_windows)

    def label(self) -> str:
        return f"{self.k} of {self.n} @ {self.threshold:g}"

    def first_alert(self, p: np.ndarray) -> int | None:
        """Index of the window at which the rule first fires, or None."""
        votes = (np.asarray(p, dtype=np.float64) >= self.threshold).astype(int)
        for i in range(votes.size):
            if votes[max(0, i - self.n + 1): i + 1].sum() >= self.k:
                return i
        return None

    def evaluate(self, t_end: np.ndarray, p: np.ndarray, start: float) -> dict:
        """Alert outcome of one run: windows in time order, their end times and P(training)."""
        order = np.argsort(np.asarray(t_end, dtype=np.float64), kind="stable")
        t_sorted, p_sorted = np.asarray(t_end, dtype=np.float64)[order], np.asarray(p, dtype=np.float64)[order]
        i = self.first_alert(p_sorted)
        if i is None:
            return {"alerted": False, "alert_t": None, "time_to_alert_s": None}
        return {"alerted": True, "alert_t": float(t_sorted[i]),
                "time_to_alert_s": max(0.0, float(t_sorted[i]) - float(start))}
