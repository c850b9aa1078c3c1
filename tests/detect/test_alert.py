import numpy as np
import pytest

from trainsentry.detect.alert import AlertRule


def test_three_of_five_fires_on_the_third_vote():
    rule = AlertRule(0.75, 3, 5)
    p = np.array([0.1, 0.8, 0.2, 0.9, 0.1, 0.76, 0.9])
    assert rule.first_alert(p) == 5


def test_votes_outside_the_last_n_windows_do_not_count():
    rule = AlertRule(0.75, 3, 5)
    p = np.array([0.9, 0.9, 0.1, 0.1, 0.1, 0.1, 0.9, 0.1, 0.1])
    assert rule.first_alert(p) is None


def test_time_to_alert_from_true_start_and_order_independent():
    rule = AlertRule(0.75, 3, 5)
    t_end = np.array([18.0, 10.0, 12.0, 14.0, 16.0]) + 1000.0
    p = np.array([0.9, 0.1, 0.8, 0.8, 0.9])
    out = rule.evaluate(t_end, p, start=1002.0)
    assert out["alerted"] and out["alert_t"] == 1016.0
    assert out["time_to_alert_s"] == pytest.approx(14.0)
    assert rule.evaluate(t_end, np.zeros(5), 1002.0) == {"alerted": False, "alert_t": None, "time_to_alert_s": None}


def test_bad_rules_are_refused():
    with pytest.raises(ValueError):
        AlertRule(0.75, 6, 5)
    with pytest.raises(ValueError):
        AlertRule(1.5, 3, 5)


def test_a_rule_capped_at_the_windows_a_short_run_has():
    rule = AlertRule(0.75, 3, 5)
    assert rule.capped(1) == AlertRule(0.75, 1, 1)
    assert rule.capped(2) == AlertRule(0.75, 2, 2)
    assert rule.capped(5) is rule and rule.capped(18) is rule
    assert rule.capped(1).first_alert(np.array([0.8])) == 0
    assert rule.capped(2).first_alert(np.array([0.8, 0.5])) is None
    assert rule.label() == "3 of 5 @ 0.75"
