"""docs/detector.md's paragraph on the single-device path takes its numbers from the path's own
committed results (detect.docs.single_device_numbers), never from hand-written text."""

from __future__ import annotations

from trainsentry.detect.docs import single_device_numbers


def _det(acc, fpr, det, tta, single=None, embed=None, lofo_single=None, lofo_embed=None) -> dict:
    return {"run_accuracy": acc, "inference_fpr": fpr, "training_detection": det, "median_time_to_alert_s": tta,
            "per_family": {"single-gpu": {"alerted_frac": single}, "embed": {"alerted_frac": embed}},
            "lofo": {"single-gpu": {"alerted_frac": lofo_single, "runs": 33},
                     "embed": {"alerted_frac": lofo_embed, "runs": 12}}}


def test_numbers_come_from_the_results_and_absence_is_said():
    sd = {"command": "trainsentry eval --data a --data b", "dataset": {"runs": 237},
          "detectors": {"fused": _det(0.85, 0.02, 0.65, 9.1),
                        "fused+single-device": _det(0.94, 0.07, 0.93, 9.0, 0.9, 0.3, 0.88, 0.6)}}
    one_gpu = {"frozen": {"fused+single-device": {"per_run": [
        {"class": "training", "alerted": True}, {"class": "training", "alerted": False},
        {"class": "inference", "alerted": True}, {"class": "inference", "alerted": False},
        {"class": "other", "alerted": False}]}}}
    text = single_device_numbers(sd, one_gpu)
    assert "(237 runs, `trainsentry eval --data a --data b`" in text
    assert "94.0 % / 7.0 % / 93.0 % / 9.0 against `fused`'s 85.0 % / 2.0 % / 65.0 % / 9.1" in text
    assert ("alerted on 90 % of the `single-gpu` family's test appearances (88 % of its 33 runs when the family "
            "is left out of the fit)") in text
    assert "on 30 % of the `embed` family's (60 % of its 12 runs left out)" in text
    assert "found 1 of the one-GPU node's 2 training runs and called 1 of its 2 inference runs training" in text
    assert "The benign family it alerts on most" not in text   # embedding is the worst: already said
    fam = sd["detectors"]["fused+single-device"]
    fam["per_family"]["attribute"] = {"class": "inference", "alerted_frac": 0.54}
    fam["per_family"]["single-gpu"]["class"] = "training"
    fam["lofo"]["attribute"] = {"alerted_frac": 0.5, "runs": 9}
    text = single_device_numbers(sd, one_gpu)
    assert ("The benign family it alerts on most in its test appearances is `attribute`: 54 % (50 % of its 9 runs "
            "with the family left out).") in text
    del fam["lofo"]["attribute"]   # not left out: no parenthesis
    assert "is `attribute`: 54 %." in single_device_numbers(sd, one_gpu)
    fam["per_family"]["embed"]["class"] = "inference"
    fam["per_family"]["embed"]["alerted_frac"] = 0.6   # embedding alerted more: already said, no second sentence
    assert "alerts on most" not in single_device_numbers(sd, one_gpu)
    missing = single_device_numbers(None, None)
    assert "not in this checkout" in missing and "%" not in missing


def test_the_leads_comparison_comes_from_its_results_file():
    from trainsentry.detect.docs import LEADS_DOCS, leads_numbers
    counts = {"new": {"inference": {"runs": 4, "alerted": 1}, "training": {"runs": 2, "alerted": 2}},
              "old": {"inference": {"runs": 4, "alerted": 3}, "training": {"runs": 2, "alerted": 1}}}
    text = leads_numbers({"revisions": ["new", "old"], "counts": counts, "runs": [{}] * 6})
    assert text == (f"On the 6 runs recorded after the leads were fitted (`{LEADS_DOCS}`), the lead committed at "
                    "`new` alerted on 1 of 4 gapped services (against `old`'s 3) and found 2 of 2 throttled "
                    "trainers (against `old`'s 1).")
    assert "not in this checkout" in leads_numbers(None)


def test_the_fp8_rounds_come_from_the_prospective_checks_in_fit_order():
    from trainsentry.detect.docs import fp8_numbers

    def run(cls, precision, alerted):
        cfg = "train.single.w|batch=8" + (f"|precision={precision}" if precision else "")
        return {"class": cls, "config": cfg, "single-device_alerted_capped_rule": alerted}
    later = {"judged_from": 2.0, "runs_before": 6, "model": {"rev": "bbb"},
             "per_run": [run("training", "fp8_delayed", True), run("training", "fp8_delayed", False),
                         run("inference", "fp8_delayed", True)]}
    first = {"judged_from": 1.0, "runs_before": 0, "model": {"rev": "aaa"},
             "per_run": [run("training", "fp8", False), run("training", None, True), run("inference", "fp8", False)]}
    text = fp8_numbers([later, first])
    assert text.startswith("the lead committed at `aaa` (none of the dataset's runs in its fit) found 0 of 1 "
                           "dynamic-recipe trainers, 1 of 1 BF16 trainers and alerted on 0 of 1 inference "
                           "services served in the dynamic recipe; `bbb` (6 of the dataset's runs in its fit) "
                           "found 1 of 2 delayed-recipe trainers and alerted on 1 of 1 inference services "
                           "served in the delayed recipe"), text
    assert "not in this checkout" in fp8_numbers(None)


def test_fused_wrong_instances_are_traced_to_their_cause():
    """The share of `fused`'s errors that are training behind a closed exchange gate is counted from
    per_run and the gate's shares, never summed by hand."""
    from trainsentry.detect.docs import wrong_by_cause
    per_run = {"single-a": {"class": "training", "test_instances": 30, "wrong_frac": 1.0},
               "ddp-b": {"class": "training", "test_instances": 20, "wrong_frac": 0.5},
               "tp-c": {"class": "inference", "test_instances": 40, "wrong_frac": 0.25},
               "gen-d": {"class": "inference", "test_instances": 40, "wrong_frac": 0.0},
               "ungated-e": {"class": "training", "test_instances": 10, "wrong_frac": 1.0},
               "unknown-f": {"class": "training", "test_instances": 4, "wrong_frac": 0.5}}
    gate = {"single-a": {"exchange": 0.0}, "ddp-b": {"exchange": 0.9}, "tp-c": {"exchange": 1.0},
            "gen-d": {"exchange": 0.0}, "ungated-e": {"exchange": 0.5}}
    text = wrong_by_cause(per_run, gate)
    assert text.startswith("`fused`'s wrong test instances over all splits: 62; "
                           "training the exchange gate leaves closed: 30 (48%); "
                           "training with the gate open: 20 (32%); inference alerted: 10 (16%); "
                           "training, gate not recorded: 2 (3%)")
    assert wrong_by_cause({"x": {"class": "training", "test_instances": 3, "wrong_frac": 0.0}}, {}) == \
        "`fused` judged every test appearance right."


def _row(dataset, acc, fpr, tta):
    return {"dataset": dataset, "run_accuracy": acc, "inference_fpr": fpr, "other_fpr": 0.0,
            "training_detection": acc, "median_time_to_alert_s": tta, "splits_with_test_runs": 3}


def test_the_targets_are_judged_on_the_target_datasets_rows_where_there_are_several():
    """With several datasets, each detector's numbers against issue 4's targets are its row for
    `data/h200`'s test runs, not the pooled one; with one, the pooled row."""
    from trainsentry.detect.docs import targets_lines
    dets = {"fused": {**_row("all", 0.80, 0.0, 9.0), "per_dataset": [_row("data/h200", 0.95, 0.001, 9.0),
                                                                     _row("data/h200x1", 0.60, 0.0, 9.0)]},
            "fused+single-device-live-noconv": {**_row("all", 0.93, 0.03, 9.0),
                                                "per_dataset": [_row("data/h200", 0.992, 0.005, 9.1)]}}
    text = "\n".join(targets_lines(dets))
    assert "on the test runs of `data/h200`" in text
    assert "| `fused` | 95.0 % (missed) | 0.1 % (met) | 9.0 s (met) |" in text
    assert "| `fused+single-device-live-noconv` | 99.2 % (met) | 0.5 % (met) | 9.1 s (met) |" in text
    alone = "\n".join(targets_lines({"fused": _row("all", 0.991, 0.02, 25.0)}))
    assert "on every test run" in alone and "| `fused` | 99.1 % (met) | 2.0 % (missed) | 25.0 s (missed) |" in alone


def test_the_live_verdict_is_shown_beside_its_gated_form_only_when_that_was_evaluated():
    from trainsentry.detect.docs import exchange_comparison
    live = {**_row("all", 0.93, 0.03, 9.0), "per_dataset": [_row("data/h200", 0.992, 0.005, 9.1)]}
    gated = {"command": "trainsentry eval --seed 0", "protocol": {"splits": 200, "seed": 0},
             "detectors": {"fused+single-device-live-noconv-gated": {**_row("all", 0.92, 0.03, 9.0),
                                                                     "per_dataset": [_row("data/h200", 0.989, 0.005, 9.1)]}}}
    live["per_run"] = {"fsdp": {"class": "training", "test_instances": 64, "alerted_frac": 1.0},
                       "cp": {"class": "inference", "test_instances": 80, "alerted_frac": 3 / 80},
                       "same": {"class": "inference", "test_instances": 10, "alerted_frac": 0.0}}
    gated["detectors"]["fused+single-device-live-noconv-gated"]["per_run"] = {
        "fsdp": {"class": "training", "test_instances": 64, "alerted_frac": 44 / 64},
        "cp": {"class": "inference", "test_instances": 80, "alerted_frac": 2 / 80},
        "same": {"class": "inference", "test_instances": 10, "alerted_frac": 0.0}}
    doc = {"detectors": {"fused+single-device-live-noconv": live}}
    text = "\n".join(exchange_comparison(doc, gated))
    assert "| `fused+single-device-live-noconv` | `data/h200` | 99.2 % |" in text
    assert "| `fused+single-device-live-noconv-gated` | `data/h200` | 98.9 % |" in text
    assert "same 200 splits (seed 0; `trainsentry eval --seed 0`)" in text
    # the runs the change moved, counted from per_run, largest change first; an unmoved run is not named
    assert "fsdp (training) 64 / 44 of 64; cp (inference) 3 / 2 of 80." in text and "same (" not in text
    assert exchange_comparison(doc, None) == [] and exchange_comparison({}, gated) == []
    assert exchange_comparison(None, gated) == []
