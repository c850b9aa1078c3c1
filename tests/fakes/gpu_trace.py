"""A synthetic one-GPU trace in the project's trace format, for tests of studies that read runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainsentry.traces.io import write_trace
from trainsentry.traces.schema import GPU_METRICS


def gpu_trace(root: Path, run_id: str, cls: str, family: str, values: dict, extra: dict,
              config: dict | None = None, samples: int = 300, ground_truth: dict | None = None) -> None:
    """Write ``root/run_id``: one GPU sampled at 10 Hz, every GPU metric empty but ``values`` (a
    constant, or a function of the sample times), the manifest's labels and ``extra`` as rank 0's
    ground truth (with ``ground_truth``'s other fields: steps, step times, tokens)."""
    t = 1_800_000_000.0 + np.arange(samples) / 10.0
    cols = {"node": ["n"] * t.size, "device": ["gpu0"] * t.size, "kind": ["gpu"] * t.size, "t": list(t)}
    for m in GPU_METRICS:
        cols[m.name] = [None] * t.size
    for name, v in values.items():
        cols[name] = list(v(t)) if callable(v) else [v] * t.size
    manifest = {"run_id": run_id, "node": "n", "start": float(t[0]), "end": float(t[-1]), "sample_hz": 10.0,
                "labels": {"workload": run_id, "class": cls, "family": family, "config": config or {}},
                "ground_truth": {**(ground_truth or {}), "extra": {"0": extra}}}
    write_trace(root / run_id, cols, manifest)
