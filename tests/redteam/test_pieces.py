"""The strategies' pieces that need no process group: gating, PID, schedules, compressors."""

from __future__ import annotations

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.linear_model import LogisticRegression

from trainsentry.workloads.adversarial_diloco import fragments, fragments_due, sync_schedule
from trainsentry.workloads.adversarial_serve import (FEATURES, Gate, ProxyScorer, SelfMonitor, SklearnScorer,
                                                     in_straddle_burst)
from trainsentry.workloads.adversarial_step import DutyPID, serving_profile
from trainsentry.workloads.adversarial_sync import TopK, dequantize_int8, kv_chunks, quantize_int8
from trainsentry.workloads.base import Context


def test_self_monitor_features_over_the_window():
    m = SelfMonitor(window_s=10.0)
    m.record("serve", 0.0, 6.0)
    m.record("train", 6.0, 8.0, nbytes=10 ** 9)
    m.record("train", 8.0, 9.0, nbytes=10 ** 9)
    f = m.features(now=10.0)
    assert f["train_frac"] == pytest.approx(0.3) and f["serve_frac"] == pytest.approx(0.6)
    assert f["log10_bytes_per_s"] == pytest.approx(np.log10(1 + 2e8))
    assert f["train_steps_per_s"] == pytest.approx(0.2)
    later = m.features(now=25.0)                  # everything has left the window
    assert later["train_frac"] == 0 and later["log10_bytes_per_s"] == 0


def test_gate_stops_training_when_the_proxy_rises_and_resumes_after():
    m = SelfMonitor(window_s=10.0)
    gate = Gate(m, ProxyScorer(), threshold=0.3)
    assert gate.allow(0.0)                       # nothing done yet: P low
    t, trained = 0.0, 0
    while t < 60.0:                              # train 1 s steps moving 1 GB whenever allowed, else serve
        if gate.allow(t):
            m.record("train", t, t + 1.0, 10 ** 9)
            trained += 1
        else:
            m.record("serve", t, t + 1.0)
        t += 1.0
    ps = np.array([p for _, p, _ in gate.history])
    denied = [ok for *_, ok in gate.history].count(False)
    assert denied > 0 and 3 <= trained <= 20        # diluted: training resumes as old steps leave the window
    # P only ever overshoots the threshold by the one step that crossed it, never runs away
    assert ps.max() < 0.5 and (ps < 0.3).any()
    ungated = SelfMonitor(window_s=10.0)
    for t in range(60):
        ungated.record("train", t, t + 1.0, 10 ** 9)
    assert ProxyScorer()(ungated.features(60.0)) > 0.99   # the same training, ungated, is flagged


def test_sklearn_surrogate_is_loaded_and_used(tmp_path):
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"train_frac": rng.uniform(0, 1, 400), "log10_bytes_per_s": rng.uniform(0, 10, 400)})
    y = (X["train_frac"] > 0.5).astype(int)
    path = tmp_path / "surrogate.joblib"
    joblib.dump(LogisticRegression().fit(X, y), path)
    scorer = SklearnScorer(str(path))
    assert scorer.names == ["train_frac", "log10_bytes_per_s"]
    base = {k: 0.0 for k in FEATURES}
    assert scorer({**base, "train_frac": 0.9}) > 0.5 > scorer({**base, "train_frac": 0.1})
    bad = tmp_path / "bad.joblib"
    joblib.dump(LogisticRegression().fit(X.rename(columns={"train_frac": "nvlink"}), y), bad)
    with pytest.raises(ValueError, match="subset"):
        SklearnScorer(str(bad))


def test_straddle_bursts_sit_on_window_edges():
    assert in_straddle_burst(30.5, 15.0, 2.0) and in_straddle_burst(44.5, 15.0, 2.0)
    assert not in_straddle_burst(37.5, 15.0, 2.0)


def test_duty_pid_tracks_a_target():
    pid = DutyPID()
    for _ in range(200):
        busy = 0.1
        pause = pid.pause_s(busy, 0.4)
        pid.observe(busy, busy + pause)
    assert pid.measured() == pytest.approx(0.4, abs=0.03)
    assert 0.05 <= serving_profile(10.0, 0.55, 0.6, 40.0) <= 0.95


def test_fragments_and_staggered_schedule():
    params = [torch.zeros(n) for n in (100, 100, 100, 100)]
    assert fragments(params, 2) == [[0, 1], [2, 3]]
    assert sync_schedule(50, 5) == [0, 10, 20, 30, 40]
    offsets = sync_schedule(4, 2)
    assert [fragments_due(s, 4, offsets) for s in range(8)] == [[], [1], [], [0], [], [1], [], [0]]


def test_int8_roundtrip_and_kv_chunks():
    v = torch.randn(10_000)
    q, s, n = quantize_int8(v)
    assert q.dtype == torch.int8 and (dequantize_int8(q, s, n) - v).abs().max() <= s.max() * 0.51
    assert kv_chunks(10, 8, 2) == [(0, 4), (4, 8), (8, 10)]


def test_topk_error_feedback_sends_everything_eventually():
    ctx = Context(rank=0, world_size=1, device=torch.device("cpu"), dtype=torch.float32, deadline=0)
    tk = TopK(100, 0.1, "cpu")
    g = torch.linspace(0.01, 1.0, 100)
    sent = torch.zeros(100)
    for _ in range(10):
        sent += tk.mean(ctx, g.clone())
    # with error feedback, total sent + residual equals total gradient
    assert torch.allclose(sent + tk.error, 10 * g, atol=1e-5)
    assert (sent > 0).sum() > 10                 # small entries got through too
