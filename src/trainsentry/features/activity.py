"""Power, utilisation, memory and GPM activity features of one GPU over one window."""

from __future__ import annotations

import math

import numpy as np

from . import signal as S

GIB = float(2 ** 30)
IDLE_UTIL_PCT = 5.0


def _stats(prefix: str, x: np.ndarray, f: dict[str, float]) -> None:
    v = S.finite(x)
    if not v.size:
        return
    m = float(v.mean())
    f[f"{prefix}.mean"] = m
    f[f"{prefix}.std"] = float(v.std())
    f[f"{prefix}.p05"] = float(np.percentile(v, 5))
    f[f"{prefix}.p95"] = float(np.percentile(v, 95))
    f[f"{prefix}.cv"] = float(v.std() / m) if abs(m) > 1e-9 else 0.0


# the GPM activity metrics every window has statistics of (SM busy, SM occupancy, tensor cores, DRAM)
GPM_ACTIVITY = ("gpm_sm_util_pct", "gpm_sm_occupancy_pct", "gpm_tensor_util_pct", "gpm_dram_bw_util_pct")


def gpu_activity(series: dict[str, np.ndarray], dt_s: float) -> dict[str, float]:
    """Activity features from one GPU's gridded gauges; metrics the GPU lacks are simply absent."""
    f: dict[str, float] = {}
    power_w = series.get("power_mw")
    if power_w is not None:
        power_w = power_w / 1000.0
        _stats("power_W", power_w, f)
        f["power_W.acf_peak"], f["power_W.period_s"] = S.acf_peak(power_w, dt_s)
        f["power_W.spec_peak"], _ = S.spectral_peak(power_w, dt_s)
    if "energy_W" in series:
        f["energy_W.mean"] = S.mean(series["energy_W"])
    util = series.get("gpu_util_pct")
    if util is not None:
        _stats("util_pct", util, f)
        u = S.finite(util)
        if u.size:
            f["util_pct.idle_frac"] = float((u < IDLE_UTIL_PCT).mean())
            busy = u >= IDLE_UTIL_PCT
            f["util_pct.transitions_hz"] = float(np.count_nonzero(np.diff(busy.astype(int)))) / (u.size * dt_s)
    if "mem_util_pct" in series:
        _stats("mem_util_pct", series["mem_util_pct"], f)
    mem = series.get("mem_used_bytes")
    if mem is not None:
        m = S.finite(mem)
        if m.size:
            f["mem_GiB.mean"] = float(m.mean() / GIB)
            f["mem_GiB.range"] = float((m.max() - m.min()) / GIB)
            t = np.arange(mem.size)[np.isfinite(mem)] * dt_s
            f["mem_GiB.slope_per_s"] = float(np.polyfit(t, m / GIB, 1)[0]) if m.size > 2 and np.ptp(t) > 0 else 0.0
    for name in ("sm_clock_mhz", "mem_clock_mhz", "temp_c"):
        if name in series:
            f[f"{name}.mean"] = S.mean(series[name])
    for name in GPM_ACTIVITY:
        if name in series:
            _stats(name, series[name], f)
    if "gpm_sm_util_pct" in series:
        f["gpm_sm_util_pct.acf_peak"], _ = S.acf_peak(series["gpm_sm_util_pct"], dt_s)
    if "gpm_tensor_util_pct" in series and power_w is not None:
        # Tensor work per watt separates dense matmul phases (training and prefill) from memory-bound decode.
        p = S.mean(power_w)
        f["tensor_per_kW"] = S.mean(series["gpm_tensor_util_pct"]) / p * 1000.0 if p > 0 else math.nan
    if "gpm_tensor_util_pct" in series and "gpm_dram_bw_util_pct" in series:
        # Arithmetic intensity, as the GPU's own activity counters see it: training's forward and
        # backward passes are dense matmuls over a whole batch (tensor-bound); token-by-token decode
        # reads every weight and the KV cache for a few tokens (DRAM-bound); copies use DRAM only.
        f["tensor_per_dram"] = S.mean(series["gpm_tensor_util_pct"]) / max(S.mean(series["gpm_dram_bw_util_pct"]), 1.0)
    f.update(tensor_per_sm(series))
    return f


# An SM-activity floor (%) below which a sample's tensor share is not read: an idle SM has no share.
TENSOR_SHARE_SM_FLOOR_PCT = 1.0


def tensor_per_sm(series: dict[str, np.ndarray]) -> dict[str, float]:
    """The share of the SMs' busy time spent in the tensor cores (GPM tensor activity over GPM SM
    activity). Training's forward and backward passes are matmuls over batch x sequence tokens in every
    step, compute-bound, so the tensor cores work through most of the SMs' busy time; decode's matmuls
    have one row per sequence of the batch (memory-bound) and its attention reads the KV cache, so its SMs
    are busy with little tensor work (per family on the recorded runs: docs/tensor-share.md,
    scripts/tensor_share.py). ``tensor_per_sm``: the ratio of
    the window means; ``tensor_per_sm.p05``: the 5th percentile of the per-sample ratio over the samples
    with SM activity of at least ``TENSOR_SHARE_SM_FLOOR_PCT`` (at least 3), which asks that the tensor
    work last through the window (a prefill burst inside decode raises the mean of the windows that hold
    it, not their low percentile). Both are shares of busy time, so idle gaps do not scale them. Absent
    without both GPM metrics or with idle SMs."""
    f: dict[str, float] = {}
    te, sm = series.get("gpm_tensor_util_pct"), series.get("gpm_sm_util_pct")
    if te is None or sm is None:
        return f
    t, s = S.mean(te), S.mean(sm)
    if np.isfinite(t) and np.isfinite(s) and s >= TENSOR_SHARE_SM_FLOOR_PCT:
        f["tensor_per_sm"] = t / s
    ok = np.isfinite(te) & np.isfinite(sm) & (sm >= TENSOR_SHARE_SM_FLOOR_PCT)
    if ok.sum() >= 3:
        f["tensor_per_sm.p05"] = float(np.percentile(te[ok] / sm[ok], 5.0))
    return f


def is_tensor_share_column(column: str) -> bool:
    """Whether a feature column is one of ``tensor_per_sm``'s (feature version 4), under any prefix."""
    return column.split(".")[1:2] == ["tensor_per_sm"]


# The GPM pipe utilisations outside the tensor cores (traces/schema.py, recorded since 2026-12-01).
# Not a detector input: on the one-GPU runs that have them they do not separate training from
# batched forward work (docs/pipes.md, scripts/pipes_study.py; the FP16 pipe, which stirs in pure bf16
# training, reads higher in fp16 serving and stirs in bf16 attribution too), and the datasets before
# that date lack them, so a model fitted on both would learn the recording date. Measured here for that study.
PIPE_METRICS = ("gpm_fp32_util_pct", "gpm_fp16_util_pct", "gpm_integer_util_pct")


def pipe_activity(series: dict[str, np.ndarray]) -> dict[str, float]:
    """Window means of one GPU's pipe utilisations beside its tensor, DRAM and SM activity, and each
    non-tensor pipe per unit of SM activity (a share of the busy SMs' cycles); absent where not recorded."""
    f: dict[str, float] = {}
    for name in (*PIPE_METRICS, "gpm_tensor_util_pct", "gpm_dram_bw_util_pct", "gpm_sm_util_pct", "gpu_util_pct"):
        if name in series and np.isfinite(series[name]).any():
            f[name] = S.mean(series[name])
    sm = f.get("gpm_sm_util_pct", math.nan)
    for name in PIPE_METRICS:
        if name in f and sm >= 1.0:
            f[f"{name}.per_sm"] = f[name] / sm
    return f


# Duty-free activity: a GPM level over a window is the workload's intensity while it runs times the share
# of the window it runs. A service that idles between batches (users arriving, a throttled job) moves
# the second factor, not the first: dense embedding with 0.25-2 s gaps averaged down into the levels
# single-GPU training shows at full duty, and the single-device lead read it half-way to training
# (docs/duty-cycle.md). The busiest GPU's levels divided by its busy share (NVML utilisation,
# the share of time a kernel ran) give back the intensity; the duty cycle itself stays visible in the
# utilisation statistics (mean, idle_frac, transitions_hz). Derived from a window frame's busiest-GPU
# aggregates (``act.<metric>.<stat>.max``), so cached features need no recomputation; on a node whose GPUs
# differ the two maxima may come from different GPUs. NVML's memory utilisation (the share of time the
# memory was read or written) scales the same way and is divided the same way.
DUTY_FREE_METRICS = (*GPM_ACTIVITY, "mem_util_pct")
# the window mean only: a percentile of the ~1 s-averaged GPM samples is a level inside the bursts, not
# over the window, and divided by the busy share it overshoots (above 100 % at 2 s gaps)
DUTY_FREE_STATS = ("mean",)
# level statistics of the divided metrics: replaced by the duty-free mean
DUTY_LEVEL_STATS = ("mean", "p05", "p95", "std")
# busiest-GPU columns that also scale with the duty cycle but have no duty-free form: board power sits on
# an idle floor (119-124 W on the idle runs of docs/dataset-h200x1.md) and stays raised after a kernel
# ends, so dividing by the busy share overshoots the gapless run's power; energy is power; temperature
# integrates power; tensor activity per kW is a level over a level with that floor (embedding with 1-2 s
# gaps reads at or below single-GPU training's value). Both measured on recorded runs by
# tests/features/test_duty_free.py. Power's shape (cv, autocorrelation, period, spectral peak) stays.
DUTY_BOUND_NO_FORM = ("power_W.mean", "power_W.p05", "power_W.p95", "power_W.std", "energy_W.mean", "temp_c.mean",
                      "tensor_per_kW")
# below this busy share the division only amplifies noise (the single-device lead does not speak under 5 %)
BUSY_SHARE_FLOOR = 0.05


def duty_free_column(metric: str, stat: str) -> str:
    return f"act.{metric}.{stat}_busy.max"


def is_duty_free_column(column: str) -> bool:
    """A column ``duty_free`` derives (this version's or a later one's: they share the naming)."""
    return column.startswith("act.") and "_busy." in column


def duty_free_columns() -> list[str]:
    """Every column ``duty_free`` adds."""
    return [duty_free_column(m, s) for m in DUTY_FREE_METRICS for s in DUTY_FREE_STATS]


def duty_bound(column: str) -> bool:
    """A busiest-GPU statistic whose value scales with the duty cycle: the level statistics of the
    divided metrics (``act.<metric>.{mean,p05,p95,std}.max``, replaced by ``duty_free``'s columns) and
    the power, energy, temperature and tensor-per-kW levels (``DUTY_BOUND_NO_FORM``, left out).
    Coefficients of variation scale too (the gaps are variation) but describe the duty cycle, which
    the utilisation statistics show anyway; autocorrelation, period and the duty-free columns do not."""
    if not (column.startswith("act.") and column.endswith(".max")):
        return False
    body = column[len("act."):-len(".max")]
    metric, _, stat = body.rpartition(".")
    return (metric in DUTY_FREE_METRICS and stat in DUTY_LEVEL_STATS) or body in DUTY_BOUND_NO_FORM


def duty_free(X):
    """``X`` (a window frame, pandas) with the busiest GPU's levels per unit of busy share added
    (``duty_free_columns``): ``act.<metric>.<stat>.max / max(act.util_pct.mean.max / 100, 0.05)``, NaN
    where either is missing or not a number. Always recomputed from the levels (a copy; X is left alone)."""
    import pandas as pd

    def num(col: str) -> np.ndarray:
        return (pd.to_numeric(X[col], errors="coerce").to_numpy(dtype=np.float64) if col in X.columns
                else np.full(len(X), np.nan))

    share = np.maximum(num("act.util_pct.mean.max") / 100.0, BUSY_SHARE_FLOOR)
    out = X.copy()
    for m in DUTY_FREE_METRICS:
        for s in DUTY_FREE_STATS:
            out[duty_free_column(m, s)] = num(f"act.{m}.{s}.max") / share
    return out
