"""One command's worth of outputs: results/flops.json, results/figures/flops_*.png, docs/flops.md, models/.

Everything written here comes from :func:`regenerate` running the protocol on a dataset; the doc's
numbers are read from the result dict (markdown.py), never typed in.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .dataset import load_runs
from .estimators import ESTIMATORS, energy_diagnostics, make
from .evaluate import best_estimator, run_protocol
from .features import SM_CLOCK_MAX_MHZ
from .live import provenance, save_model
from .markdown import LABELS, SEED_STUDY_MEDIAN_PCT, TARGET_PCT, markdown

# Datasheet dense BF16 peak per GPU: 132 SMs × 4 tensor cores × 1024 FLOP per clock at 1830 MHz.
H200_DENSE_BF16_FLOPS = 989.4e12
DATASHEET_CLOCK_MHZ = 1830.0
PEAK_AT_FEATURE_CLOCK = H200_DENSE_BF16_FLOPS * SM_CLOCK_MAX_MHZ / DATASHEET_CLOCK_MHZ


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
                   "tensor_rate_check": tensor_rate_check(runs)})
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
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        return out / name

    figs = [save(_est_vs_true(plt, result), "flops_est_vs_true.png"), save(_errors(plt, result), "flops_errors.png")]
    trc = result.get("tensor_rate_check", {})
    if any(r["attention_share"] is not None for r in trc.get("per_run", [])):
        figs.append(save(_tensor_rate(plt, trc), "flops_tensor_rate.png"))
    return figs


def _est_vs_true(plt, result: dict):
    rows = result["per_run"]
    fig, axes = plt.subplots(2, 3, figsize=(12, 8), sharex=True, sharey=True)
    y = np.asarray([r["true_flops"] for r in rows])
    lim = (y.min() / 2, y.max() * 2)
    for ax, name in zip(axes.flat, ESTIMATORS):
        e = result["estimators"][name]
        pred = np.asarray([np.nan if r.get(name) is None else r[name] for r in rows])
        ax.loglog(lim, lim, color="0.6", lw=1)
        ax.scatter(y, pred, s=12, alpha=0.7)
        m = e.get("median_abs_pct_error")
        title = LABELS[name] + (f"\nmedian |err| {m:.1f} %" if m is not None else "\nmedian unbounded")
        if e["splits_failed"]:
            title += f", failed {e['splits_failed']}/{e['splits_attempted']} splits"
        ax.set_title(title, fontsize=9)
        ax.set_xlim(lim)
        ax.set_ylim(lim)
    for ax in axes[-1]:
        ax.set_xlabel("true FLOPs (FlopCounterMode)")
    for ax in axes[:, 0]:
        ax.set_ylabel("estimated FLOPs (held out)")
    fig.suptitle("Estimated vs true FLOPs per training run (geometric mean over the splits it was held out and scored)",
                 fontsize=10)
    return fig


def _errors(plt, result: dict):
    rows = result["per_run"]
    names = [n for n in ESTIMATORS if any(r.get(n) is not None for r in rows)]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    ax.boxplot([np.abs([100 * (r[n] - r["true_flops"]) / r["true_flops"] for r in rows if r.get(n) is not None])
                for n in names], whis=(5, 95), showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), [LABELS[n] for n in names], rotation=20, fontsize=8)
    ax.set_yscale("symlog", linthresh=1)
    ax.axhline(TARGET_PCT, color="tab:red", lw=1, ls="--", label=f"target {TARGET_PCT:.0f} %")
    ax.set_ylabel("|error| % per run (held-out mean estimate)")
    ax.legend(fontsize=8)
    return fig


def _tensor_rate(plt, trc: dict):
    pts = [r for r in trc["per_run"] if r["attention_share"] is not None]
    fig, ax = plt.subplots(figsize=(7, 4.2))
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
    ax.legend(fontsize=7)
    return fig
