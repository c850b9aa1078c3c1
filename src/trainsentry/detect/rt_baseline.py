"""``rt-baseline``: a reproduction of Rahman & Tajdari's two-stage random forest (arXiv 2606.19262).

Stage 1 separates ML work (training or inference) from everything else; stage 2, fitted on ML
windows only, separates training from inference with the absolute-level statistics (mean, min,
max, percentiles) removed so that it must rely on the shape of the signals. Both stages: 400 trees,
no depth limit, min_samples_leaf 2, sqrt features per split, balanced class weights.
P(training) = P(ML) · P(training | ML). Features: :mod:`trainsentry.features.rt` (166 per window,
1 Hz, 30 s windows every 15 s).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..features.rt import LEVEL_STATS, RT_FEATURE_NAMES, RT_STRIDE_S, RT_WINDOW_S
from .base import Detector, check_fit_input

STAGE2_FEATURES = tuple(c for c in RT_FEATURE_NAMES if c.rsplit(".", 1)[-1] not in LEVEL_STATS)


def _forest(n_trees: int, seed: int):
    from sklearn.ensemble import RandomForestClassifier
    return RandomForestClassifier(n_estimators=n_trees, max_depth=None, min_samples_leaf=2, max_features="sqrt",
                                  class_weight="balanced", n_jobs=-1, random_state=seed)


class _Stage:
    """One forest, or a constant when its fit data held a single class."""

    def __init__(self, cols: tuple[str, ...], n_trees: int, seed: int):
        self.cols, self.n_trees, self.seed = cols, n_trees, seed
        self.model, self.constant = None, None

    def matrix(self, X: pd.DataFrame) -> np.ndarray:
        data = {c: pd.to_numeric(X[c], errors="coerce") if c in X.columns else np.nan for c in self.cols}
        m = pd.DataFrame(data, index=X.index).to_numpy(dtype=np.float64)
        return np.where(np.isfinite(m), m, np.nan)

    def fit(self, X: pd.DataFrame, y: np.ndarray) -> "_Stage":
        if len(set(y)) < 2:
            self.constant = float(y[0]) if len(y) else 1.0
            return self
        self.model = _forest(self.n_trees, self.seed).fit(self.matrix(X), y)
        return self

    def proba(self, X: pd.DataFrame) -> np.ndarray:
        if self.constant is not None:
            return np.full(len(X), self.constant)
        return self.model.predict_proba(self.matrix(X))[:, 1]


class RTBaseline(Detector):
    name = "rt-baseline"
    feature_set = "rt"
    window_s = RT_WINDOW_S
    stride_s = RT_STRIDE_S

    def __init__(self, n_trees: int = 400, seed: int = 0, exclude: tuple[str, ...] = ()):
        """``exclude``: features whose name contains any of these are not read (an ablation, not the
        published method: detect.variants)."""
        self.n_trees, self.seed, self.exclude = n_trees, seed, tuple(exclude)
        keep = lambda cols: tuple(c for c in cols if not any(x in c for x in self.exclude))  # noqa: E731
        self.stage1 = _Stage(keep(RT_FEATURE_NAMES), n_trees, seed)
        self.stage2 = _Stage(keep(STAGE2_FEATURES), n_trees, seed + 1)

    def uses(self, column: str) -> bool:
        return column in RT_FEATURE_NAMES

    def fit(self, X: pd.DataFrame, y: np.ndarray, groups: Sequence | None = None,
            classes: Sequence[str] | None = None) -> "RTBaseline":
        y = check_fit_input(X, y)
        if classes is None:
            # Without the three-way label every non-training window counts as ML (stage 1 is a no-op).
            ml = np.ones(len(y), dtype=int)
        else:
            ml = np.array([c in ("training", "inference") for c in classes], dtype=int)
        self.stage1.fit(X, ml)
        keep = ml == 1
        self.stage2.fit(X[keep], y[keep] if keep.any() else y)
        return self

    def predict_proba(self, X: pd.DataFrame) -> np.ndarray:
        return self.stage1.proba(X) * self.stage2.proba(X)

    def explain(self, x: Mapping[str, float]) -> list[str]:
        row = pd.DataFrame([dict(x)])
        p1, p2 = float(self.stage1.proba(row)[0]), float(self.stage2.proba(row)[0])
        out = [f"P(training) = {p1 * p2:.2f} = P(ML work) {p1:.2f} × P(training | ML) {p2:.2f} "
               f"(two-stage random forest, {self.n_trees} trees each)"]
        for stage, label in ((self.stage1, "stage 1"), (self.stage2, "stage 2")):
            if stage.model is not None:
                imp = stage.model.feature_importances_
                top = np.argsort(imp)[::-1][:3]
                vals = stage.matrix(row)[0]
                out.append(f"{label} leans most on " + ", ".join(f"{stage.cols[i]} = {vals[i]:.4g}" for i in top))
        return out

    def describe(self) -> dict:
        return {**super().describe(), "n_trees": self.n_trees, "exclude": list(getattr(self, "exclude", ())),
                "n_features": len(self.stage1.cols),
                "stage2_features": len(self.stage2.cols), "reference": "Rahman & Tajdari, arXiv 2606.19262"}
