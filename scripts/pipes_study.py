"""Do the GPU's non-tensor arithmetic pipes tell single-device training from batched forward work?

    python scripts/pipes_study.py --data data/h200x1 --out results/pipes.json --docs docs/pipes.md \
        --figure results/figures/pipes.png

The single-device lead (detect/single_device.py) confuses batched embedding at the power cap with
training: power, utilisation and SM, tensor and DRAM activity are alike (docs/one-gpu.md). Since
2026-12-01 the agent also reads GPM's FP32, FP16 and integer pipe utilisation. The hypothesis: mixed-
precision training keeps fp32 master weights, gradients and optimizer state, so its optimizer step,
norms and casts keep the FP32 pipe busier than a bf16 forward pass does. Its counter-cases were
recorded too: pure bf16 training (``param_dtype: bf16``) and embedding served in fp32 or fp16 (``weights``);
the page names those found in the data, and the campaigns they came from.

Every run of the --data roots that has the pipe signals is cut into the detectors' windows (8 s, 2 s
stride) inside its workload span, on its busiest GPU; ``features.activity.pipe_activity`` gives each
window's means. Per signal: ROC AUC of training against everything else, over busy windows and over
runs (run medians), with and without the counter-cases. Nothing is fitted. Where training and other
work ran at one shape (width, depth, batch, tokens: LoRA at each attribution configuration's shape,
configs/campaigns/h200x1-matched.yaml), the page sets them side by side with their DRAM ÷ tensor ratio.
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

from trainsentry.detect.evaluate import window_auc  # noqa: E402
from trainsentry.detect.single_device import BUSY_UTIL_PCT  # noqa: E402
from trainsentry.features.activity import PIPE_METRICS, pipe_activity  # noqa: E402
from trainsentry.features.grid import to_grids  # noqa: E402
from trainsentry.features.windows import DEFAULT_STRIDE_S, DEFAULT_WINDOW_S  # noqa: E402
from trainsentry.traces.io import iter_runs, read_trace  # noqa: E402

SIGNALS = ("gpm_fp32_util_pct", "gpm_fp32_util_pct.per_sm", "gpm_integer_util_pct", "gpm_integer_util_pct.per_sm",
           "gpm_fp16_util_pct", "gpm_tensor_util_pct", "gpm_dram_bw_util_pct")
HZ = 10.0


def precision(extra: dict) -> str:
    """How the run held its numbers: 'mixed' (fp32 weights, bf16 autocast: the training default),
    'bf16' (pure bf16 training), or the inference weights' dtype ('bf16', 'fp32', 'fp16'), else ''."""
    e = extra.get("0", {})
    if "param_dtype" in e:
        return "mixed" if e["param_dtype"] == "fp32" else "bf16"
    w = str(e.get("weights_dtype", ""))
    return {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(w, "")


def _median(values: list[float]) -> float:
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.median(v)) if v.size else float("nan")


def run_windows(run_dir: Path) -> dict | None:
    table, m = read_trace(run_dir)
    if not any(table.column(n).null_count < table.num_rows for n in PIPE_METRICS):
        return None
    grid = next(iter(to_grids(table, HZ, t0=float(m["start"]), t1=float(m["end"])).values()))
    power = {d: np.nanmean(s["power_mw"]) for d, s in grid.gpus.items() if np.isfinite(s.get("power_mw", [np.nan])).any()}
    gpu = max(power, key=power.get)
    n, step = int(DEFAULT_WINDOW_S * HZ), int(DEFAULT_STRIDE_S * HZ)
    wins = [pipe_activity({k: v[i:i + n] for k, v in grid.gpus[gpu].items()})
            for i in range(0, len(grid.t) - n + 1, step)]
    labels = m["labels"]
    prec = precision(m.get("ground_truth", {}).get("extra", {}))
    cfg = labels.get("config") or {}
    # the counter-cases: training without an fp32 master copy, serving outside bf16 (fp32, fp16)
    counter = (labels["class"] == "training" and prec == "bf16") or (labels["class"] != "training" and prec in ("fp32", "fp16"))
    med = {k: _median([w.get(k, np.nan) for w in wins]) for k in SIGNALS + ("gpu_util_pct",)}
    short = adapters(cfg.get("lora_targets"), cfg.get("lora_layers"), cfg.get("n_layers"))
    cls, family = labels["class"], labels["family"]
    return {"run": run_dir.name, "class": cls, "family": family, "precision": prec,
            "counter_case": counter, "median": med, "windows": wins, "shape": shape(cfg),
            # what the matched-shape comparison keeps apart: a training family, LoRA by its adapter set
            # where it is not every projection ("lora (q, v)"), other work as "class family"
            "group": (f"{family} ({short})" if short else family) if cls == "training" else f"{cls} {family}",
            "what": " ".join(str(x) for x in (labels.get("workload", ""), cfg.get("method") or "",
                                              f"rank {cfg['lora_rank']}" if cfg.get("lora_rank") else "",
                                              f"on {short}" if short else "") if x)}


def adapters(lora_targets: list | None, lora_layers: int | None = None, n_layers: int | None = None) -> str:
    """LoRA's adapter set in short (``q, v``, in workloads.lora.TARGETS order; ``last 4 of 20 blocks``
    when only the top blocks carry adapters), or "" for every projection of every block."""
    from trainsentry.workloads.lora import TARGETS
    parts = []
    if lora_targets and set(lora_targets) != set(TARGETS):
        parts.append(", ".join(t.split(".")[-1] for t in TARGETS if t in lora_targets))
    if lora_layers and lora_layers != n_layers:
        parts.append(f"last {lora_layers} of {n_layers} blocks")
    return "; ".join(parts)


def shape(cfg: dict) -> list[int] | None:
    """The computation's shape, (width, layers, batch, tokens per sequence), from a run's resolved config:
    a model preset's (workloads.infer_common.MODELS) or the config's own width and depth; attribution
    keeps its token count in ``text_len`` (its ``seq_len`` is one longer). None when the config lacks one."""
    from trainsentry.workloads.infer_common import MODELS
    arch = MODELS.get(cfg.get("model")) or cfg
    tokens = cfg.get("text_len") or cfg.get("seq_len")
    key = [arch.get("d_model"), arch.get("n_layers"), cfg.get("batch"), tokens]
    return key if all(isinstance(v, int) for v in key) else None


def matched(runs: list[dict]) -> list[dict]:
    """Training and non-training runs of one shape side by side: per shape with both, every run's median
    tensor-core and DRAM activity and their ratio (DRAM ÷ tensor, of the run medians)."""
    by: dict[tuple, list[dict]] = {}
    for r in runs:
        if r["shape"] is not None:
            by.setdefault(tuple(r["shape"]), []).append(r)
    out = []
    for key, rs in sorted(by.items()):
        if len({r["class"] == "training" for r in rs}) < 2:
            continue
        rows = []
        for r in sorted(rs, key=lambda r: (r["class"], r["family"], r["run"])):
            t, d = r["median"]["gpm_tensor_util_pct"], r["median"]["gpm_dram_bw_util_pct"]
            ratio = d / t if np.isfinite(t) and np.isfinite(d) and t > 0 else None
            rows.append({"run": r["run"], "class": r["class"], "family": r["family"], "group": r["group"], "what": r["what"],
                         "precision": r["precision"],
                         "gpu_util_pct": r["median"]["gpu_util_pct"] if np.isfinite(r["median"]["gpu_util_pct"]) else None,
                         "tensor": t if np.isfinite(t) else None, "dram": d if np.isfinite(d) else None,
                         "dram_per_tensor": ratio})
        out.append({"shape": {"width": key[0], "layers": key[1], "batch": key[2], "tokens": key[3]}, "runs": rows})
    return out


def matched_summary(groups: list[dict]) -> dict:
    """Computed once, read by the page below and by the report. ``groups``: per group of runs (a
    training family, LoRA by adapter set; other work as "class family"), its DRAM ÷ tensor ratios' range
    over the matched shapes. ``comparisons``: per training group and other group that share a shape,
    the shapes they share (both with a ratio), in how many every run of the training group reads a
    higher ratio than every run of the other (``above``), their ranges over those shapes, and whether
    the ranges overlap (``overlap``: then no one threshold parts them without knowing the shape)."""
    ratios: dict[str, dict] = {}
    per_shape: list[dict[str, list[float]]] = []
    for g in groups:
        here: dict[str, list[float]] = {}
        for r in g["runs"]:
            if r["dram_per_tensor"] is not None:
                here.setdefault(r["group"], []).append(r["dram_per_tensor"])
                e = ratios.setdefault(r["group"], {"training": r["class"] == "training", "values": []})
                e["values"].append(r["dram_per_tensor"])
        per_shape.append(here)
    out = {"groups": {k: {"training": e["training"], "ratio": [min(e["values"]), max(e["values"])]}
                      for k, e in sorted(ratios.items())}, "comparisons": []}
    for tg in [k for k, e in out["groups"].items() if e["training"]]:
        for og in [k for k, e in out["groups"].items() if not e["training"]]:
            shared = [h for h in per_shape if tg in h and og in h]
            if not shared:
                continue
            t = [v for h in shared for v in h[tg]]
            o = [v for h in shared for v in h[og]]
            out["comparisons"].append({
                "training": tg, "other": og, "shapes": len(shared),
                "above": sum(min(h[tg]) > max(h[og]) for h in shared),
                "training_ratio": [min(t), max(t)], "other_ratio": [min(o), max(o)],
                "overlap": min(t) <= max(o) and min(o) <= max(t)})
    return out


def matched_reading(summary: dict) -> str:
    """The matched-shape comparison in words, from :func:`matched_summary`."""
    comps = summary.get("comparisons") or []
    if not comps:
        return "No shape has both training and other runs with the tensor and DRAM signals."
    parts = [f"{c['training']} training read a higher DRAM ÷ tensor ratio than {c['other']} in {c['above']} of the "
             f"{c['shapes']} shape(s) they share (ratios {c['training_ratio'][0]:.2f}–{c['training_ratio'][1]:.2f} "
             f"against {c['other_ratio'][0]:.2f}–{c['other_ratio'][1]:.2f}, "
             + ("overlapping across shapes)" if c["overlap"] else "apart even across shapes)") for c in comps]
    out = "; ".join(parts) + "."
    if any(c["overlap"] and c["above"] == c["shapes"] for c in comps):
        out += (" Where a training group is above at every shared shape but the ranges overlap across shapes, "
                "the ratio parts them only beside a run of the same shape, which an inspector does not know.")
    return out


def auc(pos: list[float], neg: list[float]) -> float | None:
    """ROC AUC of training (``pos``) against the rest (``neg``), finite values only; None without both."""
    p, q = [v for v in pos if np.isfinite(v)], [v for v in neg if np.isfinite(v)]
    if not p or not q:
        return None
    return window_auc(np.r_[np.ones(len(p)), np.zeros(len(q))], np.asarray(p + q, dtype=np.float64))


def separation(runs: list[dict], keep_counter: bool, against: tuple[str, ...] = ("inference", "other")) -> dict:
    """ROC AUC per signal of training against the classes in ``against``, over busy windows and over
    run medians; with or without the counter-cases."""
    use = [r for r in runs if r["median"]["gpu_util_pct"] >= BUSY_UTIL_PCT and (keep_counter or not r["counter_case"])
           and (r["class"] == "training" or r["class"] in against)]
    out = {"against": list(against), "runs": len(use), "training_runs": sum(r["class"] == "training" for r in use),
           "signals": {}}
    for s in SIGNALS:
        pos = [w.get(s, np.nan) for r in use if r["class"] == "training" for w in r["windows"]
               if w.get("gpu_util_pct", 0) >= BUSY_UTIL_PCT]
        neg = [w.get(s, np.nan) for r in use if r["class"] != "training" for w in r["windows"]
               if w.get("gpu_util_pct", 0) >= BUSY_UTIL_PCT]
        out["signals"][s] = {
            "window_auc": auc(pos, neg),
            "run_auc": auc([r["median"][s] for r in use if r["class"] == "training"],
                           [r["median"][s] for r in use if r["class"] != "training"])}
    return out


def groups(runs: list[dict]) -> dict:
    """Per (class, precision) group: run-median ranges of every signal, and for each pipe the share
    of busy windows where it read above 0 (``above_zero``)."""
    out: dict[str, dict] = {}
    above: dict[str, dict[str, list[bool]]] = {}
    for r in runs:
        if r["median"]["gpu_util_pct"] < BUSY_UTIL_PCT:
            continue
        key = f"{r['class']} ({r['precision'] or 'precision not recorded'})"
        g = out.setdefault(key, {"runs": 0, **{s: [np.inf, -np.inf] for s in SIGNALS}})
        g["runs"] += 1
        for s in SIGNALS:
            v = r["median"][s]
            if np.isfinite(v):
                g[s] = [min(g[s][0], v), max(g[s][1], v)]
        for m in PIPE_METRICS:
            above.setdefault(key, {}).setdefault(m, []).extend(
                w[m] > 0 for w in r["windows"] if w.get("gpu_util_pct", 0) >= BUSY_UTIL_PCT and m in w)
    res = {}
    for k, g in sorted(out.items()):
        res[k] = {kk: (vv if not isinstance(vv, list) or np.isfinite(vv[0]) else None) for kk, vv in g.items()}
        res[k]["above_zero"] = {m: (float(np.mean(v)) if v else None) for m, v in above.get(k, {}).items()}
    return res


def figure(runs: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = {"training": "tab:red", "inference": "tab:blue", "other": "tab:grey"}
    for r in runs:
        w = [x for x in r["windows"] if x.get("gpu_util_pct", 0) >= BUSY_UTIL_PCT]
        if not w:
            continue
        kw = dict(s=9, alpha=0.5, c=colours[r["class"]], marker="x" if r["counter_case"] else "o")
        ax[0].scatter([x.get("gpm_tensor_util_pct", np.nan) for x in w], [x.get("gpm_fp32_util_pct", np.nan) for x in w], **kw)
        ax[1].scatter([x.get("gpm_dram_bw_util_pct", np.nan) for x in w],
                      [x.get("gpm_integer_util_pct", np.nan) for x in w], **kw)
    ax[0].set(xlabel="tensor pipe utilisation (%)", ylabel="FP32 pipe utilisation (%)", yscale="symlog")
    ax[1].set(xlabel="DRAM bandwidth utilisation (%)", ylabel="integer pipe utilisation (%)")
    for c, col in colours.items():
        ax[0].scatter([], [], c=col, label=c)
    ax[0].scatter([], [], c="k", marker="x", label="counter-case (bf16 training, fp32 or fp16 serving)")
    ax[0].legend(fontsize=7)
    fig.suptitle("One H200, busy 8 s windows of every run with the pipe signals (busiest GPU)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _f(v, fmt="{:.2f}") -> str:
    return "–" if v is None or not np.isfinite(v) else fmt.format(v)   # None: not measured (JSON null)


def _g(v) -> str:
    """Two decimals, or three significant digits below 0.01 (a pipe busy 0.004 % of cycles is not 0.00)."""
    if v is None or not np.isfinite(v):
        return "–"
    return f"{v:.2f}" if v == 0 or abs(v) >= 0.01 else f"{v:.2g}"


def markdown(res: dict) -> str:
    sep_all, sep_plain = res["separation"]["with_counter_cases"], res["separation"]["without_counter_cases"]
    best = max(SIGNALS, key=lambda s: abs((sep_plain["signals"][s]["window_auc"] or 0.5) - 0.5))
    b = sep_plain["signals"][best]
    lines = [
        "# The arithmetic pipes outside the tensor cores: a single-device signal?", "",
        f"*Generated by `{res['command']}` from `{res['results_file']}`; do not edit by hand.*", "",
        "The single-device lead confuses batched forward work at the power cap (embedding, prefill) with "
        "training on one GPU. Since 2026-12-01 the agent reads GPM's FP32, FP16 and integer pipe "
        "utilisation (`traces/schema.py`). Hypothesis: mixed-precision training keeps fp32 master weights, "
        "gradients and optimizer state, so its optimizer step, norms and casts keep the FP32 pipe busier "
        "than a bf16 forward pass. Counter-cases in the data (training without an fp32 master copy, "
        "serving outside bf16): " + (", ".join(f"{n} {k}" for k, n in res["counter_cases"].items()) or "none") + ".", "",
        f"Data: {res['runs']} runs with the pipe signals in {', '.join('`' + d + '`' for d in res['data'])} "
        f"(campaign {', '.join(res['campaigns'])}, recorded {res['recorded']}). Windows of {DEFAULT_WINDOW_S:.0f} s every {DEFAULT_STRIDE_S:.0f} s inside "
        f"each run's workload span, on its busiest GPU; busy: GPU utilisation ≥ {BUSY_UTIL_PCT:.0f} %. "
        "AUC: P(a training value exceeds a non-training one); 0.5 is no separation, and a value far below "
        "0.5 separates the other way. Nothing is fitted.", "",
        "## Separation", "",
        "Training against every other busy run (inference and other work), without and with the "
        "counter-cases, and against inference alone (no counter-cases): window AUC / run AUC.", "",
        "| signal | vs all, no counter-cases | vs all, with them | vs inference alone |",
        "|---|---|---|---|"]
    sep_inf = res["separation"]["training_vs_inference"]
    for s in SIGNALS:
        cells = [f"{_f(d['signals'][s]['window_auc'])} / {_f(d['signals'][s]['run_auc'])}" for d in (sep_plain, sep_all, sep_inf)]
        lines.append(f"| `{s}` | " + " | ".join(cells) + " |")
    lines += ["", f"Runs: {sep_plain['runs']} busy without the counter-cases ({sep_plain['training_runs']} training), "
              f"{sep_all['runs']} with them ({sep_all['training_runs']} training), {sep_inf['runs']} against inference "
              f"alone ({sep_inf['training_runs']} training).", "",
              "## Busy windows where each pipe read above 0", "",
              "| group | " + " | ".join(f"`{m}`" for m in PIPE_METRICS) + " |", "|---|" + "---|" * len(PIPE_METRICS)]
    for k, g in res["groups"].items():
        lines.append(f"| {k} | " + " | ".join(_f(None if g["above_zero"].get(m) is None else 100 * g["above_zero"][m],
                                                 "{:.0f} %") for m in PIPE_METRICS) + " |")
    lines += ["",
              "## Run medians per class and precision (min – max over runs)", "",
              "| group | runs | " + " | ".join(f"`{s}`" for s in SIGNALS) + " |",
              "|---|---|" + "---|" * len(SIGNALS)]
    for k, g in res["groups"].items():
        cells = [("–" if g[s] is None else f"{_g(g[s][0])} – {_g(g[s][1])}") for s in SIGNALS]
        lines.append(f"| {k} | {g['runs']} | " + " | ".join(cells) + " |")
    lines += ["", "## Every run (medians over its windows)", "",
              "| run | class | precision | GPU util % | " + " | ".join(f"`{s}`" for s in SIGNALS) + " |",
              "|---|---|---|---|" + "---|" * len(SIGNALS)]
    for r in res["per_run"]:
        m = r["median"]
        lines.append(f"| {r['run']} | {r['class']} | {r['precision'] or '–'} | {_f(m['gpu_util_pct'], '{:.0f}')} | "
                     + " | ".join(_g(m[s]) for s in SIGNALS) + " |")
    if res.get("matched"):
        lines += ["", "## Matched shapes: training beside other work of the same width, depth, batch and length", "",
                  "Median tensor-core and DRAM activity (% of cycles, over each run's windows, busy or not) of each "
                  "run of a shape that has both training and other runs; DRAM ÷ tensor is the ratio of the two "
                  "medians. A shape is width, layers, batch and tokens per sequence (heads and feed-forward width "
                  "aside).", "",
                  "| shape (width × layers, batch × tokens) | run | class | what | precision | GPU util % | "
                  "`gpm_tensor_util_pct` | `gpm_dram_bw_util_pct` | DRAM ÷ tensor |", "|---|---|---|---|---|---|---|---|---|"]
        for g in res["matched"]:
            sh = g["shape"]
            label = f"{sh['width']} × {sh['layers']}, {sh['batch']} × {sh['tokens']}"
            for r in g["runs"]:
                lines.append(f"| {label} | {r['run']} | {r['class']} | {r['what']} | {r['precision'] or '–'} | "
                             f"{_f(r['gpu_util_pct'], '{:.0f}')} | {_g(r['tensor'])} | {_g(r['dram'])} | "
                             f"{_f(r['dram_per_tensor'])} |")
        lines += ["", res["matched_reading"]]
    lines += ["", "## Reading", "",
              f"Without the counter-cases the most separating signal is `{best}` (window AUC {_f(b['window_auc'])}, "
              f"run AUC {_f(b['run_auc'])}). " + res["reading"], "",
              f"Figure: `{res['figure']}`.", ""]
    return "\n".join(lines)


def candidates(sep: dict) -> list[str]:
    """Signals separating training from the rest with and without the counter-cases (|AUC − 0.5| ≥ 0.4
    on windows in both): the study's one criterion, stored in the results for its readers (the report)."""
    plain, full = (sep[k]["signals"] for k in ("without_counter_cases", "with_counter_cases"))
    return [s for s in SIGNALS if all(d[s]["window_auc"] is not None and abs(d[s]["window_auc"] - 0.5) >= 0.4
                                      for d in (plain, full))]


def above_zero_in(groups: dict) -> dict:
    """Per pipe: the groups whose busy windows read it above 0 (``groups``), out of how many groups
    measured it (``of``), and the one with the highest run median (``highest``): computed once and stored
    in the results, which the reading below and the report both read."""
    out = {}
    for m in PIPE_METRICS:
        shares = {k: g["above_zero"].get(m) for k, g in groups.items() if g["above_zero"].get(m) is not None}
        on = [k for k, v in shares.items() if v > 0]
        out[m] = {"groups": on, "of": len(shares),
                  "highest": max(on, key=lambda k: (groups[k][m] or [0.0, 0.0])[1]) if on else None}
    return out


def reading(res: dict) -> str:
    """The verdict, from the numbers: a signal is a candidate only if it separates with and without
    the counter-cases (|AUC − 0.5| ≥ 0.4 on windows in both); then FP32's direction against inference
    alone (the hypothesis), and any pipe that read above 0 in some groups' windows only (which, and
    whether training reads it highest)."""
    sep, strong = res["separation"], res["candidates"]
    if strong:
        out = ("Separating with and without the counter-cases (|AUC − 0.5| ≥ 0.4 on windows): "
               + ", ".join(f"`{s}`" for s in strong) + ". A candidate detector input, to be validated on runs it has "
               "not seen.")
    else:
        out = ("No signal separates training from the other busy work both with and without the counter-cases "
               "(|AUC − 0.5| ≥ 0.4 on windows in both), so the pipe utilisations stay recorded but are not a "
               "detector input.")
    fp32 = sep["training_vs_inference"]["signals"]["gpm_fp32_util_pct"]["window_auc"]
    if fp32 is not None:
        way = "higher, as the hypothesis said" if fp32 > 0.5 else "lower: the hypothesis is reversed, not merely unmet"
        out += (f" Against inference alone (no counter-cases) the FP32 pipe's window AUC is {fp32:.2f}: "
                f"mixed-precision training's FP32 pipe is {way}.")
    for m in PIPE_METRICS:
        on, n, top = (res["above_zero_in"][m][k] for k in ("groups", "of", "highest"))
        shares = {k: res["groups"][k]["above_zero"][m] for k in on}
        if len(on) == 1 and n > 1:
            g = res["groups"][on[0]]
            out += (f" `{m}` read above 0 only in {on[0]}: in {100 * shares[on[0]]:.0f} % of its busy windows "
                    f"({g['runs']} runs, run medians {g[m][0]:.4f}–{g[m][1]:.4f} % of cycles), and exactly 0 in every "
                    f"busy window of every other group. A lead to test against benign work that runs that "
                    f"arithmetic, not a detector input on this little evidence.")
        elif 1 < len(on) < n:
            # read above 0 in some groups only: say which, and whether training reads it highest
            spans = {k: res["groups"][k][m] for k in on}   # a window above 0 gives a finite median: never None here
            parts = [f"{k} ({100 * shares[k]:.0f} % of busy windows, run medians "
                     + (f"{spans[k][0]:.4f}–{spans[k][1]:.4f} %" if spans[k] else "–") + " of cycles)" for k in on]
            out += (f" `{m}` read above 0 in " + ", ".join(parts[:-1]) + f" and {parts[-1]}, and exactly 0 in every "
                    f"busy window of the other groups; highest in {top}"
                + (": not specific to training." if not top.startswith("training") else "."))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", required=True, help="dataset root (repeatable)")
    ap.add_argument("--out", default="results/pipes.json")
    ap.add_argument("--docs", default="docs/pipes.md")
    ap.add_argument("--figure", default="results/figures/pipes.png")
    args = ap.parse_args(argv)
    command = "python scripts/pipes_study.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    runs, starts, campaigns = [], [], set()
    for root in args.data:
        for d in iter_runs(REPO / root):
            r = run_windows(d)
            if r is not None:
                m = json.loads((d / "manifest.json").read_text())
                runs.append(r)
                starts.append(m["start"])
                machine = m.get("machine") or {}
                campaigns.add(f"{m.get('campaign', '?')} (node {m.get('node', '?')}, {machine.get('device', '?')})")
    if not runs:
        raise SystemExit("no run with the pipe signals under " + ", ".join(args.data))
    res = {"command": command, "results_file": args.out, "data": args.data, "runs": len(runs),
           "recorded": " – ".join(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t)) for t in (min(starts), max(starts))),
           "campaigns": sorted(campaigns),
           "counter_cases": {k: sum(1 for r in runs if r["counter_case"] and f"{r['class']} runs in {r['precision']}" == k)
                             for k in sorted({f"{r['class']} runs in {r['precision']}" for r in runs if r["counter_case"]})},
           "window_s": DEFAULT_WINDOW_S, "stride_s": DEFAULT_STRIDE_S, "busy_util_pct": BUSY_UTIL_PCT,
           "separation": {"without_counter_cases": separation(runs, False), "with_counter_cases": separation(runs, True),
                          "training_vs_inference": separation(runs, False, ("inference",))},
           "groups": groups(runs), "figure": args.figure,
           "per_run": [{**{k: v for k, v in r.items() if k not in ("windows", "median")},
                        "median": {k: (v if np.isfinite(v) else None) for k, v in r["median"].items()}}
                       for r in sorted(runs, key=lambda r: (r["class"], r["run"]))]}
    res["matched"] = matched(runs)
    res["matched_summary"] = matched_summary(res["matched"])
    res["matched_reading"] = matched_reading(res["matched_summary"])
    res["candidates"] = candidates(res["separation"])
    res["above_zero_in"] = above_zero_in(res["groups"])
    res["reading"] = reading(res)
    figure(runs, REPO / args.figure)
    (REPO / args.out).write_text(json.dumps(res, indent=1, allow_nan=False, default=lambda v: None) + "\n")
    if args.docs:
        (REPO / args.docs).write_text(markdown(res))
    print(res["reading"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
