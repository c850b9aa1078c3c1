"""Duty-free activity (features.activity.duty_free): the busiest GPU's GPM and memory-activity
levels per unit of busy share.
On recorded runs of one embedding service with and without idle gaps between its batches, the window
levels fall with the idle share while the duty-free intensity stays where the gapless run has it."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainsentry.detect.dataset import load_run
from trainsentry.features.activity import (BUSY_SHARE_FLOOR, DUTY_FREE_METRICS, duty_bound, duty_free,
                                           duty_free_column, duty_free_columns)

DATA = Path(__file__).resolve().parents[2] / "data"


def test_level_over_busy_share_with_a_floor_and_nan_where_missing():
    X = pd.DataFrame({"act.util_pct.mean.max": [50.0, 100.0, 0.0, np.nan],
                      "act.gpm_tensor_util_pct.mean.max": [30.0, 30.0, 1.0, 30.0]})
    out = duty_free(X)
    col = duty_free_column("gpm_tensor_util_pct", "mean")
    assert out[col].iloc[:3].tolist() == pytest.approx([60.0, 30.0, 1.0 / BUSY_SHARE_FLOOR])
    assert np.isnan(out[col].iloc[3])                                    # no utilisation: no share
    assert out[duty_free_column("gpm_dram_bw_util_pct", "mean")].isna().all()   # metric not recorded
    assert "act.gpm_tensor_util_pct.mean_busy.max" not in X.columns      # the caller's frame is left alone
    # always recomputed from the levels: a stale derived value is replaced, text that is no number is NaN
    stale = out.assign(**{"act.util_pct.mean.max": ["25", "oops", 100.0, 50.0]})
    again = duty_free(stale)
    assert again[col].iloc[0] == pytest.approx(120.0) and np.isnan(again[col].iloc[1])
    assert again[col].iloc[3] == pytest.approx(60.0)
    assert stale[col].iloc[0] == pytest.approx(60.0)                     # the input frame keeps its values


def test_duty_bound_names_the_levels_that_scale_with_the_duty_cycle():
    assert "mem_util_pct" in DUTY_FREE_METRICS and len(duty_free_columns()) == len(DUTY_FREE_METRICS)
    for m in DUTY_FREE_METRICS:
        for stat in ("mean", "p05", "p95", "std"):
            assert duty_bound(f"act.{m}.{stat}.max")
        assert not duty_bound(f"act.{m}.cv.max") and not duty_bound(duty_free_column(m, "mean"))
        assert not duty_bound(f"act.{m}.mean.mean")                      # not the busiest GPU's
    for level in ("power_W.mean", "power_W.p95", "energy_W.mean", "temp_c.mean", "tensor_per_kW"):
        assert duty_bound(f"act.{level}.max")                            # no duty-free form: left out
    for kept in ("util_pct.mean", "util_pct.idle_frac", "power_W.acf_peak", "power_W.cv", "tensor_per_dram",
                 "mem_GiB.mean", "sm_clock_mhz.mean"):
        assert not duty_bound(f"act.{kept}.max"), kept


def _median(dataset: str, run_id: str) -> pd.Series:
    df = load_run(DATA / dataset / run_id, None).windows["trainsentry"]
    return duty_free(df[df["in_run"].astype(bool)]).median(numeric_only=True)


@pytest.mark.parametrize("run_id", ["infer.embed.l1b_b128_l1024_x2-8dc6a2-r0",    # fixed 0.25 s gaps
                                    "infer.embed.l1b_b128_l1024_x2-0e84ba-r0",    # fixed 1 s
                                    "infer.embed.l1b_b128_l1024_x2-313245-r0",    # exponential, mean 1 s
                                    "infer.embed.l1b_b128_l1024_x2-9651f8-r0"])   # fixed 2 s
def test_idle_gaps_lower_the_level_not_the_intensity(run_id):
    """The same 0.9 B encoder on the same H200: without gaps it keeps the GPU busy (data/h200x1);
    with them NVML utilisation falls to 20-65 % and the tensor, occupancy, DRAM and NVML memory-activity
    levels with it, while the duty-free values stay within 15 % of the gapless run's."""
    full = _median("h200x1", "infer.embed.l1b_b128_l1024_x2-base-r0")
    gapped = _median("h200x1-host", run_id)
    assert gapped["act.util_pct.mean.max"] < 0.7 * full["act.util_pct.mean.max"]
    for m in ("gpm_tensor_util_pct", "gpm_sm_occupancy_pct", "gpm_dram_bw_util_pct", "mem_util_pct"):
        level, busy = f"act.{m}.mean.max", duty_free_column(m, "mean")
        assert gapped[level] < 0.7 * full[level], m
        assert gapped[busy] == pytest.approx(full[busy], rel=0.15), m


@pytest.mark.parametrize("run_id", ["infer.embed.l1b_b128_l1024_x2-0e84ba-r0",    # fixed 1 s gaps
                                    "infer.embed.l1b_b128_l1024_x2-9651f8-r0"])   # fixed 2 s
def test_power_levels_have_no_duty_free_form(run_id):
    """Why power, and tensor activity per kW, are left out rather than divided (DUTY_BOUND_NO_FORM): the
    same encoder with 1-2 s gaps draws less power on average, but power divided by the busy share
    overshoots the gapless run's by far more than the GPM values drift (power sits on an idle floor and
    stays raised after the work), and its tensor activity per kW falls to single-GPU training's value
    or below it."""
    full = _median("h200x1", "infer.embed.l1b_b128_l1024_x2-base-r0")
    gapped = _median("h200x1-host", run_id)
    train = _median("h200x1", "train.single.w1024-l16-base-r0")
    share = gapped["act.util_pct.mean.max"] / 100.0
    assert gapped["act.power_W.mean.max"] < 0.6 * full["act.power_W.mean.max"]
    assert gapped["act.power_W.mean.max"] / share > 1.4 * full["act.power_W.mean.max"]
    assert duty_bound("act.power_W.mean.max") and duty_bound("act.tensor_per_kW.max")
    assert full["act.tensor_per_kW.max"] > 1.4 * train["act.tensor_per_kW.max"]          # gapless: apart
    assert gapped["act.tensor_per_kW.max"] < 1.15 * train["act.tensor_per_kW.max"]      # gapped: at or below
