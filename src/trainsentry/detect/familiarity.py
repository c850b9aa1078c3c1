"""Is this window like anything the detectors were fitted on?

A learned detector extrapolates on a workload unlike its fitting data, and its P(training) says
nothing about that: the model committed at e391dc4 called every context-parallel prefill run, a
family it had never seen, training at P = 1.00 (docs/prospective-e391dc4.md). Familiarity is the
distance from a window's features to the nearest windows of the fitting data, set against how far
one configuration of the fitting data lies from the others, so the evidence can say "this workload
is unlike anything the verdict was learned from": a verdict to review, not to trust blindly. It
changes no verdict and raises no alert (an unseen benign workload is unfamiliar as often as an
evasion is).

Features: every ``act.*`` and ``comm.*`` window feature (the fused detector's), each centred on the
fitting windows' median and scaled by their interquartile range (or standard deviation, or 1),
clipped to ±20 scale units, a missing feature at the median. Distance: mean Euclidean distance to
the k = 5 nearest fitting windows. Threshold: the 95th percentile, over every fitting window, of the
same distance measured to the windows of the *other* configurations only — how far a new
configuration of a known workload lies. Above it, the window is unfamiliar. A window lacking a
sensor every fitting window had (``detect.base.feature_group``: a node without GPUs, a GPU without
GPM) is not judged: its missing features would sit at the median and pull it towards familiar (a
red-team run unfamiliar in every window reads mostly familiar with its activity features removed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .base import groups_lacking, groups_seen, numeric_matrix

PREFIXES = ("act.", "comm.")
K = 5
QUANTILE = 0.95
CLIP = 20.0


class Familiarity:
    name = "familiarity"
    feature_set = "trainsentry"

    def __init__(self, k: int = K, quantile: float = QUANTILE):
        self.k, self.quantile = k, quantile
        self.cols_: list[str] = []
        self.center_ = self.scale_ = None
        self.threshold_: float | None = None
        self.groups_seen_: list[str] = []
        self._nn = None

    def _z(self, X: pd.DataFrame) -> np.ndarray:
        Z = (numeric_matrix(X, self.cols_) - self.center_) / self.scale_
        return np.nan_to_num(np.clip(Z, -CLIP, CLIP), nan=0.0).astype(np.float32)

    def fit(self, X: pd.DataFrame, configs: Sequence[str]) -> "Familiarity":
        from sklearn.neighbors import NearestNeighbors
        configs = np.asarray(configs)
        if len(X) != len(configs) or len(set(configs.tolist())) < 2:
            raise ValueError("familiarity needs windows of at least two configurations, one label per window")
        num = X[[c for c in X.columns if c.startswith(PREFIXES)]].apply(pd.to_numeric, errors="coerce")
        self.cols_ = [c for c in num.columns if np.isfinite(num[c].to_numpy(dtype=np.float64)).any()]
        num = num[self.cols_]
        self.groups_seen_ = groups_seen(num, self.cols_)
        self.center_ = num.median().to_numpy(dtype=np.float64)
        iqr = (num.quantile(0.75) - num.quantile(0.25)).to_numpy(dtype=np.float64)
        std = num.std().to_numpy(dtype=np.float64)
        self.scale_ = np.where(iqr > 0, iqr, np.where(std > 0, std, 1.0))
        Z = self._z(num)
        apart = np.empty(len(Z))
        for c in np.unique(configs):
            mine = configs == c
            nn = NearestNeighbors(n_neighbors=min(self.k, int((~mine).sum()))).fit(Z[~mine])
            apart[mine] = nn.kneighbors(Z[mine])[0].mean(axis=1)
        self.threshold_ = float(np.quantile(apart, self.quantile))
        if not self.threshold_ > 0:
            raise ValueError("familiarity: the configurations' windows do not differ (threshold 0)")
        self._nn = NearestNeighbors(n_neighbors=min(self.k, len(Z))).fit(Z)
        return self

    def _judge(self, X: pd.DataFrame) -> tuple[np.ndarray, list[list[str]]]:
        """(mean distance to the k nearest fitting windows, NaN where a sensor is lacking; per row, the
        sensors every fitting window had that this one lacks)."""
        if self._nn is None:
            raise RuntimeError("familiarity is not fitted")
        if len(X) == 0:
            return np.zeros(0), []
        miss = groups_lacking(X, self.cols_, self.groups_seen_)
        lacking = [[g for g in self.groups_seen_ if miss[g][i]] for i in range(len(X))]
        d = self._nn.kneighbors(self._z(X))[0].mean(axis=1)
        d[np.array([bool(m) for m in lacking])] = np.nan
        return d, lacking

    def distance(self, X: pd.DataFrame) -> np.ndarray:
        """Mean distance to the k nearest fitting windows; NaN for a window lacking a sensor the fit had."""
        return self._judge(X)[0]

    def unfamiliar(self, X: pd.DataFrame) -> np.ndarray:
        """True above the threshold; a window not judged (NaN) is not counted unfamiliar."""
        return np.nan_to_num(self.distance(X), nan=-np.inf) > self.threshold_

    def lines(self, X: pd.DataFrame) -> list[str]:
        """One evidence line per row of X."""
        return [self.line(float(d), miss) for d, miss in zip(*self._judge(X))]

    def line(self, distance: float, missing: list[str] = ()) -> str:
        if missing or not np.isfinite(distance):
            return (f"familiarity not judged: the window lacks sensors every fitting window had "
                    f"({', '.join(missing) or 'unknown'}), so it cannot be set against them")
        ratio = distance / self.threshold_
        if ratio > 1:
            return (f"unfamiliar workload: this window lies {ratio:.1f}x as far from the windows the detector was "
                    f"fitted on as a new configuration of a known workload does ({self.quantile:.0%} of them lie "
                    f"closer): the verdict "
                    f"extrapolates, review it")
        return (f"familiar workload: this window lies within the distance at which new configurations of known "
                f"workloads lie from the fitting data ({ratio:.2f} of it)")


    def describe(self) -> dict:
        """What ``base.save_detector`` writes beside the artifact."""
        return {"name": self.name, "feature_set": self.feature_set, "k": self.k, "quantile": self.quantile,
                "threshold": self.threshold_, "features": len(self.cols_), "sensors_always_seen": self.groups_seen_}


def load(path: Path) -> Familiarity:
    import joblib
    fam = joblib.load(path)
    if not isinstance(fam, Familiarity) or fam.threshold_ is None:
        raise ValueError(f"{path} is not a fitted familiarity model")
    return fam
