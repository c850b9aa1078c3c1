"""How well the live state rule tells inference from other, on the recorded dataset.

The detectors answer training or not; the collector's state for a window that is not training is
``collector.live.classify``'s rule. This applies it to every in-run window of every non-training
run (as a window the detector did not call training: P = 0), with and without the GPM activity it
reads first, and counts the windows whose state is the run's class:

* ``tensor_share``: the rule as the collector runs it on the H200 dataset (GPM present);
* ``exchange_only``: the same rule on the same windows with the GPM keys taken out, which is the
  fallback for GPUs without GPM (and was the only rule before 2026-12-01): a large symmetric
  exchange that is not training is "other", anything else "inference".

The idle family is left out: an idle node is ``idle`` by segmentation before any of this applies
(`trainsentry eval`'s segmentation table). The thresholds were chosen looking at these windows, so
this is how the rule fits the dataset, not a held-out score.

    python scripts/state_rule.py --data data/h200 --out results/state-rule.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.collector.live import SM_ACTIVE_MIN, SM_KEY, TENSOR_KEY, classify  # noqa: E402
from trainsentry.detect.dataset import load_dataset  # noqa: E402
from trainsentry.detect.pipeline import default_cache_dir  # noqa: E402

RULES = ("tensor_share", "exchange_only")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="data/h200")
    ap.add_argument("--out", default="results/state-rule.json")
    args = ap.parse_args(argv)
    runs = load_dataset(REPO / args.data, default_cache_dir())
    right = {rule: defaultdict(int) for rule in RULES}
    windows, cls_of, said = defaultdict(int), {}, {rule: defaultdict(lambda: defaultdict(int)) for rule in RULES}
    shares = defaultdict(list)   # tensor-core share of SM activity, windows whose SMs work (>= SM_ACTIVE_MIN)
    faint = defaultdict(list)    # tensor activity (%) of the windows below SM_ACTIVE_MIN
    for r in runs:
        if r.cls == "training" or r.family == "idle":
            continue
        df = r.windows["trainsentry"]
        for row in df[df["in_run"]].to_dict("records"):
            bare = {k: v for k, v in row.items() if k not in (TENSOR_KEY, SM_KEY)}
            for rule, x in (("tensor_share", row), ("exchange_only", bare)):
                state, _ = classify(True, 0.0, x, 0.5)
                right[rule][r.family] += state == r.cls
                said[rule][r.family][state] += 1
            windows[r.family] += 1
            cls_of[r.family] = r.cls
            tensor, sm = row.get(TENSOR_KEY), row.get(SM_KEY)
            if tensor is not None and sm is not None and sm >= SM_ACTIVE_MIN:
                shares[r.family].append(tensor / sm)
            elif tensor is not None and sm is not None:
                faint[r.family].append(tensor)

    def share(rule: str, fams: list[str]) -> float:
        n = sum(windows[f] for f in fams)
        return round(sum(right[rule][f] for f in fams) / n, 6) if n else None

    by_cls = {c: sorted(f for f in windows if cls_of[f] == c) for c in ("inference", "other")}
    doc = {"what": "share of non-training in-run windows whose live state is the run's class (P(training) = 0)",
           "command": "python scripts/state_rule.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "data": args.data,
           "note": "thresholds chosen on these windows: a fit, not a held-out score; idle family left out "
                   "(segmentation makes it idle)",
           "rules": {rule: {c: share(rule, fams) for c, fams in by_cls.items()} for rule in RULES},
           "families": {f: {"class": cls_of[f], "windows": windows[f],
                            **{rule: round(right[rule][f] / windows[f], 4) for rule in RULES},
                            "tensor_share_range": [round(min(shares[f]), 4), round(max(shares[f]), 4)]
                            if shares[f] else None,
                            "tensor_pct_range_sm_below_min": [round(min(faint[f]), 4), round(max(faint[f]), 4)]
                            if faint[f] else None, "windows_sm_below_min": len(faint[f]),
                            **{f"{rule}_said": dict(said[rule][f]) for rule in RULES}}
                        for f in sorted(windows)}}
    (REPO / args.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["rules"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
