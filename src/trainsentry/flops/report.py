"""One command's worth of outputs: results/flops.json, results/figures/flops_*.png, docs/flops.md, models/.

Everything written here comes from :func:`regenerate` running the protocol on a dataset; the doc's
numbers are read from the result dict (markdown.py), never typed in.
"""

from __future__ import annotations

import json
import math
import textwrap
from pathlib import Path

import numpy as np

from .dataset import load_runs
from .estimators import CAPPED_FRACTION, ESTIMATORS, MIN_SLOPE_T, EnergyModel, energy_diagnostics, make
from .evaluate import best_estimator, reference_pass, run_protocol
from .features import (DATASHEET_CLOCK_MHZ, H200_DENSE_BF16_FLOPS, H200_POWER_LIMIT_W, PEAK_AT_FEATURE_CLOCK,
                       SM_CLOCK_MAX_MHZ)
from .live import provenance, save_model
from .markdown import LABELS, SEED_STUDY_MEDIAN_PCT, TARGET_PCT, markdown


def regenerate(data: str | Path, n_splits: int = 200, seed: int = 0, results: str | Path = "results/flops.json",
               figures: str | Path = "results/figures", docs: str | Path = "docs/flops.md",
               models: str | Path = "models", command: str = "", with_segmentation: bool = True,
               with_causal_half: bool = True, progress=print) -> dict:
    runs = load_runs(data)
    progress(f"{len(runs)} training runs, {len(set(runs.configs))} configurations from {data}"
             + (f"; {len(runs.skipped)} skipped" if runs.skipped else ""))
    result = run_protocol(runs, ESTIMATORS, n_splits=n_splits, seed=seed, progress=progress)
    held_out = result.pop("_held_out_pct_errors")
    best = best_estimator(result)
    result.update({"best": best, "data": str(data), "command": command, "skipped": runs.skipped,
                   "target_median_abs_pct_error": TARGET_PCT, "seed_study_median_abs_pct_error": SEED_STUDY_MEDIAN_PCT,
                   "families": sorted(set(runs.families)), "truth": "FlopCounterMode as recorded (causal attention in full)",
                   "energy_diagnostics": energy_diagnostics(runs.X, runs.flops),
                   "power_only_check": power_only_check(runs, n_splits, seed),
                   "tensor_rate_check": tensor_rate_check(runs)})
    per_gpu = runs.X["mean_power_W"] / np.maximum(runs.X["gpus"], 1.0)
    result["energy_diagnostics"]["below_limit_runs"] = [
        runs.run_ids[i] for i in np.flatnonzero(per_gpu < CAPPED_FRACTION * H200_POWER_LIMIT_W)]
    if with_segmentation:
        progress("the same splits over the detector's segmentation")
        result["with_segmentation"] = secondary_pass(lambda: load_runs(data, interval="segment"), n_splits, seed, progress)
    if with_causal_half:
        progress("the same splits with causal attention counted as half")
        result["with_causal_half"] = secondary_pass(runs.causal_half, n_splits, seed, progress)
    # calibrate every estimator on all runs and save it; models/flops.json is the best one
    prov = provenance(command, str(data), len(runs), len(set(runs.configs)))
    full, not_calibrated = {}, {}
    models = Path(models)
    for name in ESTIMATORS:
        try:
            full[name] = make(name, seed=seed).fit(runs.X, runs.flops)
        except ValueError as e:
            progress(f"{name}: cannot calibrate on all runs: {e}")
            not_calibrated[name] = str(e)
            continue
        if name in held_out:  # live intervals from errors on unseen configurations, not in-sample ones
            full[name].set_interval_from_errors(held_out[name])
        save_model(full[name], models / f"flops_{name}.json", prov)
    if best in full:
        save_model(full[best], models / "flops.json", {**prov, "chosen_as": "lowest held-out median error"})
    result["calibrated_on_all_runs"] = {n: e.to_dict()["params"] for n, e in full.items()
                                        if n not in ("mlp", "residual_mlp")}
    result["not_calibrated_on_all_runs"] = not_calibrated
    Path(results).parent.mkdir(parents=True, exist_ok=True)
    Path(results).write_text(json.dumps(result, indent=1, default=float) + "\n")
    figs = write_figures(result, Path(figures))
    Path(docs).parent.mkdir(parents=True, exist_ok=True)
    Path(docs).write_text(markdown(result, figs))
    return result


def secondary_pass(load, n_splits: int, seed: int, progress) -> dict:
    """The same protocol on another view of the runs (``load()`` gives the RunSet): errors and failures only."""
    try:
        alt = load()
        res = run_protocol(alt, ESTIMATORS, n_splits=n_splits, seed=seed)
    except ValueError as e:
        progress(f"  not evaluated: {e}")
        return {"error": str(e)}
    res.pop("_held_out_pct_errors")
    out = {"runs": len(alt), "configurations": len(set(alt.configs)), "skipped": alt.skipped,
           "common_splits": res["protocol"]["common_splits"],
           "estimators": {n: {"median_abs_pct_error": v["median_abs_pct_error"],
                              "p90_abs_pct_error": v["p90_abs_pct_error"], "splits_failed": v["splits_failed"],
                              "failures": [{k: f[k] for k in ("reason", "splits")} for f in v["failures"]],
                              "common_median_abs_pct_error": (v["common"] or {}).get("median_abs_pct_error")}
                          for n, v in res["estimators"].items()}}
    if alt.shifts_s and any(a or b for a, b in alt.shifts_s):
        shifts = np.asarray(alt.shifts_s)
        out.update({"start_shift_s_median": float(np.median(shifts[:, 0])),
                    "end_shift_s_median": float(np.median(shifts[:, 1])),
                    "start_shift_s_max_abs": float(np.max(np.abs(shifts[:, 0]))),
                    "end_shift_s_max_abs": float(np.max(np.abs(shifts[:, 1])))})
    return out


def power_only_check(runs, n_splits: int, seed: int) -> dict:
    """Is power only's refusal the data's answer or the fit's? Its energy per TFLOP on all runs (and under
    causal-half truth) with its standard error, and, on the same splits, what a fit that cannot fail knows."""
    po = EnergyModel(("t",), name="power_only")
    out = {"min_slope_t": MIN_SLOPE_T}
    views = [("all_runs", runs.X, runs.flops)]
    if runs.attention_flops is not None and np.isfinite(runs.attention_flops).all():
        views.append(("all_runs_causal_half", runs.X, runs.flops - 0.5 * runs.attention_flops))
    for key, X, y in views:
        coef, se = po.energy_per_tflop(X, y)
        finite = math.isfinite(se) and se > 0  # an exact or rank-deficient fit has no usable standard error
        out[key] = {"E_per_TFLOP_J": float(coef[0]), "E_per_TFLOP_se_J": float(se) if finite else None,
                    "P_overhead_W": float(coef[1]), "t_stat": float(coef[0] / se) if finite else None,
                    "runs": int(y.size)}
    out["references"] = reference_pass(runs, n_splits, seed)
    if len(views) > 1:
        out["references_causal_half"] = reference_pass(runs.causal_half(), n_splits, seed)
    return out


def tensor_rate_check(runs) -> dict:
    """FLOPs per tensor-busy GPU-second per run, under both truth conventions, against the tensor cores' peak.

    The feature counts busy seconds at the SM clock the trace reports, scaled to SM_CLOCK_MAX_MHZ,
    so the comparable peak is the one at that clock, not the datasheet's (quoted at 1830 MHz)."""
    busy = runs.X["tensor_cycles_s"]
    ok = busy > 0
    att = runs.attention_flops if runs.attention_flops is not None else np.full(len(runs), np.nan)
    half = runs.flops - 0.5 * att
    gmean = lambda v: float(np.exp(np.mean(np.log(v))))  # noqa: E731  the tensor estimator's own fit
    clock = runs.X["tensor_cycles_s"][ok] / runs.X["tensor_active_s"][ok] * SM_CLOCK_MAX_MHZ
    out = {"datasheet_peak_flops": H200_DENSE_BF16_FLOPS, "datasheet_clock_mhz": DATASHEET_CLOCK_MHZ,
           "feature_clock_mhz": SM_CLOCK_MAX_MHZ, "peak_at_feature_clock_flops": PEAK_AT_FEATURE_CLOCK,
           "busy_weighted_sm_clock_mhz_median": float(np.median(clock)),
           "per_run": [{"run_id": runs.run_ids[i],
                        "attention_share": float(att[i] / runs.flops[i]) if np.isfinite(att[i]) else None,
                        "counted_flops_per_busy_s": float(runs.flops[i] / busy[i]),
                        "causal_half_flops_per_busy_s": float(half[i] / busy[i]) if np.isfinite(half[i]) else None}
                       for i in np.flatnonzero(ok)]}
    for key, y in (("counted", runs.flops), ("causal_half", half)):
        keep = ok & np.isfinite(y)
        if keep.any():
            r = y[keep] / busy[keep]
            out[key] = {"rate_flops_per_busy_s": gmean(r), "runs": int(keep.sum()), "min": float(r.min()),
                        "max": float(r.max()), "of_datasheet_peak": gmean(r) / H200_DENSE_BF16_FLOPS,
                        "of_peak_at_feature_clock": gmean(r) / PEAK_AT_FEATURE_CLOCK}
    return out


def write_figures(result: dict, out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)

    def save(fig, name: str) -> Path:
        fig.savefig(out / name, dpi=110, bbox_inches="tight")
        plt.close(fig)
        return out / name

    figs = [save(est_vs_true_figure(plt, result), "flops_est_vs_true.png"),
            save(errors_figure(plt, result), "flops_errors.png")]
    trc = result.get("tensor_rate_check", {})
    if any(r["attention_share"] is not None for r in trc.get("per_run", [])):
        figs.append(save(tensor_rate_figure(plt, trc), "flops_tensor_rate.png"))
    return figs


# Axes are labelled in plain numbers (no mathtext powers of ten, which overlap on a log axis spanning less
# than a decade and print font warnings where the math fonts are missing).
MANTISSAS = (1, 1.5, 2, 3, 5, 7)


def log_ticks(lo: float, hi: float) -> list[float]:
    """Ticks at 1, 1.5, 2, 3, 5, 7 × 10^k inside [lo, hi], thinned to at most 6 so their labels never crowd."""
    ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
             for m in MANTISSAS if lo <= m * 10.0 ** k <= hi]
    while len(ticks) > 6:
        ticks = ticks[::2]
    return ticks


def plain(v: float) -> str:
    """0.1, 1, 2.5, 10, 100: a tick label with neither exponent nor minus sign."""
    return f"{v:.6g}"


def _failed_note(e: dict) -> str:
    return f"{e['splits_failed']} of {e['splits_attempted']} splits failed" if e.get("splits_failed") else ""


def est_vs_true_figure(plt, result: dict):
    """Held-out estimate against truth per run and estimator, both axes in units of 10^k FLOPs."""
    from matplotlib.ticker import FixedLocator, NullLocator
    rows = result["per_run"]
    names = list(result["estimators"])
    ncol = 3
    nrow = -(-len(names) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(11, 3.7 * nrow), sharex=True, sharey=True, squeeze=False)
    y = np.asarray([r["true_flops"] for r in rows])
    lim = (y.min() / 1.6, y.max() * 1.6)  # set by the truth; an estimate beyond it is drawn on the edge
    k = int(math.floor(math.log10(math.sqrt(lim[0] * lim[1]))))
    ticks = log_ticks(*lim)
    labels = [plain(t / 10.0 ** k) for t in ticks]
    for ax, name in zip(axes.flat, names):
        e = result["estimators"][name]
        pred = np.asarray([np.nan if r.get(name) is None else r[name] for r in rows], dtype=float)
        ax.plot(lim, lim, color="0.6", lw=1)
        inside = (pred >= lim[0]) & (pred <= lim[1])
        ax.scatter(y[inside], pred[inside], s=14, alpha=0.75)
        off = np.isfinite(pred) & ~inside
        if off.any():
            ax.scatter(y[off], np.clip(pred[off], lim[0] * 1.04, lim[1] / 1.04), s=28, marker="x", color="tab:red",
                       clip_on=False, label=f"{int(off.sum())} off the scale, drawn at its edge")
            ax.legend(fontsize=7, loc="upper left")
        ax.set_xscale("log")
        ax.set_yscale("log")
        m = e.get("median_abs_pct_error")
        sub = f"median |error| {m:.1f} %" if m is not None else "median |error| unbounded"
        if e.get("splits_failed"):
            sub += f"\n{_failed_note(e)}: runs shown from the rest"
        ax.set_title(f"{LABELS[name]}\n{sub}", fontsize=9)
        ax.set_xlim(lim)
        ax.set_ylim(lim)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(FixedLocator(ticks))
            axis.set_minor_locator(NullLocator())
        ax.set_xticklabels(labels)
        ax.set_yticklabels(labels)
        ax.tick_params(labelsize=8, labelbottom=True, labelleft=True)
        ax.grid(True, color="0.92", lw=0.6)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel(f"true FLOPs (FlopCounterMode), units of 1e{k}", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"estimated FLOPs (held out), units of 1e{k}", fontsize=8)
    fig.suptitle("Estimated against true FLOPs per training run: geometric mean of its estimates over the splits"
                 " that held it out", fontsize=10)
    fig.tight_layout()
    return fig


def errors_figure(plt, result: dict):
    """|error| per run (of its held-out mean estimate) and estimator, on a log axis labelled in plain percent."""
    from matplotlib.ticker import FixedLocator, NullLocator
    rows = result["per_run"]
    names = [n for n in result["estimators"] if any(r.get(n) is not None for r in rows)]
    errs = [np.abs([100 * (r[n] - r["true_flops"]) / r["true_flops"] for r in rows if r.get(n) is not None])
            for n in names]
    floor = 0.1  # |errors| below 0.1 % are drawn at 0.1 % (a log axis has no 0)
    shown = [np.maximum(e, floor) for e in errs]
    fig, ax = plt.subplots(figsize=(10, 4.8))
    ax.boxplot(shown, whis=(5, 95), showfliers=False, widths=0.5)
    for i, e in enumerate(shown, 1):
        ax.scatter(i + np.linspace(-0.15, 0.15, len(e)), e, s=10, alpha=0.6, color="#4a7bb7", zorder=3)
    ax.set_yscale("log")
    top = max(float(np.max(e)) for e in shown) * 1.5
    ax.set_ylim(floor / 1.3, max(top, 20.0))
    ticks = [t for t in (0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000) if t <= ax.get_ylim()[1]]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([plain(t) for t in ticks])
    xl = []
    for n in names:
        e = result["estimators"][n]
        xl.append(textwrap.fill(LABELS[n], 16, break_on_hyphens=False)
                  + (f"\n({_failed_note(e)})" if e.get("splits_failed") else ""))
    ax.set_xticks(range(1, len(names) + 1), xl, fontsize=8)
    target = result.get("target_median_abs_pct_error", TARGET_PCT)
    ax.axhline(target, color="tab:red", lw=1, ls="--", label=f"target for the median: {plain(target)} %")
    ax.grid(True, axis="y", color="0.92", lw=0.6)
    ax.set_ylabel("|error| per run, % (log scale)")
    ax.set_title("Error of each run's held-out estimate (box: quartiles, whiskers: 5th–95th percentile;"
                 f" below {plain(floor)} % drawn at {plain(floor)} %)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def tensor_rate_figure(plt, trc: dict):
    pts = [r for r in trc["per_run"] if r["attention_share"] is not None]
    fig, ax = plt.subplots(figsize=(8, 4.6))
    share = [100 * r["attention_share"] for r in pts]
    ax.scatter(share, [r["counted_flops_per_busy_s"] / 1e12 for r in pts],
               label="FLOPs as recorded (causal attention in full)")
    ax.scatter(share, [r["causal_half_flops_per_busy_s"] / 1e12 for r in pts], marker="s",
               label="causal attention counted as half")
    ax.axhline(trc["datasheet_peak_flops"] / 1e12, color="tab:red", ls="--", lw=1,
               label=f"datasheet dense BF16 peak ({trc['datasheet_clock_mhz']:.0f} MHz)")
    ax.axhline(trc["peak_at_feature_clock_flops"] / 1e12, color="tab:purple", ls=":", lw=1,
               label=f"the same tensor cores at {trc['feature_clock_mhz']:.0f} MHz")
    ax.set_xlabel("causal attention share of the recorded FLOPs (%)")
    ax.set_ylabel("TFLOP per tensor-busy GPU-second")
    ax.set_title("FLOPs per tensor-busy second, per training run", fontsize=10)
    ax.grid(True, color="0.92", lw=0.6)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig
