"""The single-device check (detect.single_device) on recorded H200 runs: fitted on a few runs of the
2-GPU node, it judges runs of the one-GPU node (data/h200x1: another machine, configurations the fit
never had) where a GPU is busy, and says nothing elsewhere."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainsentry.detect.base import load_detector, save_detector
from trainsentry.detect.dataset import load_run, stack
from trainsentry.detect.single_device import SingleDeviceCheck, load

DATA = Path(__file__).resolve().parents[2] / "data"
FIT = ["train.single.w1024-l16-base-r0", "train.single.w2048-l24-base-r0", "train.ddp.w1024-l16-base-r0",
       "infer.generate.g7b_b16-base-r0", "infer.generate.l1b_b256-base-r0", "infer.generate.m350m_b128-base-r0",
       "infer.serve.xl3b_r1_idle-base-r0", "other.idle.bare-base-r0", "other.memcpy.d2d_1g-base-r0"]


def _in_run(run):
    df = run.windows[SingleDeviceCheck.feature_set]
    return df[df["in_run"]].reset_index(drop=True)


@pytest.fixture(scope="module")
def check():
    runs = [load_run(DATA / "h200" / r, None) for r in FIT]
    X, y, classes, ids = stack(runs, SingleDeviceCheck.feature_set)
    return SingleDeviceCheck().fit(X, y, groups=ids, classes=classes)


def _lines(check, dataset, run_id):
    return check.lines(_in_run(load_run(DATA / dataset / run_id, None)))


@pytest.mark.parametrize("run_id", ["train.single.w1024-l16-6816dd-r0",     # SGD: no optimizer state
                                    "train.single.w2048-l24-707643-r0"])    # 2.7 B parameters
def test_unseen_single_device_training_reads_like_training(check, run_id):
    lines = _lines(check, "h200x1", run_id)
    assert all(line is not None for line in lines)          # gate closed, GPU busy: every window spoken
    like = [": like training" in line for line in lines]
    assert np.mean(like) >= 0.8, lines


def test_unseen_decode_does_not(check):
    lines = _lines(check, "h200x1", "infer.generate.m350m_b128-ccf1ab-r0")   # a 5.6 B model, batch 64
    assert all(line is not None and line.endswith(": not like training") for line in lines), lines


def test_silent_where_nothing_is_busy(check):
    run = "other.idle.bare-base-r0"
    assert _lines(check, "h200x1", run) == [None] * len(_in_run(load_run(DATA / "h200x1" / run, None)))


def test_it_speaks_where_the_gpus_exchange_too_unless_told_not_to(check):
    """DDP on two GPUs passes the exchange gate in every window: the check reads its busy GPUs all the
    same (a training GPU's activity does not depend on whom it exchanges with), and the form used until
    2026-12-04 (``on_exchange=False``) leaves such windows to the verdict's detector."""
    from trainsentry.detect.rules import exchange_gate
    df = _in_run(load_run(DATA / "h200" / "train.ddp.w1024-l16-base-r1", None))
    assert (exchange_gate(df)[0] >= 0.5).all()
    lines = check.lines(df)
    assert all(line is not None for line in lines) and np.mean([": like training" in x for x in lines]) >= 0.8
    gated = check.speaking_on_exchange(False)
    assert gated.required_ == check.required_ and check.speaking_on_exchange(True).lines(df) == lines
    assert gated.lines(df) == [None] * len(df)
    assert check.describe()["on_exchange"] and not gated.describe()["on_exchange"]


@pytest.mark.parametrize("run_id", ["train.single.w1024-l16-base-r0", "infer.generate.m350m_b128-ccf1ab-r0"])
def test_silent_on_a_gpu_without_gpm_counters(check, run_id):
    """Busy by NVML utilisation, but no tensor-core or DRAM activity (a GPU or agent without GPM): the
    trees would read power and utilisation alone, and called most inference training that way."""
    df = _in_run(load_run(DATA / "h200x1" / run_id, None))
    no_gpm = df.drop(columns=[c for c in df.columns if "gpm_" in c or c.startswith("act.tensor_per_")])
    assert (no_gpm["act.util_pct.mean.max"] > 5).all()
    assert check.lines(no_gpm) == [None] * len(no_gpm)
    assert all(line is not None for line in check.lines(df))     # the same windows, GPM there: judged


def test_predict_proba_is_the_lead_where_it_speaks_and_zero_elsewhere(check):
    df = pd.concat([_in_run(load_run(DATA / "h200x1" / r, None))
                    for r in ("train.single.w2048-l24-707643-r0", "other.idle.bare-base-r0")], ignore_index=True)
    p, lines = check.predict_proba(df), check.lines(df)
    assert len(p) == len(df)
    silent = np.array([line is None for line in lines])
    assert silent.any() and (~silent).any()
    assert (p[silent] == 0).all()
    spoken = [float(line.split("P(training) = ")[1][:4]) for line in lines if line is not None]
    assert np.allclose(p[~silent], spoken, atol=0.005)
    assert ((p[~silent] >= check.threshold) == [": like training" in line for line in lines if line]).all()


def test_saved_and_loaded_as_the_live_collector_does(check, tmp_path):
    path = save_detector(check, tmp_path / "single-device.joblib", "test")
    again = load(path)
    df = _in_run(load_run(DATA / "h200x1" / "train.single.w1024-l16-base-r0", None))
    assert again.lines(df) == check.lines(df)
    with pytest.raises(ValueError, match="not a fitted single-device check"):
        load(save_detector(load_detector(Path(__file__).resolve().parents[2] / "models" / "fused.joblib"),
                           tmp_path / "fused.joblib", "test"))


def test_a_check_needing_columns_this_code_does_not_derive_is_refused(check, tmp_path):
    """A check fitted by newer code on a derived column this code lacks would find it missing in every
    window and never speak; loading it says so instead."""
    import copy
    newer = copy.deepcopy(check)
    assert any("_busy." in c for c in newer.trees.cols_)                 # it reads duty-free columns
    newer.trees.cols_ = [*newer.trees.cols_, "act.gpm_fp64_util_pct.mean_busy.max"]
    with pytest.raises(ValueError, match="does not derive.*gpm_fp64_util_pct"):
        load(save_detector(newer, tmp_path / "newer.joblib", "test"))
    assert load(save_detector(check, tmp_path / "now.joblib", "test")).trees.cols_ == check.trees.cols_


# the 38 columns of the lead committed at 49bb577 (models/single-device.joblib at that revision, cols_)
COLS_49BB577 = [
    "act.energy_W.mean.max", "act.gpm_dram_bw_util_pct.cv.max", "act.gpm_dram_bw_util_pct.mean_busy.max",
    "act.gpm_sm_occupancy_pct.cv.max", "act.gpm_sm_occupancy_pct.mean_busy.max", "act.gpm_sm_util_pct.acf_peak.max",
    "act.gpm_sm_util_pct.cv.max", "act.gpm_sm_util_pct.mean_busy.max", "act.gpm_tensor_util_pct.cv.max",
    "act.gpm_tensor_util_pct.mean_busy.max", "act.mem_GiB.mean.max", "act.mem_GiB.range.max",
    "act.mem_GiB.slope_per_s.max", "act.mem_clock_mhz.mean.max", "act.mem_util_pct.cv.max", "act.mem_util_pct.mean.max",
    "act.mem_util_pct.p05.max", "act.mem_util_pct.p95.max", "act.mem_util_pct.std.max", "act.power_W.acf_peak.max",
    "act.power_W.cv.max", "act.power_W.mean.max", "act.power_W.p05.max", "act.power_W.p95.max",
    "act.power_W.period_s.max", "act.power_W.spec_peak.max", "act.power_W.std.max", "act.sm_clock_mhz.mean.max",
    "act.temp_c.mean.max", "act.tensor_per_dram.max", "act.tensor_per_kW.max", "act.util_pct.cv.max",
    "act.util_pct.idle_frac.max", "act.util_pct.mean.max", "act.util_pct.p05.max", "act.util_pct.p95.max",
    "act.util_pct.std.max", "act.util_pct.transitions_hz.max"]


def test_the_earlier_rules_select_the_columns_they_were_fitted_on():
    """`fused+single-device-gpm` reproduces the 49bb577 lead's columns; the current trees drop every
    duty-bound level and read the five duty-free means instead."""
    from trainsentry.detect.single_device import BusiestGpuActivity
    from trainsentry.detect.variants import GpmDutyFree
    from trainsentry.features.activity import duty_bound, duty_free, duty_free_columns
    cols = duty_free(_in_run(load_run(DATA / "h200x1" / "train.single.w1024-l16-base-r0", None))).columns
    assert sorted(c for c in cols if GpmDutyFree().uses(c)) == COLS_49BB577
    from trainsentry.detect.variants import GpmLevels
    from trainsentry.features.activity import is_tensor_share_column
    assert any(is_tensor_share_column(c) for c in cols)          # version 4 computes it; no earlier rule reads it
    assert not any(is_tensor_share_column(c) for c in cols if GpmLevels().uses(c) or BusiestGpuActivity().uses(c))
    now = [c for c in cols if BusiestGpuActivity().uses(c)]
    assert set(duty_free_columns()) <= set(now) and not any(duty_bound(c) for c in now)
    assert set(now) - set(duty_free_columns()) < set(COLS_49BB577)


def test_the_live_gated_variant_reads_fused_alone_where_the_live_check_is_silent(tmp_path):
    """`fused+single-device-live` adds the single-device check only where the live collector would
    show it (busy above 5 %, features present, in domain): on an idle run it is `fused`
    exactly; on unseen single-GPU training it is at least the check's P; the ungated variant reads
    the trees on idle windows too."""
    from trainsentry.detect.variants import VARIANTS
    runs = [load_run(DATA / "h200" / r, None) for r in FIT]
    X, y, classes, ids = stack(runs, SingleDeviceCheck.feature_set)
    live = VARIANTS["fused+single-device-live"]().fit(X, y, groups=ids, classes=classes)
    idle = _in_run(load_run(DATA / "h200x1" / "other.idle.bare-base-r0", None))
    assert not live.single.judged(idle).any()
    assert np.array_equal(live.predict_proba(idle), live.multi.predict_proba(idle))
    train = _in_run(load_run(DATA / "h200x1" / "train.single.w1024-l16-6816dd-r0", None))
    p = live.predict_proba(train)
    assert live.single.judged(train).all() and np.all(p >= live.single.predict_proba(train))
    assert live.name == "fused+single-device-live"


def test_the_noconv_variant_fits_its_trees_without_the_convolutional_runs():
    """`fused+single-device-noconv` fits `fused` on every run and the single-device trees as if the
    convolutional runs were not there: its trees read exactly what trees fitted without them read."""
    from trainsentry.detect.single_device import BusiestGpuActivity
    from trainsentry.detect.variants import VARIANTS
    runs = [load_run(DATA / "h200" / r, None) for r in FIT]
    conv = [load_run(DATA / "h200x1-vision" / r, None) for r in ("train.convnet.r50_b256-base-r0",
                                                                 "infer.vision.r50_b256-base-r0")]
    X, y, classes, ids = stack(runs + conv, SingleDeviceCheck.feature_set)
    Xa, ya, ca, ia = stack(runs, SingleDeviceCheck.feature_set)
    v = VARIANTS["fused+single-device-noconv"]().fit(X, y, groups=ids, classes=classes)
    ref = BusiestGpuActivity().fit(Xa, ya, ia, ca)
    with_conv = BusiestGpuActivity().fit(X, y, ids, classes)
    assert np.array_equal(v.single.predict_proba(X), ref.predict_proba(X))
    assert not np.array_equal(with_conv.predict_proba(X), ref.predict_proba(X))   # the runs left out mattered
    assert v.name == "fused+single-device-noconv"
    with pytest.raises(ValueError, match="groups"):
        VARIANTS["fused+single-device-noconv"]().fit(X, y)


def test_the_nodecode_variant_leaves_a_dataset_out_by_its_folder():
    """`fused+single-device-noconv-nodecode` leaves out of the trees' fit the runs whose id names the
    decode dataset's folder (run ids carry their root when the evaluation reads several), as well as the
    convolutional ones; a run of the same workload from another folder stays in."""
    from dataclasses import replace

    from trainsentry.detect.single_device import BusiestGpuActivity
    from trainsentry.detect.variants import VARIANTS
    runs = [load_run(DATA / "h200" / r, None) for r in FIT]
    decode = [replace(load_run(DATA / "h200x1-decode" / r, None), run_id=f"data/h200x1-decode/{r}")
              for r in ("infer.generate.g7b_b16-faec4e-r0", "train.single.w2048-l24-2772b5-r0")]
    X, y, classes, ids = stack(runs + decode, SingleDeviceCheck.feature_set)
    Xa, ya, ca, ia = stack(runs, SingleDeviceCheck.feature_set)
    v = VARIANTS["fused+single-device-noconv-nodecode"]().fit(X, y, groups=ids, classes=classes)
    ref = BusiestGpuActivity().fit(Xa, ya, ia, ca)
    assert np.array_equal(v.single.predict_proba(X), ref.predict_proba(X))
    assert v.name == "fused+single-device-noconv-nodecode"


def test_the_live_noconv_variant_gates_a_check_fitted_without_the_convolutional_runs():
    """`fused+single-device-live-noconv`, the live verdict's pair: `fused` on every run and the live-gated
    check fitted as if the convolutional runs were not there (the committed check is fitted so)."""
    from trainsentry.detect.variants import VARIANTS
    runs = [load_run(DATA / "h200" / r, None) for r in FIT]
    conv = [load_run(DATA / "h200x1-vision" / r, None) for r in ("train.convnet.r50_b256-base-r0",
                                                                 "infer.vision.r50_b256-base-r0")]
    X, y, classes, ids = stack(runs + conv, SingleDeviceCheck.feature_set)
    Xa, ya, ca, ia = stack(runs, SingleDeviceCheck.feature_set)
    v = VARIANTS["fused+single-device-live-noconv"]().fit(X, y, groups=ids, classes=classes)
    ref = SingleDeviceCheck().fit(Xa, ya, ia, ca)
    assert np.array_equal(v.single.predict_proba(X), ref.predict_proba(X))
    assert np.array_equal(v.predict_proba(X), np.maximum(v.multi.predict_proba(X), ref.predict_proba(X)))
    assert v.name == "fused+single-device-live-noconv"
    with pytest.raises(ValueError, match="groups"):
        VARIANTS["fused+single-device-live-noconv"]().fit(X, y)


LOW_DUTY = DATA / "redteam-x1" / "adv.throttle.dit-b-lowutil-5022a8-r0"   # DiT-B/2 held to 10 % duty: 2.8 % busy


def test_below_the_floor_the_line_bounds_the_work_instead_of_a_p(check):
    """The red team's DiT trainer held under the busy floor: no P in any window, and each window's
    line bounds its tensor-core work by activity × span × peak; over the run that bound holds against
    the work its ledger recorded (nothing masked in the DiT's attention)."""
    from trainsentry.detect.single_device import below_floor, below_floor_flops
    from trainsentry.flops.features import PEAK_AT_FEATURE_CLOCK, PEAK_FP8_AT_FEATURE_CLOCK, interval_features
    from trainsentry.traces.io import read_trace
    df = _in_run(load_run(LOW_DUTY, None))
    low = below_floor(df)
    assert low.all() and (df["act.util_pct.mean.max"] <= 5).all()
    assert check.scores(df) == [None] * len(df) and (check.predict_proba(df) == 0).all()
    flops = below_floor_flops(df)
    # at the FP8 peak: GPM counts an FP8 matmul's busy cycles as a BF16 one's (docs/below-floor.md)
    want = df["act.gpm_tensor_util_pct.mean.max"] / 100 * (df["t_end"] - df["t_start"]) * PEAK_FP8_AT_FEATURE_CLOCK
    assert np.allclose(flops, want) and (flops > 0).all()
    for line, f in zip(check.lines(df), flops):
        assert line.startswith("single-device check: the busiest GPU ran kernels ") and "under the 5 % floor" in line
        assert f"at most {f / 1e12:.1f} TFLOP of tensor-core work" in line and f"{f / 2e12:.1f} if the work was BF16" in line
    table, m = read_trace(LOW_DUTY)
    bound = interval_features(table, float(m["start"]), float(m["end"])).tensor_active_s * PEAK_AT_FEATURE_CLOCK
    recorded = float(m["ground_truth"]["flops"])   # a BF16 trainer: within the BF16 half of the bound
    assert recorded <= bound <= 1.2 * recorded, (recorded, bound)


def test_no_floor_line_where_the_gpu_is_idle_or_busy(check):
    """An idle GPU (a stray 1 % sample, GPM's noise) gets no line; a busy one gets the trees' P."""
    idle = _lines(check, "h200x1", "other.idle.bare-base-r0")
    assert idle == [None] * len(idle)
    busy = _lines(check, "h200x1", "train.single.w1024-l16-base-r0")
    assert all(line is not None and "P(training) = " in line for line in busy)


def test_the_floor_bound_sums_a_nodes_gpus_when_it_knows_them(check):
    """With the node's GPU count the bound is their mean activity times their number: the busiest GPU's
    alone when the others did nothing, twice it when two did as much; without a count, the busiest's."""
    from trainsentry.detect.single_device import TENSOR_COL, TENSOR_MEAN_COL, below_floor_flops
    df = _in_run(load_run(LOW_DUTY, None))
    one = below_floor_flops(df)
    half = df.assign(**{TENSOR_MEAN_COL: df[TENSOR_COL] / 2})    # a second GPU idle beside the busy one
    assert np.allclose(below_floor_flops(half, gpus=2), one)
    both = df.assign(**{TENSOR_MEAN_COL: df[TENSOR_COL]})        # two GPUs equally busy
    assert np.allclose(below_floor_flops(both, gpus=2), 2 * one)
    assert np.allclose(below_floor_flops(both, gpus=None), one) and np.allclose(below_floor_flops(both, gpus=1), one)
    lines = check.lines(both, gpus=2)
    assert all("on its 2 GPUs in this window" in line for line in lines), lines[0]
    assert check.floor_bounds(both, gpus=2) == pytest.approx(list(2 * one))
