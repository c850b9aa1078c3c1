"""The throughput-side efficiency factors: straggler tail, sync interval, compression quality,
activation compression. Vectorised over numpy arrays."""

from __future__ import annotations

import numpy as np

ETA_H_FLOOR = 0.4
ALPHA_BASE = 0.08

# Pseudo-gradient compression quality per compression ratio, by scenario, with and without error
# feedback: the multiplicative loss in efficiency from compressing the outer update.
_COMPRESSION_RATIOS = np.array([1.0, 4.0, 16.0, 100.0, 150.0, 500.0])
COMPRESSION_QUALITY = {
    (True, "optimistic"): (1.00, 1.00, 1.00, 1.00, 1.00, 0.99),
    (True, "expected"): (1.00, 1.00, 1.00, 0.99, 0.99, 0.96),
    (True, "conservative"): (1.00, 0.99, 0.97, 0.93, 0.91, 0.80),
    (False, "optimistic"): (1.00, 1.00, 1.00, 1.00, 0.99, 0.99),
    (False, "expected"): (1.00, 1.00, 0.99, 0.98, 0.96, 0.95),
    (False, "conservative"): (1.00, 0.99, 0.95, 0.90, 0.85, 0.75),
}

# Activation compression quality per stage boundary (pipeline-group mode): errors compound over
# the 2(S-1) boundary crossings of a forward and backward pass.
_ACTIVATION_RATIOS = np.array([1.0, 2.0, 4.0, 10.0])
ACTIVATION_QUALITY = {
    "optimistic": (1.00, 1.00, 1.00, 0.995),
    "expected": (1.00, 1.00, 0.995, 0.98),
    "conservative": (1.00, 0.99, 0.96, 0.90),
}


def straggler_factor(n, coeff: float):
    """f(N) = 1 + coeff * log2(N) for N > 1 participants, else 1."""
    n = np.asarray(n, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = 1.0 + coeff * np.log2(np.maximum(n, 1.0))
    return np.where(n > 1, f, 1.0)


def alpha(params):
    """alpha = 0.08 / (1 + log10(P / 1e9) / 5): bigger models tolerate longer sync intervals."""
    return ALPHA_BASE / (1.0 + np.log10(np.asarray(params, dtype=float) / 1e9) / 5.0)


def eta_sync_interval(h_eff, params):
    """eta_H = max(0.4, 1 - alpha log10 H)."""
    h = np.maximum(np.asarray(h_eff, dtype=float), 1.0)
    return np.maximum(ETA_H_FLOOR, 1.0 - alpha(params) * np.log10(h))


def _log_interp(ratio, keys, values):
    # Log-linear interpolation; ratios <= 1 give 1, ratios past the table keep its last value.
    r = np.maximum(np.asarray(ratio, dtype=float), 1.0)
    return np.interp(np.log10(r), np.log10(keys), np.asarray(values))


def eta_compression(ratio, error_feedback: bool = True, scenario: str = "expected"):
    """Pseudo-gradient compression quality at compression ratio ``ratio``."""
    return _log_interp(ratio, _COMPRESSION_RATIOS, COMPRESSION_QUALITY[(error_feedback, scenario)])


def eta_activation(ratio, stages, scenario: str = "expected"):
    """eta_act = q^(2(S-1)), q the per-boundary quality at activation compression ``ratio``."""
    q = _log_interp(ratio, _ACTIVATION_RATIOS, ACTIVATION_QUALITY[scenario])
    s = np.maximum(np.asarray(stages, dtype=float), 1.0)
    return q ** (2.0 * (s - 1.0))
