"""The project's targets are defined once (trainsentry.targets); the red team judges against them."""

from __future__ import annotations

import dataclasses

import pytest

from trainsentry import targets
from trainsentry.redteam import rounds


def test_the_red_team_judges_against_the_project_targets():
    assert rounds.TARGETS == targets.detector_targets()
    for k, t in rounds.TARGETS.items():
        assert t is targets.TARGETS[f"detector.{k}"]
        assert t.text() in rounds.TARGETS_SOURCE
    assert rounds.TARGETS_SOURCE.count(">=") + rounds.TARGETS_SOURCE.count("<=") == len(rounds.TARGETS)


def test_a_changed_target_changes_the_red_teams_verdict(monkeypatch):
    b = {"run_accuracy": 0.97, "inference_fpr": 0.02, "median_time_to_alert_s": 10.0,
         "inference_fpr_bound_at_zero_alerts": 0.04}
    t = rounds.against_targets(b)
    assert (t["run_accuracy"]["met"], t["inference_fpr"]["met"], t["inference_fpr"]["resolvable"]) == (False, False, False)
    eased = {**rounds.TARGETS, "run_accuracy": dataclasses.replace(rounds.TARGETS["run_accuracy"], value=0.95),
             "inference_fpr": dataclasses.replace(rounds.TARGETS["inference_fpr"], value=0.05)}
    monkeypatch.setattr(rounds, "TARGETS", eased)
    t = rounds.against_targets(b)
    assert (t["run_accuracy"]["met"], t["inference_fpr"]["met"], t["inference_fpr"]["resolvable"]) == (True, True, True)
    assert t["run_accuracy"]["target"] == ">= 0.95"


def test_target_wording():
    assert targets.TARGETS["detector.run_accuracy"].text() == "run accuracy >= 99 %"
    assert targets.TARGETS["detector.median_time_to_alert_s"].value_text() == "20 s"
    # a 1 % FPR needs n inference runs, none alerting, for the 95 % bound 1 - 0.05^(1/n) to reach it
    n = rounds.inference_runs_to_resolve()
    assert 1 - 0.05 ** (1 / n) <= 0.01 < 1 - 0.05 ** (1 / (n - 1))
    assert targets.TARGETS["detector.inference_fpr"].met(None) is None
    with pytest.raises(KeyError):
        targets.TARGETS["detector.nothing"]
