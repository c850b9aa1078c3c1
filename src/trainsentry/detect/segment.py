"""Where workloads start and end in a node's stream: the seed study's rule and ours.

Baseline (seed FLOP study): poll GPU utilisation every 1.5 s; a workload starts when it exceeds
5 % for 2 consecutive polls and ends after 3 polls below 5 %. It splits one job at every pause
longer than ~4.5 s, which is how that study's red team hid a run as several small ones.

Ours: a GPU is active when its utilisation exceeds 5 %, its power is 40 W above its own idle
floor, or it moves NVLink bytes (peer copies run on copy engines and leave utilisation at 0 %).
Segments are runs of activity (start after 1 s active, end after 2 s idle). Two consecutive
segments are linked into one *job* when the gap is short enough (default 10 min), the GPUs kept
their memory through the gap (a paused process holds its weights and optimizer state; a finished
one frees them), and the resumed segment has the same signature (same GPUs; power and NVLink
volume within tolerance). Both segments and jobs are reported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa

from ..features import signal as S
from ..features.grid import NodeGrid, to_grids

UTIL_ACTIVE_PCT = 5.0
POWER_ACTIVE_MARGIN_W = 40.0
NVLINK_ACTIVE_BPS = 1e6
MAX_GAP_S = 600.0       # segments further apart are never one job
HELD_FRAC = 0.8         # share of its memory above the idle floor a GPU keeps through a pause


@dataclass
class Segment:
    start: float
    end: float
    gpus: list[str] = field(default_factory=list)
    power_W: float = math.nan
    nvlink_Bps: float = math.nan
    mem_bytes: dict[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end - self.start


@dataclass
class Job:
    start: float
    end: float
    segments: list[int]


def _runs_with_hysteresis(active: np.ndarray, on_bins: int, off_bins: int) -> list[tuple[int, int]]:
    """(start, stop) bin indices: start after on_bins active in a row, stop at the first of off_bins idle."""
    out, i, n = [], 0, active.size
    while i < n:
        if active[i: i + on_bins].size == on_bins and active[i: i + on_bins].all():
            j = i + on_bins
            while j < n and active[j: j + off_bins].any():
                j += 1
            out.append((i, j))
            i = j + off_bins
        else:
            i += 1
    return out


def baseline_segments(table: pa.Table, poll_s: float = 1.5, util_pct: float = UTIL_ACTIVE_PCT,
                      on_polls: int = 2, off_polls: int = 3) -> dict[str, list[Segment]]:
    """The seed study's daemon: utilisation polls only (node utilisation = busiest GPU)."""
    out = {}
    for node, grid in to_grids(table, 1.0 / poll_s, max_hold_s=2 * poll_s).items():
        utils = [s["gpu_util_pct"] for s in grid.gpus.values() if "gpu_util_pct" in s]
        if not utils:
            out[node] = []
            continue
        util = np.nanmax(np.vstack([S.fill(u) for u in utils]), axis=0)
        t0 = grid.t - grid.dt_s
        out[node] = [Segment(float(t0[a]), float(t0[b]) if b < t0.size else float(grid.t[-1]))
                     for a, b in _runs_with_hysteresis(util > util_pct, on_polls, off_polls)]
    return out


def _gpu_active(series: dict[str, np.ndarray]) -> np.ndarray:
    n = next(iter(series.values())).size
    act = np.zeros(n, dtype=bool)
    if "gpu_util_pct" in series:
        act |= S.fill(series["gpu_util_pct"]) > UTIL_ACTIVE_PCT
    if "power_mw" in series:
        p = S.fill(series["power_mw"]) / 1000.0
        if np.isfinite(p).any():
            act |= p > np.nanpercentile(p, 5) + POWER_ACTIVE_MARGIN_W
    if "nvlink_tx_Bps" in series and "nvlink_rx_Bps" in series:
        act |= np.nan_to_num(series["nvlink_tx_Bps"]) + np.nan_to_num(series["nvlink_rx_Bps"]) > NVLINK_ACTIVE_BPS
    return act


def _describe(grid: NodeGrid, a: int, b: int, per_gpu: dict[str, np.ndarray]) -> Segment:
    t0 = grid.t - grid.dt_s
    gpus = [str(d) for d, act in per_gpu.items() if act[a:b].mean() > 0.2]
    power = [S.mean(grid.gpus[d]["power_mw"][a:b]) / 1000 for d in gpus if "power_mw" in grid.gpus[d]]
    nvl = [S.mean(grid.gpus[d]["nvlink_tx_Bps"][a:b]) for d in gpus if "nvlink_tx_Bps" in grid.gpus[d]]
    mem = {d: S.mean(grid.gpus[d]["mem_used_bytes"][a:b]) for d in gpus if "mem_used_bytes" in grid.gpus[d]}
    return Segment(float(t0[a]), float(t0[b]) if b < t0.size else float(grid.t[-1]), gpus,
                   float(np.mean(power)) if power else math.nan, float(np.mean(nvl)) if nvl else math.nan, mem)


def same_signature(a: Segment, b: Segment, power_tol: float = 0.25, nvlink_log_tol: float = 0.5) -> bool:
    if set(a.gpus) != set(b.gpus):
        return False
    if math.isfinite(a.power_W) and math.isfinite(b.power_W):
        if abs(a.power_W - b.power_W) > power_tol * max(a.power_W, b.power_W):
            return False
    if math.isfinite(a.nvlink_Bps) and math.isfinite(b.nvlink_Bps):
        if abs(math.log10(a.nvlink_Bps + 1) - math.log10(b.nvlink_Bps + 1)) > nvlink_log_tol:
            return False
    return True


def memory_held(seg: Segment, floor: dict[str, float], gap_min: dict[str, float],
                held_frac: float = HELD_FRAC) -> bool:
    """Every GPU of the segment kept ≥ held_frac of its memory above the node's idle floor in the gap.

    ``floor``: each GPU's lowest memory in the node's stream; ``gap_min``: its lowest in the gap (a GPU
    missing from either has nothing to show, and is not held)."""
    if not seg.mem_bytes:
        return False
    for d, m in seg.mem_bytes.items():
        f, g = floor.get(d, math.nan), gap_min.get(d, math.nan)
        if not (math.isfinite(f) and math.isfinite(g)) or m - f <= 0 or (g - f) < held_frac * (m - f):
            return False
    return True


def links(prev: Segment, seg: Segment, floor: dict[str, float], gap_min: dict[str, float],
          max_gap_s: float = MAX_GAP_S, held_frac: float = HELD_FRAC) -> bool:
    """The job rule: ``seg`` continues the job whose latest segment is ``prev`` when the gap between
    them is at most ``max_gap_s``, the signature is the same and the GPUs held their memory through it.
    One rule for offline segmentation (:func:`segment_stream`) and the live collector."""
    return (seg.start - prev.end <= max_gap_s and same_signature(prev, seg)
            and memory_held(prev, floor, gap_min, held_frac))


def _memory(grid: NodeGrid, i_from: int, i_to: int) -> tuple[dict[str, float], dict[str, float]]:
    """(lowest memory per GPU over the whole grid, lowest in bins [i_from, i_to)), finite values only."""
    floor, gap_min = {}, {}
    for d, series in grid.gpus.items():
        m = series.get("mem_used_bytes")
        if m is None or not np.isfinite(m).any():
            continue
        floor[d] = float(np.nanmin(m))
        gap = S.finite(m[i_from:i_to])
        if gap.size:
            gap_min[d] = float(gap.min())
    return floor, gap_min


def segment_stream(table: pa.Table, hz: float = 2.0, max_gap_s: float = MAX_GAP_S, held_frac: float = HELD_FRAC,
                   on_s: float = 1.0, off_s: float = 2.0) -> dict[str, dict]:
    """Per node: {"segments": [...], "jobs": [...]} with jobs linking paused segments."""
    out = {}
    for node, grid in to_grids(table, hz).items():
        per_gpu = {d: _gpu_active(s) for d, s in grid.gpus.items() if s}
        if not per_gpu:
            out[node] = {"segments": [], "jobs": []}
            continue
        active = np.any(np.vstack(list(per_gpu.values())), axis=0)
        spans = _runs_with_hysteresis(active, max(1, round(on_s * hz)), max(1, round(off_s * hz)))
        segs = [_describe(grid, a, b, per_gpu) for a, b in spans]
        jobs: list[Job] = []
        for i, seg in enumerate(segs):
            if jobs:
                prev = segs[jobs[-1].segments[-1]]
                floor, gap_min = _memory(grid, spans[jobs[-1].segments[-1]][1], spans[i][0])
                if links(prev, seg, floor, gap_min, max_gap_s, held_frac):
                    jobs[-1].segments.append(i)
                    jobs[-1].end = seg.end
                    continue
            jobs.append(Job(seg.start, seg.end, [i]))
        out[node] = {"segments": [asdict(s) for s in segs], "jobs": [asdict(j) for j in jobs]}
    return out
