"""``trainsentry eval-transfer`` (issue 9's 8-GPU scoring, any pair of datasets) on tiny probe datasets:
fitted on the base, judged frozen and with the target's runs added, never a run on both sides."""

import json

import pytest
from typer.testing import CliRunner

from detect.conftest import FAMILY, PHASE, write_probe_dataset
from detect.probe_traces import IDLE_MEM_BYTES, write_probe_trace
from trainsentry.cli import app


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """New configurations (other lengths, other names) of the same three shapes, recorded later."""
    return write_probe_dataset(tmp_path_factory.mktemp("target"), (39.0, 45.0), prefix="x8-", t=1.9e9)


def test_transfer_scores_frozen_and_added(tiny_dataset, target, feature_cache, tmp_path):
    out, docs = tmp_path / "eight_gpu.json", tmp_path / "eight-gpu.md"
    res = CliRunner().invoke(app, ["eval-transfer", "--base", str(tiny_dataset), "--target", str(target),
                                   "--splits", "3", "--detector", "comm-rules", "--detector", "fused",
                                   "--out", str(out), "--docs", str(docs), "--cache", str(feature_cache)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["base"]["runs"] == 18 and doc["target"]["runs"] == 12
    for name in ("comm-rules", "fused"):
        frozen = doc["frozen"][name]
        assert len(frozen["per_run"]) == 12 and {x["class"] for x in frozen["per_run"]} == set(PHASE)
        # DDP exchange is training on any node; idle never is
        assert frozen["training_detection"] == 1.0 and frozen["other_fpr"] == 0.0, frozen
        added = doc["added"][name]
        assert added["splits"] == 3 and added["run_accuracy"] is not None
        assert set(added["per_family"]) <= set(FAMILY.values())
    text = docs.read_text()
    assert "| `fused` | frozen |" in text and "| `fused` | added |" in text and "Target runs judged wrong" in text


def test_transfer_refuses_a_target_run_the_base_holds(tiny_dataset, feature_cache, tmp_path):
    res = CliRunner().invoke(app, ["eval-transfer", "--base", str(tiny_dataset), "--target", str(tiny_dataset),
                                   "--splits", "0", "--detector", "comm-rules", "--out", str(tmp_path / "x.json"),
                                   "--docs", "", "--cache", str(feature_cache)])
    assert res.exit_code == 2 and "in both datasets" in res.output


def test_added_holds_a_shared_configuration_out_of_the_base_while_it_is_tested(tiny_dataset, feature_cache, tmp_path,
                                                                                monkeypatch):
    """The same workload config on both machines is one configuration: on a split that tests it, its
    base runs are not in the fit either."""
    from trainsentry.detect import transfer
    target = write_probe_dataset(tmp_path / "t", (39.0, 45.0), prefix="x8-", t=1.9e9)
    for cls, (phase, mem) in PHASE.items():                     # new runs of the base's 36 s configurations
        plan = [("idle", 3.0, IDLE_MEM_BYTES), (phase, 36.0, mem), ("idle", 2.0, IDLE_MEM_BYTES)]
        write_probe_trace(target, f"x8-again-{FAMILY[cls]}-36", plan, cls, FAMILY[cls], f"{FAMILY[cls]}-36", t_start=2e9)
    fits = []
    real = transfer.fit_and_score

    def spy(factory, fit, test, rule):
        fits.append(({r.config for r in fit}, {r.config for r in test}))
        return real(factory, fit, test, rule)
    monkeypatch.setattr(transfer, "fit_and_score", spy)
    doc = transfer.run_transfer(str(tiny_dataset), str(target), tmp_path / "y.json", None, 6, ["comm-rules"],
                                cache_dir=feature_cache)
    key = {f: f"{f}|config={f}-36" for f in ("ddp", "disagg", "idle")}         # lab.summary.config_key
    assert set(doc["shared_configs"]) == set(key.values())
    frozen_fit, added = fits[0], fits[1:]
    assert len(added) == doc["added"]["comm-rules"]["splits"] == 6
    assert {f"ddp|config=ddp-{n}" for n in (36, 42, 48)} <= frozen_fit[0]   # frozen: the whole base
    assert all(not (fit & test) for fit, test in added)                     # added: never a tested config in the fit
    assert any(key["ddp"] in test for _, test in added)                      # (and the shared one was tested)


def test_variants_are_reachable_by_name_in_the_order_named_and_unknown_names_refused():
    """eval and eval-transfer resolve detectors through one function: the four by default, a
    variant of detect.variants only when named (docs/one-gpu.md scores `fused+single-device`)."""
    from trainsentry.detect.pipeline import resolve_detectors
    from trainsentry.detect.transfer import DEFAULT_DETECTORS
    assert list(resolve_detectors(None, 10)) == ["comm-rules", "comm-ml", "fused", "rt-baseline"]
    assert list(resolve_detectors(None, 10, DEFAULT_DETECTORS)) == list(DEFAULT_DETECTORS)
    got = resolve_detectors(["fused+single-device", "fused"], 10)
    assert list(got) == ["fused+single-device", "fused"] and got["fused+single-device"]().name == "fused+single-device"
    with pytest.raises(ValueError, match="unknown detectors .*'nope'"):
        resolve_detectors(["fused", "nope"], 10)
