"""Saved estimators and the live path: FLOPs so far, with an interval, for a job judged to be training.

``models/flops.json`` holds the estimator that won the evaluation, calibrated on every training
run of the dataset (``trainsentry flops-eval`` writes it, with the command that made it). The
collector calls :func:`estimate_so_far` with the node's samples (the trace table layout), the job
start its segmentation found, and the current time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from .estimators import LEVEL, Estimator, from_dict
from .features import PEAK_FP8_AT_FEATURE_CLOCK, interval_features, stack

# /2: the energy models' overhead term is per busy GPU-second (features.busy_gpu_s), not per node-second;
# a /1 file's overhead power would be applied to the wrong time base, so it is refused, not misread
MODEL_FORMAT = "trainsentry.flops-model/2"
DEFAULT_MODEL = Path("models/flops.json")

_cache: dict[tuple[str, float], Estimator] = {}


def save_model(est: Estimator, path: str | Path, provenance: dict) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": MODEL_FORMAT, "estimator": est.to_dict(), "provenance": provenance}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def load_model(path: str | Path = DEFAULT_MODEL) -> Estimator:
    """A saved estimator; cached per (path, mtime) so the live path does not re-read it per call."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no saved FLOP model (run `trainsentry flops-eval` first)")
    key = (str(path.resolve()), path.stat().st_mtime)
    if key not in _cache:
        doc = json.loads(path.read_text())
        if doc.get("format") != MODEL_FORMAT:
            raise ValueError(f"{path}: a {doc.get('format')!r} file, not {MODEL_FORMAT} "
                             "(refit it with `trainsentry flops-eval`)")
        _cache[key] = from_dict(doc["estimator"])
    return _cache[key]


def tensor_ceiling(table: pa.Table, tensor_active_s: float) -> float | None:
    """The most tensor-core work an interval can hold: its tensor-busy GPU-seconds times the dense FP8
    peak at the boost clock, whatever precision the work ran in (GPM counts an FP8 product's busy cycles
    as a BF16 one's, docs/below-floor.md and docs/fp8-training.md); executed FLOPs, so twice it for
    2:4-sparse products counted as the dense ones they stand for. The estimators, calibrated on BF16
    training, see about half of an FP8 trainer's work; this does not depend on that calibration. None
    where the GPUs report no tensor activity (no GPM)."""
    if "gpm_tensor_util_pct" not in table.column_names:
        return None
    col = np.asarray(table.column("gpm_tensor_util_pct").to_numpy(zero_copy_only=False), dtype=np.float64)
    if not np.isfinite(col).any() or not np.isfinite(tensor_active_s):
        return None
    return float(tensor_active_s * PEAK_FP8_AT_FEATURE_CLOCK)


def estimate_interval(table: pa.Table, start: float, end: float, model: Estimator,
                      level: float = LEVEL) -> dict:
    f = interval_features(table, start, end)
    X = stack([f])
    pred = float(model.predict(X)[0])
    lo, hi = model.predict_interval(X, level)
    return {"flops": pred, "lo": float(lo[0]), "hi": float(hi[0]), "level": level, "estimator": model.name,
            "tensor_flop_max": tensor_ceiling(table, f.tensor_active_s), "features": f.as_dict()}


def estimate_so_far(table: pa.Table, start: float, now: float | None = None,
                    model: Estimator | str | Path | None = None, level: float = LEVEL) -> dict:
    """The FLOPs spent by the job from ``start`` up to ``now`` (default: the newest sample):
    ``estimate_interval``'s answer (``flops``, ``lo``, ``hi``, ``tensor_flop_max``, ...).

    ``now`` is clipped to the newest GPU sample so a late call does not count seconds nobody
    measured as idle. Raises ValueError when there is no measured time after ``start`` yet.
    """
    est = model if isinstance(model, Estimator) else load_model(model or DEFAULT_MODEL)
    t = np.asarray(table.column("t").to_numpy(zero_copy_only=False), dtype=np.float64)
    if t.size == 0:
        raise ValueError("no samples")
    end = float(np.max(t)) if now is None else min(float(now), float(np.max(t)))
    if not end > start:
        raise ValueError(f"no samples after the job start {start}")
    return estimate_interval(table, start, end, est, level)


def provenance(command: str, data: str, n_runs: int, n_configs: int) -> dict:
    return {"command": command, "data": data, "runs": n_runs, "configurations": n_configs,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
