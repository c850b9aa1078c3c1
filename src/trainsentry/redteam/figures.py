"""The red-team figures, drawn once from results/redteam.json: docs/redteam.md's figure files
(:func:`write`, called by ``trainsentry redteam rounds`` and ``trainsentry redteam page``) and the report
(:mod:`trainsentry.report.figures` draws the same functions to PNG bytes).

Each drawing function takes pyplot and the results (or their stored ranking) and returns the figure; the
caller saves it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def detection_by_round(plt, redteam: dict):
    """Each strategy setting (rows) by round (columns): share of runs detected, with the share of
    windows below it; a grid, so that settings with the same values do not hide one another."""
    rounds = [r["round"] for r in redteam["rounds"]]
    keys: list[tuple] = []
    cell: dict[tuple, dict] = {}
    for rnd in redteam["rounds"]:
        for s in rnd["strategies"]:
            k = (s["name"], s.get("setting"))
            if k not in keys:
                keys.append(k)
            cell[(k, rnd["round"])] = s
    keys.sort()
    grid = np.full((len(keys), len(rounds)), np.nan)
    for i, k in enumerate(keys):
        for j, r in enumerate(rounds):
            s = cell.get((k, r))
            if s and s.get("run_detection") is not None:
                grid[i, j] = 100 * s["run_detection"]
    fig, ax = plt.subplots(figsize=(6.5, 0.9 + 0.45 * len(keys)))
    im = ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=100, aspect="auto")
    for i, k in enumerate(keys):
        for j, r in enumerate(rounds):
            s = cell.get((k, r))
            if not s:
                txt = "not played"
            elif s.get("run_detection") is None:
                txt = "no score"
            else:
                wd = s.get("window_detection")
                txt = f"runs {100 * s['run_detection']:.0f} %" + (f"\nwindows {100 * wd:.0f} %" if wd is not None else "")
            dark = not np.isnan(grid[i, j]) and (grid[i, j] < 20 or grid[i, j] > 80)
            ax.text(j, i, txt, ha="center", va="center", fontsize=7, color="white" if dark else "black")
    ax.set_xticks(range(len(rounds)), [f"round {r}" for r in rounds], fontsize=8)
    ax.set_yticks(range(len(keys)), [f"{n} {st}" if st else n for n, st in keys], fontsize=8)
    ax.xaxis.tick_top()
    cb = fig.colorbar(im, ax=ax, fraction=0.04)
    cb.set_label("runs detected, %", fontsize=8)
    cb.ax.tick_params(labelsize=7)
    return fig


def evasion_cost(plt, ranking: list[dict]):
    """Runs undetected in the last round against GPU-hours per token relative to DDP, one point per
    ranked setting (``ranking``: results/redteam.json's ``ranking`` rows, or the report's joined rows);
    log axis, since costs span orders of magnitude; labels in the legend so that settings at the same
    point stay readable."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    markers = "osD^vP*Xh<>"
    for i, r in enumerate(ranking):
        ax.scatter(1 + r["gpu_hour_overhead"], 100 * (1 - r["run_detection"]), s=45, marker=markers[i % len(markers)],
                   alpha=0.8, label=r["name"] + (f" {r['setting']}" if r.get("setting") else ""))
    ax.axvline(1, color="0.6", lw=1, ls=":")
    ax.set_xscale("log")
    from matplotlib.ticker import FixedLocator, NullLocator
    xs = [1 + r["gpu_hour_overhead"] for r in ranking] + [1.0]
    lo, hi = min(xs) / 1.3, max(xs) * 1.3
    ticks = [m * 10.0 ** e for e in range(-2, 4) for m in (1, 2, 5) if lo <= m * 10.0 ** e <= hi]
    ax.set_xlim(lo, hi)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{t:g}\u00d7" for t in ticks])
    ax.set_xlabel("GPU-hours per token, relative to DDP training (1 = same cost)")
    ax.set_ylabel("runs undetected, last round, %")
    ax.set_ylim(-8, 108)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return fig




def benign_fpr_by_round(plt, doc: dict):
    """Inference runs alerted per round and detector, on the benign splits each round re-measured."""
    fig, ax = plt.subplots(figsize=(6, 3.6))
    dets = doc["protocol"]["detectors"]
    width = 0.8 / max(1, len(dets))
    rounds = [r["round"] for r in doc["rounds"]]
    for i, n in enumerate(dets):
        vals = [100 * (r["benign"][n]["inference_fpr"] or 0.0) if n in r["benign"] else np.nan for r in doc["rounds"]]
        ax.bar(np.arange(len(rounds)) + i * width, vals, width, label=n)
    ax.set_xticks(np.arange(len(rounds)) + 0.4 - width / 2, [str(r) for r in rounds])
    ax.set(xlabel="round", ylabel="inference runs alerted, %", title="Benign inference false positives by round")
    ax.legend(fontsize=7)
    return fig


def flop_error(plt, doc: dict):
    """The frozen FLOP estimator's error per strategy setting against its benign held-out range; None
    when the results hold no FLOP scores."""
    f = doc.get("flop_estimator") or {}
    if f.get("headline") and f.get("settings"):
        head, rows = f["headline"], f["settings"]
        b = f["benign_held_out"][head]
        fig, ax = plt.subplots(figsize=(7, 0.35 * len(rows) + 1.6))
        y = np.arange(len(rows))
        ax.axvspan(b["min_pct_error"], b["max_pct_error"], color="0.85", label="benign held-out range")
        ax.scatter([r["headline_pct_error"] for r in rows], y, marker="o", label="true interval", zorder=3)
        ax.scatter([r["headline_pct_error_segmented"] for r in rows], y, marker="x", label="segmented jobs", zorder=3)
        ax.axvline(0, color="k", lw=0.6)
        ax.set_yticks(y, [f"{r['name']} (control)" if r["role"] == "control" else f"{r['name']} {r['setting']}"
                          for r in rows], fontsize=7)
        ax.set(xlabel="FLOP estimate error, % (negative: under-reported)", title=f"Frozen FLOP estimator ({head})")
        ax.legend(fontsize=7)
        return fig
    return None


def write(doc: dict, out: Path) -> list[Path]:
    """The figure files of docs/redteam.md: detection by round, evasion against cost (the stored ranking),
    benign FPR by round and the FLOP estimator's error."""
    plt = _plt()
    out.mkdir(parents=True, exist_ok=True)
    figs = [("redteam_detection_by_round.png", detection_by_round(plt, doc)),
            ("redteam_evasion_cost.png", evasion_cost(plt, doc["ranking"])),
            ("redteam_benign_fpr_by_round.png", benign_fpr_by_round(plt, doc)),
            ("redteam_flop_error.png", flop_error(plt, doc))]
    return [_save(plt, fig, out / name) for name, fig in figs if fig is not None]


def _save(plt, fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
