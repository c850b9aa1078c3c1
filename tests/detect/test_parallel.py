"""``trainsentry eval --jobs N``: the splits fitted in worker processes give the results of one process."""

import json

from typer.testing import CliRunner

from trainsentry.cli import app


def _strip(doc: dict) -> dict:
    """What depends on the run and not on the numbers: the command line and the time it took."""
    return {k: v for k, v in doc.items() if k not in ("command", "elapsed_s", "results_file", "figures")}


def test_two_jobs_give_the_results_of_one(tiny_dataset, feature_cache, tmp_path):
    docs = {}
    for jobs in (1, 2):
        out = tmp_path / f"jobs{jobs}"
        res = CliRunner().invoke(app, ["eval", "--data", str(tiny_dataset), "--splits", "4", "--rt-trees", "10",
                                       "--detector", "fused", "--detector", "rt-baseline", "--no-lofo",
                                       "--out", str(out), "--docs", "", "--cache", str(feature_cache),
                                       "--jobs", str(jobs)])
        assert res.exit_code == 0, res.output
        docs[jobs] = json.loads((out / "detector.json").read_text())
    assert _strip(docs[1]) == _strip(docs[2])
    assert len(docs[2]["detectors"]["fused"]["splits"]) == 4


def test_a_pool_needs_two_jobs(tiny_dataset):
    import pytest

    from trainsentry.detect.alert import AlertRule
    from trainsentry.detect.parallel import SplitPool
    with pytest.raises(ValueError, match="at least 2"):
        SplitPool(1, str(tiny_dataset), None, None, 0, None, 10, [], AlertRule(), [])
