"""comm-rules on feature rows shaped like the workloads it used to confuse (docs/detector.md)."""

import numpy as np
import pandas as pd
import pytest

from trainsentry.detect.rules import CommRules


def _nvlink(bps=5e9, sym=1.0, duty=1.0, steady=0.9, acf=0.05, bpj=7.0, coactive=1.0, oneway=0.0):
    return {"comm.nvlink.Bps.min": bps, "comm.nvlink.sym.min": sym, "comm.nvlink.duty.min": duty,
            "comm.nvlink.steady.min": steady, "comm.nvlink.acf_peak.min": acf, "comm.nvlink.oneway_bins.min": oneway,
            "comm.nvlink.log_bytes_per_J.mean": bpj, "comm.nvlink.coactive": coactive,
            "comm.nvlink.simult_corr": coactive}


def _p(*rows):
    return CommRules().predict_proba(pd.DataFrame(list(rows)))


def test_continuous_steady_exchange_is_training_and_a_servers_continuous_mix_is_not():
    # data-parallel steps shorter than a bin: busy and steady; tensor-parallel serving: busy, unsteady
    ddp, tp_serving = _p(_nvlink(steady=0.9), _nvlink(steady=0.3, bps=2.3e9))
    assert ddp > 0.9 and tp_serving < 0.1


def test_periodic_exchange_is_regular_however_unsteady_its_bins():
    # steps longer than a bin: bursts at the step rate (edge bins make the burst bins unsteady)
    (p,) = _p(_nvlink(duty=0.5, steady=0.3, acf=0.85))
    assert p > 0.9


def test_gradients_staged_through_host_memory_show_on_pcie():
    # each GPU copies its gradients out and the reduced ones back: symmetric PCIe, no NVLink
    host = {"comm.nvlink.Bps.min": 0.0, "comm.pcie.Bps.min": 9e8, "comm.pcie.sym.min": 0.81,
            "comm.pcie.duty.min": 0.9, "comm.pcie.steady.min": 0.2, "comm.pcie.acf_peak.min": 0.45,
            "comm.pcie.log_bytes_per_J.mean": 7.1, "comm.pcie.coactive": 0.8, "comm.pcie.simult_corr": 0.5}
    loading = {**host, "comm.pcie.sym.min": 0.15}   # host -> device input batches: one-way
    p_host, p_loading = _p(host, loading)
    assert p_host > 0.75 and p_loading < 0.05
    ev = " ".join(CommRules().explain(host))
    assert "PCIe" in ev and "steadiness" in ev


def test_absent_steadiness_is_no_evidence_of_regularity():
    row = _nvlink(acf=0.0)
    del row["comm.nvlink.steady.min"]
    (p,) = _p(row)
    assert p < 0.05
    assert np.isfinite(p)


def test_a_busy_network_exchange_stays_regular_however_jittered_its_host_timed_steps():
    # gloo DDP between CPU ranks: steps timed by a busy scheduler, not by GPU kernels
    net = {"comm.net.Bps": 4e8, "comm.net.sym": 1.0, "comm.net.duty": 1.0, "comm.net.steady": 0.66,
           "comm.net.acf_peak": 0.1}
    (p,) = _p(net)
    assert p > 0.9


def test_pipeline_training_alternates_and_pipeline_inference_only_sends_forward():
    # the dataset's 1F1B / GPipe runs: ~0.4 GB/s point-to-point, one way per bin (0.2-0.9), as many
    # bytes back (gradients) as forward (activations); unsteady bins, weak autocorrelation
    pp_train = _nvlink(bps=4e8, sym=0.99, steady=0.6, acf=0.25, oneway=0.22)
    pp_infer = _nvlink(bps=4e8, sym=0.0, steady=0.0, acf=0.25, oneway=1.0)      # activations forward only
    tp_serving = _nvlink(bps=2.3e9, sym=1.0, steady=0.4, acf=0.15, oneway=0.0)  # all-reduce: both ways per bin
    p_train, p_infer, p_serve = _p(pp_train, pp_infer, tp_serving)
    assert p_train > 0.9
    assert p_infer < 0.01 and p_serve < 0.1
    assert "one way per bin" in " ".join(CommRules().explain(pp_train))


def test_the_volume_threshold_rises_only_for_a_material_gain():
    train = [_nvlink(bps=5e9)] * 50
    few = [_nvlink(bps=2e8)] + [_nvlink(bps=0.0)] * 199        # one server ramp window at 200 MB/s
    many = [_nvlink(bps=2e8)] * 100 + [_nvlink(bps=0.0)] * 100  # half of the negatives at 200 MB/s
    y = np.array([1] * 50 + [0] * 200)
    low = CommRules().fit(pd.DataFrame(train + few), y)
    assert low.volume_Bps == 1e6 and low.calibration["best_balanced_accuracy_on_fit"] > low.calibration[
        "balanced_accuracy_on_fit"]
    high = CommRules().fit(pd.DataFrame(train + many), y)
    assert 2e8 < high.volume_Bps <= 5e9


def test_keep_training_holds_the_threshold_below_the_training_it_would_cut():
    # benign exchange at 1 GB/s beside training at 0.5-5 GB/s: the plain fit rises above the benign
    # volume and drops the slower training with it; keep_training refuses a rise that costs training
    train = [_nvlink(bps=5e9)] * 40 + [_nvlink(bps=5e8)] * 10
    benign = [_nvlink(bps=1e9)] * 100 + [_nvlink(bps=0.0)] * 100
    X, y = pd.DataFrame(train + benign), np.array([1] * 50 + [0] * 200)
    plain = CommRules().fit(X, y)
    assert 5e8 < plain.volume_Bps <= 5e9 and (plain.predict_proba(X)[40:50] < 0.5).all()
    kept = CommRules(keep_training=0.01).fit(X, y)
    assert kept.volume_Bps < 5e8 and kept.describe()["keep_training"] == 0.01
    assert (kept.predict_proba(X)[:50] >= 0.5).all()

    with pytest.raises(ValueError, match="keep_training"):
        CommRules(keep_training=-0.01)
