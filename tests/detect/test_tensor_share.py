"""scripts/tensor_share.py: the tensor cores' share of SM activity per run and family."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tensor_share.py"


def _row(run_id, cls, fam, share):
    return {"run_id": run_id, "class": cls, "family": fam, "busy_windows": 5, "share": share, "share_p05": share}


def test_separation_leaves_out_single_gpu_trainers_and_dense_forward_inference():
    ns = runpy.run_path(str(SCRIPT))
    rows = [_row("ddp", "training", "ddp", 0.4), _row("tp", "training", "tensor-parallel", 0.3),
            _row("one", "training", "single-gpu", 0.1),          # left out: single-GPU family
            _row("dec", "inference", "serve", 0.12), _row("gen", "inference", "generate", 0.2),
            _row("cp", "inference", "cp", 0.6),                  # left out: dense forward work
            _row("idle", "other", "idle", None)]
    s = ns["separation"](rows, {"single-gpu"})
    assert s["training_multi_gpu_min"] == {"run_id": "tp", "share": 0.3}
    assert s["inference_decode_max"] == {"run_id": "gen", "share": 0.2}
    fams = {(f["class"], f["family"]): f for f in ns["family_rows"](rows)}
    assert fams[("other", "idle")]["share"] is None
    assert fams[("training", "ddp")]["share"] == [0.4, 0.4, 0.4]
    assert "| inference | cp | 1 | 0.60 / 0.60 / 0.60 |" in ns["render"]({
        "command": "c", "feature_version": 4, "busy_util_pct": 5.0, "families": ns["family_rows"](rows),
        "separation": s})


def test_the_variant_without_the_tensor_share_reads_every_other_fused_input():
    from trainsentry.detect.learned import fused
    from trainsentry.detect.variants import VARIANTS
    plain, without = fused(), VARIANTS["fused-no-tensor-share"]()
    assert without.name == "fused-no-tensor-share"
    for col in ("act.tensor_per_sm.max", "act.tensor_per_sm.p05.min"):
        assert plain.uses(col) and not without.uses(col)
    for col in ("act.tensor_per_dram.max", "comm.nvlink.steady.min", "act.power_W.mean.max"):
        assert without.uses(col) == plain.uses(col)
