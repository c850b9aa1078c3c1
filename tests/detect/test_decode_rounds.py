"""scripts/decode_rounds.py on data/h200x1-decode and the committed evaluations: the figures docs/lab.md
and results/device/README.md quote for the thirty-sixth session."""

import json
from pathlib import Path

import pytest

from detect.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "h200x1-decode"
EVAL3 = REPO / "results" / "per-dataset-decode3" / "detector.json"
LIVE, WITHOUT = "fused+single-device-noconv", "fused+single-device-noconv-nodecode"


def test_the_rounds_trainers_learned_and_most_servers_ran_past_capacity():
    dr = load_script("decode_rounds")
    runs = dr.runs(str(DATA))
    assert len(runs) == 31 and (runs["class"] == "training").sum() == 11
    train = runs[runs["class"] == "training"]
    assert (train["loss_last"] < train["loss_first"] - 2.5).all()
    first = train[train["start_utc"] < "16:00"]        # round 1 (calls s36-1 and s36-2)
    assert len(first) == 5
    assert first["loss_first"].min() == pytest.approx(5.22, abs=0.005) and first["loss_first"].max() == pytest.approx(6.44, abs=0.005)
    assert first["loss_last"].min() == pytest.approx(0.95, abs=0.005) and first["loss_last"].max() == pytest.approx(2.39, abs=0.005)
    queues = sorted(runs["max_queue"].dropna().astype(int))
    assert queues == [20, 23, 41, 115, 319, 2461]      # four past capacity, two not


def test_the_false_alerts_of_the_live_pair_fall_where_the_lab_notes_say():
    dr = load_script("decode_rounds")
    doc = json.loads(EVAL3.read_text())
    shares = dr.false_alert_shares(doc, LIVE, "data/h200x1")
    assert shares.index[0] == "attribute" and round(100 * shares["attribute"]) == 81
    assert set(dr.false_alert_shares(doc, LIVE, "data/h200x1-fp8").index) == {"embed"}
    longctx = "data/h200/infer.serve.l1b_r6_longctx-base-r0"
    assert round(100 * dr.wrong_runs(doc, WITHOUT).loc[longctx, "wrong_frac"]) == 32
    assert dr.wrong_runs(doc, LIVE).loc[longctx, "wrong_frac"] < 0.02
