"""Prospective check of a committed detector: score, without refitting, every run recorded after the
detector was frozen. Unlike the grouped splits of `trainsentry eval` (which refit on each split's
training side), this reads the model exactly as it was committed and used by the live collector, on
runs nobody had seen when it was fitted: the closest the lab gets to "workloads we have not seen".

    python scripts/prospective.py --model-rev 2fe9f72 --data data/h200 --out results/prospective.json

``--model-rev`` takes the model file (models/fused.joblib and its JSON) from that git revision, so
the check stays reproducible after the model is refitted. Runs recorded before the model's
``fitted_at`` are left out (they may have been in its training data); a run whose configuration
appears among those earlier runs is reported apart from a run of a configuration that is new.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.detect.alert import AlertRule  # noqa: E402
from trainsentry.detect.base import load_detector  # noqa: E402
from trainsentry.detect.dataset import load_dataset  # noqa: E402
from trainsentry.detect.pipeline import default_cache_dir  # noqa: E402
from trainsentry.traces.io import read_manifest  # noqa: E402


def model_from_rev(rev: str, name: str, tmp: Path) -> tuple[Path, dict]:
    out = {}
    for suffix in (".joblib", ".json"):
        blob = subprocess.run(["git", "show", f"{rev}:models/{name}{suffix}"], cwd=REPO, capture_output=True,
                              check=True).stdout
        (tmp / f"{name}{suffix}").write_bytes(blob)
    out = json.loads((tmp / f"{name}.json").read_text())
    return tmp / f"{name}.joblib", out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-rev", required=True, help="git revision holding models/NAME.joblib")
    ap.add_argument("--name", default="fused")
    ap.add_argument("--data", default="data/h200")
    ap.add_argument("--out", default="results/prospective.json")
    args = ap.parse_args(argv)
    rule = AlertRule(0.75, 3, 5)
    with tempfile.TemporaryDirectory() as tmp:
        path, meta = model_from_rev(args.model_rev, args.name, Path(tmp))
        det = load_detector(path)
    fitted_at = float(meta["fitted_at"])
    runs = load_dataset(REPO / args.data, cache_dir=default_cache_dir())
    recorded = {r.run_id: read_manifest(Path(r.path))["record_start"] for r in runs}
    before = [r for r in runs if recorded[r.run_id] < fitted_at]
    after = [r for r in runs if recorded[r.run_id] >= fitted_at]
    if not after:
        raise SystemExit(f"no run of {args.data} was recorded after the model was fitted")
    seen_configs = {r.config for r in before}
    rows = []
    for r in sorted(after, key=lambda r: r.run_id):
        df = r.windows[det.feature_set]
        p = det.predict_proba(df) if len(df) else np.zeros(0)
        t_end = df["t_end"].to_numpy()
        a = rule.evaluate(t_end, p, r.start)
        capped = rule.capped(len(df)).evaluate(t_end, p, r.start)
        in_run = df["in_run"].to_numpy(dtype=bool)
        rows.append({"run_id": r.run_id, "class": r.cls, "family": r.family, "config": r.config,
                     "config_seen_before": r.config in seen_configs, "windows": int(len(df)),
                     "alerted": bool(a["alerted"]), "time_to_alert_s": a["time_to_alert_s"],
                     "alerted_capped_rule": bool(capped["alerted"]),
                     "p_in_run_median": float(np.median(p[in_run])) if in_run.any() else None,
                     "correct": bool(a["alerted"]) == (r.cls == "training")})

    def summary(sel: list[dict]) -> dict:
        def rate(xs):
            return round(float(np.mean(xs)), 4) if xs else None
        return {"runs": len(sel), "run_accuracy": rate([x["correct"] for x in sel]),
                "training_detection": rate([x["alerted"] for x in sel if x["class"] == "training"]),
                "inference_fpr": rate([x["alerted"] for x in sel if x["class"] == "inference"]),
                "other_fpr": rate([x["alerted"] for x in sel if x["class"] == "other"]),
                "median_time_to_alert_s": (float(np.median([x["time_to_alert_s"] for x in sel
                                                            if x["class"] == "training" and x["alerted"]]))
                                           if any(x["class"] == "training" and x["alerted"] for x in sel) else None)}

    result = {"what": "a committed detector, not refitted, on the runs recorded after it was fitted",
              "command": "python scripts/prospective.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "model": {"rev": args.model_rev, "name": args.name, "fitted_at": fitted_at,
                        "trained_by": meta.get("trained_by"), "runs": meta.get("runs")},
              "rule": rule.label(), "data": args.data, "runs_before": len(before),
              "all": summary(rows), "new_configs": summary([x for x in rows if not x["config_seen_before"]]),
              "seen_configs": summary([x for x in rows if x["config_seen_before"]]),
              "wrong": [x["run_id"] for x in rows if not x["correct"]], "per_run": rows}
    out = REPO / args.out
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("all", "new_configs", "seen_configs", "wrong")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
