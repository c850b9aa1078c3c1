"""scripts/convnet_pairs.py on the recorded convolutional runs (data/h200x1-vision): the same network
trained reads about a third of the host bytes per joule its service reads, for every network recorded,
yet over all networks the two classes' ranges overlap (the numbers docs/lab.md quotes)."""

from pathlib import Path

import pytest

from detect.scripts import load_script

VISION = Path(__file__).resolve().parents[2] / "data" / "h200x1-vision"


@pytest.fixture(scope="module")
def runs():
    cp = load_script("convnet_pairs")
    t = cp.table([str(VISION)])
    return cp, t[t["class"].isin(["training", "inference"])]


def test_one_network_trained_reads_a_third_of_the_input_bytes_per_joule_it_reads_served(runs):
    cp, t = runs
    pairs = cp.pairs(t)
    assert len(pairs) == 9          # every network recorded both ways
    ratio = pairs["input_MiB_per_J train/serve"]
    assert ratio.between(0.25, 0.40).all(), ratio
    assert (pairs["mem_GiB train/serve"] > 1.1).all()
    # FP32 activity is a recipe, not a law: higher in training for the residual networks and VGG, not MobileNetV2
    fp32 = pairs["fp32_share train/serve"]
    mobile = fp32.index.str.startswith("MobileNetV2")
    assert mobile.sum() == 2
    assert (fp32[~mobile] > 1.5).all() and (fp32[mobile] < 1.0).all()


def test_without_the_network_the_classes_overlap(runs):
    cp, t = runs
    r = cp.ranges(t)
    assert r.loc["training", ("max", "input_MiB_per_J")] > r.loc["inference", ("min", "input_MiB_per_J")]
    assert r.loc["training", ("min", "mem_GiB")] < r.loc["inference", ("max", "mem_GiB")]
    assert r.loc["training", ("max", "input_MiB_per_J")] == pytest.approx(4.52, abs=0.01)
    assert r.loc["inference", ("min", "input_MiB_per_J")] == pytest.approx(2.14, abs=0.01)
