"""The same convolutional network trained and served on one GPU, side by side: what the counters can
see of the difference, in quantities with a physical reason, and whether it survives not knowing the
network.

    python scripts/convnet_pairs.py --data data/h200x1-vision

For each recorded run of ``train.convnet`` and ``infer.vision``, from the raw 10 Hz samples of its GPU
while it stepped steadily (from the end of its first step, cuDNN choosing and compiling its kernels,
to the end of its last: ``first_step_t`` and the step times where the manifest has them, else the span
of its steps after the first ending at its last busy sample; samples with utilisation over 5 %; a run
with fewer than ten such samples is left out):

* ``input_MiB_per_J``: bytes the GPU read from the host over PCIe (GPM ``pcie_rx``) per joule above the
  GPU's idle power (the median before the run started). Training does a forward and a backward pass,
  about three forward passes' work, per image that crosses PCIe; serving does one. For one network the
  ratio should be near a third.
* ``mem_GiB``: memory held. Training keeps every layer's activations for the backward pass, serving
  frees them layer by layer.
* ``fp32_share``: FP32-pipe activity per unit of SM activity (%). Training under autocast keeps FP32
  weights, gradients and optimizer state; a service cast to bf16 has none. A recipe, not a law.
* ``tensor_share``: tensor-core activity per unit of SM activity (%).

Runs pair by network (``arch``, depth, block, image side); the table gives each pair's train/serve
ratio and, last, the range of each quantity over all trainers and all services, which is what an
inspector who does not know the network has to go on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainsentry.traces.io import read_manifest, read_samples  # noqa: E402
from trainsentry.workloads.infer_vision import describe_net  # noqa: E402

QUANTITIES = ("input_MiB_per_J", "mem_GiB", "fp32_share", "tensor_share")
BUSY_PCT = 5.0


def network(config: dict) -> str:
    """A network's name (the training table's, ``workloads.infer_vision.describe_net``) with its image
    side: the pairing key."""
    return f"{describe_net(config)} @{config['image_px']}px"


def run_row(run_dir: Path) -> dict | None:
    """One run's steady-state quantities, or None where it has no steady busy samples."""
    m = read_manifest(run_dir)
    gt = m.get("ground_truth") or {}
    steps = gt.get("step_times_s") or []
    df = read_samples(run_dir).to_pandas()
    gpu = df[df["device"] == "gpu0"]
    idle = float(np.nanmedian(gpu.loc[gpu["t"] < m["start"], "power_mw"])) / 1e3
    if gt.get("first_step_t") is not None:       # recorded from round 3 on
        lo = float(gt["first_step_t"]) + float(steps[0])
        hi = float(gt["first_step_t"]) + float(sum(steps))
    else:   # the steps ended at the last busy sample (a trainer's held-out loss after them is two batches)
        busy = gpu[(gpu["t"] >= m["start"]) & (gpu["t"] <= m["end"]) & (gpu["gpu_util_pct"] > BUSY_PCT)]
        if busy.empty:
            return None
        hi = float(busy["t"].max())
        lo = hi - float(sum(steps[1:]))
    s = gpu[(gpu["t"] >= lo) & (gpu["t"] <= hi) & (gpu["gpu_util_pct"] > BUSY_PCT)]
    if len(s) < 10:
        return None
    med = lambda c: float(np.nanmedian(s[c]))  # noqa: E731
    sm = max(med("gpm_sm_util_pct"), 1e-9)
    above = med("power_mw") / 1e3 - idle
    return {"run": m["run_id"], "class": m["labels"]["class"], "network": network(m["labels"]["config"]),
            "batch": m["labels"]["config"]["batch"], "samples": len(s),
            "input_MiB_per_J": med("gpm_pcie_rx_mibps") / above if above > 0 else float("nan"),
            "mem_GiB": med("mem_used_bytes") / 2 ** 30,
            "fp32_share": 100 * med("gpm_fp32_util_pct") / sm,
            "tensor_share": 100 * med("gpm_tensor_util_pct") / sm}


def table(roots: list[str]) -> pd.DataFrame:
    rows = [r for root in roots for d in sorted(Path(root).glob("*/manifest.json"))
            if (r := run_row(d.parent)) is not None]
    return pd.DataFrame(rows).set_index("run")


def pairs(runs: pd.DataFrame) -> pd.DataFrame:
    """Per network with both a trainer and a service: the medians of each class and their ratio."""
    med = runs.groupby(["network", "class"])[list(QUANTITIES)].median()
    out = []
    for net in sorted({n for n, _ in med.index}):
        if (net, "training") in med.index and (net, "inference") in med.index:
            t, i = med.loc[(net, "training")], med.loc[(net, "inference")]
            out.append({"network": net, **{f"{q} train/serve": t[q] / i[q] for q in QUANTITIES}})
    return pd.DataFrame(out).set_index("network")


def ranges(runs: pd.DataFrame) -> pd.DataFrame:
    """Each quantity's lowest and highest value over each class's runs, networks pooled."""
    g = runs.groupby("class")[list(QUANTITIES)]
    return pd.concat({"min": g.min(), "max": g.max()}, axis=1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", required=True, help="dataset root (repeatable)")
    args = ap.parse_args(argv)
    runs = table(args.data)
    runs = runs[runs["class"].isin(["training", "inference"])]
    with pd.option_context("display.width", 250, "display.max_rows", 500):
        print(runs.sort_values(["network", "class"]).round(2).to_string(), "\n")
        print(pairs(runs).round(2).to_string(), "\n")
        print(ranges(runs).round(2).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
