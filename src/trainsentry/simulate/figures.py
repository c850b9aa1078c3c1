"""Figures from a results dict (results/simulator.json): cost vs target, cost vs bandwidth, and
the eta breakdown of the published rows."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; no display on CI or the device machines
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def cost_vs_target(results: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    curve = [r for r in results.get("cost_curve", []) if r["free"]]
    if curve:
        ax.plot([r["target"] for r in curve], [r["free"]["cost_usd"] for r in curve], "o-",
                label="free search (this simulator)")
    pub = results["headline"]
    ax.plot([r["target_c_local"] for r in pub], [r["published"]["cost_usd"] for r in pub], "s--",
            label="published (paper)")
    ax.set(xscale="log", yscale="log", xlabel="target C_local (FLOP)",
           ylabel="minimum capital cost (USD)",
           title="Cost of reaching a C_local target in 740 days, 100 Mbps")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cost_vs_bandwidth(results: dict, path: Path) -> None:
    rows = results.get("bandwidth", [])
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if rows:
        bw = [r["bw_bps"] for r in rows]
        ax.plot(bw, [r["free"]["cost_usd"] for r in rows], "o-", label="free search")
        ax.plot(bw, [r["published"]["cost_usd"] for r in rows], "s--", label="published")
        ax.plot(bw, [r["paper_replay"]["cost_usd"] for r in rows], "x:",
                label="paper's procedure, replayed")
    ax.set(xscale="log", yscale="log", xlabel="WAN bandwidth per direction (bit/s)",
           ylabel="minimum capital cost (USD)", title="C_local = 1e25: cost vs bandwidth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def eta_breakdown(results: dict, path: Path) -> None:
    rows = results["headline"]
    labels = [f"{r['target_c_local']:.2g}\n{r['forward']['mode_label']}" for r in rows]
    parts = ("eta_h", "eta_comp", "eta_rep", "eta_act", "chi")
    names = ("eta_H (sync interval)", "eta_comp (compression)", "eta_rep (replicas)",
             "eta_act (activations)", "chi (overtraining)")
    x = np.arange(len(rows))
    width = 0.16
    fig, ax = plt.subplots(figsize=(8.0, 4.4))
    for k, (p, name) in enumerate(zip(parts, names)):
        ax.bar(x + (k - 2) * width, [r["forward"][p] for r in rows], width, label=name)
    ax.plot(x, [r["forward"]["eta"] for r in rows], "k^", label="eta (product)")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set(ylim=(0, 1.3), ylabel="factor", title="Efficiency breakdown of the published rows")
    ax.legend(fontsize=7, ncol=3, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_all(results: dict, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, fn in (("simulator_cost_vs_target.png", cost_vs_target),
                     ("simulator_cost_vs_bandwidth.png", cost_vs_bandwidth),
                     ("simulator_eta_breakdown.png", eta_breakdown)):
        fn(results, folder / name)
        out.append(folder / name)
    return out
