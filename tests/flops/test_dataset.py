"""Loading the calibration set: only training runs with ground truth; bad runs listed, never lost silently."""

import copy
import json
import shutil

import numpy as np
import pytest

from trainsentry.flops.dataset import counted_attention_flops, load_runs
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


# train.ddp.seq16k-base-r1 of data/h200 as recorded: 76 % of its FlopCounterMode count is causal attention
SEQ16K = {"ground_truth": {"flops": 4.346664958348493e16, "tokens": 11665408, "extra": {"0": {
    "analytic_flops_per_token": 3323461632,
    "model": {"causal": True, "d_model": 1024, "n_heads": 16, "n_layers": 12, "seq_len": 16384}}}}}


def test_counted_attention_is_read_from_the_manifest_and_checked():
    att = counted_attention_flops(SEQ16K)
    assert att == 14 * 12 * 16384 * 1024 * 11665408
    assert att / SEQ16K["ground_truth"]["flops"] == pytest.approx(0.756, abs=1e-3)
    m = copy.deepcopy(SEQ16K)
    m["ground_truth"]["extra"]["0"]["model"]["causal"] = False
    assert counted_attention_flops(m) == 0.0  # an encoder: nothing to discount
    m = copy.deepcopy(SEQ16K)
    m["ground_truth"]["flops"] *= 1.05  # a count this reading does not explain
    with pytest.raises(ValueError, match="analytic"):
        counted_attention_flops(m)
    with pytest.raises(ValueError, match="model shape"):
        counted_attention_flops({"ground_truth": {"flops": 1e15}})


# train.lora.single-r8-w1536-071a9d-r0 of data/h200x1 as recorded: LoRA on q, v in the last 4 of 20 blocks
TOP4 = {"ground_truth": {"flops": 2.069682462916608e16, "tokens": 8437760, "extra": {"0": {
    "analytic_flops_per_token": 2436104192, "lora_layers": 4,
    "model": {"causal": True, "d_model": 2048, "n_heads": 16, "n_layers": 20, "seq_len": 1024}}}}}


def test_counted_attention_of_lora_in_the_top_blocks_has_the_backward_there_only():
    """The forward's attention runs in all 20 blocks, the backward and its recompute in the 4 adapted
    ones: the recorded count is the analytic one plus 2·s·d per adapted block (the check passes), and
    the attention inside it is (4·20 + 10·4)·s·d per token, not 14·20."""
    sd = 1024 * 2048
    assert counted_attention_flops(TOP4) == (4 * 20 + 10 * 4) * sd * 8437760
    m = copy.deepcopy(TOP4)
    del m["ground_truth"]["extra"]["0"]["lora_layers"]   # read as every block: the count no longer adds up
    with pytest.raises(ValueError, match="analytic"):
        counted_attention_flops(m)


def test_causal_half_truth_leaves_out_runs_it_cannot_read(synth_root, tmp_path):
    root = tmp_path / "half"
    shutil.copytree(synth_root, root)
    first = iter_runs(root)[0]
    m = json.loads((first / "manifest.json").read_text())
    del m["ground_truth"]["tokens"]
    (first / "manifest.json").write_text(json.dumps(m))
    runs = load_runs(root)
    half = runs.causal_half()
    assert len(half) == len(runs) - 1 and first.name not in half.run_ids
    assert any(s["run"] == first.name and "causal attention FLOPs unknown" in s["reason"] for s in half.skipped)
    i = runs.run_ids.index(half.run_ids[0])
    assert half.flops[0] == pytest.approx(runs.flops[i] - 0.5 * runs.attention_flops[i])
    assert np.all(half.flops < runs.flops[[runs.run_ids.index(r) for r in half.run_ids]])
    recorded = json.loads((root / runs.run_ids[i] / "manifest.json").read_text())["ground_truth"]["flops"]
    assert runs.flops[i] == recorded  # the recorded truth is untouched
