"""The host's CPU beside the GPUs (the agent's host source, telemetry/host.py): one summary of a span
of busy cores, shared by the host study (scripts/host_study.py, on a run's grid) and the collector's
evidence line (collector/evidence.py, on a window's samples).

A GPU program's launching thread spins while it waits for the GPU, so any GPU job keeps about one core
busy per GPU; the *witness* asks for more: at least ``BUSY_MARGIN`` cores beyond one per GPU busy (user
+ system; 3 on a one-GPU node, the node docs/host.md measured) in at least ``BUSY_SHARE`` of the span's
samples (the agent's 10 Hz samples, the study's 0.1 s bins). The margin was set by hand on the runs it
was then scored on (in-sample), on one virtual machine. An optimizer run on the host's cores (ZeRO-Offload) is witnessed, copies
over PCIe are not, and neither is an update on one or two threads, nor told from other host
computation locked to the transfers (docs/host.md). It is evidence to show, not an alert.
"""

from __future__ import annotations

import numpy as np

BUSY_MARGIN = 2.0
BUSY_SHARE = 0.1


def witness_cores(n_gpus: int) -> float:
    """The busy cores the witness asks for on a node of ``n_gpus`` GPUs (one launching thread each)."""
    return max(1, int(n_gpus)) + BUSY_MARGIN


BUSY_CORES = witness_cores(1)   # on a one-GPU node


def busy_cores(user: np.ndarray, system: np.ndarray) -> np.ndarray:
    """Cores busy (user + system time per second), NaN where either is unmeasured."""
    return np.asarray(user, dtype=np.float64) + np.asarray(system, dtype=np.float64)


def host_activity(user: np.ndarray, system: np.ndarray, busy_at: float = BUSY_CORES,
                  share_at: float = BUSY_SHARE) -> dict | None:
    """Median and 90th percentile of the busy cores over a span, the share of its (finite) samples with
    at least ``busy_at`` cores busy, and whether that share reaches ``share_at``; None when the span
    has no measurement."""
    busy = busy_cores(user, system)
    busy = busy[np.isfinite(busy)]
    if not busy.size:
        return None
    share = float(np.mean(busy >= busy_at))
    return {"busy_cores_median": float(np.median(busy)), "busy_cores_p90": float(np.percentile(busy, 90)),
            "busy_share": share, "witnessed": share >= share_at}
