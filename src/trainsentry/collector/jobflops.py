"""``GET /v1/jobs/{job}/flops``: the job's estimated training FLOPs so far, with its interval.

The estimate is :func:`trainsentry.flops.live.estimate_so_far` (the saved estimator in
``$TRAINSENTRY_MODELS/flops.json``, default ``models/flops.json``; ``trainsentry flops-eval``
writes it) over each node's stored samples from the job's start, plus the idle stretch before it
that the estimator takes its power baseline from. A job over several nodes is the sum of its
nodes' estimates; its interval is the sum of the nodes' bounds (the widest the nodes' errors can
add up to, since they are not independent). Without a saved model the answer says so instead of
guessing. Answers are cached per job for ``CACHE_S``: the estimate reads every sample of the job.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

CACHE_S = 30.0
BASELINE_S = 60.0      # samples read before the job start, for the estimator's idle baseline
MAX_SAMPLES = 2_000_000


def model_path() -> Path:
    return Path(os.environ.get("TRAINSENTRY_MODELS", "models")) / "flops.json"


def node_table(conn: sqlite3.Connection, node: str, start: float, end: float):
    """A trace table (the :mod:`trainsentry.traces.io` layout, rates derived there) of one node's samples."""
    from ..telemetry.base import Reading
    from ..traces.io import columns_to_table, readings_to_columns
    from .schema import SAMPLE_METRICS
    rows = conn.execute(
        f"SELECT s.device, s.kind, s.t, {', '.join('s.' + m for m in SAMPLE_METRICS)} FROM nodes n "
        "JOIN batches b ON b.node_id = n.node_id JOIN samples s ON s.sample_id BETWEEN b.first_sample AND b.last_sample "
        "WHERE n.name = ? AND b.t_last >= ? AND b.t_first <= ? AND s.t >= ? AND s.t <= ? LIMIT ?",
        (node, start, end, start, end, MAX_SAMPLES + 1)).fetchall()
    if len(rows) > MAX_SAMPLES:
        raise ValueError(f"node {node} holds more than {MAX_SAMPLES} samples in the job; too long to estimate here")
    readings = [Reading(r[0], r[1], r[2], {m: v for m, v in zip(SAMPLE_METRICS, r[3:]) if v is not None})
                for r in sorted(rows, key=lambda r: (r[2], r[0]))]
    return columns_to_table(readings_to_columns(node, readings))


def estimate_job(conn: sqlite3.Connection, job: dict, now: float | None = None) -> dict:
    """``{"available": bool, ...}`` for a job row (``job``, ``nodes``, ``start_t``) of the live engine."""
    from ..flops.live import LEVEL, estimate_so_far, load_model
    now = time.time() if now is None else now
    path = model_path()
    base = {"job": job["job"], "start": job["start_t"], "model": str(path)}
    if not path.exists():
        return {**base, "available": False,
                "reason": f"no saved FLOP model at {path} (`trainsentry flops-eval` writes it)"}
    try:
        model = load_model(path)
    except (ValueError, KeyError) as e:
        return {**base, "available": False, "reason": f"the FLOP model at {path} cannot be used: {e}"}
    per_node, problems = {}, {}
    for node in job["nodes"]:
        try:
            table = node_table(conn, node, job["start_t"] - BASELINE_S, now)
            r = estimate_so_far(table, job["start_t"], now, model=model)
            per_node[node] = {k: r[k] for k in ("flops", "lo", "hi", "tensor_flop_max")}
        except ValueError as e:  # no samples after the start yet, no GPUs, too long
            problems[node] = str(e)
    if not per_node:
        return {**base, "available": False, "reason": "; ".join(f"{n}: {p}" for n, p in problems.items()),
                "per_node": {}}
    return {**base, "available": True, "level": LEVEL, "estimator": model.name,
            "flops": sum(v["flops"] for v in per_node.values()), "lo": sum(v["lo"] for v in per_node.values()),
            "hi": sum(v["hi"] for v in per_node.values()),
            # the precision-blind ceiling, summed where every estimated node reports tensor activity
            "tensor_flop_max": (sum(v["tensor_flop_max"] for v in per_node.values())
                                if all(v["tensor_flop_max"] is not None for v in per_node.values()) else None),
            "per_node": per_node, "not_estimated": problems}


class JobFlops:
    """Per-job cache in front of :func:`estimate_job`."""

    def __init__(self, reader):
        self.reader = reader
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, dict]] = {}

    def get(self, job: dict) -> dict:
        t = time.monotonic()
        with self._lock:
            hit = self._cache.get(job["job"])
        if hit and t - hit[0] < CACHE_S:
            return hit[1]
        out = estimate_job(self.reader(), job)
        with self._lock:
            self._cache[job["job"]] = (t, out)
        return out
