"""Figures the report draws itself (matplotlib, returned as PNG bytes), and reuse of committed ones.

Figures other commands already write (results/figures/*.png) are embedded as they are; this module
draws the counter check, the agent's cost split and telemetry of a red-team run beside its benign
counterpart, and renders to PNG the figures whose drawing lives with their results: detection by round
and evasion against cost (trainsentry.redteam.figures, which also draws docs/redteam.md's), and the FLOP
evaluation's (trainsentry.flops.report).
"""

from __future__ import annotations

import functools
import html
import io
from pathlib import Path

import numpy as np


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _png(fig, tight: bool = True) -> bytes:
    buf = io.BytesIO()
    if tight:
        fig.tight_layout()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def existing(results: Path, name: str) -> bytes | None:
    p = results / "figures" / name
    return p.read_bytes() if p.is_file() else None


def existing_pair(figs, results: Path, items: list[tuple[str, str]]) -> str:
    """Two committed figures (results/figures/NAME) side by side, each with its caption and source."""
    return ("<div class='pair'>" + "".join(figs.embed(existing(results, name), name,
                                                      html.escape(cap + f" (results/figures/{name})"))
                                           for name, cap in items) + "</div>")


def gpu_check_figure(gc: dict) -> bytes:
    """Left: bytes handed to NCCL against bytes the NVLink counters saw, per phase, GPU and direction.
    Right: the relative error of each non-zero row (the bars alone look identical at this accuracy)."""
    plt = _plt()
    rows = gc["rows"]
    labels = [f"{r['phase'].replace('_', '-')}\n{r['gpu']} {r['direction'].upper()}" for r in rows]
    x = np.arange(len(rows))
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(9.5, 3.4), gridspec_kw={"width_ratios": [3, 2]})
    ax.bar(x - 0.2, [r["expected_bytes"] / 1e9 for r in rows], 0.4, label="bytes handed to NCCL")
    ax.bar(x + 0.2, [r["measured_bytes"] / 1e9 for r in rows], 0.4, label="NVLink DATA counters")
    ax.set_xticks(x, [lab.replace("\n", " ") for lab in labels], fontsize=7, rotation=35, ha="right")
    ax.set_ylabel("GB in the phase")
    ax.set_title("bytes per phase, GPU and direction", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=2, framealpha=1)
    ax.set_ylim(0, 1.25 * max(r["expected_bytes"] for r in rows) / 1e9)
    nz = [(lab, r) for lab, r in zip(labels, rows) if r["expected_bytes"]]
    y = np.arange(len(nz))
    ax2.barh(y, [1e6 * abs(r["measured_bytes"] - r["expected_bytes"]) / r["expected_bytes"] for _, r in nz],
             color="#4a7bb7")
    ax2.set_yticks(y, [lab.replace("\n", " ") for lab, _ in nz], fontsize=7)
    ax2.invert_yaxis()
    ax2.set_xlabel("|counters − NCCL| / NCCL, parts per million")
    ax2.set_title("relative error (rows where NCCL sent bytes)", fontsize=9)
    return _png(fig)


def agent_parts_figure(parts: dict[str, float]) -> bytes:
    """Where the agent's CPU time goes, percent of one core per part."""
    plt = _plt()
    items = sorted(parts.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7.5, 3.0))
    colors = ["#999999" if k.strip().startswith("total") else "#4a7bb7" for k, _ in items]
    ax.barh([k.strip() for k, _ in items], [v for _, v in items], color=colors)
    ax.set_xlabel("% of one CPU core (profiled run)")
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


@functools.lru_cache(maxsize=64)
def mean_levels(run_dir: Path) -> dict[str, float]:
    """Per-GPU means over the workload (manifest start to end): NVLink bytes/s sent plus received, and
    board power in W; what the ranking's "why it worked" compares with the benign counterpart."""
    m, g = _gpu_series(run_dir)
    g = g[(g["s"] >= 0) & (g["s"] <= m["end"] - m["start"])]
    per_gpu = g.groupby("device")
    return {"nvlink_Bps": float(per_gpu["nvlink_GBps"].mean().mean() * 1e9),
            "power_W": float(per_gpu["power_W"].mean().mean())}


@functools.lru_cache(maxsize=32)
def telemetry_pair_figure(adv_dir: Path, base_dir: Path) -> bytes:
    """NVLink bytes/s and power of one red-team run (left) and its benign counterpart (right), on the
    same time and value axes so the two read side by side; drawn once per pair in a process."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(9.5, 4.6), sharex=True, sharey="row")
    series = [_gpu_series(d) for d in (adv_dir, base_dir)]
    t_max = max(g["s"].max() for _, g in series)
    for col, ((m, g), role) in enumerate(zip(series, ("red team", "benign counterpart"))):
        for dev, part in g.groupby("device"):
            axes[0, col].plot(part["s"], part["nvlink_GBps"], lw=0.7, label=dev)
            axes[1, col].plot(part["s"], part["power_W"], lw=0.7, label=dev)
        axes[0, col].set_title(f"{role}: {m['labels']['workload']}", fontsize=9)
        axes[1, col].set_xlabel("seconds since the workload started")
        axes[1, col].set_xlim(min(g["s"].min() for _, g in series), t_max)
    axes[0, 0].set_ylabel("NVLink TX+RX, GB/s")
    axes[1, 0].set_ylabel("board power, W")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper right", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return _png(fig, tight=False)


def detection_by_round_figure(redteam: dict) -> bytes:
    """Detection by round per strategy setting: the red team's own figure (trainsentry.redteam.figures)."""
    from ..redteam.figures import detection_by_round
    return _png(detection_by_round(_plt(), redteam))


def evasion_cost_figure(ranking: list[dict]) -> bytes:
    """Runs undetected against cost per ranked setting: the red team's own figure (trainsentry.redteam.figures)."""
    from ..redteam.figures import evasion_cost
    return _png(evasion_cost(_plt(), ranking))


CLASS_ORDER = {"training": 0, "inference": 1, "other": 2}


def family_class(dets: dict, fam: str) -> str:
    return next(d["per_family"][fam]["class"] for d in dets.values() if fam in (d.get("per_family") or {}))


def families_in_order(dets: dict) -> list[str]:
    """Families of detector results, training first, then inference, then other; by name within a class."""
    fams = {f for d in dets.values() for f in (d.get("per_family") or {})}
    return sorted(fams, key=lambda f: (CLASS_ORDER.get(family_class(dets, f), 3), f))


def detector_families_figure(detector: dict) -> bytes:
    """Share of a family's test runs that alerted, per detector: training families should be high,
    the others low. Horizontal, so that family names stay legible."""
    plt = _plt()
    dets = detector["detectors"]
    names = list(dets)
    fams = families_in_order(dets)
    cls = {f: family_class(dets, f) for f in fams}
    y = np.arange(len(fams))
    h = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.3 * len(fams)))
    for i, n in enumerate(names):
        pf = dets[n].get("per_family") or {}
        ax.barh(y + (i - (len(names) - 1) / 2) * h, [100 * pf.get(f, {}).get("alerted_frac", np.nan) for f in fams],
                h, label=n)
    ax.set_yticks(y, [f"{f} ({cls[f]})" for f in fams], fontsize=7)
    ax.invert_yaxis()
    for i in range(1, len(fams)):
        if cls[fams[i]] != cls[fams[i - 1]]:
            ax.axhline(i - 0.5, color="0.3", lw=0.8)
    ax.set_xlabel("test runs that alerted, % (training: detected; inference and other: false alarms)")
    ax.set_xlim(0, 100)
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(names), frameon=False)
    return _png(fig)


def flop_label(name: str) -> str:
    """The estimator's readable name, as docs/flops.md and the FLOP figures name it."""
    from ..flops.markdown import LABELS
    return LABELS.get(name, name)


def flops_est_vs_true_figure(flops: dict) -> bytes:
    """Estimated against true FLOPs per held-out training run, one panel per estimator: the FLOP
    evaluation's own figure (trainsentry.flops.report), drawn from the same results."""
    from ..flops.report import est_vs_true_figure
    return _png(est_vs_true_figure(_plt(), flops))


def flops_errors_figure(flops: dict) -> bytes:
    """|error| per held-out training run and estimator: the FLOP evaluation's own figure."""
    from ..flops.report import errors_figure
    return _png(errors_figure(_plt(), flops))
