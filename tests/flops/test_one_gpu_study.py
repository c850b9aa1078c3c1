"""scripts/flops_one_gpu.py on synthetic traces with a known answer: two-GPU runs calibrate, the same
runs with one GPU left calibrate nothing and are scored; the energy models' overhead on busy
GPU-seconds measures them, on the seed study's duration it counts their overhead twice."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from flops.fixtures.probe_traces import synthetic_runs
from trainsentry.traces.io import read_manifest, read_trace, write_trace

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "flops_one_gpu.py"


def _script():
    spec = importlib.util.spec_from_file_location("flops_one_gpu", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _one_gpu(two_gpu_dirs: list[Path], root: Path) -> None:
    """Each two-GPU run as a one-GPU node would record it: gpu1's rows gone, half the FLOPs."""
    for d in two_gpu_dirs:
        table, m = read_trace(d)
        m = {**m, "run_id": m["run_id"] + "-x1", "labels": {**m["labels"], "family": "single-gpu"},
             "ground_truth": {**m["ground_truth"], "flops": m["ground_truth"]["flops"] / 2}}
        m.pop("schema", None)
        write_trace(root / m["run_id"], table.filter(pc.equal(table.column("device"), "gpu0")), m)


def test_the_study_scores_every_one_gpu_run_and_shows_the_time_base(tmp_path):
    cal = tmp_path / "cal"
    dirs = synthetic_runs(cal, configs=[(6.0, 1.0), (9.0, 0.6), (12.0, 0.8), (5.0, 0.5), (15.0, 0.9), (8.0, 0.7),
                                        (10.0, 0.4), (7.0, 0.95)])
    _one_gpu(dirs, tmp_path / "x1")
    out, docs, fig = tmp_path / "r.json", tmp_path / "d.md", tmp_path / "f.png"
    assert _script().main(["--calibrate", str(cal), "--data", str(tmp_path / "x1"), "--model", str(tmp_path / "none"),
                           "--flops-results", str(tmp_path / "none.json"), "--out", str(out), "--docs", str(docs),
                           "--figure", str(fig), "--blind-after", "@0"]) == 0
    doc = json.loads(out.read_text())
    # every run was recorded after the epoch: the blind test is all of them, scored the same
    assert doc["blind"]["runs"] == len(dirs)
    assert doc["summary"]["three_input"]["blind"] == doc["summary"]["three_input"]["all"]
    assert doc["calibrated_on"]["runs"] == len(dirs) and not doc["runs_not_scored"]
    assert doc["summary"]["tensor"]["all"]["runs"] == len(dirs)
    # every one-GPU run repeats a calibration configuration here: none is counted as new, and saying so
    # takes no number from an empty set
    assert doc["new_configurations"] == 0 and doc["summary"]["tensor"]["new_configurations"]["runs"] == 0
    assert doc["calibration_one_busy_gpu"] == 0
    assert "saved" not in doc["estimators"] and doc["headline"] is None   # nothing to read: said, not invented
    base = doc["time_base"]["by_time_base"]
    busy, seed = base["busy_gpu_s"]["three_input"], base["duration_s"]["three_input"]
    # the same physics on one GPU: busy GPU-seconds measure it, the duration under-reports it
    assert busy["median_abs_pct_error"] < 0.5 * seed["median_abs_pct_error"]
    assert seed["median_pct_error"] < 0
    text = docs.read_text()
    assert "## The overhead's time base" in text and "full model" in text and fig.stat().st_size > 0
    assert "## The blind test" in text and f"The {len(dirs)} one-GPU training runs recorded after `@0`" in text


def test_the_blind_test_says_when_nothing_was_recorded_after_the_commit(tmp_path):
    """A cutoff later than every run: no blind run, said in words, no figure from an empty set; a revision
    git does not know is refused by name."""
    mod = _script()
    cal = tmp_path / "cal"
    dirs = synthetic_runs(cal, configs=[(6.0, 1.0), (9.0, 0.6), (12.0, 0.8), (5.0, 0.5), (15.0, 0.9), (8.0, 0.7)])
    _one_gpu(dirs, tmp_path / "x1")
    found = mod.manifests(tmp_path / "x1", {read_manifest(d)["run_id"] + "-x1" for d in dirs})
    assert len(found) == len(dirs) and mod.recorded_after(found, 4e9) == {}
    out, docs = tmp_path / "r.json", tmp_path / "d.md"
    assert mod.main(["--calibrate", str(cal), "--data", str(tmp_path / "x1"), "--model", str(tmp_path / "none"),
                     "--flops-results", str(tmp_path / "none.json"), "--out", str(out), "--docs", str(docs),
                     "--figure", str(tmp_path / "f.png"), "--blind-after", "@4000000000"]) == 0
    doc = json.loads(out.read_text())
    assert doc["blind"]["runs"] == 0
    assert all(v["blind"]["runs"] == 0 and v["blind"]["median_abs_pct_error"] is None for v in doc["summary"].values())
    text = docs.read_text()
    assert "No one-GPU run has been recorded since `@4000000000`" in text and "The blind test" in text
    with pytest.raises(SystemExit, match="--blind-after no-such-rev: not a commit"):
        mod.commit_time("no-such-rev")
    assert mod.commit_time("@12.5") == 12.5
