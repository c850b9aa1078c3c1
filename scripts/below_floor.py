"""What the single-device check says below its busy floor: a bound on the work, measured on every run.

The check (detect.single_device) judges a window only where its busiest GPU ran kernels more than
``BUSY_UTIL_PCT`` (5 %) of the time. Below that it gives no P; since 2026-12-03 its line bounds the
window's work instead (``below_floor``, ``below_floor_flops``: tensor-core activity times the dense FP8
peak at the boost clock). This measures, over every in-run window of the datasets given, with no fitting:

* per class, the windows below the floor that still held work (gate closed, kernels or tensor
  activity), the runs they come from, and the highest tensor-core activity any of them showed: what
  a GPU kept under the floor computes at most, per second;
* per training run with such windows, the share of its windows below the floor, and for the runs
  with most of their windows there (the evaders), the bound over the whole run (tensor-busy seconds
  integrated as the FLOP estimator does, ``ledger_check``) against the FLOPs its workload
  ledger recorded, and the rate the run trained at;
* the matmul burns recorded in BF16, FP8 and 2:4-sparse BF16: how GPM's tensor activity counts their work.

    python scripts/below_floor.py --data data/h200 --data data/h200x1 --data data/h200x1-host \
        --data data/redteam-x1 --data data/redteam-r1 --out results/below-floor.json --docs docs/below-floor.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.detect.base import numeric_matrix  # noqa: E402
from trainsentry.detect.dataset import load_dataset, stack  # noqa: E402
from trainsentry.detect.single_device import BUSY_UTIL_PCT, TENSOR_COL, UTIL_COL, below_floor  # noqa: E402
from trainsentry.flops.features import FP8_OVER_BF16, PEAK_AT_FEATURE_CLOCK, PEAK_FP8_AT_FEATURE_CLOCK  # noqa: E402

MOSTLY = 0.5            # a training run with more than this share of its windows below the floor is listed in full
SCALE_FLOP = 1e25       # a training compute of this size, for scale (the order of the largest reported runs)
YEAR_S = 365.25 * 86400


def measure(runs) -> dict:
    X, y, classes, ids = stack(runs, "trainsentry")
    low = below_floor(X)
    util = np.nan_to_num(numeric_matrix(X, [UTIL_COL])[:, 0], nan=0.0)
    tensor = numeric_matrix(X, [TENSOR_COL])[:, 0]
    classes, ids = np.asarray(classes), np.asarray(ids)
    per_class = {}
    for cls in sorted(set(classes)):
        m = classes == cls
        lm = m & low
        per_class[cls] = {"windows": int(m.sum()), "runs": int(len(set(ids[m]))), "below_floor_windows": int(lm.sum()),
                          "below_floor_runs": int(len(set(ids[lm]))),
                          "max_tensor_pct": float(np.nanmax(tensor[lm])) if lm.any() and np.isfinite(tensor[lm]).any() else None,
                          "max_util_pct": float(util[lm].max()) if lm.any() else None}
    tensor_low = tensor[low & np.isfinite(tensor)]
    top = float(tensor_low.max()) if tensor_low.size else 0.0
    rate = top / 100.0 * PEAK_FP8_AT_FEATURE_CLOCK
    roots = sorted({r.path.rsplit("/", 1)[0] for r in runs})
    ledgers = ledger_check(roots)
    trainers = []
    for r in runs:
        if r.cls != "training":
            continue
        m = ids == r.run_id
        if not (m & low).any():
            continue
        row = {"run": r.run_id, "windows": int(m.sum()), "below_floor_share": float(low[m].mean()),
               "median_util_pct": float(np.median(util[m]))}
        if row["below_floor_share"] > MOSTLY:
            row.update(ledgers["runs"].get(str(Path(r.path)), {}))
        trainers.append(row)
    trainers.sort(key=lambda t: -t["below_floor_share"])
    return {"per_class": per_class, "max_tensor_pct_below_floor": top, "max_rate_flops_per_s": rate,
            "scale_flop": SCALE_FLOP, "scale_gpu_years_at_max_rate": SCALE_FLOP / rate / YEAR_S if rate > 0 else None,
            "trainers": trainers, "ledgers": ledgers["datasets"], "precision": precision_check(runs)}


def precision_check(runs) -> list[dict]:
    """The matmul burns recorded with a ``precision`` (other.matmul, BF16 or FP8): their recorded FLOPs
    against their tensor activity at the BF16 peak, and the rate inside their steps. An FP8 matmul that
    GPM counts as busy as a BF16 one does twice the FLOPs per busy cycle."""
    from trainsentry.flops.features import interval_features
    from trainsentry.traces.io import read_trace
    out = []
    for r in runs:
        if r.family != "matmul":
            continue
        table, m = read_trace(Path(r.path))
        cfg, g = m["labels"].get("config") or {}, m.get("ground_truth") or {}
        if "precision" not in cfg or not g.get("flops"):
            continue
        f = interval_features(table, float(m["start"]), float(m["end"]))
        steps = np.asarray(g.get("step_times_s") or [], dtype=np.float64)
        extra = (g.get("extra") or {}).get("0", {})
        bound = f.tensor_active_s * PEAK_AT_FEATURE_CLOCK
        # a sparse product's ledger counts the dense product it stands for; half of it is executed
        executed = float(extra["executed_flops_per_step"]) * len(steps) if "executed_flops_per_step" in extra else float(g["flops"])
        out.append({"run": r.run_id, "precision": cfg["precision"], "precision_run": extra.get("precision_run"),
                    "executed_over_bf16_bound": executed / bound,
                    "duty": float(cfg.get("duty", 1.0)), "tensor_pct": 100.0 * f.tensor_active_s / f.duration_s,
                    "step_tflops_per_s": float(g["flops"]) / len(steps) / float(np.median(steps)) / 1e12 if steps.size else None,
                    "recorded_over_bf16_bound": float(g["flops"]) / bound})
    return sorted(out, key=lambda x: (x["precision"], -x["duty"]))


def ledger_check(roots: list[str]) -> dict:
    """The bound against the workload ledgers, run by run: every training run with a recorded FLOP count
    (adversarial ones included), its tensor-busy GPU-seconds integrated over the run
    (``flops.features.interval_features``, the FLOP estimator's own integral) times the peak, against
    the recorded FLOPs and against the work the tensor cores did (recorded minus the masked half of
    causal attention, ``flops.dataset.counted_attention_flops``)."""
    from trainsentry.flops.dataset import load_runs
    datasets, per_run = [], {}
    for root in roots:
        try:
            rs = load_runs(root, exclude_prefixes=())
        except ValueError:   # no training run with a ledger under this root
            continue
        bound = rs.X["tensor_active_s"] * PEAK_AT_FEATURE_CLOCK
        att = np.nan_to_num(rs.attention_flops) if rs.attention_flops is not None else np.zeros(len(rs))
        work = rs.flops - 0.5 * att
        ok = bound > 0
        rec_ratio, work_ratio = rs.flops[ok] / bound[ok], work[ok] / bound[ok]
        worst = int(np.argmax(work_ratio)) if ok.any() else None
        datasets.append({"data": root, "runs": int(ok.sum()),
                         "recorded_over_bound_median": float(np.median(rec_ratio)), "recorded_over_bound_max": float(rec_ratio.max()),
                         "work_over_bound_median": float(np.median(work_ratio)), "work_over_bound_max": float(work_ratio.max()),
                         "work_over_bound_max_run": np.asarray(rs.run_ids)[ok][worst] if worst is not None else None,
                         "work_over_bound_above_1": int((work_ratio > 1).sum())})
        for i, rid in enumerate(rs.run_ids):
            d = rs.X["duration_s"][i]
            per_run[str(Path(root) / rid)] = {
                "bound_flop": float(bound[i]), "recorded_flop": float(rs.flops[i]), "tensor_work_flop": float(work[i]),
                "recorded_tflops_per_s": float(rs.flops[i] / d / 1e12) if d > 0 else None}
    return {"datasets": datasets, "runs": per_run}


def _sci(x: float) -> str:
    return f"{x:.0e}".replace("e+", "e")


def _pct(x) -> str:
    return "–" if x is None else f"{x:.2f} %"


def render(res: dict) -> str:
    pc, top = res["per_class"], res["max_tensor_pct_below_floor"]
    out = ["# Below the busy floor: what the single-device check says about a GPU it does not judge", "",
           f"*Generated by `{res['command']}` on {res['date']} (results: `{res['out']}`); do not edit by hand.*", "",
           f"The single-device check (`trainsentry.detect.single_device`) judges a window only where its busiest GPU "
           f"ran kernels more than {res['floor_pct']:.0f} % of the time (NVML utilisation; until 2026-12-04 also only "
           "where no exchange was seen). "
           "A trainer throttled under that floor is never judged, and pays for it in GPU-hours "
           "(`docs/redteam-x1.md`). Below the floor the check now bounds the window's work instead of giving a P: "
           "the busiest GPU's mean tensor-core activity (GPM) times the window's span times the tensor cores' "
           f"dense FP8 peak at the 1980 MHz boost clock ({PEAK_FP8_AT_FEATURE_CLOCK / 1e12:.0f} TFLOP/s, "
           f"{FP8_OVER_BF16:g} × the BF16 one of {PEAK_AT_FEATURE_CLOCK / 1e12:.0f}), the most a tensor-busy "
           "second can hold (*Precision* below; `docs/flops.md`, *Tensor activity against the datasheet peak*). "
           f"Measured on every in-run window of {res['runs']} runs ({', '.join(f'`{d}`' for d in res['data'])}), "
           "8 s windows every 2 s, no fitting; the bound here is the busiest GPU's.", "",
           "In the live collector the line stands in each such window's evidence, where the lead's P would be, "
           "also in idle windows between a throttled trainer's bursts; the bound, summed over the node's GPUs, "
           "is stored beside the verdict (`floor_flop`) and summed per node over the last hour and per job "
           "(`below_floor` in `/v1/nodes/{node}/verdict` and `/v1/jobs/{job}`, each second counted once; "
           "`docs/collector.md`).", "",
           "## Windows below the floor that held work", "",
           "Gate closed (where the GPUs exchange, the verdict's detector judges the exchange), busiest GPU busy at "
           "most the floor, and kernels ran or the tensor cores worked:", "",
           "| class | runs | in-run windows | below the floor with work: windows (runs) | highest utilisation there | highest tensor activity there |",
           "|---|---|---|---|---|---|"]
    for cls, c in pc.items():
        out.append(f"| {cls} | {c['runs']} | {c['windows']} | {c['below_floor_windows']} ({c['below_floor_runs']}) | "
                   f"{_pct(c['max_util_pct'])} | {_pct(c['max_tensor_pct'])} |")
    out += ["", f"Over every class, no window below the floor showed more than {top:.2f} % tensor-core activity on its "
            f"busiest GPU: at that activity a GPU kept under the floor can compute at most "
            f"{res['max_rate_flops_per_s'] / 1e12:.0f} TFLOP/s in FP8 ({res['max_rate_flops_per_s'] / FP8_OVER_BF16 / 1e12:.0f} "
            "in BF16). At the FP8 rate "
            f"{_sci(res['scale_flop'])} FLOP of training takes {res['scale_gpu_years_at_max_rate']:,.0f} GPU-years, "
            f"against {res['scale_flop'] / PEAK_FP8_AT_FEATURE_CLOCK / YEAR_S:,.0f} at the FP8 peak. Utilisation and tensor activity "
            "are different counters (NVML's share of time a kernel ran; GPM's tensor-pipe activity), so the bound "
            "reads the tensor counter itself rather than assuming the utilisation floor caps it.", "",
            "## Precision", "",
            "Matmul burns recorded to see how GPM's tensor activity counts FP8 (`torch._scaled_mm` with e4m3 "
            "operands) and the tensor cores' 2:4-sparse mode (BF16, `torch.sparse.to_sparse_semi_structured`; "
            "FP8, the e4m3 operand compressed with `torch._cslt_compress`; both cuSPARSELt) "
            "(`configs/campaigns/h200x1-fp8.yaml`): their recorded FLOPs (2n³ per product: for the "
            "sparse product, the dense one it stands for) and the FLOPs executed (half of that for the sparse "
            "product) against their tensor activity at the BF16 peak, and the rate inside their steps:", "",
            "| run | precision | duty cycle | tensor activity | rate in a step (TFLOP/s) | recorded / BF16 bound | executed / BF16 bound |",
            "|---|---|---|---|---|---|---|"]
    for q in res["precision"]:
        rate = "–" if q["step_tflops_per_s"] is None else f"{q['step_tflops_per_s']:,.0f}"
        out.append(f"| `{q['run']}` | {q['precision']} (ran {q['precision_run']}) | {q['duty']:.0%} | "
                   f"{q['tensor_pct']:.1f} % | {rate} | {q['recorded_over_bf16_bound']:.2f} | "
                   f"{q['executed_over_bf16_bound']:.2f} |")
    low = [q for q in res["precision"] if q["duty"] < 0.1]
    fp8_low = [q["executed_over_bf16_bound"] / FP8_OVER_BF16 for q in low if q["precision"].startswith("fp8")]
    bf16_low = [q["executed_over_bf16_bound"] for q in low if q["precision"].startswith("bf16")]
    out += ["", "GPM counts an FP8 product's busy cycles as a BF16 one's while each does twice the FLOPs, so a bound "
            "at the BF16 peak does not hold for FP8 work, and the live line uses the FP8 peak (half of it bounds "
            "BF16 work). A sparse product keeps the tensor cores busy half as long as the dense one for the same "
            "dense-equivalent count: the FLOPs it executes stay at the bound of its precision, the dense FLOPs it "
            "stands for reach twice it. At full load the burns sit at the power limit, below their peak rates, so "
            "their ratios are lower there; held to low duty cycles they run at full clock, where the bound is "
            "tight rather than loose: what the low-duty burns executed came to "
            + (f"{min(bf16_low):.2f}–{max(bf16_low):.2f} of the BF16 bound (BF16 work) and " if bf16_low else "")
            + (f"{min(fp8_low):.2f}–{max(fp8_low):.2f} of the FP8 bound (FP8 work)" if fp8_low else "")
            + ". So the live bound holds for executed FLOPs to the counter's precision (a few per cent: tensor "
            "activity integrated over 10 Hz samples of a GPU at 1–2 % activity); a treaty that counts a 2:4-sparse "
            "product as the dense one it stands for must double it.", "",
            "## Does the bound hold?", "",
            "Every training run with a FLOP ledger, the adversarial ones included (all with BF16 matmuls): its "
            "tensor-busy GPU-seconds integrated over the run (the FLOP estimator's own integral, "
            "`flops.features.interval_features`) times the BF16 peak, against the FLOPs the ledger recorded (FlopCounter's count, which charges the masked half of "
            "causal attention as well) and against the work the tensor cores did (that count less the masked half, "
            "`flops.dataset.counted_attention_flops`; nothing is masked in the diffusion transformer's attention):", "",
            "| data | training runs | recorded / bound: median, max | tensor-core work / bound: median, max | runs above 1 | highest |",
            "|---|---|---|---|---|---|"]
    for d in res["ledgers"]:
        out.append(f"| `{d['data']}` | {d['runs']} | {d['recorded_over_bound_median']:.2f}, {d['recorded_over_bound_max']:.2f} | "
                   f"{d['work_over_bound_median']:.2f}, {d['work_over_bound_max']:.2f} | {d['work_over_bound_above_1']} | "
                   f"`{d['work_over_bound_max_run']}` |")
    out += ["", "Below 1 everywhere in the tensor-core work column is what a bound must give; the live line's FP8 "
            "bound is twice this one. The recorded count can exceed the BF16 bound on long-context runs, by the "
            "masked attention no tensor core computes.", "",
            "## Training runs with windows below the floor", "",
            f"Every training run with at least one such window; those with more than {MOSTLY:.0%} of their windows "
            "below the floor, the red team's evaders, also with the BF16 bound over the whole run (as above), their "
            "ledger and the rate they trained at.", "",
            "| run | windows | below the floor | median utilisation | BF16 bound (TFLOP) | recorded (TFLOP) | tensor-core work / bound | recorded rate (TFLOP/s) |",
            "|---|---|---|---|---|---|---|---|"]
    for t in res["trainers"]:
        head = (f"| `{t['run']}` | {t['windows']} | {t['below_floor_share']:.0%} | {t['median_util_pct']:.1f} % | ")
        if "bound_flop" not in t:
            out.append(head + " | | | |")
            continue
        b, rate = t["bound_flop"], t["recorded_tflops_per_s"]
        ratio = f"{t['tensor_work_flop'] / b:.2f}" if b > 0 else "–"
        rate_s = "–" if rate is None else f"{rate:.1f}"
        out.append(head + f"{b / 1e12:,.0f} | {t['recorded_flop'] / 1e12:,.0f} | {ratio} | {rate_s} |")
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", required=True, help="a dataset directory (repeat)")
    ap.add_argument("--cache", default=".cache/features", help="feature cache ('' for none)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", default="", help="generated markdown ('' to skip)")
    args = ap.parse_args(argv)
    from rich.progress import Progress
    with Progress() as bar:
        task = bar.add_task("loading runs", total=None)
        runs = load_dataset(args.data, Path(args.cache) if args.cache else None, progress=lambda *a: bar.advance(task))
    if not runs:
        print("no runs under " + ", ".join(args.data), file=sys.stderr)
        return 1
    command = "python scripts/below_floor.py " + " ".join(
        [f"--data {d}" for d in args.data] + [f"--out {args.out}"] + ([f"--docs {args.docs}"] if args.docs else []))
    res = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "out": args.out,
           "data": args.data, "runs": len(runs), "floor_pct": BUSY_UTIL_PCT,
           "peak_flops_per_s": PEAK_AT_FEATURE_CLOCK, **measure(runs)}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    if args.docs:
        Path(args.docs).write_text(render(res))
    for cls, c in res["per_class"].items():
        print(cls, c)
    print("highest tensor activity below the floor", f"{res['max_tensor_pct_below_floor']:.2f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
