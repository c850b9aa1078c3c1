"""One command's worth of outputs: results/flops.json, results/figures/flops_*.png, docs/flops.md, models/.

Everything written here comes from :func:`regenerate` running the protocol on a dataset; the doc's
numbers are read from the result dict, never typed in.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from .dataset import load_runs
from .estimators import ESTIMATORS, make
from .evaluate import best_estimator, run_protocol
from .live import provenance, save_model

# The seed study's medians on 2 × V100 (anchors.md §3), for the comparison column only.
SEED_STUDY_MEDIAN_PCT = {"three_input": 15.1, "power_only": 12.9, "mlp": 10.4, "residual_mlp": 10.4}
H200_DENSE_BF16_FLOPS = 989e12  # datasheet, per GPU, without sparsity
TARGET_PCT = 5.0
LABELS = {"three_input": "(a) 3-input energy", "power_only": "(b) power-only linear", "mlp": "(c) MLP, log features",
          "residual_mlp": "(d) residual MLP on (b)", "tensor": "(e) tensor activity", "fusion": "(e) tensor + energy fusion"}


def regenerate(data: str | Path, n_splits: int = 200, seed: int = 0, results: str | Path = "results/flops.json",
               figures: str | Path = "results/figures", docs: str | Path = "docs/flops.md",
               models: str | Path = "models", command: str = "", with_segmentation: bool = True,
               progress=print) -> dict:
    runs = load_runs(data)
    progress(f"{len(runs)} training runs, {len(set(runs.configs))} configurations from {data}"
             + (f"; {len(runs.skipped)} skipped" if runs.skipped else ""))
    result = run_protocol(runs, ESTIMATORS, n_splits=n_splits, seed=seed, progress=progress)
    held_out = result.pop("_held_out_pct_errors")
    best = best_estimator(result)
    result.update({"best": best, "data": str(data), "command": command, "skipped": runs.skipped,
                   "target_median_abs_pct_error": TARGET_PCT, "seed_study_median_abs_pct_error": SEED_STUDY_MEDIAN_PCT,
                   "families": sorted(set(runs.families))})
    if with_segmentation:
        result["with_segmentation"] = segmentation_pass(data, n_splits, seed, progress)
    # calibrate every estimator on all runs and save it; models/flops.json is the best one
    prov = provenance(command, str(data), len(runs), len(set(runs.configs)))
    full = {}
    models = Path(models)
    for name in ESTIMATORS:
        try:
            full[name] = make(name, seed=seed).fit(runs.X, runs.flops)
        except ValueError as e:
            progress(f"{name}: cannot calibrate on all runs: {e}")
            continue
        if name in held_out:  # live intervals from errors on unseen configurations, not in-sample ones
            full[name].set_interval_from_errors(held_out[name])
        save_model(full[name], models / f"flops_{name}.json", prov)
    if best in full:
        save_model(full[best], models / "flops.json", {**prov, "chosen_as": "lowest held-out median error"})
    result["calibrated_on_all_runs"] = {n: e.to_dict()["params"] for n, e in full.items() if n not in ("mlp", "residual_mlp")}
    if "tensor" in full:
        result["tensor_rate_flops_per_busy_gpu_s"] = full["tensor"].rate_flops_per_s
    Path(results).parent.mkdir(parents=True, exist_ok=True)
    Path(results).write_text(json.dumps(result, indent=1, default=float) + "\n")
    figs = write_figures(result, Path(figures))
    Path(docs).parent.mkdir(parents=True, exist_ok=True)
    Path(docs).write_text(markdown(result, figs, Path(docs)))
    return result


def segmentation_pass(data, n_splits: int, seed: int, progress) -> dict:
    """The same protocol with each run's interval found by the detector's segmentation, not the lab's truth."""
    try:
        seg = load_runs(data, interval="segment")
        res = run_protocol(seg, ESTIMATORS, n_splits=n_splits, seed=seed)
    except ValueError as e:
        progress(f"segmentation pass: {e}")
        return {"error": str(e)}
    res.pop("_held_out_pct_errors")
    shifts = np.asarray(seg.shifts_s)
    return {"runs": len(seg), "configurations": len(set(seg.configs)), "skipped": seg.skipped,
            "start_shift_s_median": float(np.median(shifts[:, 0])), "end_shift_s_median": float(np.median(shifts[:, 1])),
            "start_shift_s_max_abs": float(np.max(np.abs(shifts[:, 0]))),
            "end_shift_s_max_abs": float(np.max(np.abs(shifts[:, 1]))),
            "estimators": {n: {k: v.get(k) for k in ("median_abs_pct_error", "p90_abs_pct_error", "failed_splits")}
                           for n, v in res["estimators"].items()}}


def write_figures(result: dict, out: Path) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)
    names = [n for n in ESTIMATORS if result["estimators"][n].get("median_abs_pct_error") is not None]
    rows = result["per_run"]
    fig, axes = plt.subplots(2, 3, figsize=(12, 8), sharex=True, sharey=True)
    y = np.asarray([r["true_flops"] for r in rows])
    lim = (y.min() / 2, y.max() * 2)
    for ax, name in zip(axes.flat, ESTIMATORS):
        pred = np.asarray([np.nan if r.get(name) is None else r[name] for r in rows])
        ax.loglog(lim, lim, color="0.6", lw=1)
        ax.scatter(y, pred, s=12, alpha=0.7)
        m = result["estimators"][name].get("median_abs_pct_error")
        ax.set_title(f"{LABELS[name]}\nmedian |err| {m:.1f} %" if m is not None else LABELS[name], fontsize=9)
        ax.set_xlim(lim)
        ax.set_ylim(lim)
    for ax in axes[-1]:
        ax.set_xlabel("true FLOPs (FlopCounterMode)")
    for ax in axes[:, 0]:
        ax.set_ylabel("estimated FLOPs (held out)")
    fig.suptitle("Estimated vs true FLOPs per training run (geometric mean over splits where held out)", fontsize=10)
    fig.tight_layout()
    p1 = out / "flops_est_vs_true.png"
    fig.savefig(p1, dpi=110)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    data = [np.abs([100 * (r[n] - r["true_flops"]) / r["true_flops"] for r in rows if r.get(n) is not None]) for n in names]
    ax.boxplot(data, whis=(5, 95), showfliers=True)
    ax.set_xticks(range(1, len(names) + 1), [LABELS[n] for n in names], rotation=20, fontsize=8)
    ax.set_yscale("symlog", linthresh=1)
    ax.axhline(TARGET_PCT, color="tab:red", lw=1, ls="--", label=f"target {TARGET_PCT:.0f} %")
    ax.set_ylabel("|error| % per run (held-out mean estimate)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    p2 = out / "flops_errors.png"
    fig.savefig(p2, dpi=110)
    plt.close(fig)
    return [p1, p2]


def _fmt(x, spec=".1f", suffix=" %") -> str:
    return "—" if x is None else f"{x:{spec}}{suffix}"


def markdown(result: dict, figs: list[Path], doc_path: Path) -> str:
    pr, est = result["protocol"], result["estimators"]
    best = result["best"]
    bm = est[best]["median_abs_pct_error"]
    met = bm <= TARGET_PCT
    rel = lambda p: Path("..") / p if not p.is_absolute() else p  # noqa: E731  docs/ → results/
    lines = [
        "# Training-FLOP estimation from outside telemetry", "",
        f"Generated by `{result['command'] or 'trainsentry flops-eval'}` from `{result['data']}`; do not edit by hand.", "",
        "## What is estimated, from what",
        "Each training run's FLOPs (ground truth: PyTorch FlopCounterMode per rank per step × steps, summed over",
        "ranks) are estimated from what a monitor outside the job sees on the node, integrated over the job's",
        "interval and summed over GPUs: energy above the idle baseline (NVML energy counter; baseline from the",
        "idle seconds before the job), duration, HBM bytes (GPM DRAM-bandwidth utilisation × 4.8 TB/s, the H200",
        "datasheet figure), NVLink payload bytes (NVML all-link DATA counters) and tensor-pipe activity (GPM",
        "any-tensor utilisation weighted by SM clock / 1980 MHz).", "",
        "## Protocol",
        f"{pr['splits']} random splits of the {pr['configurations']} training configurations ({pr['runs']} runs,"
        f" families: {', '.join(result['families'])}): {pr['cal_fraction']:.0%} of configurations calibrate, the"
        " rest are scored; every repeat of a configuration stays on one side. Errors are pooled over all held-out"
        " predictions of all splits. All estimators see the same splits.", "",
        "| estimator | median abs. error | p90 abs. error | median signed | split medians p25–p75 |"
        f" {pr['interval_level']:.0%} interval coverage | with detector segmentation | seed study (2 × V100) |",
        "|---|---|---|---|---|---|---|---|"]
    seg = result.get("with_segmentation") or {}
    for name in ESTIMATORS:
        e = est[name]
        if e.get("median_abs_pct_error") is None:
            lines.append(f"| {LABELS[name]} | failed on all {e['failed_splits']} splits | | | | | | |")
            continue
        seed = SEED_STUDY_MEDIAN_PCT.get(name)
        lines.append(f"| {LABELS[name]}{' **(best)**' if name == best else ''} | {_fmt(e['median_abs_pct_error'])} |"
                     f" {_fmt(e['p90_abs_pct_error'])} | {_fmt(e['median_signed_pct_error'], '+.1f')} |"
                     f" {e['split_median_p25']:.1f}–{e['split_median_p75']:.1f} % | {e['interval_coverage']:.0%} |"
                     f" {_fmt(seg.get('estimators', {}).get(name, {}).get('median_abs_pct_error'))} | {_fmt(seed)} |")
    if seg.get("estimators"):
        lines += ["", f"*With detector segmentation*: the same protocol, each run integrated over the job that"
                  f" `trainsentry.detect.segment` finds in its trace instead of the lab's true interval ({seg['runs']}"
                  f" runs, {len(seg['skipped'])} without a job found; median start shift {seg['start_shift_s_median']:+.1f} s,"
                  f" end shift {seg['end_shift_s_median']:+.1f} s; largest {seg['start_shift_s_max_abs']:.1f} s /"
                  f" {seg['end_shift_s_max_abs']:.1f} s)."]
    elif seg.get("error"):
        lines += ["", f"*With detector segmentation*: not evaluated ({seg['error']})."]
    lines += ["", *(f"![{p.stem}]({rel(p)})" for p in figs), "",
              "## Against the seed study",
              f"The seed FLOP-estimation study (2 × V100 with NVLink, system-level signals only; see"
              " `/work/shared/reference/anchors.md` §3) reached median absolute errors of 15.1 % with its"
              " 3-input energy model, 12.9 % with power alone and 10.4 % with its MLPs, over 88 configurations"
              " and 10 trials each. Here, on the H200 dataset above, the best estimator is"
              f" **{LABELS[best]}** at **{bm:.1f} %** median absolute error on held-out configurations, which"
              f" {'meets' if met else 'does not meet'} the {TARGET_PCT:.0f} % target."
              + (f" With only {pr['configurations']} training configurations (the seed study had 88), each split"
                 f" scores about {pr['configurations'] - round(pr['cal_fraction'] * pr['configurations'])} of them:"
                 " read these medians as rough, not as a ranking." if pr["configurations"] < 20 else "")]
    if "tensor_rate_flops_per_busy_gpu_s" in result:
        r = result["tensor_rate_flops_per_busy_gpu_s"]
        lines += ["", f"Calibrated on all runs, one tensor-busy GPU-second stood for {r / 1e12:.0f} TFLOP"
                  f" ({r / H200_DENSE_BF16_FLOPS:.0%} of the H200's 989 TFLOP/s dense BF16 datasheet peak): the"
                  " \"measured peak rate\" of estimator (e)."]
    cal = result.get("calibrated_on_all_runs", {})
    for name in ("three_input", "power_only"):
        if name in cal:
            lines += ["", f"{LABELS[name]} constants (all runs): " +
                      ", ".join(f"{k} = {v:.4g}" for k, v in cal[name]["coef"].items())]
    fams = sorted({f for n in ESTIMATORS for f in est[n].get("by_family", {})})
    if fams:
        lines += ["", "## Per family (median absolute error over held-out predictions; signed median in brackets)", "",
                  "| family | " + " | ".join(LABELS[n] for n in ESTIMATORS) + " |", "|---|" + "---|" * len(ESTIMATORS)]
        for f in fams:
            cells = []
            for n in ESTIMATORS:
                b = est[n].get("by_family", {}).get(f)
                cells.append("—" if b is None else f"{b['median_abs_pct_error']:.1f} % ({b['median_signed_pct_error']:+.1f})")
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
    lines += ["", "## Per configuration (held-out estimates, geometric mean over splits and repeats)", "",
              "| configuration | runs | true FLOPs | " + " | ".join(LABELS[n] for n in ESTIMATORS) + " |",
              "|---|---|---|" + "---|" * len(ESTIMATORS)]
    by_cfg = defaultdict(list)
    for r in result["per_run"]:
        by_cfg[r["config"]].append(r)
    for cfg, rs in sorted(by_cfg.items()):
        truth = float(np.mean([r["true_flops"] for r in rs]))
        cells = []
        for n in ESTIMATORS:
            errs = [100 * (r[n] - r["true_flops"]) / r["true_flops"] for r in rs if r.get(n) is not None]
            cells.append(f"{np.median(errs):+.1f} %" if errs else "—")
        short = cfg if len(cfg) < 70 else cfg[:67] + "…"
        lines.append(f"| `{short}` | {len(rs)} | {truth:.3e} | " + " | ".join(cells) + " |")
    lines += ["", "## Caveats",
              "- The interval of each run is the lab's true workload interval; live, the collector uses the",
              "  detector's segmentation, whose errors add to these.",
              "- In the protocol, intervals come from calibration residuals (in-sample); the coverage column is how"
              " often they held on held-out configurations. The saved models (`models/flops_*.json`) carry the"
              " quantiles of the held-out errors instead, for the live interval.",
              "- Power capping and clock throttling could not be exercised: the lent H200s forbid changing them.",
              "- Red-team workloads (`adv.*`) are left out of calibration and scoring: they are meant to face the"
              " frozen estimator (`models/flops.json`), as in the seed study.",
              f"- Runs skipped while loading: {len(result.get('skipped', []))}."]
    return "\n".join(lines) + "\n"
