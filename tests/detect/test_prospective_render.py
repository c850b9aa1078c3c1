"""scripts/prospective.py's page: wrong runs listed, or said to be none, and every family's tally."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prospective.py"


def _result(per_run: list[dict]) -> dict:
    block = {"runs": len(per_run), "run_accuracy": sum(x["correct"] for x in per_run) / len(per_run),
             "training_detection": None, "inference_fpr": 0.0, "other_fpr": 0.0, "median_time_to_alert_s": None}
    return {"command": "python scripts/prospective.py --model-rev abc", "date": "2026-12-01T00:00:00Z",
            "data": "data/h200", "rule": "3 of 5 @ 0.75", "threshold": 0.75, "runs_before": 4,
            "model": {"name": "fused", "rev": "abc", "trained_by": "trainsentry eval", "runs": 4},
            "all": block, "new_configs": block, "seen_configs": block, "per_run": per_run}


def _run(run_id: str, cls: str, family: str, correct: bool, alerted: bool) -> dict:
    return {"run_id": run_id, "class": cls, "family": family, "correct": correct, "alerted": alerted,
            "p_in_run_median": 0.91 if alerted else 0.02}


def test_no_wrong_run_says_none_and_tallies_families():
    render = runpy.run_path(str(SCRIPT))["render"]
    page = render(_result([_run("a", "inference", "ep", True, False), _run("b", "inference", "ep", True, False),
                           _run("c", "other", "stencil", True, False)]), "results/p.json")
    assert "Runs judged wrong: none." in page
    assert "| run | class |" not in page
    assert "Right by family: inference ep 2 of 2, other stencil 1 of 1." in page


def test_wrong_runs_are_listed_with_their_median_p():
    render = runpy.run_path(str(SCRIPT))["render"]
    page = render(_result([_run("x", "inference", "cp", False, True), _run("y", "inference", "cp", True, False)]),
                  "results/p.json")
    assert "| `x` | inference | cp | yes | 0.91 |" in page
    assert "`y`" not in page
    assert "inference cp 1 of 2" in page


def test_the_cut_off_is_the_later_fit_when_a_second_model_joins():
    """With --also the runs judged start at the later of the two fits, and the page says so."""
    render = runpy.run_path(str(SCRIPT))["render"]
    res = _result([_run("a", "inference", "ep", True, False)])
    page = render(res, "results/p.json")
    assert "judges every run recorded after it was fitted" in page
    res["model"].update(fitted_at=100.0, also={"name": "single-device", "fitted_at": 200.0,
                                                "trained_by": "python scripts/single_device.py", "runs": 9})
    res["judged_from"] = 200.0
    res["fused or single-device"] = {**res["all"], "wrong": []}
    page = render(res, "results/p.json")
    assert "judges every run recorded after the later fit of it and `single-device`" in page
    res["model"]["also"]["fitted_at"], res["judged_from"] = 50.0, 100.0   # the second model fitted first
    assert "judges every run recorded after it was fitted" in render(res, "results/p.json")
    res["since"] = 0.0
    assert "judges every run recorded from 1970-01-01 00:00 UTC (`--since`" in render(res, "results/p.json")


def test_with_a_second_model_the_page_tallies_the_combination_and_how_close_it_came():
    render = runpy.run_path(str(SCRIPT))["render"]
    runs = [dict(_run("a", "inference", "md", True, False), either_correct=True, **{"single-device_p_in_run_median": 0.12}),
            dict(_run("b", "inference", "md", True, False), either_correct=True, **{"single-device_p_in_run_median": 0.31}),
            dict(_run("c", "training", "lora", False, False), either_correct=True, **{"single-device_p_in_run_median": 0.97})]
    res = _result(runs)
    res["model"].update(fitted_at=100.0, also={"name": "single-device", "fitted_at": 200.0,
                                                "trained_by": "python scripts/single_device.py", "runs": 9})
    page = render(res, "results/p.json")
    assert "Right by family: inference md 2 of 2, training lora 0 of 1." in page
    assert "`fused or single-device` right by family: inference md 2 of 2, training lora 1 of 1." in page
    assert ("lowest – highest over each family's runs (it alerts at 0.75 in enough windows): inference md 0.12 – 0.31, "
            "training lora 0.97 – 0.97.") in page
    # a run fused missed shows what the second model said of it
    runs[2]["single-device_alerted_capped_rule"] = True
    page = render(res, "results/p.json")
    assert "| run | class | family | alerted | median P(training) in run | `single-device` alerted |" in page
    assert "| `c` | training | lora | no | 0.02 | yes | 0.97 |" in page
