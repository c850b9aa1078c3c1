"""scripts/first_steps.py on the third vision round (data/h200x1-vision) and the one run not kept: the
first-step figures docs/lab.md and results/device/README.md quote."""

from pathlib import Path

import pytest

from detect.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
NOT_KEPT = REPO / "results" / "device" / "s35-call1-not-kept-train.convnet.mnv2_px160_b512-base-r0.manifest.json"


def test_a_second_process_on_a_warm_machine_skips_the_kernel_compilation():
    fs = load_script("first_steps")
    t = fs.table([str(REPO / "data" / "h200x1-vision")], [str(NOT_KEPT)])
    first = t["first_step_s"]
    # the ResNet-50 repeats, back to back on one machine: 4.98 s, then 0.09 s
    assert first["train.convnet.r50_b64-base-r1"] == pytest.approx(4.98, abs=0.01)
    assert first["train.convnet.r50_b64-base-r2"] == pytest.approx(0.09, abs=0.01)
    assert t.loc["train.convnet.r50_b64-base-r1", "before_first_step_s"] == pytest.approx(6.9, abs=0.1)
    # MobileNetV2's trainers: 19.8-30.2 s in the first step, the GPU partly busy with trial kernels
    mobile = t[t.index.str.startswith("train.convnet.mnv2")]
    assert mobile["first_step_s"].min() == pytest.approx(19.8, abs=0.05)
    assert mobile["first_step_s"].max() == pytest.approx(30.24, abs=0.01)
    assert mobile["first_step_util_pct"].dropna().between(20, 36).all()
    assert t.loc["train.convnet.mnv2_px160_b512-base-r0", "steps"] == 1
    # earlier rounds have no first_step_t and are left out
    assert not any(r.startswith("train.convnet.r101") for r in t.index)
