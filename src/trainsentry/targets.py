"""The project's own targets: what its issues ask the work to reach, set beside what was measured.

The one definition of each target: the red team (:mod:`trainsentry.redteam.rounds`) checks its
re-measured benign numbers against these and stores the verdicts in results/redteam.json; the report
(:mod:`trainsentry.report`) marks each one as a target (hover shows ``target:KEY``) and states whether
the measured value meets it. Targets are requirements, not measurements. Targets that a results file
already carries (the agent's CPU budget in ingest.json, the FLOP error target in flops.json) are read
from there, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass

DETECTOR = "fused"  # the detector the detector targets (issue 4) are set for
# what the live collector runs: fused with the single-device check as a second path (collector.live,
# detect.single_device.verdict_p), scored on the evaluation's splits under this name (detect.variants)
LIVE_DETECTOR = "fused+single-device-live-noconv"
# the data the targets are set on: issue 4's "committed H200 dataset" (the two-GPU node's campaign). An
# evaluation over several datasets fits on every dataset's training side and is judged on this one's test runs.
DETECTOR_DATASET = "data/h200"


@dataclass(frozen=True)
class Target:
    value: float
    issue: int
    what: str
    at_least: bool  # True: the measured value must be >= value; False: <= value
    label: str = ""  # what is measured, in a sentence ("run accuracy")
    unit: str = ""   # "%": the value is a fraction, written as a percentage; else the unit written after it

    def met(self, measured: float | None) -> bool | None:
        if measured is None:
            return None
        return measured >= self.value if self.at_least else measured <= self.value

    @property
    def op(self) -> str:
        return ">=" if self.at_least else "<="

    def value_text(self) -> str:
        """The value as a sentence writes it: "99 %", "20 s"."""
        if self.unit == "%":
            return f"{100 * self.value:g} %"
        return f"{self.value:g}" + (f" {self.unit}" if self.unit else "")

    def text(self) -> str:
        """"run accuracy >= 99 %"."""
        return f"{self.label} {self.op} {self.value_text()}"


TARGETS = {
    "detector.run_accuracy": Target(0.99, 4, "run accuracy of the fused detector, held out by configuration", True,
                                    "run accuracy", "%"),
    "detector.inference_fpr": Target(0.01, 4, "false-positive rate on inference runs", False,
                                     "inference false-positive rate", "%"),
    "detector.median_time_to_alert_s": Target(20, 4, "median time to alert from the start of training", False,
                                              "median time to alert", "s"),
    "redteam.rounds": Target(3, 6, "monitor-evader rounds", True, "monitor-evader rounds"),
}


def detector_targets() -> dict[str, Target]:
    """The detector issue's targets keyed by the name of the number they judge (``run_accuracy``, ...)."""
    return {k.split(".", 1)[1]: t for k, t in TARGETS.items() if k.startswith("detector.")}


def target_row(per_dataset: list[dict] | None) -> int | None:
    """The index of ``DETECTOR_DATASET``'s row among one detector's per-dataset rows of an evaluation over
    several datasets (``per_dataset`` in results/detector.json), or None (one dataset, or not among them):
    where the detector targets are judged."""
    return next((i for i, v in enumerate(per_dataset or []) if v.get("dataset") == DETECTOR_DATASET), None)
