"""``trainsentry eval`` end to end on a tiny dataset built through traces/io."""

import json
from pathlib import Path

import pytest

from typer.testing import CliRunner

from trainsentry.cli import app
from trainsentry.detect.dataset import load_dataset
from trainsentry.detect.evaluate import config_splits

REQUIRED = {"run_accuracy", "inference_fpr", "median_time_to_alert_s", "window_auc", "lofo_min_family_detection"}


def test_splits_never_share_a_configuration(tiny_dataset, feature_cache):
    runs = load_dataset(tiny_dataset, feature_cache)
    for train, test in config_splits(runs, 20, seed=1):
        assert train and test and not (train & test)
        assert {r.cls for r in runs if r.config in test} == {"training", "inference", "other"}


def test_eval_end_to_end(tiny_dataset, feature_cache, tmp_path):
    out, docs = tmp_path / "results", tmp_path / "docs" / "detector.md"
    res = CliRunner().invoke(app, ["eval", "--data", str(tiny_dataset), "--splits", "3", "--rt-trees", "10",
                                   "--out", str(out), "--docs", str(docs), "--cache", str(feature_cache)])
    assert res.exit_code == 0, res.output
    doc = json.loads((out / "detector.json").read_text())
    assert set(doc["detectors"]) == {"comm-rules", "comm-ml", "fused", "rt-baseline"}
    for name, r in doc["detectors"].items():
        assert REQUIRED <= set(r), name
        assert len(r["splits"]) == 3
    fused = doc["detectors"]["fused"]
    assert fused["run_accuracy"] == 1.0 and fused["inference_fpr"] == 0.0
    assert 0 < fused["median_time_to_alert_s"] <= 20.0
    assert fused["window_auc"] == 1.0
    assert fused["per_dataset"] == []        # one root: the headline is that dataset's
    assert fused["headline_rule"].startswith("3 of 5 @ 0.75 (faithful")
    assert fused["run_level_rules"]["faithful"]["run_accuracy"] == fused["run_accuracy"]
    # rt-baseline's 3-of-5 rule over 30 s windows every 15 s needs > 60 s: no 41-53 s trace is long
    # enough, so the faithful rule scores no run, and the headline is the adapted rule, labelled so
    rt = doc["detectors"]["rt-baseline"]
    faithful, adapted = rt["run_level_rules"]["faithful"], rt["run_level_rules"]["adapted"]
    assert faithful["runs_long_enough_pooled"] == 0 and faithful["run_accuracy"] is None
    assert rt["headline_rule"].startswith("adapted") and "1 of 1 @ 0.75" in adapted["rules_applied"]
    assert set(adapted["windows_per_test_run"]) <= {1, 2}
    assert rt["run_accuracy"] == adapted["run_accuracy"] is not None
    # its windows do separate DDP from the rest (600 W against ~80–130 W)
    assert rt["window_auc"] >= 0.5 and rt["window_accuracy"] is not None
    assert rt["alternative_alert_rules"]["1of1@0.5"]["training_detection_pooled"] >= 0.5
    for f in ("detector_roc.png", "detector_time_to_alert.png", "detector_families.png"):
        assert (out / "figures" / f).stat().st_size > 1000
    text = docs.read_text()
    assert "| `fused` | 100.0 %" in text and "arXiv 2606.19262" in text
    assert "| `rt-baseline` (adapted rule †) |" in text and "no run long enough" in text
    assert f"from `{out / 'detector.json'}`" in text
    # per run: every test run's share of wrong verdicts; the gate's evidence over every run
    assert fused["per_run"] and set(fused["per_run"]) <= {r.name for r in tiny_dataset.iterdir() if r.is_dir()}
    assert sum(v["test_instances"] for v in fused["per_run"].values()) == sum(s["n_test_runs"] for s in fused["splits"])
    assert all(v["wrong_frac"] == 0.0 for v in fused["per_run"].values())
    gate = doc["exchange_gate"]
    keys = ("exchange", "not_decode", "not_decode_comm", "regular_exchange")
    assert all(min(v[k] for k in keys) > 0.5 for v in gate.values() if v["class"] == "training")
    assert all(max(v[k] for k in keys) == 0.0 for v in gate.values() if v["class"] != "training")
    assert "Exchange gate over every run's in-run windows" in text and "Runs judged wrongly" in text
    # fused or rt-baseline: at least what fused alone catches, on the same runs
    both = doc["combinations"]["fused or rt-baseline"]
    assert both["training_detection"] >= fused["training_detection"] and both["over_splits"]["run_accuracy"]["n"] == 3
    assert "| `fused or rt-baseline` |" in text


def test_either_alert_is_the_or_of_two_detectors_verdicts_at_the_earlier_time():
    import numpy as np

    from trainsentry.detect.evaluate import RunOutcome, either_alert

    def o(rid, cls, alerted, tta):
        return RunOutcome(rid, cls, "f" + cls, rid, alerted, tta, np.zeros(0))
    a = [[o("t1", "training", True, 9.0), o("t2", "training", False, None), o("i1", "inference", False, None)],
         [o("t1", "training", False, None), o("i2", "inference", True, 5.0)]]
    b = [[o("t1", "training", True, 27.0), o("t2", "training", True, 30.0), o("i1", "inference", False, None)],
         [o("t1", "training", True, 28.0), o("i2", "inference", False, None)]]
    r = either_alert(a, b)
    assert r["over_splits"]["training_detection"]["mean"] == 1.0 and r["training_detection"] == 1.0
    assert r["inference_fpr"] == 0.5                           # split 1: 0 of 1; split 2: 1 of 1
    assert r["time_to_alert_s"]["alerted_training_runs"] == 3
    assert sorted([9.0, 30.0, 28.0])[1] == r["median_time_to_alert_s"]    # the earlier time of each run
    with pytest.raises(ValueError, match="same splits"):
        either_alert(a, b[:1])
    with pytest.raises(ValueError, match="test runs differ"):
        either_alert(a, [b[1], b[0]])


def test_eval_refuses_an_empty_directory(tmp_path):
    res = CliRunner().invoke(app, ["eval", "--data", str(tmp_path), "--out", str(tmp_path / "r")])
    assert res.exit_code == 2 and "no runs" in res.output


def test_train_final_saves_model_and_command(tiny_dataset, feature_cache, tmp_path):
    res = CliRunner().invoke(app, ["eval", "--data", str(tiny_dataset), "--train-final", "fused",
                                   "--models", str(tmp_path / "models"), "--cache", str(feature_cache)])
    assert res.exit_code == 0, res.output
    meta = json.loads((tmp_path / "models" / "fused.json").read_text())
    assert meta["trained_by"].startswith("trainsentry eval") and meta["runs"] == 18


H200 = Path(__file__).resolve().parents[2] / "data" / "h200"


@pytest.mark.skipif(not any(H200.rglob("manifest.json")) if H200.exists() else True,
                    reason="the recorded H200 dataset is not in this checkout")
def test_eval_on_a_subset_of_the_h200_dataset(tmp_path):
    """CI: the real evaluation path on 2 configurations per class of the committed dataset."""
    res = CliRunner().invoke(app, ["eval", "--data", str(H200), "--subset", "2", "--splits", "2", "--rt-trees", "20",
                                   "--no-lofo", "--out", str(tmp_path / "r"), "--docs", "",
                                   "--cache", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r" / "detector.json").read_text())
    assert doc["dataset"]["runs"] > 0
    assert all(REQUIRED <= set(r) for r in doc["detectors"].values())
    # the simulator reads comm-rules' fitted volume threshold from the same file, when the fit
    # constrains it (else the source says why not and the simulator keeps its default)
    from trainsentry.simulate.traffic import VisibilityThresholds, load_thresholds
    vis = load_thresholds(tmp_path / "r" / "detector.json")
    source = doc["simulator_visibility_source"]
    fitted = source["calibration"]["volume_Bps"]
    if "not_exported" in source:
        assert "simulator_visibility" not in doc and vis == VisibilityThresholds()
        assert fitted in (1e6, 1e10)
    else:
        assert vis.interconnect_min_bytes_per_s_per_chip == doc["simulator_visibility"][
            "interconnect_min_bytes_per_s_per_chip"] == fitted


def test_eval_reads_several_roots_as_one_dataset_and_refuses_a_run_under_two(tiny_dataset, feature_cache, tmp_path):
    """`--data A --data B`: the 2-GPU and one-GPU nodes' campaigns as one dataset (docs/one-gpu.md)."""
    from detect.conftest import write_probe_dataset
    # the same run ids as the first root's (each campaign names its runs alike): distinct runs all the same
    other = write_probe_dataset(tmp_path / "other", (36.0, 48.0, 60.0), t=1.9e9)
    args = ["eval", "--data", str(tiny_dataset), "--data", str(other), "--splits", "2", "--no-lofo",
            "--detector", "comm-rules", "--docs", "", "--cache", str(feature_cache), "--out", str(tmp_path / "r")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    ds = json.loads((tmp_path / "r" / "detector.json").read_text())["dataset"]
    doc = json.loads((tmp_path / "r" / "detector.json").read_text())
    assert ds["runs"] == 18 + 18 and ds["root"] == f"{tiny_dataset} + {other}"
    per_run = doc["detectors"]["comm-rules"]["per_run"]
    assert per_run and all(k.startswith((f"{tiny_dataset}/", f"{other}/")) for k in per_run), sorted(per_run)[:3]
    # each root's own share of the same splits, for the table per dataset in docs/detector.md
    per_ds = doc["detectors"]["comm-rules"]["per_dataset"]
    assert [v["dataset"] for v in per_ds] == sorted([str(tiny_dataset), str(other)])
    assert all(1 <= v["splits_with_test_runs"] <= 2 and 0 <= v["run_accuracy"] <= 1 for v in per_ds)
    from trainsentry.detect.docs import per_dataset_table
    table = "\n".join(per_dataset_table(doc["detectors"]))
    assert f"| `comm-rules` | `{other}` |" in table
    from trainsentry.detect.docs import render     # the page shows it below the pooled table
    assert render(doc).count(table) == 1
    from trainsentry.detect.dataset import load_dataset
    runs = load_dataset([tiny_dataset, other], feature_cache)
    ids = [r.run_id for r in runs]
    assert len(set(ids)) == 36 and f"{tiny_dataset}/ddp-36-r0" in ids and f"{other}/ddp-36-r0" in ids
    res = CliRunner().invoke(app, args[:3] + ["--data", str(tiny_dataset.parent)] + args[5:])
    assert res.exit_code == 2 and "more than one of the roots" in res.output


@pytest.mark.skipif(not any(H200.rglob("manifest.json")) if H200.exists() else True,
                    reason="the recorded H200 dataset is not in this checkout")
def test_eval_as_if_nvlink_were_read_once_a_second(tmp_path):
    """The sampling-rate study: the same runs, NVLink counters thinned to 1 Hz before the features."""
    args = ["eval", "--data", str(H200), "--subset", "1", "--splits", "2", "--detector", "comm-rules", "--no-lofo",
            "--out", str(tmp_path / "r"), "--docs", "", "--cache", str(tmp_path / "c")]
    res = CliRunner().invoke(app, args + ["--counter-period", "nvlink=1"])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r" / "detector.json").read_text())
    assert doc["protocol"]["counter_periods_s"] == {"nvlink": 1.0}
    from trainsentry.features import FEATURE_VERSION
    assert doc["protocol"]["feature_version"] == FEATURE_VERSION     # which window features the numbers are on
    bad = CliRunner().invoke(app, args + ["--counter-period", "nvlink"])
    assert bad.exit_code == 2 and "GROUP=SECONDS" in bad.output
    bad = CliRunner().invoke(app, args + ["--counter-period", "pcie=1"])
    assert bad.exit_code == 2 and "unknown counter groups" in bad.output


def test_variants_are_evaluated_only_when_named(tiny_dataset, feature_cache, tmp_path):
    # detect.variants: what was tried and not kept, reproducible by name (docs/detector.md)
    from trainsentry.detect.variants import VARIANTS
    args = ["eval", "--data", str(tiny_dataset), "--splits", "2", "--no-lofo", "--docs", "",
            "--cache", str(feature_cache), "--out", str(tmp_path / "r")]
    names = sorted(VARIANTS)
    res = CliRunner().invoke(app, args + [a for n in names for a in ("--detector", n)])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r" / "detector.json").read_text())
    assert sorted(doc["detectors"]) == names
    assert doc["detectors"]["fused-previous"]["detector"]["decode_veto"] is None
    assert doc["detectors"]["comm-ml-previous"]["detector"]["decode_veto"] is None
    assert doc["detectors"]["fused-regular"]["detector"]["regular_gate"] is True
    bad = CliRunner().invoke(app, args + ["--detector", "fused-nonesuch"])
    assert bad.exit_code == 2 and "fused-previous" in bad.output


def test_rt_baseline_without_memory_reads_every_other_signal():
    from trainsentry.detect.rt_baseline import RT_FEATURE_NAMES
    from trainsentry.detect.variants import VARIANTS
    det = VARIANTS["rt-baseline-no-memory"]()
    memory = {c for c in RT_FEATURE_NAMES if "mem_used" in c or c in ("rt.mem_change_30s", "rt.mem_plateau_s",
                                                                      "rt.mem_slope")}
    assert memory and not memory & (set(det.stage1.cols) | set(det.stage2.cols))
    assert set(det.stage1.cols) == set(RT_FEATURE_NAMES) - memory
    assert "rt.mem_util.mean" in det.stage1.cols   # the memory controller's utilisation is not memory held
    assert det.describe()["n_features"] == len(RT_FEATURE_NAMES) - len(memory)


def test_per_dataset_averages_only_the_splits_that_held_its_runs():
    """A split whose test side held no training run of a dataset has no detection rate for it: skipped,
    not counted as 0; the time to alert is the median over every alerted training run of the dataset."""
    from trainsentry.detect.evaluate import per_dataset
    rows = [{"run_accuracy": 1.0, "training_detection": 1.0, "inference_fpr": 0.0, "other_fpr": None, "tta": [3.0, 9.0]},
            {"run_accuracy": 0.5, "training_detection": None, "inference_fpr": 0.5, "other_fpr": None, "tta": []}]
    v = per_dataset(rows)
    assert (v["run_accuracy"], v["training_detection"], v["inference_fpr"], v["other_fpr"]) == (0.75, 1.0, 0.25, None)
    assert (v["median_time_to_alert_s"], v["splits_with_test_runs"]) == (6.0, 2)


def test_train_final_takes_only_the_named_red_team_families(tiny_dataset, feature_cache, tmp_path):
    """The live lead hardened with a red team's runs: only runs of the named families join the fit,
    named by their root; a root without families, or families with no run, is refused."""
    from detect.conftest import write_probe_dataset
    from trainsentry.detect.pipeline import train_final
    from trainsentry.detect.single_device import SingleDeviceCheck

    adv = write_probe_dataset(tmp_path / "rt", (36.0,), t=2.0e9)    # families ddp, disagg, idle: 2 runs each
    path = train_final(tiny_dataset, "sd", tmp_path / "m", feature_cache, 0, "cmd", factory=SingleDeviceCheck,
                       adversarial=[adv], adversarial_families=["ddp"])
    meta = json.loads(path.with_suffix(".json").read_text())
    assert (meta["runs"], meta["adversarial_runs"], meta["adversarial_families"]) == (18 + 2, 2, ["ddp"])
    with pytest.raises(ValueError, match="need the families"):
        train_final(tiny_dataset, "sd", tmp_path / "m", feature_cache, 0, "cmd", factory=SingleDeviceCheck,
                    adversarial=[adv])
    with pytest.raises(ValueError, match="no run of families"):
        train_final(tiny_dataset, "sd", tmp_path / "m", feature_cache, 0, "cmd", factory=SingleDeviceCheck,
                    adversarial=[adv], adversarial_families=["throttle"])
