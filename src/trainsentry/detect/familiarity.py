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

import json
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from .base import feature_group, groups_lacking

PREFIXES = ("act.", "comm.")
K = 5
QUANTILE = 0.95
CLIP = 20.0
SEEN_GROUP_FRACTION = 0.99   # a sensor present in this share of the fitting windows is one it always had


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
        M = pd.DataFrame({c: pd.to_numeric(X[c], errors="coerce") if c in X.columns else np.nan for c in self.cols_},
                         index=X.index).to_numpy(dtype=np.float64)
        Z = (M - self.center_) / self.scale_
        return np.nan_to_num(np.clip(Z, -CLIP, CLIP), nan=0.0).astype(np.float32)

    def fit(self, X: pd.DataFrame, configs: Sequence[str]) -> "Familiarity":
        from sklearn.neighbors import NearestNeighbors
        configs = np.asarray(configs)
        if len(X) != len(configs) or len(set(configs.tolist())) < 2:
            raise ValueError("familiarity needs windows of at least two configurations, one label per window")
        num = X[[c for c in X.columns if c.startswith(PREFIXES)]].apply(pd.to_numeric, errors="coerce")
        self.cols_ = [c for c in num.columns if np.isfinite(num[c].to_numpy(dtype=np.float64)).any()]
        num = num[self.cols_]
        present = {g: ~v for g, v in groups_lacking(num, self.cols_, sorted({feature_group(c) for c in self.cols_})).items()}
        self.groups_seen_ = sorted(g for g, v in present.items() if v.mean() >= SEEN_GROUP_FRACTION)
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

    def lacking(self, X: pd.DataFrame) -> list[list[str]]:
        """Per row, the sensors every fitting window had that this one lacks."""
        miss = groups_lacking(X, self.cols_, self.groups_seen_)
        return [[g for g in self.groups_seen_ if miss[g][i]] for i in range(len(X))]

    def distance(self, X: pd.DataFrame) -> np.ndarray:
        """Mean distance to the k nearest fitting windows; NaN for a window lacking a sensor the fit had."""
        if self._nn is None:
            raise RuntimeError("familiarity is not fitted")
        if len(X) == 0:
            return np.zeros(0)
        d = self._nn.kneighbors(self._z(X))[0].mean(axis=1)
        d[np.array([bool(m) for m in self.lacking(X)])] = np.nan
        return d

    def unfamiliar(self, X: pd.DataFrame) -> np.ndarray:
        """True above the threshold; a window not judged (NaN) is not counted unfamiliar."""
        return np.nan_to_num(self.distance(X), nan=-np.inf) > self.threshold_

    def lines(self, X: pd.DataFrame) -> list[str]:
        """One evidence line per row of X."""
        return [self.line(float(d), miss) for d, miss in zip(self.distance(X), self.lacking(X))]

    def line(self, distance: float, missing: list[str] = ()) -> str:
        if missing or not np.isfinite(distance):
            return (f"familiarity not judged: the window lacks sensors every fitting window had "
                    f"({', '.join(missing) or 'unknown'}), so it cannot be set against them")
        ratio = distance / self.threshold_
        if ratio > 1:
            return (f"unfamiliar workload: this window lies {ratio:.1f}x as far from the windows the detector was "
                    f"fitted on as a new configuration of a known workload does (95th percentile): the verdict "
                    f"extrapolates, review it")
        return (f"familiar workload: this window lies within the distance at which new configurations of known "
                f"workloads lie from the fitting data ({ratio:.2f} of it)")


def save(fam: Familiarity, path: Path, command: str, meta: dict) -> Path:
    import joblib
    path.parent.mkdir(parents=True, exist_ok=True)
    joblib.dump(fam, path, compress=3)
    path.with_suffix(".json").write_text(json.dumps({"name": fam.name, "trained_by": command, "threshold": fam.threshold_,
                                                     "k": fam.k, "quantile": fam.quantile, "features": len(fam.cols_),
                                                     "saved_at": time.time(), **meta}, indent=1) + "\n")
    return path


def load(path: Path) -> Familiarity:
    import joblib
    fam = joblib.load(path)
    if not isinstance(fam, Familiarity) or fam.threshold_ is None:
        raise ValueError(f"{path} is not a fitted familiarity model")
    return fam
