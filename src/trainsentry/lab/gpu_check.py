"""Compare the NVLink bytes the agent measured with the bytes NCCL was asked to move.

Input: a trace recorded at 10 Hz while ``scripts/gpu/nccl_known_bytes.py`` ran, and the phase log it
wrote. For each phase, the measured bytes of a GPU are the NVLink DATA counter at the last sample
before the phase started minus the counter at the last sample before the idle gap after it ended
(the counters are cumulative, so sample timing only has to bracket the phase, not align with it).
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import numpy as np

from ..traces.io import read_samples
from ..traces.schema import METRIC_BY_NAME

SETTLE_S = 1.5  # after a phase's end, inside the 3 s idle gap that follows it


def _counter_at(t: np.ndarray, v: np.ndarray, when: float) -> float:
    idx = np.searchsorted(t, when, side="right") - 1
    if idx < 0:
        raise ValueError(f"no sample before t={when:.3f}")
    return float(v[idx])


def phase_bytes(table, device: str, metric: str, start: float, end: float) -> float:
    mask = np.asarray(table.column("device").to_pylist()) == device
    t = table.column("t").to_numpy()[mask]
    v = np.asarray(table.column(metric).to_pylist(), dtype=np.float64)[mask]
    order = np.argsort(t)
    t, v = t[order], v[order]
    before = _counter_at(t, v, start - 0.05)
    after = _counter_at(t, v, end + SETTLE_S)
    return (after - before) * METRIC_BY_NAME[metric].scale


def check(run_dir: str | Path, phases_path: str | Path, machine: str = "") -> dict:
    table = read_samples(run_dir)
    phases = json.loads(Path(phases_path).read_text())
    gpus = sorted({d for d, k in zip(table.column("device").to_pylist(), table.column("kind").to_pylist())
                   if k == "gpu"})
    rows = []
    ar = phases["all_reduce"]
    for g in gpus:
        for direction, metric in (("tx", "nvlink_tx_kib"), ("rx", "nvlink_rx_kib")):
            expected = ar[f"expected_{direction}_bytes_per_gpu"]
            measured = phase_bytes(table, g, metric, ar["start"], ar["end"])
            rows.append({"phase": "all_reduce", "gpu": g, "direction": direction, "expected_bytes": expected,
                         "measured_bytes": measured, "rel_error": (measured - expected) / expected})
    sd = phases["send"]
    for g in gpus:
        for direction, metric in (("tx", "nvlink_tx_kib"), ("rx", "nvlink_rx_kib")):
            expected = sd[f"expected_{direction}_bytes"][g]
            measured = phase_bytes(table, g, metric, sd["start"], sd["end"])
            rows.append({"phase": "send", "gpu": g, "direction": direction, "expected_bytes": expected,
                         "measured_bytes": measured,
                         "rel_error": (measured - expected) / expected if expected else None})
    big = [r for r in rows if r["expected_bytes"]]
    quiet = [r for r in rows if not r["expected_bytes"]]
    # the idle direction of a one-way send must stay below 1 % of the moving direction
    send_total = sd["n"] * phases["bytes_per_op"]
    return {
        "what": "NVLink DATA counters (NVML fields 138/139, all links) vs bytes handed to NCCL",
        "machine": machine, "date": datetime.date.today().isoformat(),
        "bytes_per_op": phases["bytes_per_op"], "rows": rows,
        "max_abs_rel_error": max(abs(r["rel_error"]) for r in big),
        "within_1pct": all(abs(r["rel_error"]) <= 0.01 for r in big),
        "send_direction_visible": all(r["measured_bytes"] <= 0.01 * send_total for r in quiet),
        "send_quiet_direction_max_bytes": max((r["measured_bytes"] for r in quiet), default=0.0),
    }
