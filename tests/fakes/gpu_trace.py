"""A synthetic one-GPU trace in the project's trace format, for tests of studies that read runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainsentry.traces.io import add_rates, write_trace
from trainsentry.traces.schema import METRICS


def gpu_trace(root: Path, run_id: str, cls: str, family: str, values: dict, extra: dict,
              config: dict | None = None, samples: int = 300, ground_truth: dict | None = None,
              host_busy_cores=None) -> None:
    """Write ``root/run_id``: one GPU sampled at 10 Hz, every GPU metric empty but ``values`` (a
    constant, or a function of the sample times), the manifest's labels and ``extra`` as rank 0's
    ground truth (with ``ground_truth``'s other fields: steps, step times, tokens). With
    ``host_busy_cores`` (a constant or a function of the times) the host source's device too: that
    many cores busy in user mode, of 16."""
    t = 1_800_000_000.0 + np.arange(samples) / 10.0
    cols = {"node": ["n"] * t.size, "device": ["gpu0"] * t.size, "kind": ["gpu"] * t.size, "t": list(t)}
    for m in METRICS:
        cols[m.name] = [None] * t.size
    for name, v in values.items():
        cols[name] = list(v(t)) if callable(v) else [v] * t.size
    if host_busy_cores is not None:
        busy = np.asarray(host_busy_cores(t) if callable(host_busy_cores) else np.full(t.size, host_busy_cores), float)
        user = np.concatenate([[0.0], np.cumsum(busy[1:] * 100.0)]).round()    # ms per 0.1 s sample
        idle = np.concatenate([[0.0], np.cumsum((16 - busy[1:]) * 100.0)]).round()
        host = {"node": ["n"] * t.size, "device": ["host"] * t.size, "kind": ["host"] * t.size, "t": list(t),
                "cpu_user_ms": [int(v) for v in user], "cpu_system_ms": [0] * t.size,
                "cpu_idle_ms": [int(v) for v in idle]}
        for k in cols:
            cols[k] = cols[k] + host.get(k, [None] * t.size)
    add_rates(cols)
    manifest = {"run_id": run_id, "node": "n", "start": float(t[0]), "end": float(t[-1]), "sample_hz": 10.0,
                "labels": {"workload": run_id, "class": cls, "family": family, "config": config or {}},
                "ground_truth": {**(ground_truth or {}), "extra": {"0": extra}}}
    write_trace(root / run_id, cols, manifest)
