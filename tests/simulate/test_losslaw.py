"""The loss law, chi, the replica multiplier and the eta tables."""

import numpy as np
import pytest

from trainsentry.simulate import efficiency, losslaw


def test_loss_law_values():
    # 1.8172 + 482.01 / 1e9^0.3478 + 2085.43 / 2.56e10^0.3658, worked by hand: 2.4993.
    assert losslaw.loss(1e9, 2.56e10) == pytest.approx(2.4993, abs=2e-4)
    # Infinite model and data leave the irreducible loss.
    assert losslaw.loss(1e30, 1e30) == pytest.approx(1.8172, abs=1e-6)


def test_compute_optimal_allocation():
    c = 1e24
    n = losslaw.optimal_params(c)
    assert 6 * n * 25.6 * n == pytest.approx(c)
    # The optimum is a minimum of loss along C = 6 N D.
    for f in (0.5, 2.0):
        assert losslaw.loss(n * f, c / (6 * n * f)) > losslaw.optimal_loss(c)


def test_chi_is_one_at_optimum_and_falls_when_overtrained():
    c = 1e25
    n = losslaw.optimal_params(c)
    assert losslaw.chinchilla_efficiency(n, 25.6 * n, c) == pytest.approx(1.0, abs=1e-6)
    # 10x overtrained: same compute, sqrt(10) fewer parameters.
    n2 = n / np.sqrt(10)
    chi = losslaw.chinchilla_efficiency(n2, c / (6 * n2), c)
    assert 0.5 < chi < 0.9
    # A worse loss needs less optimal compute: chi drops with the loss multiplier.
    assert losslaw.chinchilla_efficiency(n2, c / (6 * n2), c, 1.01) < chi


def test_equivalent_compute_inverts_optimal_loss():
    c = np.array([1e22, 1e24, 1e26])
    back = losslaw.equivalent_optimal_compute(losslaw.optimal_loss(c), c)
    np.testing.assert_allclose(back, c, rtol=1e-9)


def test_replica_multiplier():
    # 34 replicas of 160B at H = 19: +0.8 % loss.
    assert losslaw.replica_loss_multiplier(34, 160e9, 19) == pytest.approx(1.008, abs=5e-4)
    assert losslaw.replica_loss_multiplier(1, 160e9, 19) == 1.0
    assert losslaw.replica_loss_multiplier(34, 160e9, 1) == 1.0   # H = 1 is data parallel
    at_ref = losslaw.replica_loss_multiplier(8, 1e9, 30)
    assert at_ref == pytest.approx(8 ** (1.0923 * 1e9 ** -0.2342))


def test_eta_tables():
    assert efficiency.eta_compression(150) == pytest.approx(0.99)
    assert efficiency.eta_compression(1) == 1.0
    # Log-linear between 150 (0.99) and 500 (0.96).
    mid = np.sqrt(150 * 500)
    assert efficiency.eta_compression(mid) == pytest.approx(0.975)
    assert efficiency.eta_compression(150, False, "conservative") == pytest.approx(0.85)
    assert efficiency.eta_activation(4, 2) == pytest.approx(0.995 ** 2)
    assert efficiency.eta_activation(1, 5) == 1.0
    assert efficiency.eta_sync_interval(1, 160e9) == 1.0
    assert efficiency.eta_sync_interval(1e9, 1e9) == 0.4                # floor
    assert efficiency.alpha(160e9) == pytest.approx(0.0555, abs=1e-4)
    assert efficiency.straggler_factor(34, 0.02) == pytest.approx(1 + 0.02 * np.log2(34))
    assert efficiency.straggler_factor(1, 0.05) == 1.0
