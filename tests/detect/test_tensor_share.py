"""scripts/tensor_share.py: the tensor cores' share of SM activity per run and family."""

from __future__ import annotations

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "tensor_share.py"


def _row(run_id, cls, fam, share, gpus=2.0, p05=None):
    return {"run_id": run_id, "class": cls, "family": fam, "busy_windows": 5, "share": share,
            "share_p05": share if p05 is None else p05, "gpus_busy": gpus}


def test_separation_splits_one_gpu_trainers_and_leaves_out_dense_forward_inference():
    ns = runpy.run_path(str(SCRIPT))
    rows = [_row("ddp", "training", "ddp", 0.4), _row("tp", "training", "tensor-parallel", 0.3),
            _row("one", "training", "single-gpu", 0.1, gpus=1.0),          # a one-GPU family
            _row("dec", "inference", "serve", 0.12), _row("gen", "inference", "generate", 0.2, p05=0.05),
            _row("cp", "inference", "cp", 0.6), _row("ig", "inference", "attribute", 0.7),  # dense forward
            _row("idle", "other", "idle", None, gpus=None),
            _row("under", "training", "single-gpu", None, gpus=None)]      # under the busy floor: no say
    single = ns["one_gpu_families"](rows)
    assert single == {"single-gpu"}                                        # idle has no run that says
    s = ns["separation"](rows, single)
    assert s["share"]["training_multi_gpu_min"] == {"run_id": "tp", "share": 0.3}
    assert s["share"]["training_single_gpu_min"] == {"run_id": "one", "share": 0.1}
    assert s["share"]["inference_decode_max"] == {"run_id": "gen", "share": 0.2}
    assert s["share_p05"]["inference_decode_max"] == {"run_id": "dec", "share": 0.12}   # gen's p05 is lower
    none = ns["separation"]([r for r in rows if r["run_id"] in ("one", "dec")], single)
    assert none["share"]["training_multi_gpu_min"] is None                 # a one-GPU dataset has no multi-GPU side
    fams = {(f["class"], f["family"]): f for f in ns["family_rows"](rows)}
    assert fams[("other", "idle")]["share"] is None
    assert fams[("training", "ddp")]["share"] == [0.4, 0.4, 0.4]
    page = ns["render"]({"command": "c", "feature_version": 4, "busy_util_pct": 5.0,
                         "families": ns["family_rows"](rows), "separation": none})
    assert "| inference | cp | 1 | 0.60 / 0.60 / 0.60 |" in page
    assert "lowest among one-GPU training runs: 0.10 (`one`)" in page and "multi-GPU training runs:" not in page


def test_the_variant_without_the_tensor_share_reads_every_other_fused_input():
    from trainsentry.detect.learned import fused
    from trainsentry.detect.variants import VARIANTS
    plain, without = fused(), VARIANTS["fused-no-tensor-share"]()
    assert without.name == "fused-no-tensor-share"
    for col in ("act.tensor_per_sm.max", "act.tensor_per_sm.p05.min"):
        assert plain.uses(col) and not without.uses(col)
    for col in ("act.tensor_per_dram.max", "comm.nvlink.steady.min", "act.power_W.mean.max"):
        assert without.uses(col) == plain.uses(col)


def test_the_variants_without_some_columns_can_be_saved_and_keep_fused_settings(tmp_path):
    """`--train-final` pickles the detector: a variant must be a class, not a fused with a lambda."""
    from trainsentry.detect.base import load_detector, save_detector
    from trainsentry.detect.learned import fused
    from trainsentry.detect.variants import VARIANTS
    for name in ("fused-no-tensor-share", "fused-shape", "fused-no-pcie-shape"):
        det = VARIANTS[name]()
        assert det.params == fused().params and det.fit_on == fused().fit_on
        back = load_detector(save_detector(det, tmp_path / f"{name}.joblib", "test"))
        assert back.name == name and back.uses("comm.nvlink.steady.min")
    assert not VARIANTS["fused-shape"]().uses("act.power_W.mean.max")


def test_the_variant_without_pcie_shape_keeps_the_pcie_volume_and_every_other_input():
    from trainsentry.detect.learned import fused
    from trainsentry.detect.variants import VARIANTS
    plain, without = fused(), VARIANTS["fused-no-pcie-shape"]()
    for col in ("comm.pcie.acf_peak.max", "comm.pcie.balance", "comm.pcie.sym.mean", "comm.pcie.Bps.max"):
        assert plain.uses(col) and not without.uses(col)
    for col in ("comm.pcie.log_Bps.mean", "comm.nvlink.acf_peak.max", "comm.nvlink.balance",
                "act.tensor_per_sm.max"):
        assert plain.uses(col) and without.uses(col)


def test_the_single_device_variant_with_the_tensor_share_adds_only_the_share():
    from trainsentry.detect.single_device import BusiestGpuActivity
    from trainsentry.detect.variants import VARIANTS
    det = VARIANTS["fused+single-device-tensor"]()
    plain = BusiestGpuActivity()
    assert det.name == "fused+single-device-tensor"
    for col in ("act.tensor_per_sm.max", "act.tensor_per_sm.p05.max"):
        assert det.single.uses(col) and not plain.uses(col)
    for col in ("act.tensor_per_sm.mean", "act.tensor_per_sm.min"):      # the busiest GPU's only
        assert not det.single.uses(col)
    for col in ("act.util_pct.mean.max", "act.power_W.mean.max", "act.sm_active.mean.max"):
        assert det.single.uses(col) == plain.uses(col)
