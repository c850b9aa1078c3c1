"""The exchange gate on the one-GPU node, ZeRO-Offload training and the benign work that loads PCIe in
detail: per family, how many runs pass the gate in at least half their in-run windows; per run of the
chosen families, the share of in-run windows passing the gate and the medians of the PCIe channel's
exchange factors and of the features they read (rules.exchange_factors at the gate's thresholds), with
the workload's own ground truth of bytes moved over PCIe beside them (and over the time its steps took,
``*_per_step_s``: the rate while it worked; set-up before the first step is left out); and what
offloading the optimizer costs, by the red team's measure (``redteam.cost``: tokens per GPU-hour over
the run's wall time, the GPU-hour multiplier, the loss penalty at equal tokens) against the same
configuration (model, batch, bf16 weights, AdamW) trained on the GPU alone (the longest `train.single`
run of that configuration, ``redteam.cost.offload_costs``).

    python scripts/offload_gate.py --data data/h200x1 --family offload --family zero-offload \
        --family kvswap --family stream --out results/offload-gate.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from trainsentry.detect.dataset import load_dataset
from trainsentry.detect.pipeline import default_cache_dir
from trainsentry.detect.rules import (GATE_BYTES_PER_J_MAX, GATE_FLOOR_FACTOR, GATE_SIMULT_MIN, GATE_SYM_MIN,
                                      exchange_factors, gate_pass_share)
from trainsentry.features.comm import ACTIVE_FLOOR_BPS
from trainsentry.redteam.cost import median_or_none as _median
from trainsentry.redteam.cost import offload_costs
from trainsentry.traces.io import read_manifest

FEATURES = ("comm.pcie.Bps.min", "comm.pcie.sym.min", "comm.pcie.duty.min", "comm.pcie.log_bytes_per_J.mean")


def _truth(manifest: dict) -> dict:
    """The ground truth of PCIe bytes, with rates over the time the run's steps took."""
    g = manifest["ground_truth"]
    extra = g["extra"]["0"]
    truth = {k: extra[k] for k in ("offload_bytes_d2h", "offload_bytes_h2d", "bytes_to_device", "bytes_to_host",
                                   "warmup_bytes_to_host", "save", "host_threads", "offload_overlap") if k in extra}
    steps_s = float(sum(g.get("step_times_s") or []))
    truth.update(run_s=round(manifest["end"] - manifest["start"], 2), steps_s=round(steps_s, 2))
    for k in ("offload_bytes_d2h", "offload_bytes_h2d", "bytes_to_device", "bytes_to_host"):
        if k in extra and steps_s > 0:
            truth[f"{k}_per_step_s"] = round(extra[k] / steps_s, 1)
    return truth


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--family", action="append", help="families to list run by run (default: every run)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cache", default=str(default_cache_dir()))
    a = ap.parse_args(argv)
    runs = load_dataset(a.data, Path(a.cache))
    out = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
           "gate": {"pcie_volume_Bps": GATE_FLOOR_FACTOR * ACTIVE_FLOOR_BPS["pcie"], "symmetry_min": GATE_SYM_MIN,
                    "simultaneity_min": GATE_SIMULT_MIN, "bytes_per_J_max": GATE_BYTES_PER_J_MAX},
           "by_family": {}, "runs": {}}
    for r in sorted(runs, key=lambda r: r.run_id):
        df = r.windows["trainsentry"]
        df = df[df["in_run"]]
        share = round(gate_pass_share(df), 3)
        fam = out["by_family"].setdefault(f"{r.cls} {r.family}", {"runs": 0, "passing_runs": 0, "max_pass_share": 0.0})
        fam["runs"] += 1
        fam["passing_runs"] += share >= 0.5
        fam["max_pass_share"] = max(fam["max_pass_share"], share)
        if a.family and r.family not in a.family:
            continue
        f = exchange_factors(df, "pcie", GATE_FLOOR_FACTOR * ACTIVE_FLOOR_BPS["pcie"], GATE_SYM_MIN, GATE_SIMULT_MIN,
                             GATE_BYTES_PER_J_MAX)
        out["runs"][r.run_id] = {
            "class": r.cls, "family": r.family, "windows": int(len(df)),
            "gate_pass_share": share,
            "pcie_factors_median": {k: _median(v) for k, v in f.items()},
            "features_median": {k: _median(df[k]) if k in df else None for k in FEATURES},
            "ground_truth": _truth(read_manifest(Path(a.data) / r.run_id))}
    out["cost"] = offload_costs([Path(a.data)])
    Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    for fam, v in sorted(out["by_family"].items()):
        print(fam, v)
    for w, c in out["cost"].items():
        print(w, c["tokens_per_gpu_hour"], c["baseline_tokens_per_gpu_hour"], c["slowdown"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
