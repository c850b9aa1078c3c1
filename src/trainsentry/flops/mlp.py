"""(c) an MLP on log features and (d) a residual MLP correcting the power-only model.

As in the seed study: two hidden layers of 32 units on log features (net energy, duration, TB
moved, NVLink TB, average power, and their ratios), inputs standardised. scikit-learn trains the
network (L-BFGS: the calibration sets are tens of runs, where it converges far better than SGD);
the weights are stored as JSON lists and the forward pass below uses them directly, so a saved
model predicts without pickle or scikit-learn.

Fits run with BLAS on one thread: the matrices are tens of rows by 32 columns, where threads only
add synchronisation; on a loaded two-core machine a multi-threaded fit took 15× longer.

The L2 penalties are fixed in advance, not tuned on the evaluation: 0.1 for the direct MLP, 1.0
for the residual one (a correction should shrink to zero when the calibration set cannot support
it).
"""

from __future__ import annotations

import warnings

import numpy as np

from .estimators import EnergyModel, Estimator, FitFailure, _col

LOG_FEATURES = ("log_net_energy", "log_duration", "log_dram_gb", "log_nvlink_gb", "log_mean_power",
                "log_net_power", "log_dram_gbps", "log_nvlink_gbps", "net_energy_fraction")


def log_features(X: dict[str, np.ndarray]) -> np.ndarray:
    e_net = np.maximum(_col(X, "net_energy_J"), 1.0)
    t = np.maximum(_col(X, "duration_s"), 1e-3)
    dram_gb = np.maximum(_col(X, "dram_bytes"), 0.0) / 1e9
    nvl_gb = np.maximum(_col(X, "nvlink_bytes"), 0.0) / 1e9
    power = np.maximum(_col(X, "mean_power_W"), 1.0)
    energy = np.maximum(_col(X, "energy_J"), 1.0)
    return np.column_stack([np.log(e_net), np.log(t), np.log1p(dram_gb), np.log1p(nvl_gb), np.log(power),
                            np.log(e_net / t), np.log1p(dram_gb / t), np.log1p(nvl_gb / t), e_net / energy])


class _Net:
    """Standardiser + MLP weights; fitted by scikit-learn, evaluated in numpy."""

    def __init__(self, hidden=(32, 32), alpha: float = 0.1, seed: int = 0) -> None:
        self.hidden, self.alpha, self.seed = tuple(hidden), float(alpha), int(seed)
        self.x_mean = self.x_sd = None
        self.y_mean, self.y_sd = 0.0, 1.0
        self.coefs: list[np.ndarray] = []
        self.intercepts: list[np.ndarray] = []

    def fit(self, F: np.ndarray, target: np.ndarray) -> None:
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPRegressor
        from threadpoolctl import threadpool_limits
        self.x_mean, self.x_sd = F.mean(axis=0), F.std(axis=0)
        self.x_sd = np.where(self.x_sd > 1e-12, self.x_sd, 1.0)
        self.y_mean, self.y_sd = float(target.mean()), float(target.std()) or 1.0
        net = MLPRegressor(hidden_layer_sizes=self.hidden, activation="relu", solver="lbfgs", alpha=self.alpha,
                           max_iter=3000, random_state=self.seed)
        with warnings.catch_warnings(), threadpool_limits(limits=1, user_api="blas"):
            warnings.simplefilter("ignore", ConvergenceWarning)
            net.fit((F - self.x_mean) / self.x_sd, (target - self.y_mean) / self.y_sd)
        self.coefs = [np.asarray(c) for c in net.coefs_]
        self.intercepts = [np.asarray(b) for b in net.intercepts_]

    def __call__(self, F: np.ndarray) -> np.ndarray:
        h = (F - self.x_mean) / self.x_sd
        for i, (w, b) in enumerate(zip(self.coefs, self.intercepts)):
            h = h @ w + b
            if i < len(self.coefs) - 1:
                h = np.maximum(h, 0.0)
        return h[:, 0] * self.y_sd + self.y_mean

    def to_dict(self) -> dict:
        return {"hidden": list(self.hidden), "alpha": self.alpha, "seed": self.seed,
                "x_mean": self.x_mean.tolist(), "x_sd": self.x_sd.tolist(), "y_mean": self.y_mean,
                "y_sd": self.y_sd, "coefs": [c.tolist() for c in self.coefs],
                "intercepts": [b.tolist() for b in self.intercepts]}

    @classmethod
    def from_dict(cls, d: dict) -> "_Net":
        n = cls(d["hidden"], d["alpha"], d["seed"])
        n.x_mean, n.x_sd = np.asarray(d["x_mean"]), np.asarray(d["x_sd"])
        n.y_mean, n.y_sd = float(d["y_mean"]), float(d["y_sd"])
        n.coefs = [np.asarray(c) for c in d["coefs"]]
        n.intercepts = [np.asarray(b) for b in d["intercepts"]]
        return n


class LogMLP(Estimator):
    """(c) log FLOPs from the log features, two 32-unit hidden layers."""

    name = "mlp"
    inputs = ("net_energy_J", "duration_s", "dram_bytes", "nvlink_bytes", "mean_power_W", "energy_J")
    description = "MLP (32, 32) on standardised log features → log FLOPs"

    def __init__(self, seed: int = 0, alpha: float = 0.1) -> None:
        super().__init__()
        self.net = _Net(alpha=alpha, seed=seed)

    def _fit(self, X, y) -> None:
        self.net.fit(log_features(X), np.log(y))

    def _predict(self, X) -> np.ndarray:
        return np.exp(np.clip(self.net(log_features(X)), -50, 100))

    def params(self) -> dict:
        return {"net": self.net.to_dict(), "features": list(LOG_FEATURES)}

    def load_params(self, p: dict) -> None:
        self.net = _Net.from_dict(p["net"])


class ResidualMLP(Estimator):
    """(d) power-only estimate × exp(MLP correction of its log residual)."""

    name = "residual_mlp"
    description = "power-only × exp(MLP (32, 32) on log features → log residual)"

    def __init__(self, seed: int = 0, alpha: float = 1.0) -> None:
        super().__init__()
        self.base = EnergyModel(("t",), name="power_only")
        self.net = _Net(alpha=alpha, seed=seed)
        self.inputs = tuple(dict.fromkeys(LogMLP.inputs + self.base.inputs))   # the base reads busy_gpu_s too

    def _fit(self, X, y) -> None:
        try:
            self.base.fit(X, y)
        except FitFailure as e:
            raise e.within(f"base {self.base.name}") from e
        self.net.fit(log_features(X), np.log(y) - np.log(self.base.predict(X)))

    def _predict(self, X) -> np.ndarray:
        return self.base.predict(X) * np.exp(np.clip(self.net(log_features(X)), -20, 20))

    def params(self) -> dict:
        return {"base": self.base.to_dict(), "net": self.net.to_dict(), "features": list(LOG_FEATURES)}

    def load_params(self, p: dict) -> None:
        from .estimators import from_dict
        self.base = from_dict(p["base"])
        self.net = _Net.from_dict(p["net"])
