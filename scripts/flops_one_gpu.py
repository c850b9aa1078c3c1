"""Does the FLOP estimator, calibrated on two-GPU training, measure training on a one-GPU node?

    python scripts/flops_one_gpu.py --calibrate data/h200 --data data/h200x1 \
        --out results/flops-one-gpu.json --docs docs/flops-one-gpu.md --figure results/figures/flops_one_gpu.png

``trainsentry flops-eval`` scores the estimators on held-out *configurations* of the dataset they are
calibrated on (``data/h200``: a node of two H200s, most of its training runs using both GPUs). A
one-GPU node (``data/h200x1``) is new in more than configuration: one GPU's idle baseline, no NVLink,
and LoRA variants whose backward stops early (adapters in the top blocks only). Nothing is refitted
on it: every estimator is calibrated on all training runs of ``--calibrate`` (as flops-eval
calibrates its saved models), frozen, and applied to every training run of ``--data`` over the run's
true interval and over the jobs the detector's segmentation finds (the red team's FLOP scoring,
:func:`trainsentry.redteam.flopscore.flop_scores`, one code path). The saved model
(``models/flops.json``) is scored beside them as ``saved``. Each estimator's own held-out error range
on the calibration data (configurations dealt into 8 folds) is the yardstick: a one-GPU error outside
it is a transfer failure, not noise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.flops.dataset import load_runs  # noqa: E402
from trainsentry.flops.estimators import make  # noqa: E402
from trainsentry.redteam.flopscore import calibration_set, flop_scores, held_out_errors  # noqa: E402
from trainsentry.traces.io import iter_runs, read_manifest  # noqa: E402

LABELS = {"three_input": "three-input energy", "power_only": "power only", "mlp": "MLP on log features",
          "residual_mlp": "residual MLP on power only", "tensor": "tensor activity",
          "fusion": "tensor + three-input fusion", "saved": "saved model (models/flops.json)"}


def variant(labels: dict) -> str:
    """What kind of training a run is, by what its backward pass covers: the whole model, or low-rank
    adapters on every projection, on the query and value projections, or on those of the top blocks."""
    if labels["family"] != "lora":
        return "full model"
    cfg = labels.get("config") or {}
    targets = cfg.get("lora_targets")
    if not targets:
        return "LoRA, every projection"
    if cfg.get("lora_layers"):
        return "LoRA q,v, top blocks only"
    return "LoRA q,v"


def training_runs(root: Path) -> list[dict]:
    out = []
    for run_dir in iter_runs(root):
        m = read_manifest(run_dir)
        if m["labels"]["class"] != "training":
            continue
        out.append({"dir": str(run_dir), "name": variant(m["labels"]), "setting": m["labels"]["workload"] + " "
                    + json.dumps(m["labels"].get("overrides") or {}, sort_keys=True), "role": "strategy"})
    if not out:
        raise SystemExit(f"{root}: no training runs")
    return out


TIME_BASE_ESTIMATORS = ("three_input", "power_only", "residual_mlp", "fusion")
TIME_BASES = {"busy_gpu_s": "busy GPU-seconds", "duration_s": "duration (the seed study's)"}


def time_base_ablation(calibrate: list[Path], data: Path, seed: int) -> dict:
    """The energy models' overhead on the seed study's time base (the job's duration) against ours (busy
    GPU-seconds): the same estimators with ``busy_gpu_s`` replaced by ``duration_s`` are the seed's
    model. Per time base: held-out median |error| on the calibration data (8 folds, as above) and the
    error on the one-GPU runs of a fit on all calibration runs."""
    cal, target = calibration_set(calibrate), load_runs(data)

    def seed_base(rs):
        return type(rs)({**rs.X, "busy_gpu_s": rs.X["duration_s"]}, rs.flops, rs.run_ids, rs.configs, rs.workloads,
                        rs.families)
    out = {}
    for base, c, t in (("busy_gpu_s", cal, target), ("duration_s", seed_base(cal), seed_base(target))):
        held = held_out_errors(c, TIME_BASE_ESTIMATORS, seed)
        row = {}
        for n in TIME_BASE_ESTIMATORS:
            e = 100.0 * (make(n, seed=seed).fit(c.X, c.flops).predict(t.X) - t.flops) / t.flops
            row[n] = {"held_out_median_abs_pct_error": float(np.median(np.abs(held[n].errors))),
                      "held_out_failed_folds": len(held[n].failures),
                      "one_gpu_median_abs_pct_error": float(np.median(np.abs(e))),
                      "one_gpu_median_pct_error": float(np.median(e)),
                      "one_gpu_p90_abs_pct_error": float(np.quantile(np.abs(e), 0.9))}
        out[base] = row
    return {"runs": len(target), "estimators": list(TIME_BASE_ESTIMATORS), "by_time_base": out,
            "labels": TIME_BASES}


def summarize(doc: dict) -> dict:
    """Per estimator, over every scored run and per variant: median |error|, p90 |error|, median
    signed error, and the share of runs inside the estimator's held-out range on the calibration data."""
    rows = [r for r in doc["runs"] if "error" not in r]
    out: dict[str, dict] = {}
    for name in doc["estimators"]:
        held = doc["benign_held_out"].get(name)
        lo, hi = (held["min_pct_error"], held["max_pct_error"]) if held else (None, None)

        def stats(rs: list[dict], key: str = "pct_error") -> dict:
            e = np.asarray([r[key][name] for r in rs], dtype=np.float64)
            inside = None if lo is None else float(np.mean((e >= lo) & (e <= hi)))
            return {"runs": int(e.size), "median_abs_pct_error": float(np.median(np.abs(e))),
                    "p90_abs_pct_error": float(np.quantile(np.abs(e), 0.9)),
                    "median_pct_error": float(np.median(e)), "share_inside_held_out_range": inside}
        by_variant = {}
        for v in sorted({r["name"] for r in rows}):
            by_variant[v] = stats([r for r in rows if r["name"] == v])
        out[name] = {"all": stats(rows), "segmented": stats(rows, "pct_error_segmented"), "by_variant": by_variant,
                     "held_out_range": [lo, hi],
                     "held_out_median_abs_pct_error": held["median_abs_pct_error"] if held else None}
    return out


def markdown(doc: dict, command: str) -> str:
    s, cal = doc["summary"], doc["calibrated_on"]
    names = [n for n in doc["estimators"] if n in s]
    best = doc["headline"]
    variants = sorted({v for n in names for v in s[n]["by_variant"]})
    n_runs = s[names[0]]["all"]["runs"]
    count = {v: s[names[0]]["by_variant"][v]["runs"] for v in variants}

    def pct(x: float | None, signed: bool = False) -> str:
        return "–" if x is None else (f"{x:+.1f} %" if signed else f"{x:.1f} %")

    lines = [
        "# The FLOP estimator on a one-GPU node",
        "",
        f"*Generated by `{command}` on {doc['created']}; do not edit by hand.*",
        "",
        f"Every estimator of `trainsentry flops-eval` calibrated on all {cal['runs']} training runs of "
        f"`{', '.join(cal['dirs'])}` ({cal['configurations']} configurations, a node of two H200s), frozen, and "
        f"applied to the {n_runs} training runs of `{doc['data']}` (a node of one H200: one GPU's idle baseline, "
        "no NVLink). Nothing is fitted on the one-GPU runs. Error = 100 · (estimate − ground truth) / ground "
        "truth (ground truth: PyTorch's FLOP counter per step × steps); negative = under-reported. *Held-out "
        "range*: the estimator's own errors on calibration configurations it was not fitted on (8 folds); a "
        "one-GPU error outside it is the transfer failing, not the estimator's usual spread. The best estimator "
        f"of `trainsentry flops-eval` (`results/flops.json`) is **{LABELS.get(best, best)}**.",
        "",
        "Over the run's true interval (the manifest's start → end):",
        "",
        "| estimator | median abs. error | p90 abs. error | median signed | inside held-out range | held-out: median abs. / range |",
        "|---|---|---|---|---|---|",
    ]
    for n in names:
        a, lo_hi = s[n]["all"], s[n]["held_out_range"]
        rng = "–" if lo_hi[0] is None else f"{pct(s[n]['held_out_median_abs_pct_error'])} / {lo_hi[0]:+.1f} … {lo_hi[1]:+.1f} %"
        inside = "–" if a["share_inside_held_out_range"] is None else f"{100 * a['share_inside_held_out_range']:.0f} %"
        mark = " **(best)**" if n == best else ""
        lines.append(f"| {LABELS.get(n, n)}{mark} | {pct(a['median_abs_pct_error'])} | {pct(a['p90_abs_pct_error'])} | "
                     f"{pct(a['median_pct_error'], True)} | {inside} | {rng} |")
    lines += ["", "Median signed error by kind of training (runs in brackets), over the true interval:", "",
              "| estimator | " + " | ".join(f"{v} ({count[v]})" for v in variants) + " |",
              "|---|" + "---|" * len(variants)]
    for n in names:
        lines.append(f"| {LABELS.get(n, n)} | " + " | ".join(
            pct(s[n]["by_variant"][v]["median_pct_error"], True) for v in variants) + " |")
    lines += ["", "Over the jobs the detector's segmentation finds (what a monitor that does not know the run's "
              "interval integrates), all runs:", "",
              "| estimator | median abs. error | p90 abs. error | median signed |", "|---|---|---|---|"]
    for n in names:
        a = s[n]["segmented"]
        lines.append(f"| {LABELS.get(n, n)} | {pct(a['median_abs_pct_error'])} | {pct(a['p90_abs_pct_error'])} | "
                     f"{pct(a['median_pct_error'], True)} |")
    ab = doc.get("time_base")
    if ab:
        lines += ["", "## The overhead's time base", "",
                  "The energy models subtract an overhead power times a time. The seed study's time is the job's "
                  "duration; ours is busy GPU-seconds (each GPU's seconds at work, summed). On a job that keeps every "
                  "GPU of the node busy the two differ by a constant factor the fit absorbs; calibrated on two-GPU "
                  "jobs and applied to one GPU, the duration counts the overhead twice. The same estimators on each "
                  "time base (held out: 8 folds of the calibration configurations; one GPU: a fit on every "
                  f"calibration run applied to the {ab['runs']} one-GPU runs):", "",
                  "| time base | " + " | ".join(LABELS.get(n, n) for n in ab["estimators"]) + " |",
                  "|---|" + "---|" * len(ab["estimators"])]
        for base, row in ab["by_time_base"].items():
            lines.append(f"| {TIME_BASES[base]} | " + " | ".join(
                f"held out {pct(row[n]['held_out_median_abs_pct_error'])}; one GPU "
                f"{pct(row[n]['one_gpu_median_abs_pct_error'])} ({pct(row[n]['one_gpu_median_pct_error'], True)})"
                for n in ab["estimators"]) + " |")
        lines += ["", "(median absolute error; one GPU: median signed error in brackets)"]
    if doc["runs_not_scored"]:
        lines += ["", "Runs not scored: " + ", ".join(f"`{r['run_id']}` ({r['error']})" for r in doc["runs_not_scored"])]
    if doc.get("not_calibrated"):
        lines += ["", "Not calibrated: " + ", ".join(f"`{k}` ({v})" for k, v in doc["not_calibrated"].items())]
    if doc.get("figure"):
        lines += ["", f"![flops_one_gpu](../{doc['figure']})"]
    return "\n".join(lines) + "\n"


def figure(doc: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter
    rows = [r for r in doc["runs"] if "error" not in r]
    names = [n for n in (doc["headline"], "tensor", "three_input") if n and n in doc["estimators"]]
    names = list(dict.fromkeys(names))
    variants = sorted({r["name"] for r in rows})
    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names), 4.2), squeeze=False)
    for ax, n in zip(axes[0], names):
        for v in variants:
            rs = [r for r in rows if r["name"] == v]
            t = np.asarray([r["true_flops"] for r in rs])
            e = t * (1 + np.asarray([r["pct_error"][n] for r in rs]) / 100.0)
            ax.scatter(t, e, s=14, label=v)
        lim = [min(r["true_flops"] for r in rows) / 2, max(r["true_flops"] for r in rows) * 2]
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlim=lim, ylim=lim, xlabel="true FLOPs", ylabel="estimated FLOPs",
               title=LABELS.get(n, n))
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_minor_formatter(NullFormatter())      # decades only: minor labels overlap
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrate", type=Path, action="append", help="calibration roots (default data/h200)")
    ap.add_argument("--data", type=Path, default=Path("data/h200x1"))
    ap.add_argument("--model", type=Path, default=Path("models/flops.json"), help="saved model scored as 'saved'")
    ap.add_argument("--flops-results", type=Path, default=Path("results/flops.json"), help="names the best estimator")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("results/flops-one-gpu.json"))
    ap.add_argument("--docs", type=Path, default=Path("docs/flops-one-gpu.md"))
    ap.add_argument("--figure", type=Path, default=Path("results/figures/flops_one_gpu.png"))
    args = ap.parse_args(argv)
    command = "python scripts/flops_one_gpu.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    best = json.loads(args.flops_results.read_text())["best"] if args.flops_results.exists() else None
    scored = training_runs(args.data)
    doc = flop_scores(args.calibrate or [Path("data/h200")], scored, args.seed,
                      args.model if args.model.exists() else None, best)
    if "error" in doc:
        raise SystemExit(doc["error"])
    doc.update(command=command.strip(), data=str(args.data), created=time.strftime("%Y-%m-%d", time.gmtime()),
               elapsed_s=round(time.time() - t0, 1))
    doc["summary"] = summarize(doc)
    doc["time_base"] = time_base_ablation(args.calibrate or [Path("data/h200")], args.data, args.seed)
    if args.figure:
        figure(doc, args.figure)
        doc["figure"] = str(args.figure)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=float) + "\n")
    if args.docs:
        args.docs.write_text(markdown(doc, doc["command"]))
    for n, v in doc["summary"].items():
        a = v["all"]
        share = a["share_inside_held_out_range"]
        inside = "–" if share is None else f"{100 * share:.0f} %"
        print(f"{n:13s} median |err| {a['median_abs_pct_error']:6.1f} %  p90 {a['p90_abs_pct_error']:6.1f} %  "
              f"signed {a['median_pct_error']:+6.1f} %  inside held-out range {inside}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
