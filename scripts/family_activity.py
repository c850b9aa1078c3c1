"""Median busiest-GPU activity features per family or per run of lab datasets, as the single-device lead
reads them (``features.activity.duty_free`` applied; windows whose busiest GPU is busy over 5 %).

    python scripts/family_activity.py --data data/h200x1-vision --data data/h200x1 --by family
    python scripts/family_activity.py --data data/h200x1-vision --by run

The numbers docs/lab.md quotes for the convolutional families come from these two commands.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import pandas as pd  # noqa: E402

from trainsentry.detect.dataset import load_dataset, stack  # noqa: E402
from trainsentry.detect.pipeline import default_cache_dir  # noqa: E402
from trainsentry.detect.single_device import BUSY_UTIL_PCT, UTIL_COL  # noqa: E402
from trainsentry.features.activity import duty_free  # noqa: E402

COLUMNS = ["act.gpm_tensor_util_pct.mean_busy.max", "act.gpm_dram_bw_util_pct.mean_busy.max",
           "act.gpm_sm_util_pct.mean_busy.max", "act.gpm_dram_bw_util_pct.std.max",
           "act.gpm_tensor_util_pct.std.max", "act.power_W.std.max", "act.mem_GiB.mean.max", "act.util_pct.p05.max"]


def table(roots: list[str], by: str) -> pd.DataFrame:
    runs = load_dataset(roots, default_cache_dir())
    X, _, _, ids = stack(runs, "trainsentry")
    X = duty_free(X)
    names = [i.split("/")[-1] for i in ids]
    X["key"] = [".".join(n.split(".")[:2]) for n in names] if by == "family" else names
    busy = X[UTIL_COL].fillna(0) > BUSY_UTIL_PCT
    out = X[busy].groupby("key")[COLUMNS].median()
    out.columns = [c.removeprefix("act.").removesuffix(".max") for c in COLUMNS]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", required=True, help="dataset root (repeatable)")
    ap.add_argument("--by", choices=("family", "run"), default="family")
    args = ap.parse_args(argv)
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print(table(args.data, args.by).round(3).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
