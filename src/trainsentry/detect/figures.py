"""Figures of the detector evaluation (results/figures/detector_*.png)."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def roc_figure(curves: dict[str, dict], path: Path) -> Path:
    from sklearn.metrics import roc_curve
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    for name, c in curves.items():
        y, p = c["roc_y"], c["roc_p"]
        if y.size and len(set(y.tolist())) == 2:
            fpr, tpr, _ = roc_curve(y, p)
            ax.plot(fpr, tpr, label=name)
    ax.plot([0, 1], [0, 1], ls=":", c="grey")
    ax.set_xlabel("false-positive rate (windows of inference and other runs)")
    ax.set_ylabel("detection rate (training windows)")
    ax.set_title("Window ROC, test sides of all splits pooled")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def tta_figure(curves: dict[str, dict], path: Path) -> Path:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    for name, c in curves.items():
        v = np.sort(np.asarray(c["tta"], dtype=float))
        if v.size:
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", label=f"{name} (n={v.size})")
    ax.set_xlabel("time to alert from the true start of training (s)")
    ax.set_ylabel("share of alerted training runs")
    ax.set_title("Time to alert (k-of-n rule)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def family_figure(results: dict[str, dict], path: Path) -> Path:
    plt = _plt()
    fams = sorted({f for r in results.values() for f in r["per_family"]})
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(fams) + 2), 4.2))
    width = 0.8 / max(1, len(results))
    for i, (name, r) in enumerate(results.items()):
        vals = [r["per_family"].get(f, {}).get("alerted_frac") or 0.0 for f in fams]
        ax.bar(np.arange(len(fams)) + i * width, vals, width, label=name)
    labels = [f"{f}\n({next(iter(results.values()))['per_family'].get(f, {}).get('class', '?')})" for f in fams]
    ax.set_xticks(np.arange(len(fams)) + 0.4 - width / 2, labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("share of test runs alerted")
    ax.set_title("Alerts per family (training: higher is better; others: lower)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
