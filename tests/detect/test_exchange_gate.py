"""The exchange gate in front of the learned detectors (rules.exchange_gate)."""

import numpy as np
import pandas as pd
import pytest

from trainsentry.detect.dataset import load_dataset, stack
from trainsentry.detect.learned import LearnedDetector, fused
from trainsentry.detect.rules import exchange_gate


@pytest.fixture(scope="module")
def runs(tiny_dataset, feature_cache):
    return load_dataset(tiny_dataset, feature_cache)


def _row(ch, bps, sym, coactive=1.0, bpj=7.0):
    sfx = ".min" if ch != "net" else ""
    row = {f"comm.{ch}.Bps{sfx}": bps, f"comm.{ch}.sym{sfx}": sym,
           f"comm.{ch}.log_bytes_per_J" + (".mean" if ch != "net" else ""): bpj}
    if ch != "net":
        row.update({f"comm.{ch}.coactive": coactive, f"comm.{ch}.simult_corr": coactive})
    return row


def test_gate_opens_on_a_collective_on_any_channel_and_stays_shut_otherwise():
    rows = [_row("nvlink", 5e9, 1.0),                   # data-parallel all-reduce
            _row("pcie", 9e8, 0.8, coactive=0.8),       # gradients staged through host memory
            _row("net", 5e8, 0.95),                      # gradients between nodes
            _row("nvlink", 5e9, 0.0),                    # prefill -> decode hand-off: one-way
            _row("nvlink", 0.0, float("nan")),           # no traffic (replicas, matmul burn)
            _row("pcie", 4e7, 0.2),                      # PCIe chatter and input batches
            {},                                          # nothing measured
            _row("nvlink", 1.4e11, 1.0, bpj=9.09)]       # the dataset's NCCL sweep: bytes, not compute
    g, _ = exchange_gate(pd.DataFrame(rows))
    assert np.all(g[:3] > 0.8)
    assert np.all(g[3:7] < 0.01)
    assert g[7] < 0.3   # caps P(training) below the alert threshold (0.75) whatever the trees say


def test_a_closed_gate_overrides_trees_that_learned_the_wrong_thing(runs):
    # label the one-way sends "training": trees learn to call them training; the gate does not
    X, y, classes, ids = stack(runs, "trainsentry")
    send = np.array([c == "inference" for c in classes])
    wrong = np.where(send, 1, y)
    ungated = LearnedDetector("fused", ("comm.", "act."), gate=False).fit(X, wrong)
    gated = LearnedDetector("fused", ("comm.", "act."), gate=True, fit_on="all").fit(X, wrong)
    assert np.median(ungated.predict_proba(X[send])) > 0.9
    assert np.max(gated.predict_proba(X[send])) < 0.05
    ddp = np.array([c == "training" for c in classes])
    assert np.median(gated.predict_proba(X[ddp])) > 0.9


def test_the_gate_is_part_of_the_evidence(runs):
    X, y, classes, ids = stack(runs, "trainsentry")
    det = fused().fit(X, y, groups=ids, classes=classes)
    one_way = X[np.array([c == "inference" for c in classes])].iloc[5].to_dict()
    ev = det.explain(one_way)
    assert "exchange gate" in ev[1] and float(ev[1].split()[2]) < 0.1
    assert det.describe()["exchange_gate"] is True
    assert det.describe()["fit_on"] == "all"   # trees learn from every window; the gate still multiplies


def test_fit_on_is_checked():
    with pytest.raises(ValueError):
        LearnedDetector("x", ("comm.",), fit_on="some")


def test_the_gate_and_comm_rules_share_one_definition_of_an_exchange():
    # one copy of the volume / symmetry / simultaneity / compute-bound logic (rules.exchange_factors):
    # comm-rules adds its regularity rule to exactly these factors, at its own thresholds
    from trainsentry.detect.rules import CHANNELS, CommRules, exchange_factors
    X = pd.DataFrame([_row("nvlink", 5e9, 1.0), _row("pcie", 9e8, 0.8, coactive=0.8), _row("net", 5e8, 0.95),
                      _row("nvlink", 5e9, 0.0), _row("nvlink", 1.4e11, 1.0, bpj=9.09)])
    rules = CommRules()
    for ch in CHANNELS:
        f = rules._factors(X, ch)
        shared = exchange_factors(X, ch, rules.volume_Bps, rules.sym_min, rules.simult_min, rules.bytes_per_J_max)
        assert set(f) == set(shared) | {"regularity"}
        for k, v in shared.items():
            np.testing.assert_array_equal(f[k], v)


def _shape(row, duty=1.0, steady=float("nan"), acf=0.0, oneway=0.0):
    """Add the regularity features of the NVLink channel (worst GPU) to a row."""
    return {**row, "comm.nvlink.duty.min": duty, "comm.nvlink.steady.min": steady,
            "comm.nvlink.acf_peak.min": acf, "comm.nvlink.oneway_bins.min": oneway}


def test_the_regular_gate_variant_closes_on_request_driven_all_reduces_and_opens_on_training_steps():
    # the gate of detect.variants' fused-regular (tried, not kept)
    ex = _row("nvlink", 3e9, 1.0)
    rows = [_shape(ex, duty=1.0, steady=0.87, acf=0.10),               # DDP steps shorter than a bin: steady
            _shape(ex, duty=0.6, steady=0.4, acf=0.85),                # steps longer than a bin: periodic
            _shape(ex, duty=0.9, steady=0.6, acf=0.25, oneway=0.3),    # pipeline: forward, then back
            _shape(ex, duty=1.0, steady=0.31, acf=0.18),               # TP serving: volume follows the requests
            _shape(ex, duty=1.0, steady=0.0, acf=0.02),                # TP decode, batch changing
            _shape(ex, duty=1.0, steady=0.63, acf=0.19)]               # TP serving at 20 requests/s
    plain, _ = exchange_gate(pd.DataFrame(rows))
    regular, ch = exchange_gate(pd.DataFrame(rows), regular=True)
    assert np.all(plain > 0.9)              # every one is a symmetric, simultaneous exchange
    assert np.all(regular[:3] > 0.9) and np.all(ch[:3] == 0)
    assert np.all(regular[3:] < 0.1)


def test_comm_rules_and_the_regular_gate_share_one_regularity_rule():
    from trainsentry.detect.rules import CHANNELS, CommRules, regularity_factor
    ex = _row("nvlink", 3e9, 1.0)
    X = pd.DataFrame([_shape(ex, steady=0.87, acf=0.1), _shape(ex, steady=0.3, acf=0.18),
                      _shape(ex, duty=0.5, steady=0.2, acf=0.6), _shape(ex, steady=0.4, oneway=0.4)])
    rules = CommRules()
    for ch in CHANNELS:
        np.testing.assert_array_equal(rules._factors(X, ch)["regularity"], regularity_factor(X, ch))


def _decode(row, tpd, **shape):
    return {**_shape(row, **shape), "act.tensor_per_dram.max": tpd}


def test_the_decode_veto_closes_on_tp_decode_and_on_nothing_training_does():
    ex = _row("nvlink", 3e9, 1.0)
    rows = [_decode(ex, 0.39, duty=1.0, steady=0.31, acf=0.18),              # TP serving: memory-bound, request mix
            _decode(ex, 0.10, duty=1.0, steady=0.0, acf=0.01),               # TP decode at batch 1
            _decode(ex, 0.37, duty=1.0, steady=0.63, acf=0.19),              # TP serving at 20 requests/s
            _decode(ex, 1.07, duty=1.0, steady=0.87, acf=0.10),              # DDP, steps shorter than a bin
            _decode(ex, 0.46, duty=1.0, steady=0.65, acf=0.89),              # narrow DDP: memory-bound, periodic
            _decode(ex, 0.71, duty=1.0, steady=0.50, acf=0.62),              # TP training
            _decode(ex, 1.00, duty=0.9, steady=0.6, acf=0.25, oneway=0.3),   # pipeline training
            _decode(ex, 1.10, duty=0.04, acf=0.0),                           # DiLoCo: one sync in the window
            _decode(ex, 1.10, duty=0.60, steady=0.0, acf=0.02),              # training under decoy traffic
            _decode(ex, 1.10, duty=1.0, steady=0.2, acf=0.05),               # ... continuous decoy, compute-dense
            _shape(ex, duty=1.0, steady=0.3, acf=0.1)]                       # no GPM reading: no evidence of decode
    plain, _ = exchange_gate(pd.DataFrame(rows))
    veto, _ = exchange_gate(pd.DataFrame(rows), decode_veto="memory_bound")
    comm, _ = exchange_gate(pd.DataFrame(rows), decode_veto="comm")
    assert np.all(plain > 0.9)
    assert np.all(veto[:3] < 0.2) and np.all(veto[3:] > 0.9)   # caps P(training) far below the alert threshold
    # communication alone: continuous and irregular, whatever the GPUs compute
    assert np.all(comm[:3] < 0.2) and np.all(comm[[3, 4, 5, 6, 7, 8]] > 0.9) and np.all(comm[[9, 10]] < 0.2)
    with pytest.raises(ValueError):
        exchange_gate(pd.DataFrame(rows), decode_veto="sometimes")


def test_the_decode_veto_reads_the_channel_that_exchanges():
    # a continuous, irregular NVLink exchange of memory-bound GPUs beside a regular, one-way PCIe
    # trickle: the other channel's regularity does not reopen the gate, and the network is not vetoed
    row = _decode(_row("nvlink", 3e9, 1.0), 0.4, duty=1.0, steady=0.2, acf=0.05)
    row.update({"comm.pcie.Bps.min": 5e7, "comm.pcie.sym.min": 0.0, "comm.pcie.duty.min": 1.0,
                "comm.pcie.steady.min": 0.99, "comm.pcie.acf_peak.min": 0.9})
    net = {**_row("net", 5e8, 0.95), "comm.net.duty": 1.0, "comm.net.acf_peak": 0.0, "act.tensor_per_dram.max": 0.4}
    veto, ch = exchange_gate(pd.DataFrame([row, net]), decode_veto="memory_bound")
    assert veto[0] < 0.1
    assert veto[1] > 0.9 and ch[1] == 2


def test_the_learned_detectors_veto_decode(runs):
    from trainsentry.detect.learned import comm_ml
    from trainsentry.detect.variants import VARIANTS
    assert comm_ml().describe()["decode_veto"] == "comm" and fused().describe()["decode_veto"] is None
    assert VARIANTS["fused-decode-veto"]().describe()["decode_veto"] == "memory_bound"
    # trees fitted on data without any TP server cannot make its exchange training through the gate
    X, y, classes, ids = stack(runs, "trainsentry")
    serving = pd.DataFrame([_decode(_row("nvlink", 3e9, 1.0), 0.39, steady=0.31, acf=0.18)])
    for det in (comm_ml(), VARIANTS["fused-decode-veto"]()):
        det.fit(X, y, groups=ids, classes=classes)
        assert det.predict_proba(serving)[0] < 0.2
        assert "not tensor-parallel decode's" in det.explain(serving.iloc[0].to_dict())[1]
    assert fused().fit(X, y, groups=ids, classes=classes).predict_proba(serving)[0] > 0.5   # the plain gate is open
