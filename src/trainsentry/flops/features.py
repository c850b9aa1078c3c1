"""Per-interval estimator inputs from a trace table: one function for offline runs and the live path.

Every quantity is an integral over ``[start, end]`` summed over the node's GPUs. A rate sample at
``t[i]`` describes the interval ``(t[i-1], t[i]]`` (that is how :mod:`trainsentry.traces.rates`
derives ``energy_W`` from the energy counter, and how GPM averages "since the previous GPM read"),
so each sample contributes ``rate × overlap((t[i-1], t[i]], [start, end])``. Integrating the derived
energy rate this way equals differencing the NVML energy counter, with counter resets handled once
in traces/rates.py.

Idle baseline. The workload lab keeps one torchrun process (and its CUDA context) alive across
runs, and a GPU holding a context idles near 122 W instead of ~80 W (the H200 probe: 80.2 W before
the context, 122.3 W with it, no kernels). So the baseline is measured per GPU from the idle
samples just before ``start`` (median rate over ``idle_window_s``); only when the trace has fewer
than ``MIN_IDLE_SAMPLES`` of them do we fall back to ``IDLE_W_CONTEXT_DEFAULT``, the probe's value.

Busy GPU-seconds. The energy models' overhead term (power above idle that no FLOP or byte explains:
clocks raised, a busier board) is paid by each GPU while it works, so its time base is
``busy_gpu_s``, the seconds each GPU's NVML utilisation is at or above ``IDLE_UTIL_PCT`` summed over
the GPUs (time without a reading counts as busy), not the node's wall time: calibrated on jobs that
mostly keep two GPUs busy, an overhead per node-second counted a one-GPU job's overhead about twice
and under-reported its FLOPs (scripts/flops_one_gpu.py).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..features.activity import IDLE_UTIL_PCT

# H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s. GPM's DRAM bandwidth utilisation is a fraction of
# this peak, so bytes moved = util/100 × 4.8e12 B/s × dt.
HBM_BANDWIDTH_BPS = 4.8e12
# SM clock the H200s ran at under load in the probe (and their maximum boost clock): tensor
# activity is scaled by sm_clock / this so a throttled GPU is not credited with full-rate cycles.
SM_CLOCK_MAX_MHZ = 1980.0
# Datasheet dense BF16 peak per GPU: 132 SMs × 4 tensor cores × 1024 FLOP per clock at 1830 MHz; at
# SM_CLOCK_MAX_MHZ the same tensor cores peak higher, so that is the most one tensor-busy second holds.
H200_DENSE_BF16_FLOPS = 989.4e12
DATASHEET_CLOCK_MHZ = 1830.0
PEAK_AT_FEATURE_CLOCK = H200_DENSE_BF16_FLOPS * SM_CLOCK_MAX_MHZ / DATASHEET_CLOCK_MHZ
# Hopper's dense FP8 (and INT8) tensor rate is twice its BF16 rate (H200 datasheet: 1979 against 989 TFLOP/s),
# and GPM's tensor activity counts an FP8 matmul's busy cycles as it counts a BF16 one's: on the H200, an
# FP8 burn held to a 3 % duty cycle did 1.98 times the FLOPs its activity would hold at the BF16 peak,
# a BF16 burn 0.96 (data/h200x1 other.matmul.n8192_x2-787bfe-r0 and -b5e1c3-r0, docs/below-floor.md). A
# 2:4-sparse BF16 burn executed 0.99 of it (its dense-equivalent count 1.99: -2c7481-r0).
FP8_OVER_BF16 = 2.0
PEAK_FP8_AT_FEATURE_CLOCK = FP8_OVER_BF16 * PEAK_AT_FEATURE_CLOCK
# H200 SXM datasheet maximum board power (TDP), the lent H200s' power limit (they forbid changing
# it; traces do not record the enforced limit). Only used to say how many runs sit at the limit.
H200_POWER_LIMIT_W = 700.0
# Board power of one H200 holding a CUDA context with no kernels running (h200-probe samples.csv,
# 2026-11-30, both GPUs 122.3 W ± 0.1 W between the all-reduce phase and the DDP phase).
IDLE_W_CONTEXT_DEFAULT = 122.3
IDLE_WINDOW_S = 3.0
MIN_IDLE_SAMPLES = 5

FEATURE_NAMES = ("duration_s", "energy_J", "idle_W", "net_energy_J", "dram_bytes", "nvlink_bytes",
                 "mean_power_W", "tensor_active_s", "tensor_cycles_s", "sm_active_s", "busy_gpu_s", "gpus",
                 "coverage")


@dataclass
class IntervalFeatures:
    duration_s: float        # end - start
    energy_J: float          # total board energy in the interval, summed over GPUs
    idle_W: float            # idle baseline, summed over GPUs
    net_energy_J: float      # energy_J - idle_W × duration_s
    dram_bytes: float        # GPM DRAM bandwidth util × HBM bandwidth, integrated
    nvlink_bytes: float      # NVLink payload TX + RX, summed over GPUs
    mean_power_W: float      # energy_J / duration_s (sum over GPUs)
    tensor_active_s: float   # ∫ GPM any-tensor util / 100 dt, summed over GPUs (tensor-busy GPU-seconds)
    tensor_cycles_s: float   # the same weighted by sm_clock / SM_CLOCK_MAX_MHZ where the clock is known
    sm_active_s: float       # ∫ GPM SM util / 100 dt, summed over GPUs
    busy_gpu_s: float        # seconds at NVML util >= IDLE_UTIL_PCT, summed over GPUs (see the module doc)
    gpus: int                # GPUs in the table
    coverage: float          # fraction of [start, end] covered by energy samples (min over GPUs)
    idle_source: str = "pre-start"   # or "default" when the trace had no idle samples before start
    energy_source: str = "energy_counter"  # or "power_gauge" when the energy counter was absent

    def as_dict(self) -> dict:
        return asdict(self)


def _col(table: pa.Table, name: str) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, np.nan)
    return pc.cast(table.column(name), pa.float64()).to_numpy(zero_copy_only=False).astype(np.float64)


def _hold(x: np.ndarray) -> np.ndarray:
    """A gauge held from each reading to the next (the agent reads slow gauges like the clock at 1 Hz);
    samples before the first reading take the first one. All-NaN stays NaN."""
    ok = ~np.isnan(x)
    if not ok.any():
        return x
    idx = np.where(ok, np.arange(x.size), 0)
    np.maximum.accumulate(idx, out=idx)
    held = x[idx]
    held[: int(np.argmax(ok))] = x[int(np.argmax(ok))]
    return held


def _overlap(t_prev: np.ndarray, t: np.ndarray, start: float, end: float) -> np.ndarray:
    return np.clip(np.minimum(t, end) - np.maximum(t_prev, start), 0.0, None)


def rate_integral(t: np.ndarray, rate: np.ndarray, start: float, end: float) -> tuple[float, float]:
    """∫ rate dt over [start, end] from samples whose rate covers (previous valid t, t]; and seconds covered.

    Only samples carrying a value count (GPM is absent on reads < 100 ms after the previous one, so
    its averaging interval starts at the previous *valid* sample).
    """
    ok = ~np.isnan(rate)
    tv, rv = t[ok], rate[ok]
    if tv.size < 2:
        return 0.0, 0.0
    w = _overlap(tv[:-1], tv[1:], start, end)
    return float(np.sum(rv[1:] * w)), float(np.sum(w))


def _idle_rate(t: np.ndarray, rate: np.ndarray, start: float, window_s: float) -> float | None:
    ok = ~np.isnan(rate) & (t <= start) & (t > start - window_s)
    # the first sample's rate reaches back before the window; it still counts (it ends inside)
    if int(ok.sum()) < MIN_IDLE_SAMPLES:
        return None
    return float(np.median(rate[ok]))


def interval_features(table: pa.Table, start: float, end: float, idle_window_s: float = IDLE_WINDOW_S,
                      idle_W_per_gpu: float | None = None) -> IntervalFeatures:
    """Estimator inputs for the interval [start, end] of a trace table (all GPUs of one node).

    ``idle_W_per_gpu`` forces a baseline (e.g. one measured earlier by a live monitor); by default it
    comes from the samples in the ``idle_window_s`` before ``start``.
    """
    if not (math.isfinite(start) and math.isfinite(end)) or end <= start:
        raise ValueError(f"interval [{start}, {end}] is empty or not finite")
    kind = np.asarray(table.column("kind").to_pylist()) if table.num_rows else np.asarray([])
    device = np.asarray(table.column("device").to_pylist()) if table.num_rows else np.asarray([])
    gpu_devices = sorted(set(device[kind == "gpu"].tolist()))
    if not gpu_devices:
        raise ValueError("the trace holds no GPU samples")
    t_all = _col(table, "t")
    cols = {n: _col(table, n) for n in ("energy_W", "power_mw", "gpm_dram_bw_util_pct", "nvlink_tx_Bps",
                                         "nvlink_rx_Bps", "gpm_nvlink_tx_mibps", "gpm_nvlink_rx_mibps",
                                         "gpm_tensor_util_pct", "gpm_sm_util_pct", "sm_clock_mhz", "gpu_util_pct")}
    duration = end - start
    tot = dict(energy=0.0, idle=0.0, dram=0.0, nvl=0.0, tensor=0.0, cycles=0.0, sm=0.0, busy=0.0)
    coverage = 1.0
    idle_source, energy_source = "pre-start", "energy_counter"
    for dev in gpu_devices:
        rows = np.flatnonzero(device == dev)
        rows = rows[np.argsort(t_all[rows], kind="stable")]
        t = t_all[rows]
        c = {k: v[rows] for k, v in cols.items()}
        power_W = c["energy_W"]
        if np.isnan(power_W).all():  # no energy counter: the ~1 s averaged power gauge stands in
            power_W, energy_source = c["power_mw"] / 1000.0, "power_gauge"
        e, covered = rate_integral(t, power_W, start, end)
        coverage = min(coverage, covered / duration)
        tot["energy"] += e
        idle = idle_W_per_gpu if idle_W_per_gpu is not None else _idle_rate(t, power_W, start, idle_window_s)
        if idle is None:
            idle, idle_source = IDLE_W_CONTEXT_DEFAULT, "default"
        tot["idle"] += idle
        tot["dram"] += rate_integral(t, c["gpm_dram_bw_util_pct"] / 100.0 * HBM_BANDWIDTH_BPS, start, end)[0]
        if not np.isnan(c["nvlink_tx_Bps"]).all():
            nvl = np.nan_to_num(c["nvlink_tx_Bps"]) + np.nan_to_num(c["nvlink_rx_Bps"])
            nvl[np.isnan(c["nvlink_tx_Bps"]) & np.isnan(c["nvlink_rx_Bps"])] = np.nan
        else:  # no NVLink counters: GPM's all-link MiB/s (also a payload rate) instead
            nvl = (np.nan_to_num(c["gpm_nvlink_tx_mibps"]) + np.nan_to_num(c["gpm_nvlink_rx_mibps"])) * 2**20
            nvl[np.isnan(c["gpm_nvlink_tx_mibps"]) & np.isnan(c["gpm_nvlink_rx_mibps"])] = np.nan
        tot["nvl"] += rate_integral(t, nvl, start, end)[0]
        tensor = c["gpm_tensor_util_pct"] / 100.0
        tot["tensor"] += rate_integral(t, tensor, start, end)[0]
        clock = _hold(c["sm_clock_mhz"])
        # where the clock is unknown the cycle count falls back to full clock (ratio 1)
        ratio = np.where(np.isnan(clock), 1.0, np.clip(clock / SM_CLOCK_MAX_MHZ, 0.0, 1.2))
        tot["cycles"] += rate_integral(t, tensor * ratio, start, end)[0]
        tot["sm"] += rate_integral(t, c["gpm_sm_util_pct"] / 100.0, start, end)[0]
        # NVML's utilisation is the share of its last sample period a kernel ran: it covers the time up
        # to its reading, like the rates above. Time no reading covers counts as busy, all of it when
        # the GPU has no utilisation at all: one rule, whether the readings are missing for a while or
        # throughout (a gap must not make the overhead smaller than no readings would).
        util = c["gpu_util_pct"]
        busy, covered = rate_integral(t, np.where(np.isnan(util), np.nan, (util >= IDLE_UTIL_PCT) * 1.0), start, end)
        tot["busy"] += busy + max(0.0, duration - covered)
    return IntervalFeatures(
        duration_s=duration, energy_J=tot["energy"], idle_W=tot["idle"],
        net_energy_J=tot["energy"] - tot["idle"] * duration, dram_bytes=tot["dram"], nvlink_bytes=tot["nvl"],
        mean_power_W=tot["energy"] / duration, tensor_active_s=tot["tensor"], tensor_cycles_s=tot["cycles"],
        sm_active_s=tot["sm"], busy_gpu_s=tot["busy"], gpus=len(gpu_devices), coverage=coverage,
        idle_source=idle_source, energy_source=energy_source)


def stack(rows: list[IntervalFeatures | dict]) -> dict[str, np.ndarray]:
    """Feature rows to the column dict the estimators take (``X[name]`` is one array per feature)."""
    dicts = [r.as_dict() if isinstance(r, IntervalFeatures) else r for r in rows]
    return {n: np.asarray([float(d[n]) for d in dicts], dtype=np.float64) for n in FEATURE_NAMES}
