"""Fit the live collector's single-device check (trainsentry.detect.single_device) and save it.

    python scripts/single_device.py --data data/h200 --data data/h200x1 --save models/single-device.joblib

Fitted on every run of every --data root (the 2-GPU dataset and the one-GPU node's). Its rates on
configurations it never saw come from `trainsentry eval-transfer` (docs/one-gpu.md), which scores the
same trees as the variant `fused+single-device`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.detect.base import save_detector  # noqa: E402
from trainsentry.detect.dataset import load_dataset, stack  # noqa: E402
from trainsentry.detect.pipeline import default_cache_dir  # noqa: E402
from trainsentry.detect.single_device import SingleDeviceCheck  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", required=True, help="dataset root (repeatable)")
    ap.add_argument("--save", default="models/single-device.joblib")
    args = ap.parse_args(argv)
    roots = [REPO / root for root in args.data]
    runs = load_dataset(roots if len(roots) > 1 else roots[0], cache_dir=default_cache_dir())
    X, y, classes, ids = stack(runs, SingleDeviceCheck.feature_set)
    check = SingleDeviceCheck().fit(X, y, groups=ids, classes=classes)
    command = "python scripts/single_device.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    by_class = {c: sum(r.cls == c for r in runs) for c in sorted({r.cls for r in runs})}
    path = save_detector(check, REPO / args.save, command, {"data": args.data, "runs": len(runs),
                                                            "runs_by_class": by_class, "fitted_at": time.time()})
    print(f"saved {path.relative_to(REPO)}: {len(runs)} runs {by_class}, {len(X)} windows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
