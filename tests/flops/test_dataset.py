"""Loading the calibration set: only training runs with ground truth; bad runs listed, never lost silently."""

import json
import shutil

import pytest

from trainsentry.flops.dataset import load_runs
from trainsentry.traces.io import iter_runs


def test_only_training_runs_with_truth_enter_and_bad_ones_are_listed(synth_root, tmp_path):
    root = tmp_path / "mixed"
    shutil.copytree(synth_root, root)
    runs = iter_runs(root)
    m = json.loads((runs[0] / "manifest.json").read_text())
    m["labels"]["class"] = "inference"
    (runs[0] / "manifest.json").write_text(json.dumps(m))
    m = json.loads((runs[1] / "manifest.json").read_text())
    m["ground_truth"] = {}
    (runs[1] / "manifest.json").write_text(json.dumps(m))
    (runs[2] / "samples.parquet").write_bytes(b"not parquet")
    m = json.loads((runs[4] / "manifest.json").read_text())
    m["labels"]["workload"] = "adv.split.gap6"  # red-team runs face the frozen estimator, not the protocol
    (runs[4] / "manifest.json").write_text(json.dumps(m))
    m = json.loads((runs[3] / "manifest.json").read_text())
    m["end"] = m["start"] + 500.0  # the recording covers a small part of this interval
    (runs[3] / "manifest.json").write_text(json.dumps(m))
    got = load_runs(root)
    assert len(got) == len(runs) - 5 and runs[4].name not in got.run_ids
    reasons = " | ".join(s["reason"] for s in got.skipped)
    assert "ground_truth.flops" in reasons and "unreadable" in reasons and "cover" in reasons
    assert runs[0].name not in got.run_ids
    assert load_runs(root, classes=("inference",)).run_ids == [runs[0].name]  # the relabelled run
    with pytest.raises(ValueError):
        load_runs(root, interval="bogus")


def test_empty_root_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no training runs"):
        load_runs(tmp_path)
