"""The figures docs/lab.md and results/device/README.md quote for data/h200x1-decode (the thirty-sixth
session), from committed files only:

    python scripts/decode_rounds.py --data data/h200x1-decode \
        --eval results/per-dataset-decode3/detector.json --detector fused+single-device-noconv

the runs (start, steps, the trainers' first and last loss, the servers' requests and longest queue, from
the manifests), and, from a ``trainsentry eval`` results file, each inference family's share of a
dataset's false alerts (a run's test appearances times its wrong share, summed per family) and the
runs a detector judged wrong most often.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainsentry.traces.io import read_manifest  # noqa: E402

SERVE_KEYS = ("requests_arrived", "requests_done", "requests_unfinished", "max_queue")


def run_row(m: dict) -> dict:
    g = m.get("ground_truth") or {}
    loss = [x[1] if isinstance(x, (list, tuple)) else x for x in (g.get("loss_curve") or [])]
    extra = (g.get("extra") or {}).get("0") or {}
    return {"run": m["run_id"], "class": m["labels"]["class"],
            "start_utc": datetime.fromtimestamp(m["start"], timezone.utc).strftime("%H:%M"),
            "steps": g.get("steps"), "loss_first": loss[0] if loss else None, "loss_last": loss[-1] if loss else None,
            **{k: extra.get(k) for k in SERVE_KEYS}}


def runs(root: str) -> pd.DataFrame:
    return pd.DataFrame([run_row(read_manifest(d.parent)) for d in sorted(Path(root).glob("*/manifest.json"))]
                        ).set_index("run")


def wrong_runs(doc: dict, detector: str) -> pd.DataFrame:
    """Every run of the results file with its class, family, test appearances, wrong share and the
    instances that makes (appearances × share)."""
    rows = [{"run": k, **{f: v[f] for f in ("class", "family", "test_instances", "wrong_frac")}}
            for k, v in doc["detectors"][detector]["per_run"].items()]
    df = pd.DataFrame(rows).set_index("run")
    df["wrong_instances"] = df["test_instances"] * df["wrong_frac"]
    return df


def false_alert_shares(doc: dict, detector: str, dataset: str) -> pd.Series:
    """Each inference family's share of ``dataset``'s false alerts (runs whose id starts with it)."""
    df = wrong_runs(doc, detector)
    inf = df[(df["class"] == "inference") & df.index.str.startswith(dataset.rstrip("/") + "/")]
    per = inf.groupby("family")["wrong_instances"].sum()
    return (per[per > 0] / per.sum()).sort_values(ascending=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", default=[], help="dataset root (repeatable)")
    ap.add_argument("--eval", action="append", default=[], help="a trainsentry eval results file (repeatable)")
    ap.add_argument("--detector", action="append", default=[], help="detector of the results files (repeatable)")
    args = ap.parse_args(argv)
    with pd.option_context("display.width", 220, "display.max_rows", 500):
        for root in args.data:
            print(f"== {root}\n{runs(root).round(2).to_string()}\n")
        for path in args.eval:
            doc = json.loads(Path(path).read_text())
            for det in args.detector:
                df = wrong_runs(doc, det)
                print(f"== {path} {det}: runs wrong in more than 2 % of their test appearances")
                print(df[df["wrong_frac"] > 0.02].sort_values("wrong_frac", ascending=False).round(3).to_string())
                for ds in sorted({k.split("/")[0] + "/" + k.split("/")[1] for k in df.index if k.startswith("data/")}):
                    shares = false_alert_shares(doc, det, ds)
                    if len(shares):
                        print(f"  {ds} false alerts by family: "
                              + ", ".join(f"{f} {100 * v:.0f} %" for f, v in shares.items()))
                print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
