"""scripts/run_steps.py: per-run step statistics from a manifest's ground truth."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_steps.py"


def test_step_statistics_of_a_training_and_an_inference_run():
    ns = runpy.run_path(str(SCRIPT))
    train = {"run_id": "t", "ground_truth": {
        "steps": 6, "flops": 6e12, "step_times_s": [5.0, 0.5, 0.5, 0.5, 0.5, 0.5],
        "loss_curve": [[i, v] for i, v in enumerate([3, 3, 3, 3, 3, 1, 1, 1, 1, 1])],
        "extra": {"0": {"val_loss": 0.9}}}}
    s = ns["step_stats"](train)
    assert s["median_step_s"] == 0.5 and s["tflops_at_median_step"] == 2.0     # 1e12 per step over 0.5 s
    assert s["loss_first5"] == 3.0 and s["loss_last5"] == 1.0 and s["val_loss"] == 0.9
    infer = {"run_id": "i", "ground_truth": {"steps": 2, "flops": 4e12, "step_times_s": [1.0, 3.0], "extra": {"0": {}}}}
    s = ns["step_stats"](infer)
    assert s["median_step_s"] == 2.0 and s["tflops_at_median_step"] == 1.0
    assert s["loss_first5"] is None and s["val_loss"] is None


def test_busy_share_is_the_busiest_gpus_mean_inside_the_run():
    import pandas as pd
    ns = runpy.run_path(str(SCRIPT))
    rows = [{"node": "a", "kind": "gpu", "device": "gpu0", "t": t, "gpu_util_pct": u} for t, u in ((0, 100), (1, 10), (2, 20), (3, 100))]
    rows += [{"node": "a", "kind": "gpu", "device": "gpu1", "t": t, "gpu_util_pct": 4.0} for t in range(4)]
    rows += [{"node": "b", "kind": "gpu", "device": "gpu1", "t": t, "gpu_util_pct": 12.0} for t in range(4)]
    rows += [{"node": "a", "kind": "net", "device": "eth0", "t": 1.5, "gpu_util_pct": None}]
    frame = pd.DataFrame(rows)
    # the samples before and after the run are left out; node b's gpu1 is not node a's
    assert ns["busy_pct"](frame, 1, 2) == 15.0
    assert ns["busy_pct"](frame, 5, 6) is None
