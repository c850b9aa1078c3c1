"""Figures the report draws itself (matplotlib, returned as PNG bytes), and reuse of committed ones.

Figures other commands already write (results/figures/*.png) are embedded as they are; this module
draws only what no other command draws: the counter check, the agent's cost split, telemetry of a
red-team run beside its benign counterpart, detection by round and the evasion-cost ranking.
"""

from __future__ import annotations

import functools
import io
from pathlib import Path

import numpy as np


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110)
    _plt().close(fig)
    return buf.getvalue()


def existing(results: Path, name: str) -> bytes | None:
    p = results / "figures" / name
    return p.read_bytes() if p.is_file() else None


def gpu_check_figure(gc: dict) -> bytes:
    """Bytes NCCL was handed against bytes the NVLink counters saw, one bar pair per GPU and direction."""
    plt = _plt()
    rows = gc["rows"]
    labels = [f"{r['phase']}\n{r['gpu']} {r['direction']}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.bar(x - 0.2, [r["expected_bytes"] / 1e9 for r in rows], 0.4, label="handed to NCCL")
    ax.bar(x + 0.2, [r["measured_bytes"] / 1e9 for r in rows], 0.4, label="NVLink DATA counters")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("GB in the phase")
    ax.legend(fontsize=8)
    return _png(fig)


def agent_parts_figure(parts: dict[str, float]) -> bytes:
    """Where the agent's CPU time goes, percent of one core per part."""
    plt = _plt()
    items = sorted(parts.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.barh([k.strip() for k, _ in items], [v for _, v in items], color="#4a7bb7")
    ax.set_xlabel("% of one core")
    ax.tick_params(axis="y", labelsize=7)
    return _png(fig)


def _gpu_series(run_dir: Path):
    from ..traces.io import read_manifest, read_samples
    m = read_manifest(run_dir)
    t = read_samples(run_dir).to_pandas()
    g = t[t["kind"] == "gpu"].copy()
    g["s"] = g["t"] - m["start"]
    g["nvlink_GBps"] = (g["nvlink_tx_Bps"].fillna(0) + g["nvlink_rx_Bps"].fillna(0)) / 1e9
    g["power_W"] = g["power_mw"] / 1000.0
    return m, g


@functools.lru_cache(maxsize=32)
def telemetry_pair_figure(adv_dir: Path, base_dir: Path) -> bytes:
    """NVLink bytes/s and power of one red-team run (left) and its benign counterpart (right); drawn
    once per pair in a process (recorded runs do not change)."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(9, 4.2), sharex="col", sharey="row")
    for col, d in enumerate((adv_dir, base_dir)):
        m, g = _gpu_series(d)
        for dev, part in g.groupby("device"):
            axes[0, col].plot(part["s"], part["nvlink_GBps"], lw=0.8, label=dev)
            axes[1, col].plot(part["s"], part["power_W"], lw=0.8, label=dev)
        axes[0, col].set_title(f"{m['labels']['workload']} ({m['run_id']})", fontsize=8)
        axes[1, col].set_xlabel("s since workload start")
    axes[0, 0].set_ylabel("NVLink TX+RX GB/s")
    axes[1, 0].set_ylabel("power W")
    axes[0, 0].legend(fontsize=7)
    return _png(fig)


def detection_by_round_figure(redteam: dict) -> bytes:
    plt = _plt()
    series: dict[str, list[tuple[int, float]]] = {}
    for rnd in redteam["rounds"]:
        for s in rnd["strategies"]:
            if s.get("run_detection") is not None:
                series.setdefault(s["name"], []).append((rnd["round"], s["run_detection"]))
    fig, ax = plt.subplots(figsize=(8, 3.6))
    for name, pts in sorted(series.items()):
        ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], marker="o", lw=1, label=name)
    ax.set_xlabel("round")
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rounds are whole numbers
    ax.set_ylabel("runs detected, %")
    ax.set_ylim(-5, 105)
    ax.legend(fontsize=6, ncol=2, loc="center left", bbox_to_anchor=(1, 0.5))
    return _png(fig)


def evasion_cost_figure(ranking: list[dict]) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for r in ranking:
        ax.scatter(r["gpu_hour_overhead"], 100 * r["evasion"], s=30)
        ax.annotate(r["name"] + (f" {r['setting']}" if r.get("setting") else ""),
                    (r["gpu_hour_overhead"], 100 * r["evasion"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("GPU-hour overhead against benign DDP (fraction)")
    ax.set_ylabel("runs undetected in the last round, %")
    return _png(fig)
