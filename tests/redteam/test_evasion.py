"""score_evasion against a real (fitted, then frozen) detector on traces replayed from the H200 probe."""

from __future__ import annotations

import numpy as np

from detect.probe_traces import IDLE_MEM_BYTES, ddp_plan, send_plan, write_probe_trace
from trainsentry.detect.alert import AlertRule
from trainsentry.detect.dataset import load_run, stack
from trainsentry.detect.rules import CommRules
from trainsentry.redteam.evasion import by_family, score_evasion


def _ddp_send_and_rules(tmp_path):
    """A DDP trace, a one-way send trace, and comm-rules fitted on both."""
    ddp = write_probe_trace(tmp_path, "ddp", ddp_plan(80.0), "training", "ddp", "ddp")
    send = write_probe_trace(tmp_path, "send", send_plan(80.0), "inference", "disagg", "send")
    det = CommRules()
    X, y, classes, ids = stack([load_run(ddp, None), load_run(send, None)], det.feature_set)
    det.fit(X, y, groups=ids, classes=classes)
    return ddp, send, det


def test_score_evasion_alerts_on_ddp_and_not_on_a_one_way_send(tmp_path):
    ddp, send, det = _ddp_send_and_rules(tmp_path)
    rows = {r["run_id"]: r for r in score_evasion([ddp, send], det, AlertRule(0.75, 3, 5))}
    assert rows["ddp"]["alerted"] and rows["ddp"]["window_detection"] > 0.5
    assert 0 <= rows["ddp"]["time_to_alert_s"] < 80
    assert not rows["send"]["alerted"] and rows["send"]["time_to_alert_s"] is None
    fam = by_family(list(rows.values()))
    assert fam["ddp"]["run_detection"] == 1.0 and fam["disagg"]["run_detection"] == 0.0
    assert np.isfinite(fam["ddp"]["median_time_to_alert_s"])


def test_alternative_rules_reuse_one_prediction_and_match_scoring_rule_by_rule(tmp_path):
    ddp, send, det = _ddp_send_and_rules(tmp_path)
    calls = []
    predict = det.predict_proba
    det.predict_proba = lambda df: calls.append(len(df)) or predict(df)
    alts = {"loose": AlertRule(0.5, 1, 1), "never": AlertRule(1.0, 5, 5)}
    rows = score_evasion([ddp, send], det, AlertRule(0.75, 3, 5), alternatives=alts)
    assert len(calls) == 2                       # one prediction per run, not one per rule
    for name, rule in alts.items():
        alone = score_evasion([ddp, send], det, rule)
        assert [r["alternatives"][name]["alerted"] for r in rows] == [r["alerted"] for r in alone]
        assert [r["alternatives"][name]["time_to_alert_s"] for r in rows] == [r["time_to_alert_s"] for r in alone]
    assert rows[0]["alternatives"]["loose"]["alerted"] and not rows[0]["alternatives"]["never"]["alerted"]


def test_a_trace_too_short_for_the_rule_is_scored_with_it_capped_as_eval_does(tmp_path):
    """rt-baseline's 30 s windows every 15 s give a 60 s red-team trace three windows: 3 of 5 can never
    complete there. The verdict is eval's adapted reading (k and n capped at the windows), named in the
    row; the rule as given stays beside it (None where it cannot be applied)."""
    from trainsentry.detect.rt_baseline import RTBaseline
    fit_on = [write_probe_trace(tmp_path / "fit", "ddp", ddp_plan(150.0), "training", "ddp", "ddp"),
              write_probe_trace(tmp_path / "fit", "send", send_plan(150.0), "inference", "disagg", "send"),
              write_probe_trace(tmp_path / "fit", "idle", [("idle", 150.0, IDLE_MEM_BYTES)], "other", "idle", "idle")]
    det = RTBaseline(n_trees=20)     # two stages: ML or not (needs a non-ML run), then training or inference
    X, y, classes, ids = stack([load_run(d, None) for d in fit_on], det.feature_set)
    det.fit(X, y, groups=ids, classes=classes)
    ddp = write_probe_trace(tmp_path, "ddp", ddp_plan(40.0), "training", "ddp", "ddp")
    send = write_probe_trace(tmp_path, "send", send_plan(40.0), "inference", "disagg", "send")
    rule = AlertRule(0.75, 3, 5)
    rows = {r["run_id"]: r for r in score_evasion([ddp, send], det, rule)}
    n = len(load_run(ddp, None).windows[det.feature_set])
    assert 1 <= n < rule.n
    assert rows["ddp"]["rule_applied"] == rule.capped(n).label() != rule.label()
    assert rows["ddp"]["faithful_alerted"] is None
    assert rows["ddp"]["alerted"] and not rows["send"]["alerted"]    # the same shapes, longer, were its fit
    # comm-rules' 8 s windows: the rule as given, both readings the same
    ddp_rules = score_evasion([ddp], _ddp_send_and_rules(tmp_path / "c")[2], rule)[0]
    assert ddp_rules["rule_applied"] == rule.label() and ddp_rules["faithful_alerted"] == ddp_rules["alerted"]
