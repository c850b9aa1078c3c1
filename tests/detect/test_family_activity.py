"""scripts/family_activity.py on the recorded convolutional runs (data/h200x1-vision): the medians
docs/lab.md quotes for the two families, and one row per run."""

from pathlib import Path

import pytest

from detect.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
VISION = REPO / "data" / "h200x1-vision"


@pytest.fixture(scope="module")
def fa():
    return load_script("family_activity")


def test_convnet_trainers_and_image_services_show_the_activity_the_lab_notes_quote(fa):
    fam = fa.table([str(VISION)], "family")
    assert set(fam.index) == {"train.convnet", "infer.vision"}
    tensor = fam["gpm_tensor_util_pct.mean_busy"]
    # docs/lab.md (thirty-fifth session, rounds 1-3): tensor cores 12.9 % of busy time for the trainers,
    # 16.8 % for the services; DRAM 33.9 % and 33.1 %
    assert tensor["train.convnet"] == pytest.approx(12.85, abs=0.05)
    assert tensor["infer.vision"] == pytest.approx(16.77, abs=0.05)
    dram = fam["gpm_dram_bw_util_pct.mean_busy"]
    assert dram["train.convnet"] == pytest.approx(33.85, abs=0.05) and dram["infer.vision"] == pytest.approx(33.09, abs=0.05)
    runs = fa.table([str(VISION)], "run")
    manifests = sorted(p.parent.name for p in VISION.glob("*/manifest.json"))
    assert sorted(runs.index) == manifests
    assert (runs["mem_GiB.mean"] > 0).all()
