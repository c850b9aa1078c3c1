"""The loss law, the Chinchilla penalty chi, and the replica loss multiplier. Vectorised.

Loss law: Besiroglu et al. (2024) refit of Chinchilla, L(N, D) = E + A/N^a + B/D^b.
Compute-optimal allocation: D* = 25.6 N, so C = 6 N D* = 153.6 N^2.
chi = C'/C, where C' is the compute that reaches the run's loss at the optimal allocation.
"""

from __future__ import annotations

import numpy as np

LOSS_E = 1.8172
LOSS_A = 482.01
LOSS_ALPHA = 0.3478
LOSS_B = 2085.43
LOSS_BETA = 0.3658
TOKENS_PER_PARAM_OPT = 25.6
FLOP_PER_PARAM_TOKEN = 6.0

# Replica divergence fit (Charles et al. 2025, their Table 4, as used by the paper):
# L(M replicas)/L(1) = M^beta, beta = 1.0923 P^-0.2342 at H = 30, scaled by ln(H)/ln(30).
REPLICA_BETA0_COEFF = 1.0923
REPLICA_BETA0_EXP = -0.2342
REPLICA_H_REF = 30.0

# chi's bisection: bracket [1e10 FLOP, 10 C] in log space (the paper's bracket); 64 halvings of a
# bracket under 60 nats leave an error far below double precision.
_CHI_LO_FLOP = 1e10
_CHI_HI_FACTOR = 10.0
_CHI_ITERATIONS = 64


def loss(params, tokens):
    """Predicted loss of a ``params``-parameter model trained on ``tokens`` tokens."""
    params = np.asarray(params, dtype=float)
    tokens = np.asarray(tokens, dtype=float)
    with np.errstate(divide="ignore"):
        return LOSS_E + LOSS_A * params ** -LOSS_ALPHA + LOSS_B * tokens ** -LOSS_BETA


def optimal_params(compute_flop):
    """N_opt = sqrt(C / (6 * 25.6))."""
    return np.sqrt(np.asarray(compute_flop, dtype=float)
                   / (FLOP_PER_PARAM_TOKEN * TOKENS_PER_PARAM_OPT))


def optimal_loss(compute_flop):
    """Loss of a compute-optimal run of ``compute_flop`` FLOP."""
    n = optimal_params(compute_flop)
    return loss(n, TOKENS_PER_PARAM_OPT * n)


def _optimal_loss_of_log_compute(log_c):
    # Same as optimal_loss(exp(log_c)), written in logs to save a sqrt and a pow per iteration.
    log_n = 0.5 * (log_c - np.log(FLOP_PER_PARAM_TOKEN * TOKENS_PER_PARAM_OPT))
    return (LOSS_E + LOSS_A * np.exp(-LOSS_ALPHA * log_n)
            + LOSS_B * np.exp(-LOSS_BETA * (log_n + np.log(TOKENS_PER_PARAM_OPT))))


def equivalent_optimal_compute(target_loss, compute_flop):
    """C' with optimal_loss(C') = target_loss, by geometric bisection in [1e10, 10 C]."""
    target = np.asarray(target_loss, dtype=float)
    c = np.asarray(compute_flop, dtype=float)
    lo = np.full(np.broadcast(target, c).shape, np.log(_CHI_LO_FLOP))
    hi = np.log(_CHI_HI_FACTOR * c) + np.zeros_like(lo)
    for _ in range(_CHI_ITERATIONS):
        mid = 0.5 * (lo + hi)
        above = _optimal_loss_of_log_compute(mid) > target
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return np.exp(0.5 * (lo + hi))


def chinchilla_efficiency(params, tokens, compute_flop, loss_multiplier=1.0):
    """chi = min(1, C'/C) for a run whose reached loss is multiplied by ``loss_multiplier``."""
    target = loss(params, tokens) * np.asarray(loss_multiplier, dtype=float)
    c = np.asarray(compute_flop, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        chi = equivalent_optimal_compute(target, c) / c
    return np.minimum(1.0, np.where(c > 0, chi, 0.0))


def replica_loss_multiplier(replicas, params, h_eff):
    """M^beta, beta = beta0(P) ln(H)/ln(30); 1 for one replica or H <= 1 (plain data parallel)."""
    m = np.asarray(replicas, dtype=float)
    h = np.asarray(h_eff, dtype=float)
    beta0 = REPLICA_BETA0_COEFF * np.asarray(params, dtype=float) ** REPLICA_BETA0_EXP
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = beta0 * np.log(np.maximum(h, 1.0)) / np.log(REPLICA_H_REF)
        out = np.maximum(m, 1.0) ** beta
    return np.where((m > 1) & (h > 1), out, 1.0)
