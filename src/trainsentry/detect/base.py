"""The detector contract: fit on labeled windows, give P(training) per window, say why.

A detector declares the window it reads (``window_s``/``stride_s``), the feature family it needs
(``feature_set``: ``"trainsentry"`` from :mod:`trainsentry.features`, or ``"rt"`` for the Rahman &
Tajdari reproduction) and which of those columns it uses (``uses``). ``X`` is a pandas DataFrame of
window rows; ``y`` is 1 for training and 0 otherwise; ``classes`` (optional) carries the
three-way label for detectors that use it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd


class Detector(ABC):
    name: str = ""
    feature_set: str = "trainsentry"
    window_s: float = 8.0
    stride_s: float = 2.0

    @abstractmethod
    def uses(self, column: str) -> bool:
        """Whether this detector reads a feature column (its declared feature subset)."""

    def columns(self, X: pd.DataFrame) -> list[str]:
        return [c for c in X.columns if self.uses(c)]

    @abstractmethod
    def fit(self, X: pd.DataFrame, y: np.ndarray, groups: Sequence | None = None,
            classes: Sequence[str] | None = None) -> "Detector":
        ...

    @abstractmethod
    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        """P(training) for every row of X."""

    @abstractmethod
    def explain(self, x: Mapping[str, float]) -> list[str]:
        """Plain-words evidence behind the verdict on one window (a row as a mapping)."""

    def out_of_domain(self, X: pd.DataFrame) -> np.ndarray:
        """Rows of X this detector was not fitted to judge (see ``feature_group``); none by default."""
        return np.zeros(len(X), dtype=bool)

    def describe(self) -> dict:
        return {"name": self.name, "feature_set": self.feature_set, "window_s": self.window_s,
                "stride_s": self.stride_s}


def feature_group(column: str) -> str:
    """The sensor a feature comes from: ``act`` (GPU activity), ``comm.nvlink``, ``comm.pcie``,
    ``comm.net``. A window without any value of a group lacks that sensor (a node without GPUs has
    no ``act``), which a learned model that always had it has never seen."""
    parts = column.split(".")
    return parts[0] if parts[0] != "comm" else ".".join(parts[:2])


SEEN_GROUP_FRACTION = 0.99   # a sensor present in this share of the fit windows is one a model relies on


def numeric_matrix(X: pd.DataFrame, cols: list[str]) -> np.ndarray:
    """X's ``cols`` as floats in that order; a column X lacks, or a value that is not a number, is NaN."""
    return pd.DataFrame({c: pd.to_numeric(X[c], errors="coerce") if c in X.columns else np.nan for c in cols},
                        index=X.index).to_numpy(dtype=np.float64)


def groups_seen(X: pd.DataFrame, cols: list[str], fraction: float = SEEN_GROUP_FRACTION) -> list[str]:
    """The sensor groups of ``cols`` present in at least ``fraction`` of X's rows (the sensors a model
    fitted on X always had)."""
    lacking = groups_lacking(X, cols, sorted({feature_group(c) for c in cols}))
    return sorted(g for g, v in lacking.items() if (~v).mean() >= fraction)


def groups_lacking(X: pd.DataFrame, cols: list[str], groups: list[str]) -> dict[str, np.ndarray]:
    """Per sensor group, the rows of X without a single finite value of that group's columns among
    ``cols`` (a window that lacks the sensor)."""
    out = {}
    for g in groups:
        mine = [c for c in cols if feature_group(c) == g and c in X.columns]
        vals = numeric_matrix(X, mine) if mine else np.full((len(X), 1), np.nan)
        out[g] = ~np.isfinite(vals).any(axis=1)
    return out


def check_fit_input(X: pd.DataFrame, y: np.ndarray) -> np.ndarray:
    y = np.asarray(y).astype(int)
    if len(X) != len(y):
        raise ValueError(f"X has {len(X)} rows but y has {len(y)}")
    if len(X) == 0:
        raise ValueError("no windows to fit on")
    if not set(np.unique(y)) <= {0, 1}:
        raise ValueError("y must be 1 (training) or 0 (not training)")
    return y


def save_detector(det: Detector, path: str | Path, command: str, extra: dict | None = None) -> Path:
    """Save a fitted detector (joblib) with a JSON beside it naming the command that trained it and the
    window feature version it was fitted on (``features.FEATURE_VERSION``)."""
    import joblib
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from ..features import FEATURE_VERSION
    joblib.dump(det, path, compress=3)
    meta = {"detector": det.describe(), "trained_by": command, "feature_version": FEATURE_VERSION, **(extra or {})}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n")
    return path


def load_detector(path: str | Path) -> Detector:
    import joblib
    det = joblib.load(Path(path))
    if not isinstance(det, Detector):
        raise ValueError(f"{path} does not hold a trainsentry detector")
    return det
