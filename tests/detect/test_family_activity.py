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
    # docs/lab.md: tensor cores 14.6 % of busy time for the trainers, 17.4 % for the services
    assert tensor["train.convnet"] == pytest.approx(14.6, abs=0.05)
    assert tensor["infer.vision"] == pytest.approx(17.4, abs=0.05)
    runs = fa.table([str(VISION)], "run")
    manifests = sorted(p.parent.name for p in VISION.glob("*/manifest.json"))
    assert sorted(runs.index) == manifests
    assert (runs["mem_GiB.mean"] > 0).all()
