"""The project's own targets: what its issues ask the work to reach, set beside what was measured.

Targets are requirements, not measurements; the report marks each one as a target (hover shows
``target:KEY``), and states whether the measured value meets it. Targets that a results file
already carries (the agent's CPU budget in ingest.json, the FLOP error target in flops.json) are
read from there, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    value: float
    issue: int
    what: str
    at_least: bool  # True: the measured value must be >= value; False: <= value

    def met(self, measured: float | None) -> bool | None:
        if measured is None:
            return None
        return measured >= self.value if self.at_least else measured <= self.value


TARGETS = {
    "detector.run_accuracy": Target(0.99, 4, "run accuracy of the fused detector, held out by configuration", True),
    "detector.inference_fpr": Target(0.01, 4, "false-positive rate on inference runs", False),
    "detector.median_time_to_alert_s": Target(20, 4, "median time to alert from the start of training", False),
    "redteam.rounds": Target(3, 6, "monitor-evader rounds", True),
}
