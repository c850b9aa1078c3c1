"""score_evasion against a real (fitted, then frozen) detector on traces replayed from the H200 probe."""

from __future__ import annotations

import numpy as np

from detect.probe_traces import ddp_plan, send_plan, write_probe_trace
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
