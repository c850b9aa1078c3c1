"""scripts/fp8_training.py on the FP8/BF16 pairs recorded on the H200 (data/h200x1-fp8): the tensor-activity
estimator sees about half of the FP8 runs' work in either recipe, the FP8 ledgers stay within the FP8
bound, the FP8 runs learn, and the delayed recipe keeps BF16's pace where the dynamic one does not."""

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
from detect.scripts import load_script  # noqa: E402


@pytest.fixture(scope="module")
def res():
    fp = load_script("fp8_training")
    out = fp.measure(REPO / "data" / "h200x1-fp8", [REPO / "data" / "h200"], REPO / "models" / "flops.json", "fusion")
    return fp, out


def test_the_pairs_and_what_the_counters_saw(res):
    fp, r = res
    # rounds 1-5: 21 trainers; twins: round 1's two (dynamic recipe, one call), round 4's delayed runs of
    # round 1's two configurations (a call apart) and of a new one beside its BF16 twin (one call)
    assert len(r["runs"]) == 21 and len(r["pairs"]) == 5
    assert sorted((p["recipe"], p["same_call"]) for p in r["pairs"]) == [
        ("delayed", False), ("delayed", False), ("delayed", True), ("dynamic", True), ("dynamic", True)]
    for p in r["pairs"]:
        assert 0.4 < p["estimate_ratio"]["tensor"] < 0.65, p     # GPM counts FP8 cycles as BF16 ones
        assert p["estimate_ratio"]["saved"] < 0.95, p
        if p["recipe"] == "delayed":                              # the one-pass cast: no slower than BF16
            assert p["fp8_over_bf16_step_rate"] > 0.9, p
        else:                                                     # the separate quantisation kernels
            assert p["fp8_over_bf16_step_rate"] < 0.6, p
    for run in r["runs"]:
        if run["precision"].startswith("fp8"):
            assert run["precision_run"] == "fp8" and run["fp8_layers"] > 50
            assert run["fp8_cast"] == ("triton" if run["precision"] == "fp8_delayed" else None), run
            assert 1.5 < run["over_bf16_bound"] and run["over_fp8_bound"] <= 1.0, run
            assert run["loss_last"] < run["loss_first"] - 2.0, run        # it trains
        else:
            assert run["over_bf16_bound"] <= 1.0, run


def test_render(res):
    fp, r = res
    md = fp.markdown({**r, "command": "python scripts/fp8_training.py ...", "date": "today", "data": "d", "out": "x.json"})
    assert "| tensor activity |" in md and "FP8 / BF16, `train.single.w2048-l24` (dynamic, one call)" in md
    assert "FP8 / BF16, `train.single.w2048-l24` (delayed, a call apart)" in md
    assert "**The delayed recipe runs at" in md and "**The dynamic recipe runs at" in md
    assert md.count("| saved model (models/flops.json) |") == 1
