"""FLOP estimators behind one contract: ``fit(X, y)``, ``predict(X)``, ``predict_interval(X)``.

``X`` is the column dict of :func:`trainsentry.flops.features.stack` (one array per feature, one
entry per run); ``y`` is ground-truth FLOPs (FlopCounterMode, summed over ranks). Every estimator
serialises to plain JSON (``to_dict`` / :func:`from_dict`) so a saved model loads without pickle.

Intervals: each estimator keeps quantiles of its residuals in log space, ``log(y) - log(ŷ)``, and
widens a prediction by them. A freshly fitted estimator has its calibration (in-sample) residuals;
during the split protocol those are what is scored (the coverage column says how often they held).
The models ``flops-eval`` saves carry the quantiles of the protocol's *held-out* errors instead
(:meth:`Estimator.set_interval_from_errors`), so the live interval reflects unseen configurations.

The physical models (a, b) are fitted in energy space, as the seed study wrote them, and inverted:
``E_net = E_per_TFLOP·TFLOPs + E_per_TB·TB + E_per_NVL·NVL_TB + P_overhead·t``, with ``t`` the busy
GPU-seconds (``busy_gpu_s``: each GPU's time at work, summed), where the seed study wrote the job's
duration: the two are proportional for jobs that keep the same number of GPUs busy, but fitted on jobs
that mostly keep two busy, an overhead per second of duration counted a one-GPU job's overhead about
twice and under-reported its FLOPs (docs/flops-one-gpu.md compares the two). Least squares is
weighted by 1/E_net² so every run counts by its relative error (FLOPs span orders of magnitude),
and constrained to non-negative constants: a negative energy per byte or overhead power has no
physical reading, and with collinear inputs (bytes and seconds both grow with FLOPs) unconstrained
fits swing to large opposite-signed constants that do not transfer to held-out configurations.

An energy model is only as good as its energy per TFLOP, the constant it divides by. When the
calibration runs do not show energy rising with FLOPs (runs of one length that all sit at the
power limit spend the same joules whatever they compute), that constant is zero or lost in the
noise and the inverted model is meaningless. The fit then refuses with :class:`FitFailure`, naming
the reason and the numbers behind it, instead of returning a model that divides by almost nothing.
"""

from __future__ import annotations

import math

import numpy as np

from .features import H200_POWER_LIMIT_W

# A prediction is never below this (1 GFLOP): the log-space errors and intervals stay finite when a
# linear model's inversion goes to zero or below for a tiny run.
FLOPS_FLOOR = 1e9
LEVEL = 0.9
# An energy model's energy per TFLOP must lie at least this many standard errors above zero (its
# 95 % interval excludes zero): below that the calibration runs do not show energy growing with FLOPs.
MIN_SLOPE_T = 2.0
# A run "sits at the power limit" when its mean board power per GPU is at least this fraction of it.
CAPPED_FRACTION = 0.9


class FitFailure(ValueError):
    """An estimator that cannot be calibrated on these runs.

    ``reason`` is short and fixed per cause (the evaluation groups failed splits by it); the message
    adds the numbers of this calibration set."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason, self.detail = reason, detail
        super().__init__(f"{reason}: {detail}" if detail else reason)

    def within(self, part: str) -> "FitFailure":
        """The same failure, raised by an estimator built on ``part``."""
        return FitFailure(f"{part}: {self.reason}", self.detail)


def _floor(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.asarray(x, dtype=np.float64), FLOPS_FLOOR)


class Estimator:
    name = "base"
    inputs: tuple[str, ...] = ()
    description = ""

    def __init__(self) -> None:
        self.log_resid_q: dict[str, float] = {}

    # -- contract -------------------------------------------------------------------------------
    def fit(self, X: dict[str, np.ndarray], y: np.ndarray) -> "Estimator":
        y = np.asarray(y, dtype=np.float64)
        if y.size == 0 or not np.all(y > 0):
            raise FitFailure("no positive ground-truth FLOPs to calibrate on")
        self._fit(X, y)
        self._fit_interval(X, y)
        return self

    def predict(self, X: dict[str, np.ndarray]) -> np.ndarray:
        return _floor(self._predict(X))

    def predict_interval(self, X: dict[str, np.ndarray], level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
        if not self.log_resid_q:
            raise RuntimeError(f"{self.name}: not fitted")
        pred = self.predict(X)
        lo_q, hi_q = self._quantiles(level)
        return pred * math.exp(lo_q), pred * math.exp(hi_q)

    # -- pieces subclasses fill -----------------------------------------------------------------
    def _fit(self, X, y) -> None:
        raise NotImplementedError

    def _predict(self, X) -> np.ndarray:
        raise NotImplementedError

    def params(self) -> dict:
        raise NotImplementedError

    def load_params(self, p: dict) -> None:
        raise NotImplementedError

    # -- intervals and serialisation ------------------------------------------------------------
    def _fit_interval(self, X, y) -> None:
        r = np.log(y) - np.log(self.predict(X))
        self.log_resid_q = {f"{q:.3f}": float(np.quantile(r, q)) for q in (0.025, 0.05, 0.1, 0.5, 0.9, 0.95, 0.975)}
        self.log_resid_sd = float(np.std(r)) if r.size > 1 else 0.0

    def set_interval_from_errors(self, pct_errors: np.ndarray) -> None:
        """Replace the in-sample residual quantiles by those of held-out errors (100·(ŷ−y)/y)."""
        r = -np.log1p(np.asarray(pct_errors, dtype=np.float64) / 100.0)  # log(y) − log(ŷ)
        self.log_resid_q = {f"{q:.3f}": float(np.quantile(r, q)) for q in (0.025, 0.05, 0.1, 0.5, 0.9, 0.95, 0.975)}
        self.log_resid_sd = float(np.std(r))
        self.interval_source = "held-out"

    def _quantiles(self, level: float) -> tuple[float, float]:
        tail = round((1.0 - level) / 2.0, 3)
        lo, hi = self.log_resid_q.get(f"{tail:.3f}"), self.log_resid_q.get(f"{1 - tail:.3f}")
        if lo is None or hi is None:
            raise ValueError(f"interval level {level} not kept (use 0.8, 0.9 or 0.95)")
        return min(lo, 0.0), max(hi, 0.0)

    def to_dict(self) -> dict:
        return {"name": self.name, "inputs": list(self.inputs), "description": self.description,
                "params": self.params(), "log_resid_q": self.log_resid_q,
                "log_resid_sd": getattr(self, "log_resid_sd", None),
                "interval_source": getattr(self, "interval_source", "in-sample")}


def _col(X: dict[str, np.ndarray], name: str) -> np.ndarray:
    if name not in X:
        raise KeyError(f"feature {name!r} missing")
    return np.asarray(X[name], dtype=np.float64)


def _wls_nonneg(A: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least squares with every coefficient >= 0 (energies per unit and overhead power are)."""
    from scipy.optimize import nnls
    sw = np.sqrt(w)[:, None]
    scale = np.maximum(np.abs(A).max(axis=0), 1e-30)  # column scaling keeps NNLS well conditioned
    coef, _ = nnls(A * sw / scale, b * sw[:, 0])
    return coef / scale


def _first_coef_se(A: np.ndarray, b: np.ndarray, w: np.ndarray, coef: np.ndarray) -> float:
    """Standard error of ``coef[0]`` of the weighted fit, over the columns the fit kept (> 0).

    Infinite when the kept columns are collinear or there are no more runs than constants."""
    keep = [0] + [j for j in range(1, A.shape[1]) if coef[j] > 0]
    sw = np.sqrt(w)
    Aw = A[:, keep] * sw[:, None]
    n, p = Aw.shape
    scale = np.maximum(np.abs(Aw).max(axis=0), 1e-30)
    As = Aw / scale
    if n <= p or np.linalg.matrix_rank(As) < p:
        return math.inf
    resid = (b - A @ coef) * sw
    s2 = float(resid @ resid) / (n - p)
    return math.sqrt(s2 * float(np.linalg.inv(As.T @ As)[0, 0])) / scale[0]


def energy_diagnostics(X: dict[str, np.ndarray], y: np.ndarray) -> dict:
    """What the runs' energy can say about their FLOPs: power per GPU against the limit, spreads, correlation.

    ``flops_per_net_joule`` spread is what a single measured efficiency (FLOPs = η × net energy)
    would have to absorb."""
    e, t = _col(X, "net_energy_J"), _col(X, "duration_s")
    y = np.asarray(y, dtype=np.float64)
    per_gpu = _col(X, "mean_power_W") / np.maximum(_col(X, "gpus"), 1.0)
    capped = per_gpu >= CAPPED_FRACTION * H200_POWER_LIMIT_W
    eff = y / np.maximum(e, 1.0)

    def corr(sel) -> float | None:
        return float(np.corrcoef(e[sel], y[sel])[0, 1]) if sel.sum() > 2 and np.ptp(e[sel]) > 0 else None
    return {"runs": int(y.size), "power_limit_W_per_gpu": H200_POWER_LIMIT_W, "capped_fraction": CAPPED_FRACTION,
            "runs_at_power_limit": int(capped.sum()), "runs_below_power_limit": int((~capped).sum()),
            "corr_net_energy_flops_at_limit": corr(capped), "corr_net_energy_flops_below_limit": corr(~capped),
            "mean_power_W_per_gpu_min": float(per_gpu.min()), "mean_power_W_per_gpu_max": float(per_gpu.max()),
            "duration_s_min": float(t.min()), "duration_s_max": float(t.max()),
            "net_energy_J_min": float(e.min()), "net_energy_J_max": float(e.max()),
            "flops_min": float(y.min()), "flops_max": float(y.max()),
            "flops_per_net_joule_max_over_min": float(eff.max() / eff.min()),
            "corr_net_energy_flops": float(np.corrcoef(e, y)[0, 1]) if y.size > 2 else None}


def _energy_note(X, y) -> str:
    if not all(k in X for k in ("mean_power_W", "gpus", "duration_s")):
        return ""
    d = energy_diagnostics(X, y)
    note = (f"; {d['runs_at_power_limit']}/{d['runs']} calibration runs average ≥ {CAPPED_FRACTION:.0%} of the"
            f" {d['power_limit_W_per_gpu']:.0f} W power limit per GPU, durations {d['duration_s_min']:.0f}–"
            f"{d['duration_s_max']:.0f} s, net energy {d['net_energy_J_min'] / 1e3:.0f}–"
            f"{d['net_energy_J_max'] / 1e3:.0f} kJ"
            f" while FLOPs span ×{d['flops_max'] / d['flops_min']:.2f}")
    if 2 * d["runs_at_power_limit"] > d["runs"]:
        note += " (at the power limit energy measures time, not work)"
    return note


ENERGY_UNCONSTRAINED = "energy does not constrain FLOPs on these calibration runs"


class EnergyModel(Estimator):
    """(a) the seed study's 3-input model; with ``terms=("t",)`` it is (b), power only.

    TFLOPs = (E_net − E_per_TB·TB_moved − E_per_NVL·NVL_TB − P_overhead·t_busy) / E_per_TFLOP, with
    t_busy the busy GPU-seconds (the module docstring says why not the duration).
    """

    TERM_FEATURES = {"tb": "dram_bytes", "nvl_tb": "nvlink_bytes", "t": "busy_gpu_s"}

    def __init__(self, terms: tuple[str, ...] = ("tb", "nvl_tb", "t"), name: str = "three_input") -> None:
        super().__init__()
        self.terms = tuple(terms)
        self.name = name
        self.inputs = ("net_energy_J",) + tuple(self.TERM_FEATURES[k] for k in self.terms)
        self.description = ("E_net = E_per_TFLOP·TFLOPs + " +
                            " + ".join({"tb": "E_per_TB·TB_moved", "nvl_tb": "E_per_NVL·NVL_TB",
                                        "t": "P_overhead·t_busy"}[k] for k in self.terms) + ", inverted")
        self.coef: dict[str, float] = {}

    def _term(self, X, k: str) -> np.ndarray:
        v = _col(X, self.TERM_FEATURES[k])
        return v / 1e12 if k in ("tb", "nvl_tb") else v

    def energy_per_tflop(self, X, y) -> tuple[np.ndarray, float]:
        """The weighted non-negative fit in energy space: (constants, standard error of E_per_TFLOP)."""
        e = _col(X, "net_energy_J")
        A = np.column_stack([np.asarray(y, dtype=np.float64) / 1e12] + [self._term(X, k) for k in self.terms])
        w = 1.0 / np.maximum(np.abs(e), 1.0) ** 2
        coef = _wls_nonneg(A, e, w)
        return coef, _first_coef_se(A, e, w, coef)

    def _fit(self, X, y) -> None:
        coef, se = self.energy_per_tflop(X, y)
        if not (coef[0] > 0 and coef[0] >= MIN_SLOPE_T * se):
            raise FitFailure(ENERGY_UNCONSTRAINED, f"E_per_TFLOP = {coef[0]:.3g} ± {se:.2g} J (needs ≥ {MIN_SLOPE_T:g}"
                             f" standard errors above 0) over {y.size} runs" + _energy_note(X, y))
        self.coef = {"E_per_TFLOP_J": float(coef[0]),
                     **{{"tb": "E_per_TB_J", "nvl_tb": "E_per_NVL_TB_J", "t": "P_overhead_W"}[k]: float(c)
                        for k, c in zip(self.terms, coef[1:])}}

    def _predict(self, X) -> np.ndarray:
        rest = _col(X, "net_energy_J").copy()
        names = {"tb": "E_per_TB_J", "nvl_tb": "E_per_NVL_TB_J", "t": "P_overhead_W"}
        for k in self.terms:
            rest -= self.coef[names[k]] * self._term(X, k)
        return rest / self.coef["E_per_TFLOP_J"] * 1e12

    def params(self) -> dict:
        return {"terms": list(self.terms), "coef": self.coef}

    def load_params(self, p: dict) -> None:
        self.coef = dict(p["coef"])


class TensorActivity(Estimator):
    """(e) FLOPs = R × tensor-busy GPU-seconds (clock-weighted), R the peak rate measured on calibration runs.

    R is the geometric mean of FLOPs / tensor_cycles_s over the calibration runs: the tensor-pipe
    rate these workloads actually reach per fully busy second, which the evaluation reports next
    to the H200's dense BF16 datasheet peak (989 TFLOP/s).
    """

    name = "tensor"
    inputs = ("tensor_cycles_s",)
    description = "FLOPs = R_measured × ∫ GPM tensor util × (SM clock / max) dt, summed over GPUs"

    def __init__(self, feature: str = "tensor_cycles_s") -> None:
        super().__init__()
        self.feature = feature
        self.inputs = (feature,)
        self.rate_flops_per_s = float("nan")

    def _fit(self, X, y) -> None:
        a = _col(X, self.feature)
        ok = a > 0
        if not ok.any():
            raise FitFailure("no calibration run shows tensor activity", self.feature)
        self.rate_flops_per_s = float(np.exp(np.mean(np.log(y[ok] / a[ok]))))

    def _predict(self, X) -> np.ndarray:
        return self.rate_flops_per_s * _col(X, self.feature)

    def params(self) -> dict:
        return {"feature": self.feature, "rate_flops_per_s": self.rate_flops_per_s}

    def load_params(self, p: dict) -> None:
        self.feature = p["feature"]
        self.inputs = (self.feature,)
        self.rate_flops_per_s = float(p["rate_flops_per_s"])


class Fusion(Estimator):
    """Tensor activity and energy combined in log space, each weighted by 1 / its residual variance.

    The two see different things: tensor activity counts busy tensor-pipe cycles (blind to how full
    each cycle is), energy counts joules (blind to what they bought). Where one is off for a
    workload the other pulls the estimate back; the weights come from calibration residuals.

    The energy side is the three-input model, not power alone: on runs at the power limit the
    joules are fixed by time, and what they say about FLOPs is only in how they split between
    compute and memory traffic, which the three-input model separates and power alone cannot.

    Where a part's prediction is at the floor (the energy model found no energy above its overhead,
    as on a GPU busy a few per cent of the time; tensor activity found no tensor cycles), that part is
    left out of the run's estimate. Only a part that read nothing at all is left out: one just above the
    floor still pulls the estimate toward it (the energy model's resolution is not modelled), and the
    weights are still fitted on calibration residuals that include any run where a part was at the
    floor. Before
    this, the red team's host-synchronised trainers (2 GPUs) and the DiT trainer at a 10 % or 30 % duty
    cycle (one GPU) read -99.6 % to -99.8 % fused while tensor activity alone was within 5 %
    (results/redteam.json and results/redteam-x1.json as committed at 8f35948).
    """

    name = "fusion"
    description = ("exp(w·log ŷ_tensor + (1−w)·log ŷ_three_input), w = inverse residual variance; a part at the "
                   "floor is left out")

    def __init__(self) -> None:
        super().__init__()
        self.parts = [TensorActivity(), EnergyModel(("tb", "nvl_tb", "t"), name="three_input")]
        self.inputs = tuple(dict.fromkeys(i for p in self.parts for i in p.inputs))
        self.weights: list[float] = []

    def _fit(self, X, y) -> None:
        var = []
        for p in self.parts:
            try:
                p.fit(X, y)
            except FitFailure as e:
                raise e.within(p.name) from e
            r = np.log(y) - np.log(p.predict(X))
            var.append(max(float(np.mean(r ** 2)), 1e-6))
        inv = np.asarray([1.0 / v for v in var])
        self.weights = (inv / inv.sum()).tolist()

    def _predict(self, X) -> np.ndarray:
        preds = np.stack([p.predict(X) for p in self.parts])
        # A part at the floor read nothing: the three-input model's energy above the overhead was not
        # positive (a GPU busy a few per cent of the time, or pacing host work), or no tensor cycles were
        # counted (FP32-only work). That says the signal was too small to measure, not that no FLOPs ran;
        # in log space it would drag the estimate to the floor whatever the other part saw, so it is left
        # out of that run's weights. Every part at the floor: the floor.
        w = np.asarray(self.weights)[:, None] * (preds > FLOPS_FLOOR)
        total = w.sum(axis=0)
        out = np.full(preds.shape[1], FLOPS_FLOOR)
        ok = total > 0
        out[ok] = np.exp((w[:, ok] / total[ok] * np.log(preds[:, ok])).sum(axis=0))
        return out

    def params(self) -> dict:
        return {"weights": self.weights, "parts": [p.to_dict() for p in self.parts]}

    def load_params(self, p: dict) -> None:
        self.weights = list(p["weights"])
        self.parts = [from_dict(d) for d in p["parts"]]


def make(name: str, seed: int = 0) -> Estimator:
    """A fresh, unfitted estimator by name (see ESTIMATORS)."""
    from .mlp import LogMLP, ResidualMLP
    makers = {
        "three_input": lambda: EnergyModel(("tb", "nvl_tb", "t"), name="three_input"),
        "power_only": lambda: EnergyModel(("t",), name="power_only"),
        "mlp": lambda: LogMLP(seed=seed),
        "residual_mlp": lambda: ResidualMLP(seed=seed),
        "tensor": lambda: TensorActivity(),
        "fusion": lambda: Fusion(),
    }
    if name not in makers:
        raise KeyError(f"unknown estimator {name!r}; known: {sorted(makers)}")
    return makers[name]()


ESTIMATORS = ("three_input", "power_only", "mlp", "residual_mlp", "tensor", "fusion")


def from_dict(d: dict) -> Estimator:
    """Rebuild a fitted estimator from :meth:`Estimator.to_dict` output."""
    name = d.get("name")
    if name not in ESTIMATORS:
        raise ValueError(f"not a saved FLOP estimator (name {name!r})")
    est = make(name)
    if isinstance(est, EnergyModel):
        est = EnergyModel(tuple(d["params"]["terms"]), name=name)
    est.load_params(d["params"])
    est.log_resid_q = dict(d["log_resid_q"])
    est.log_resid_sd = d.get("log_resid_sd")
    est.interval_source = d.get("interval_source", "in-sample")
    return est
