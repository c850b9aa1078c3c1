"""How long each run waited before its first step, and how long that step took, from the manifests'
``first_step_t`` (recorded from 2026-12-04's third vision round on) and step times; with the GPU's mean
NVML utilisation during the first step (cuDNN trying and compiling kernels shows as a partly busy GPU).

    python scripts/first_steps.py --data data/h200x1-vision [--manifest results/device/X.json ...]

``--manifest`` adds runs whose trace was not kept (only their manifest, no samples: no utilisation).
Runs without ``first_step_t`` are left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainsentry.traces.io import read_manifest, read_samples  # noqa: E402


def row(m: dict, samples: pd.DataFrame | None) -> dict | None:
    g = m.get("ground_truth") or {}
    t0, steps = g.get("first_step_t"), g.get("step_times_s") or []
    if t0 is None or not steps:
        return None
    util = float("nan")
    if samples is not None:
        gpu = samples[(samples["device"] == "gpu0") & (samples["t"] >= t0) & (samples["t"] <= t0 + steps[0])]
        util = float(np.nanmean(gpu["gpu_util_pct"])) if len(gpu) else float("nan")
    return {"run": m["run_id"], "before_first_step_s": t0 - m["start"], "first_step_s": steps[0],
            "first_step_util_pct": util, "steps": g.get("steps"), "stepping_after_first_s": float(sum(steps[1:]))}


def table(roots: list[str], manifests: list[str] = ()) -> pd.DataFrame:
    rows = [row(read_manifest(d.parent), read_samples(d.parent).to_pandas())
            for root in roots for d in sorted(Path(root).glob("*/manifest.json"))]
    rows += [row(json.loads(Path(p).read_text()), None) for p in manifests]
    return pd.DataFrame([r for r in rows if r is not None]).set_index("run")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", default=[], help="dataset root (repeatable)")
    ap.add_argument("--manifest", action="append", default=[], help="a lone manifest (repeatable)")
    args = ap.parse_args(argv)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(table(args.data, args.manifest).round(2).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
