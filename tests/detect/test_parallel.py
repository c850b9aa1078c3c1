"""``trainsentry eval --jobs N``: the splits and the leave-one-family-out folds fitted in worker processes
give the results of one process."""

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
                                       "--detector", "fused", "--detector", "rt-baseline",
                                       "--out", str(out), "--docs", "", "--cache", str(feature_cache),
                                       "--jobs", str(jobs)])
        assert res.exit_code == 0, res.output
        docs[jobs] = json.loads((out / "detector.json").read_text())
    assert _strip(docs[1]) == _strip(docs[2])
    assert len(docs[2]["detectors"]["fused"]["splits"]) == 4
    lofo = docs[2]["detectors"]["fused"]["lofo"]
    assert sum(v["correct_frac"] is not None for v in lofo.values()) >= 2   # folds fitted by the workers


def test_lofo_folds_are_configuration_splits_of_one_family_each(tiny_dataset, feature_cache):
    """Each fold tests exactly one family's runs and fits on every other family's: as the fold fitted
    in the evaluating process always did."""
    from trainsentry.detect.dataset import load_dataset
    from trainsentry.detect.evaluate import lofo_folds
    runs = load_dataset(tiny_dataset, feature_cache)
    for fam, fold in lofo_folds(runs):
        if fold is None:
            continue
        train, test = fold
        assert {r.run_id for r in runs if r.config in test} == {r.run_id for r in runs if r.family == fam}
        assert {r.run_id for r in runs if r.config in train} == {r.run_id for r in runs if r.family != fam}


def test_a_pool_needs_two_jobs(tiny_dataset):
    import pytest

    from trainsentry.detect.alert import AlertRule
    from trainsentry.detect.parallel import SplitPool
    with pytest.raises(ValueError, match="at least 2"):
        SplitPool(1, str(tiny_dataset), None, None, 0, None, 10, [], AlertRule(), [])


def test_lofo_folds_refuse_a_configuration_shared_by_two_families(tiny_dataset, feature_cache):
    """A configuration under two families would sit on both sides of a fold: refused, not fitted."""
    from dataclasses import replace

    import pytest

    from trainsentry.detect.dataset import load_dataset
    from trainsentry.detect.evaluate import lofo_folds
    runs = load_dataset(tiny_dataset, feature_cache)
    other = next(r.family for r in runs if r.family != runs[0].family)
    mixed = runs + [replace(runs[0], run_id="again", family=other)]
    with pytest.raises(ValueError, match="shares configurations"):
        lofo_folds(mixed)
