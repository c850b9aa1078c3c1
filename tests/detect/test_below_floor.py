"""scripts/below_floor.py on recorded runs: windows below the single-device check's busy floor, the bound
on their work, and that bound against the workload ledgers."""

import shutil
from pathlib import Path

import pytest

from detect.scripts import load_script
from trainsentry.detect.dataset import load_dataset

REPO = Path(__file__).resolve().parents[2]
RUNS = [REPO / "data" / "redteam-x1" / "adv.throttle.dit-b-lowutil-5022a8-r0",   # held under the floor
        REPO / "data" / "h200x1" / "train.single.w1024-l16-base-r0",              # busy training
        REPO / "data" / "h200x1" / "infer.generate.m350m_b4_light-base-r0",       # light decode
        REPO / "data" / "h200x1" / "other.idle.bare-base-r0",
        REPO / "data" / "h200x1" / "other.matmul.n8192_x2-787bfe-r0",             # FP8 burn, 3 % duty
        REPO / "data" / "h200x1" / "other.matmul.n8192_x2-b5e1c3-r0",             # BF16 burn, 3 % duty
        REPO / "data" / "h200x1" / "other.matmul.n8192_x2-2c7481-r0",             # 2:4-sparse BF16, 3 % duty
        REPO / "data" / "h200x1" / "other.matmul.n8192_x2-8654f2-r0"]             # 2:4-sparse FP8, 3 % duty


def _script():
    return load_script("below_floor")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs") / "mixed"
    for r in RUNS:
        shutil.copytree(r, root / r.name)
    bf = _script()
    runs = load_dataset(str(root), None)
    assert len(runs) == len(RUNS)
    return bf, bf.measure(runs)


def test_the_throttled_trainer_is_below_the_floor_and_its_bound_holds(measured):
    bf, res = measured
    trainers = {t["run"]: t for t in res["trainers"]}
    low = trainers["adv.throttle.dit-b-lowutil-5022a8-r0"]
    assert low["below_floor_share"] == 1.0 and low["median_util_pct"] < 5
    assert low["tensor_work_flop"] <= low["bound_flop"] <= 1.2 * low["tensor_work_flop"], low
    assert 0 < low["recorded_tflops_per_s"] < 0.05 * bf.PEAK_AT_FEATURE_CLOCK / 1e12
    assert "train.single.w1024-l16-base-r0" not in trainers       # busy: the check judges it
    (ledger,) = res["ledgers"]
    assert ledger["runs"] == 2 and ledger["work_over_bound_above_1"] == 0 and ledger["work_over_bound_max"] <= 1


def test_per_class_counts_and_the_rate_cap(measured):
    bf, res = measured
    pc = res["per_class"]
    assert pc["other"]["below_floor_runs"] == 4                   # the burns; the idle GPU has nothing to bound
    assert pc["training"]["below_floor_runs"] == 1 and pc["training"]["max_util_pct"] <= bf.BUSY_UTIL_PCT
    assert res["max_tensor_pct_below_floor"] == max(c["max_tensor_pct"] or 0 for c in pc.values())
    assert res["max_rate_flops_per_s"] == pytest.approx(res["max_tensor_pct_below_floor"] / 100 * bf.PEAK_FP8_AT_FEATURE_CLOCK)


def test_an_fp8_burn_does_twice_what_its_activity_holds_at_the_bf16_peak(measured):
    """Recorded on the H200: GPM counts FP8 busy cycles as BF16 ones, so the live bound is at the FP8 peak."""
    bf, res = measured
    by = {q["precision"]: q for q in res["precision"]}
    assert by["fp8"]["precision_run"] == "fp8" and by["fp8"]["duty"] == 0.03
    assert 1.6 <= by["fp8"]["recorded_over_bf16_bound"] <= bf.FP8_OVER_BF16, by["fp8"]
    assert 0.7 <= by["bf16"]["recorded_over_bf16_bound"] <= 1.0, by["bf16"]
    # the sparse mode: busy half as long for the dense count, so what it executes stays within the bound
    sparse = by["bf16_sparse24"]
    assert sparse["precision_run"] == "bf16_sparse24" and sparse["recorded_over_bf16_bound"] >= 1.6, sparse
    assert sparse["executed_over_bf16_bound"] == pytest.approx(sparse["recorded_over_bf16_bound"] / 2)
    assert sparse["executed_over_bf16_bound"] <= 1.0, sparse
    # sparse FP8 (call s31-1): what it executes meets the FP8 bound, to the counter's precision, and the
    # dense product it stands for reaches twice that
    sparse8 = by["fp8_sparse24"]
    assert sparse8["precision_run"] == "fp8_sparse24" and sparse8["duty"] == 0.03, sparse8
    assert 0.9 <= sparse8["executed_over_bf16_bound"] / bf.FP8_OVER_BF16 <= 1.03, sparse8
    assert sparse8["recorded_over_bf16_bound"] >= 1.8 * bf.FP8_OVER_BF16, sparse8


def test_render(measured):
    bf, res = measured
    res = {**res, "command": "python scripts/below_floor.py ...", "date": "today", "out": "x.json", "data": ["d"],
           "runs": 7, "floor_pct": bf.BUSY_UTIL_PCT}
    md = bf.render(res)
    assert "## Does the bound hold?" in md and "`adv.throttle.dit-b-lowutil-5022a8-r0`" in md
    assert "## Precision" in md and "| fp8 (ran fp8) | 3% |" in md
    assert "| training | 2 |" in md
