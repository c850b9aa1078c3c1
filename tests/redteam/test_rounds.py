"""``trainsentry redteam rounds`` on small traces replayed from the H200 probe (tests/detect/probe_traces).

Benign: DDP training, one-way sends as inference, idle as other. Adversarial (class training, family =
strategy, workload ``adv.<strategy>.<setting>`` as the registered workloads label themselves):
``accum`` — plain DDP telemetry (nothing hidden), two settings; ``kvdisguise`` — gradient exchange
shaped like a one-way prefill → decode hand-off (the send phase); ``diloco`` — DDP bursts with silent
gaps, naming a baseline that was never recorded (its cost must be null, with the reason).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from detect.probe_traces import GIB, IDLE_MEM_BYTES, phase_bounds, readings
from trainsentry.cli import app
from trainsentry.detect.rules import CommRules
from trainsentry.redteam.page import render
from trainsentry.redteam.rounds import effectiveness, rank_strategies, run_rounds
from trainsentry.traces.io import readings_to_columns, write_trace

REQUIRED = {"name", "setting", "window_detection", "run_detection", "median_time_to_alert_s", "gpu_hour_overhead",
            "loss_penalty_equal_tokens", "loss_penalty_equal_gpu_hours"}
MEM = {"ddp": 20 * GIB, "send": 30 * GIB, "idle": IDLE_MEM_BYTES}
TOKENS_PER_STEP = 1000
SPANS: dict[str, tuple[float, float, str]] = {}      # run id -> (first, last sample time, strategy or "")


def _ground_truth(steps: int, loss_per_token: float, baseline: str | None) -> dict:
    extra = {"0": {"strategy": "x", "baseline": baseline}} if baseline else {"0": {}}
    return {"steps": steps, "tokens": steps * TOKENS_PER_STEP, "step_times_s": [0.1] * steps,
            "loss_curve": [[i, 6.0 - loss_per_token * i * TOKENS_PER_STEP] for i in range(1, steps + 1)],
            "extra": extra}


def _run(root: Path, run_id: str, phases: list[tuple[str, float]], cls: str, family: str, workload: str,
         t0: float, gt: dict | None = None) -> float:
    """One labeled trace: idle margins around the phases; the workload spans its first to last non-idle phase."""
    plan = [("idle", 3.0, MEM["idle"])] + [(p, s, MEM[p]) for p, s in phases] + [("idle", 2.0, MEM["idle"])]
    every = phase_bounds(plan, t0)
    busy = [b for b in every if b[0] != "idle"] or every[1:-1]     # an idle run is its own workload
    manifest = {"run_id": run_id, "node": "node0", "start": busy[0][1], "end": busy[-1][2], "sample_hz": 18.0,
                "ranks": [0, 1], "labels": {"workload": workload, "class": cls, "family": family,
                                            "config": {"seconds": sum(s for _, s in phases)}}}
    if gt:
        manifest["ground_truth"] = gt
    write_trace(root / run_id, readings_to_columns("node0", readings(plan, t0)), manifest)
    end = t0 + sum(s for _, s, _ in plan)
    SPANS[run_id] = (t0, end, workload.split(".")[1] if workload.startswith("adv.") else "")
    return end + 30.0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("rt")
    benign, adv = root / "benign", root / "redteam-r1"
    t = 1.8e9
    for s in (36.0, 42.0, 48.0):
        gt = _ground_truth(400, 2e-6, None) if s == 48.0 else None     # the baseline: 48 s, 400 steps
        t = _run(benign, f"train.ddp.base-{int(s)}", [("ddp", s)], "training", "ddp",
                 "train.ddp.base" if s == 48.0 else f"train.ddp.w{int(s)}", t, gt)
    for s in (36.0, 44.0):
        t = _run(benign, f"infer.disagg-{int(s)}", [("send", s)], "inference", "disagg", f"infer.disagg.p{int(s)}", t)
        t = _run(benign, f"other.idle-{int(s)}", [("idle", s)], "other", "idle", f"other.idle.s{int(s)}", t)
    t = _run(adv, "adv.accum.k8-base-r0", [("ddp", 40.0)], "training", "accum", "adv.accum.k8", t,
             _ground_truth(100, 2e-6, "train.ddp.base"))
    for rep in range(2):
        t = _run(adv, f"adv.accum.k32-base-r{rep}", [("ddp", 38.0)], "training", "accum", "adv.accum.k32", t,
                 _ground_truth(150, 2e-6, "train.ddp.base"))
    t = _run(adv, "adv.kvdisguise.step-p2k-base-r0", [("send", 40.0)], "training", "kvdisguise",
             "adv.kvdisguise.step-p2k", t, _ground_truth(60, 1e-6, "train.ddp.base"))
    t = _run(adv, "adv.diloco.h50-base-r0", [("ddp", 4.0), ("idle", 6.0)] * 4 + [("ddp", 4.0)], "training", "diloco",
             "adv.diloco.h50", t, _ground_truth(100, 2e-6, "train.ddp.w1536-l24"))
    # the campaign these runs belong to: two more strategies planned, one of them failed to record, and
    # the baseline the diloco run names is not recorded either
    (root / "campaign.yaml").write_text(
        "name: rt-test\nnproc: 2\nruns:\n" + "".join(f"- {{workload: {w}, repeats: {n}}}\n" for w, n in (
            ("train.ddp.w1536-l24", 1), ("adv.accum.k8", 1), ("adv.accum.k32", 2), ("adv.kvdisguise.step-p2k", 1),
            ("adv.diloco.h50", 1), ("adv.split.gap6", 1), ("adv.throttle.pause50ms", 1))))
    (adv / "campaign_log.jsonl").write_text(json.dumps({"t": 1.0, "planned": ["adv.split.gap6-base-r0"],
                                                        "written": [], "failed": ["adv.split.gap6-base-r0"]}) + "\n")
    return {"benign": benign, "adv": adv, "cache": root / "cache", "root": root, "campaign": root / "campaign.yaml"}


@pytest.fixture(scope="module")
def cli_doc(data):
    root = data["root"]
    out, docs, figs = root / "results" / "redteam.json", root / "docs" / "redteam.md", root / "figs"
    res = CliRunner().invoke(app, ["redteam", "rounds", "--benign", str(data["benign"]),
                                   "--adversarial", str(data["adv"]),
                                   "--campaign", str(data["campaign"]),
                                   "--rounds", "3", "--out", str(out), "--docs", str(docs), "--figures", str(figs),
                                   "--detector", "fused", "--detector", "comm-rules", "--harden", "fused",
                                   "--splits", "2", "--cache", str(data["cache"])])
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), docs.read_text(), figs


def _entry(doc, round_no, name, setting):
    rnd = next(r for r in doc["rounds"] if r["round"] == round_no)
    return next(s for s in rnd["strategies"] if (s["name"], s["setting"]) == (name, setting))


def test_json_has_the_required_shape_and_provenance(cli_doc):
    doc, _, figs = cli_doc
    assert [r["round"] for r in doc["rounds"]] == [1, 2, 3]
    for rnd in doc["rounds"]:
        assert {(s["name"], s["setting"]) for s in rnd["strategies"]} == {
            ("accum", "k8"), ("accum", "k32"), ("kvdisguise", "step-p2k"), ("diloco", "h50")}
        for s in rnd["strategies"]:
            assert REQUIRED <= set(s)
        # every evaluated detector as delivered; only the hardened one (--harden) in later rounds
        assert set(rnd["benign"]) == ({"fused", "comm-rules"} if rnd["round"] == 1 else {"fused"})
        assert {n for s in rnd["strategies"] for n in s["by_detector"]} == set(rnd["benign"])
        for b in rnd["benign"].values():
            assert b["splits"] == 2 and {"run_accuracy", "inference_fpr"} <= set(b)
    assert doc["command"].startswith("trainsentry redteam rounds --benign ")
    assert doc["data"]["benign_runs"] == 7 and doc["data"]["adversarial_runs"] == 5
    assert doc["data"]["strategies"] == ["accum", "diloco", "kvdisguise"]
    assert _entry(doc, 1, "accum", "k32")["runs"] == 2
    for f in ("redteam_detection_by_round.png", "redteam_evasion_cost.png", "redteam_benign_fpr_by_round.png"):
        assert (figs / f).stat().st_size > 1000


def test_round_one_sees_plain_ddp_and_misses_the_inference_shaped_exchange(cli_doc):
    doc, _, _ = cli_doc
    accum = _entry(doc, 1, "accum", "k8")
    assert accum["run_detection"] == 1.0 and accum["window_detection"] > 0.5
    assert 0 <= accum["median_time_to_alert_s"] < 40
    kv = _entry(doc, 1, "kvdisguise", "step-p2k")
    assert kv["run_detection"] == 0.0 and kv["median_time_to_alert_s"] is None
    assert _entry(doc, 1, "accum", "k8")["trained_on"]["adversarial_runs"] == 0
    # fitted on benign only, the delivered detectors keep inference clean on held-out configurations
    assert doc["rounds"][0]["benign"]["fused"]["inference_fpr"] == 0.0


def test_cost_against_the_named_baseline_and_null_with_a_reason(cli_doc):
    doc, _, _ = cli_doc
    k8 = _entry(doc, 1, "accum", "k8")
    # GPU-hours per token against the baseline: (400k tokens / 48 s) / (100k tokens / 40 s) - 1
    assert k8["gpu_hour_overhead"] == pytest.approx((400 / 48) / (100 / 40) - 1)
    # same loss per token as the baseline: no penalty at equal tokens
    assert k8["loss_penalty_equal_tokens"] == pytest.approx(0.0, abs=1e-9)
    assert k8["loss_penalty_equal_gpu_hours"] > 0           # fewer tokens per GPU-hour: higher loss there
    kv = _entry(doc, 1, "kvdisguise", "step-p2k")
    # half the baseline's loss drop per token, 60 steps; both curves are trailing means over 10 steps
    # (cost.SMOOTH_STEPS), which lag a straight line by 4.5 steps: (60 - 4.5) steps x 1e-3 per step
    assert kv["loss_penalty_equal_tokens"] == pytest.approx((60 - 4.5) * TOKENS_PER_STEP * (2e-6 - 1e-6), rel=1e-6)
    diloco = _entry(doc, 3, "diloco", "h50")
    assert diloco["gpu_hour_overhead"] is None and diloco["loss_penalty_equal_tokens"] is None
    assert "no baseline run" in diloco["cost_note"] and "train.ddp.w1536-l24" in diloco["cost_note"]
    assert any(u["name"] == "diloco" for u in doc["unranked"])


def test_ranking_is_computed_from_the_numbers(cli_doc):
    doc, text, _ = cli_doc
    ranked, _ = rank_strategies(doc)
    assert [(r["name"], r["setting"]) for r in ranked] == [(r["name"], r["setting"]) for r in doc["ranking"]]
    scores = [r["score"] for r in ranked]
    assert scores == sorted(scores, reverse=True)
    last = doc["rounds"][-1]["strategies"]
    for r in ranked:
        s = next(x for x in last if (x["name"], x["setting"]) == (r["name"], r["setting"]))
        assert r["score"] == pytest.approx(effectiveness(s["run_detection"], s["gpu_hour_overhead"]))
    assert _ranking_order(text) == [(r["name"], r["setting"]) for r in ranked]
    # make the last-ranked setting undetected and free: it must move to the top of the ranking, which the
    # page reads as stored (run_rounds stores rank_strategies' result)
    bottom = ranked[-1]
    changed = json.loads(json.dumps(doc))
    s = next(x for x in changed["rounds"][-1]["strategies"]
             if (x["name"], x["setting"]) == (bottom["name"], bottom["setting"]))
    s["run_detection"], s["gpu_hour_overhead"] = 0.0, 0.0
    assert _ranking_order(render(changed)) == _ranking_order(text)     # the stored ranking, not recomputed
    changed["ranking"], changed["unranked"] = rank_strategies(changed)
    assert _ranking_order(render(changed))[0] == (bottom["name"], bottom["setting"])
    assert _ranking_order(render(changed)) != _ranking_order(text)


def _ranking_order(text: str) -> list[tuple[str, str]]:
    part = text.split("## Ranking", 1)[1].split("##", 1)[0]
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^\| \d+ \| (\S+) \| (\S+) \|", part, re.M)]


def test_page_is_generated_with_its_command(cli_doc):
    doc, text, _ = cli_doc
    assert text.startswith("# Red-team rounds")
    assert f"*Generated by `{doc['command']}`" in text
    assert doc["results_file"].endswith("results/redteam.json")
    assert f"from `{doc['results_file']}`; do not edit by hand" in text      # the --out file it was written from
    for r in (1, 2, 3):
        assert f"## Round {r}" in text
    assert "| accum | k8 | 1 | " in text


class SpyRules(CommRules):
    """comm-rules that records the runs it was fitted on and the windows it scored (by time)."""
    log: list[tuple[frozenset, np.ndarray]] = []

    def fit(self, X, y, groups=None, classes=None):
        self.fitted_on = frozenset(groups)
        return super().fit(X, y, groups, classes)

    def predict_proba(self, X):
        SpyRules.log.append((self.fitted_on, X["t_end"].to_numpy()))
        return super().predict_proba(X)


def _strategies_at(t_end: np.ndarray) -> set[str]:
    return {s for t in t_end for lo, hi, s in SPANS.values() if lo <= t <= hi and s}


def test_hardened_rounds_never_fit_on_the_strategy_they_score(data):
    SpyRules.log.clear()
    doc = run_rounds([data["benign"]], [data["adv"]], 3, n_splits=2, cache_dir=data["cache"],
                     factories={"spy": SpyRules}, primary="spy")
    fitted_with_adversarial = 0
    for fitted_on, t_end in SpyRules.log:
        fit_strategies = {SPANS[i][2] for i in fitted_on} - {""}
        scored = _strategies_at(t_end)
        assert not (fit_strategies & scored), (fit_strategies, scored)
        fitted_with_adversarial += bool(fit_strategies and scored)
    assert fitted_with_adversarial >= 3 * 2        # rounds 2 and 3 scored each strategy after hardening
    everything = set(doc["data"]["strategies"])
    for rnd in doc["rounds"][1:]:
        for s in rnd["strategies"]:
            assert s["trained_on"]["strategies"] == sorted(everything - {s["name"]})
    # round 2 adds the runs once; round 3 repeats each strategy towards the benign training windows:
    # 126 s of benign DDP against 116 s of accum (once), one 40 s run of kvdisguise or diloco (3 times)
    for s in doc["rounds"][1]["strategies"]:
        assert set(s["trained_on"]["repeat"].values()) == {1}
    repeats = {}
    for s in doc["rounds"][2]["strategies"]:
        repeats.update(s["trained_on"]["repeat"])
    assert repeats == {"accum": 1, "kvdisguise": 3, "diloco": 3}


def test_bad_input_exits_2_with_a_message(data, tmp_path):
    runner = CliRunner()
    said = lambda r: " ".join(r.output.split())  # noqa: E731  (rich wraps long paths at the console width)
    res = runner.invoke(app, ["redteam", "rounds", "--benign", str(data["benign"]), "--adversarial",
                              str(tmp_path / "redteam-missing"), "--out", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and "no such directory" in said(res)
    res = runner.invoke(app, ["redteam", "rounds", "--benign", str(data["benign"]), "--adversarial",
                              str(data["benign"]), "--out", str(tmp_path / "r.json"), "--cache", str(data["cache"])])
    assert res.exit_code == 2 and "no adversarial runs" in said(res)
    (tmp_path / "empty").mkdir()
    res = runner.invoke(app, ["redteam", "rounds", "--benign", str(tmp_path / "empty"), "--adversarial",
                              str(data["adv"]), "--out", str(tmp_path / "r.json"), "--cache", str(data["cache"])])
    assert res.exit_code == 2 and "no benign runs" in said(res)
    res = runner.invoke(app, ["redteam", "rounds", "--benign", str(data["benign"]), "--adversarial", str(data["adv"]),
                              "--detector", "nope", "--out", str(tmp_path / "r.json"), "--cache", str(data["cache"])])
    assert res.exit_code == 2 and "unknown detectors" in said(res)
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert not (tmp_path / "r.json").exists()


def test_campaign_coverage_lists_what_is_not_recorded_and_never_scores_it(cli_doc):
    doc, text, _ = cli_doc
    cov = doc["campaign"]
    assert (cov["planned_runs"], cov["recorded_runs"], cov["failed_runs"], cov["not_recorded_runs"]) == (8, 5, 1, 2)
    by_no = {s["issue_strategy"]: s for s in cov["issue_strategies"]}
    assert by_no[2]["failed_to_record"] == ["adv.split.gap6"] and by_no[2]["recorded"] == []
    assert by_no[3]["not_recorded_yet"] == ["adv.throttle.pause50ms"]
    assert by_no[6]["recorded"] == ["adv.accum.k32", "adv.accum.k8"]
    assert cov["baselines"] == [{"run_id": "train.ddp.w1536-l24-base-r0", "workload": "train.ddp.w1536-l24",
                                 "status": "not recorded yet"}]
    # missing strategies are never scored: no round row, no rank, no "not ranked" entry ...
    for rnd in doc["rounds"]:
        assert not {s["name"] for s in rnd["strategies"]} & {"split", "throttle"}
    assert not {r["name"] for r in doc["ranking"] + doc["unranked"]} & {"split", "throttle"}
    rounds_text = text.split("## Data and scoring", 1)[1].split("## Ranking", 1)[0]
    assert not re.search(r"^\| (split|throttle) \|", rounds_text, re.M)
    assert "throttle" not in rounds_text and "adv.split" not in rounds_text
    assert "| 3 | Throttling (micro-pauses, low utilisation) | – | `adv.throttle.pause50ms` | – |" in text
    # ... but each is named as not run beside the ranking, with its issue strategy and why
    missing = {(m["workload"], m["status"]) for m in doc["not_run_yet"] if m["workload"]}
    assert missing == {("adv.throttle.pause50ms", "not run yet"), ("adv.split.gap6", "failed to record")}
    assert {m["issue_strategy"] for m in doc["not_run_yet"] if m["status"] == "no run planned in the campaign"} == {
        5, 7, 8, 9, 10, 11}
    ranking = text.split("## Ranking", 1)[1].split("\n## ", 1)[0]
    assert "* issue strategy 3 (Throttling (micro-pauses, low utilisation)): not run yet: `adv.throttle.pause50ms`" in ranking
    assert "(Run splitting (idle gaps, separate processes)): failed to record: `adv.split.gap6`" in ranking
    assert "* issue strategy 5 (Per-step gradient compression (PowerSGD, top-k)): no run planned in the campaign" in ranking
    assert "* Not run at all: power capping and clock limits" in ranking


def test_power_capping_and_the_limits_of_the_rounds_are_stated(cli_doc):
    doc, text, _ = cli_doc
    assert doc["not_run"][0]["strategy"].startswith("power capping and clock limits")
    assert "not allowed on the shared GPU machines" in doc["not_run"][0]["why"]
    assert "**Not run: power capping and clock limits" in text
    assert doc["protocol"]["evader_adapts"] is False
    assert "does not adapt between rounds" in text and "training data only" in text
    assert "validation loss is recorded only at each run's end" in doc["protocol"]["loss_basis"]


def test_a_surrogate_run_without_a_surrogate_file_is_flagged(tmp_path):
    from types import SimpleNamespace

    from trainsentry.redteam.rounds import run_notes
    notes = {}
    for name, params in (("fallback", {"gate": "surrogate", "scorer": "proxy"}),
                         ("real", {"gate": "surrogate", "scorer": "sklearn"}), ("proxy", {"gate": "proxy", "scorer": "proxy"}),
                         ("trees", {"gate": "surrogate", "scorer": "trees"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps(
            {"ground_truth": {"extra": {"0": {"strategy_params": params}}}}))
        notes[name] = run_notes([SimpleNamespace(dir=tmp_path / name, run=SimpleNamespace(run_id=name))])
    assert len(notes["fallback"]) == 1 and "fell back to the proxy scorer" in notes["fallback"][0]
    assert notes["real"] == [] and notes["proxy"] == [] and notes["trees"] == []


def test_surrogate_command_writes_a_model_the_workload_gate_loads(data, tmp_path):
    from trainsentry.workloads.adversarial_serve import SklearnScorer
    out = tmp_path / "sur.joblib"
    res = CliRunner().invoke(app, ["redteam", "surrogate", "--benign", str(data["benign"]), "--adversarial",
                                   str(data["adv"]), "--detector", "comm-rules", "--out", str(out),
                                   "--cache", str(data["cache"])])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.with_suffix(".json").read_text())
    assert rep["runs"] == 12 and 0 < rep["detector_positive_windows"] < rep["windows"]
    assert rep["command"].startswith("trainsentry redteam surrogate --benign ")
    SklearnScorer(str(out))
    assert rep["window_s"] == 8.0                 # the copy's window (comm-rules reads the 8 s window features)
    # the default file: JSON trees with the report inside, which the workload loads without scikit-learn
    trees = tmp_path / "sur.json"
    res = CliRunner().invoke(app, ["redteam", "surrogate", "--benign", str(data["benign"]), "--adversarial",
                                   str(data["adv"]), "--detector", "comm-rules", "--out", str(trees),
                                   "--cache", str(data["cache"])])
    assert res.exit_code == 0, res.output
    doc = json.loads(trees.read_text())
    assert doc["window_s"] == 8.0 and doc["report"]["runs"] == 12 and doc["report"]["detector_copy"] == "comm-rules"
    assert not (tmp_path / "sur.json.json").exists()
    from trainsentry.workloads.adversarial_serve import load_scorer
    scorer, kind = load_scorer(str(trees))
    assert kind == "trees" and scorer.window_s == 8.0
    res = CliRunner().invoke(app, ["redteam", "surrogate", "--benign", str(tmp_path / "nope"), "--out", str(out)])
    assert res.exit_code == 2 and "no such directory" in " ".join(res.output.split())



def _relabel(src: Path, dst: Path, family: str, setting: str) -> None:
    """A copy of a recorded run as another strategy's setting (the manifest's labels only)."""
    import shutil
    shutil.copytree(src, dst)
    m = json.loads((dst / "manifest.json").read_text())
    m["run_id"], m["labels"]["family"], m["labels"]["workload"] = dst.name, family, f"adv.{family}.{setting}"
    (dst / "manifest.json").write_text(json.dumps(m))
    first, last, _ = SPANS[src.name]
    SPANS[dst.name] = (first, last, family)


def test_sibling_families_of_one_issue_strategy_are_left_out_together(data, tmp_path):
    """PowerSGD and top-k are one issue strategy (5): the detector scoring either saw neither."""
    adv = tmp_path / "adv"
    adv.mkdir()
    _relabel(data["adv"] / "adv.accum.k8-base-r0", adv / "adv.powersgd.r4-base-r0", "powersgd", "r4")
    _relabel(data["adv"] / "adv.kvdisguise.step-p2k-base-r0", adv / "adv.topk.k1pct-base-r0", "topk", "k1pct")
    _relabel(data["adv"] / "adv.diloco.h50-base-r0", adv / "adv.diloco.h50-base-r0", "diloco", "h50")
    SpyRules.log.clear()
    doc = run_rounds([data["benign"]], [adv], 2, n_splits=1, cache_dir=data["cache"], factories={"spy": SpyRules},
                     primary="spy", score_flops=False)
    assert doc["protocol"]["held_out_units"] == {"powersgd": "issue strategy 5", "topk": "issue strategy 5",
                                                 "diloco": "issue strategy 1"}
    for s in doc["rounds"][1]["strategies"]:
        t = s["trained_on"]
        if s["name"] in ("powersgd", "topk"):
            assert t["strategies"] == ["diloco"] and t["held_out"] == ["powersgd", "topk"]
        else:
            assert t["strategies"] == ["powersgd", "topk"] and t["held_out"] == ["diloco"]
    for fitted_on, t_end in SpyRules.log:
        fit_strategies = {SPANS[i][2] for i in fitted_on} - {""}
        scored = _strategies_at(t_end)
        assert not (fit_strategies & scored), (fit_strategies, scored)
        if scored & {"powersgd", "topk"}:
            assert not fit_strategies & {"powersgd", "topk"}


def test_benign_numbers_are_reported_against_the_detector_targets(cli_doc):
    doc, text, _ = cli_doc
    assert doc["protocol"]["detector_targets"] == {"run_accuracy": ">= 0.99", "inference_fpr": "<= 0.01",
                                                   "median_time_to_alert_s": "<= 20"}
    for rnd in doc["rounds"]:
        for b in rnd["benign"].values():
            t = b["targets"]
            assert t["run_accuracy"]["met"] == (b["run_accuracy"] >= 0.99)
            assert t["inference_fpr"]["met"] == (b["inference_fpr"] <= 0.01)
            # two inference runs held out: a 1 % FPR cannot be shown, and the results say so
            assert b["inference_runs_held_out"] == 2 and t["inference_fpr"]["resolvable"] is False
            assert b["inference_fpr_bound_at_zero_alerts"] == pytest.approx(1 - 0.05 ** 0.5)
    assert "run accuracy (target >= 0.99)" in text and "inference FPR, runs (target <= 0.01)" in text
    assert "the ≤ 1 % target cannot be shown on this data" in text
    fused1 = doc["rounds"][0]["benign"]["fused"]
    row = next(line for line in text.split("## Round 1", 1)[1].splitlines() if line.startswith("| `fused` |"))
    assert row.startswith(f"| `fused` | {100 * fused1['run_accuracy']:.1f} %" + (" ✓" if fused1["targets"]["run_accuracy"]["met"]
                                                                               else " ✗"))


def test_a_setting_without_loss_data_is_not_ranked_and_says_why(cli_doc):
    doc, _, _ = cli_doc
    changed = json.loads(json.dumps(doc))
    top = rank_strategies(changed)[0][0]
    s = next(x for x in changed["rounds"][-1]["strategies"] if (x["name"], x["setting"]) == (top["name"], top["setting"]))
    s["loss_penalty_equal_tokens"] = s["loss_penalty_equal_gpu_hours"] = None
    ranked, unranked = rank_strategies(changed)
    assert (top["name"], top["setting"]) not in {(r["name"], r["setting"]) for r in ranked}
    why = next(u["why"] for u in unranked if (u["name"], u["setting"]) == (top["name"], top["setting"]))
    assert why.startswith("no loss penalty")
    s["cost_note"] = "a loss penalty is null: the two loss curves share no training (no overlap beyond a first point)"
    why = next(u["why"] for u in rank_strategies(changed)[1] if (u["name"], u["setting"]) == (top["name"], top["setting"]))
    assert why == "no loss penalty: the two loss curves share no training (no overlap beyond a first point)"
    changed["ranking"], changed["unranked"] = ranked, unranked
    assert f"* {top['name']} {top['setting']}: no loss penalty" in render(changed)


def test_round_one_on_replaced_features_is_not_called_as_delivered(cli_doc):
    from trainsentry.redteam.rounds import DELIVERED_FEATURE_VERSION, blue_side
    doc, text, _ = cli_doc
    assert doc["protocol"]["round_1_as_delivered"] is True and "not the detector as delivered" not in text
    changed = json.loads(json.dumps(doc))
    changed["protocol"].update(round_1_as_delivered=False, feature_version=DELIVERED_FEATURE_VERSION + 1,
                               blue_side_changes=blue_side(DELIVERED_FEATURE_VERSION + 1))
    for rnd in changed["rounds"]:
        rnd["feature_version"] = DELIVERED_FEATURE_VERSION + 1
    page = render(changed)
    assert "**Round 1 is not the detector as delivered:**" in page
    assert "round 1 included" in page and "training data only" not in page


def test_earlier_delivery_is_named_and_its_results_are_committed(cli_doc):
    from trainsentry.redteam.rounds import EARLIER_DELIVERIES, earlier_deliveries
    doc, text, _ = cli_doc
    root = Path(__file__).resolve().parents[2]
    for e in earlier_deliveries(doc["data"]["adversarial_dirs"]):
        assert f"`{e['results']}`" in text and f"version {e['feature_version']}" in text
    for e in EARLIER_DELIVERIES:
        earlier = json.loads((root / e["results"]).read_text())
        assert earlier["protocol"].get("feature_version", e["feature_version"]) == e["feature_version"]  # v1 predates the field
        assert [Path(d).name for d in earlier["data"]["adversarial_dirs"]] == [e["adversarial"]]
        assert [r["round"] for r in earlier["rounds"]] == e["rounds"] and e["code"] in earlier["code"]
        assert earlier["rounds"][0]["strategies"]   # scored, not an empty shell


def test_a_variant_is_reachable_by_name_as_in_eval(data):
    """`--detector fused+single-device` (a detect.variants entry) resolves as `trainsentry eval` resolves it:
    the check that stops this call is the primary's, after the names were accepted, before anything is fitted."""
    from trainsentry.redteam.rounds import InputError
    with pytest.raises(InputError, match="primary detector 'fused' is not among those evaluated"):
        run_rounds([data["benign"]], [data["adv"]], 1, n_splits=1, cache_dir=data["cache"],
                   detectors=["fused+single-device"], primary="fused")
    with pytest.raises(InputError, match="unknown detectors"):
        run_rounds([data["benign"]], [data["adv"]], 1, n_splits=1, cache_dir=data["cache"], detectors=["nope"])


def test_two_benign_roots_keep_runs_with_the_same_id_apart(data, tmp_path):
    """Two nodes' campaigns reuse run ids: with several benign roots each run's id carries its root, so
    fit groups and held-out counts see two runs, not one (as detect.dataset.load_dataset does)."""
    from trainsentry.redteam.rounds import discover

    other = tmp_path / "node2"
    shutil.copytree(data["benign"], other)
    one = discover([data["benign"]], [data["adv"]], data["cache"])
    two = discover([data["benign"], other], [data["adv"]], data["cache"])
    ids = [r.run_id for r in two["benign"]]
    assert len(ids) == 2 * len(one["benign"]) == len(set(ids))
    assert {r.run_id for r in one["benign"]} == {i.split("/")[-1] for i in ids}


def test_a_setting_run_with_overrides_is_named_by_what_they_changed():
    """Runs of one workload that a campaign overrode differently are different settings: the red team's
    faster-server online learning (redteam-x1-fast.yaml) must not be pooled with the original runs."""
    from trainsentry.redteam.rounds import _setting
    from trainsentry.workloads import registry  # noqa: F401  (registers every workload)
    from trainsentry.workloads.base import WORKLOADS

    cfg = WORKLOADS["adv.online.full-k8"].resolve(toy=False)
    fast = {"run_id": "adv.online.full-k8-32b87b-r0", "toy": False,
            "labels": {"workload": "adv.online.full-k8", "config": {**cfg, "decode_len": 16, "k": 2}}}
    assert _setting("adv.online.full-k8", "online", fast) == "full-k8 decode_len=16 k=2"
    plain = {**fast, "run_id": "adv.online.full-k8-base-r0", "labels": {**fast["labels"], "config": cfg}}
    assert _setting("adv.online.full-k8", "online", plain) == "full-k8"
    # a run recorded without overrides keeps its name even if a registered default moved since
    moved = {**plain, "labels": {**plain["labels"], "config": {**cfg, "decode_len": 999}}}
    assert _setting("adv.online.full-k8", "online", moved) == "full-k8"
    # a workload no longer registered, or no manifest: the suffix alone
    assert _setting("adv.gone.s1", "gone", {**fast, "labels": {"workload": "adv.gone.s1", "config": {}}}) == "s1"
    assert _setting("adv.online.full-k8", "online") == "full-k8"
    # a manifest that keeps the campaign's overrides is named from them alone, registry or not
    kept = {**fast, "labels": {**fast["labels"], "config": {}, "overrides": {"k": 2, "decode_len": 16}}}
    assert _setting("adv.online.full-k8", "online", kept) == "full-k8 decode_len=16 k=2"
    assert _setting("adv.online.full-k8", "online", {**kept, "labels": {**kept["labels"], "overrides": {}}}) == "full-k8"


def test_a_page_on_other_runs_cites_no_earlier_delivery_nor_a_strategy_it_never_ran(tmp_path):
    """The one-GPU red team (data/redteam-x1) was never scored by the first delivery, nor does it run the
    surrogate-gated workload: its page must not point to results/redteam-v1-round1.json or explain it."""
    from types import SimpleNamespace

    from trainsentry.redteam.rounds import SURROGATE_WORKLOAD, earlier_deliveries, limits

    assert [e["results"] for e in earlier_deliveries([Path("/x/data/redteam-r1")])] == [
        "results/redteam-v1-round1.json", "results/redteam-v3-round1.json"]
    assert [e["feature_version"] for e in earlier_deliveries([Path("/x/data/redteam-x1")])] == [3]
    proxy = [SimpleNamespace(run=SimpleNamespace(workload="adv.whitebox.proxy-lora"))]
    assert not any(t.startswith(SURROGATE_WORKLOAD) for t in limits(proxy, None))
    assert any(t.startswith(SURROGATE_WORKLOAD) for t in limits(
        proxy + [SimpleNamespace(run=SimpleNamespace(workload=SURROGATE_WORKLOAD))], None))
    camp = tmp_path / "c.yaml"    # planned but not recorded yet: the limit still concerns the campaign
    camp.write_text(f"name: c\nnproc: 2\nruns:\n- {{workload: {SURROGATE_WORKLOAD}}}\n")
    assert any(t.startswith(SURROGATE_WORKLOAD) for t in limits(proxy, camp))


def test_several_campaign_files_are_one_plan(data, tmp_path):
    """A later file that extends the campaign into the same directory (redteam-x1-fast.yaml after
    redteam-x1.yaml) is part of the plan: its recorded runs count as planned and recorded, not as
    "recorded but not in the campaign"; a run id both files plan is counted once."""
    from trainsentry.redteam.commands import _command
    from trainsentry.redteam.coverage import campaign_coverage
    from trainsentry.redteam.rounds import SURROGATE_WORKLOAD, limits

    recorded = {p.name for p in data["adv"].iterdir() if (p / "manifest.json").exists()}
    first = tmp_path / "first.yaml"
    first.write_text("name: rt-test\nnproc: 2\nruns:\n- {workload: adv.accum.k8}\n- {workload: adv.split.gap6}\n")
    later = tmp_path / "later.yaml"
    later.write_text("name: rt-test\nnproc: 2\nruns:\n- {workload: adv.accum.k32, repeats: 2}\n"
                     f"- {{workload: adv.accum.k8}}\n- {{workload: {SURROGATE_WORKLOAD}}}\n")
    alone = campaign_coverage(first, [data["adv"]], recorded)
    assert "adv.accum.k32-base-r0" in alone["recorded_outside_campaign"]
    both = campaign_coverage([first, later], [data["adv"]], recorded)
    assert (both["planned_runs"], both["recorded_runs"]) == (5, 3)
    assert not {"adv.accum.k32-base-r0", "adv.accum.k32-base-r1", "adv.accum.k8-base-r0"} & set(
        both["recorded_outside_campaign"])
    assert both["campaigns"] == [str(first), str(later)] and both["name"] == "rt-test"
    assert both["baselines"] == []   # none planned: the page says so, not "Baseline runs of the campaign: ."
    from trainsentry.redteam.page import _coverage
    assert "Baseline runs of the campaign: none planned." in _coverage({"campaign": both})
    # one workload in two settings is named by run, a workload planned once by its name
    twice = dict(both, baselines=[{"run_id": "train.single.w1024-l16-1b9dbd-r0", "workload": "train.single.w1024-l16",
                                   "status": "recorded"},
                                  {"run_id": "train.single.w1024-l16-40710a-r0", "workload": "train.single.w1024-l16",
                                   "status": "recorded"},
                                  {"run_id": "train.ddp.w1024-l16-base-r0", "workload": "train.ddp.w1024-l16",
                                   "status": "not recorded yet"}])
    assert ("Baseline runs of the campaign: `train.single.w1024-l16-1b9dbd-r0` (recorded); `train.single.w1024-l16-"
            "40710a-r0` (recorded); `train.ddp.w1024-l16` (not recorded yet).") in "\n".join(_coverage({"campaign": twice}))
    assert "--campaign first.yaml --campaign later.yaml" in _command(
        [Path("b")], [Path("a")], 3, Path("o.json"), "d.md", "f", [], "fused", 20, 0, 400,
        [Path("first.yaml"), Path("later.yaml")])
    other = tmp_path / "other.yaml"   # another campaign's file is not part of this plan; a broken one is refused
    other.write_text("name: rt-other\nnproc: 2\nruns:\n- {workload: adv.accum.k8}\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: rt-test\nnproc: 2\nruns: null\n")
    for files, said in (([first, other], "share its name"), ([first, broken], "not a campaign that plans")):
        res = CliRunner().invoke(app, ["redteam", "rounds", "--benign", str(data["benign"]), "--adversarial",
                                       str(data["adv"]), *[a for f in files for a in ("--campaign", str(f))],
                                       "--out", str(tmp_path / "r.json"), "--cache", str(data["cache"])])
        assert res.exit_code == 2 and said in " ".join(res.output.split()), res.output
    proxy = []   # the surrogate's limit follows the later file's plan too
    assert not any(t.startswith(SURROGATE_WORKLOAD) for t in limits(proxy, [first]))
    assert any(t.startswith(SURROGATE_WORKLOAD) for t in limits(proxy, [first, later]))


def test_a_family_beyond_the_issues_list_has_its_own_coverage_row(data, tmp_path):
    """ZeRO-Offload (adv.offload.*) is no strategy of the issue's list: its planned runs still get a row
    (marked "+", named by what the family builds), never vanish from the table, and a campaign that
    plans none shows no such row."""
    from trainsentry.redteam.coverage import BEYOND_MARK, campaign_coverage
    from trainsentry.redteam.page import _coverage

    camp = tmp_path / "c.yaml"
    camp.write_text("name: rt-test\nnproc: 1\nruns:\n- {workload: adv.offload.t1}\n- {workload: adv.throttle.lowutil}\n")
    cov = campaign_coverage(camp, [data["adv"]], set())
    beyond = [s for s in cov["issue_strategies"] if s["issue_strategy"] == BEYOND_MARK]
    assert [(s["families"], s["not_recorded_yet"], s["planned"]) for s in beyond] == [
        (["offload"], ["adv.offload.t1"], 1)]
    assert "ZeRO-Offload" in beyond[0]["title"]
    assert f"| {BEYOND_MARK} | beyond the issue's list: ZeRO-Offload" in "\n".join(_coverage({"campaign": cov}))
    from trainsentry.redteam.rounds import not_run_yet
    missing = [m for m in not_run_yet({"campaign": cov}) if m["issue_strategy"] == BEYOND_MARK]
    assert [(m["workload"], m["status"]) for m in missing] == [("adv.offload.t1", "not run yet")]
    from trainsentry.redteam.page import _not_run
    assert any(line.startswith("* beyond the issue's list: ZeRO-Offload") and line.endswith(": not run yet: `adv.offload.t1`")
               for line in _not_run({"campaign": cov}))
    camp.write_text("name: rt-test\nnproc: 1\nruns:\n- {workload: adv.throttle.lowutil}\n")
    assert not [s for s in campaign_coverage(camp, [data["adv"]], set())["issue_strategies"]
                if s["issue_strategy"] == BEYOND_MARK]
