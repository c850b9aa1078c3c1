"""docs/redteam.md and its figures from a stored results file: the stored ranking, one drawing function."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainsentry.cli import app
from trainsentry.redteam import figures as RF
from trainsentry.redteam.page import render
from trainsentry.report import figures as F

RESULTS = Path(__file__).resolve().parents[2] / "results" / "redteam.json"
pytestmark = pytest.mark.skipif(not RESULTS.is_file(), reason="no committed red-team results")


def _doc() -> dict:
    return json.loads(RESULTS.read_text())


def test_page_ranks_as_the_results_store_it():
    doc = _doc()
    first = doc["ranking"][0]
    doc["ranking"] = [{**first, "rank": 1, "score": 0.123456}]   # not what rank_strategies would compute
    doc["unranked"] = []
    ranking = render(doc).split("## Ranking", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in ranking.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    assert len(rows) == 1 and rows[0].endswith("| 0.12 |") and f"| {first['name']} | {first['setting']} |" in rows[0]


def test_report_and_page_draw_with_the_same_functions(monkeypatch, tmp_path):
    calls = []
    for name in ("detection_by_round", "evasion_cost"):
        real = getattr(RF, name)
        monkeypatch.setattr(RF, name, lambda plt, x, _real=real, _name=name: calls.append(_name) or _real(plt, x))
    doc = _doc()
    F.detection_by_round_figure(doc)
    F.evasion_cost_figure(doc["ranking"])
    paths = RF.write(doc, tmp_path)
    assert sorted(calls) == ["detection_by_round", "detection_by_round", "evasion_cost", "evasion_cost"]
    assert {p.name for p in paths} >= {"redteam_detection_by_round.png", "redteam_evasion_cost.png"}


def test_page_command_rewrites_docs_and_figures_without_scoring(tmp_path):
    res = tmp_path / "redteam.json"
    shutil.copy(RESULTS, res)
    out = CliRunner().invoke(app, ["redteam", "page", "--results", str(res), "--docs", str(tmp_path / "redteam.md"),
                                   "--figures", str(tmp_path / "figs")])
    assert out.exit_code == 0, out.output
    doc = json.loads(res.read_text())
    assert (tmp_path / "redteam.md").read_text() == render(doc)
    assert doc["figures"] and all(Path(p).is_file() for p in doc["figures"])
    before = _doc()
    assert doc["results_file"] == str(res)          # the page names the file it was written from
    same = lambda d: {k: v for k, v in d.items() if k not in ("figures", "results_file")}  # noqa: E731
    assert same(doc) == same(before)
    assert f"from `{res}`" in (tmp_path / "redteam.md").read_text()
    missing = CliRunner().invoke(app, ["redteam", "page", "--results", str(tmp_path / "none.json")])
    assert missing.exit_code == 2


def test_a_detector_scored_with_a_capped_rule_is_marked_and_says_so():
    doc = _doc()
    rnd = doc["rounds"][0]
    for s in rnd["strategies"]:
        for name, d in s["by_detector"].items():
            d["rules_applied"] = ["2 of 3 @ 0.75", "3 of 5 @ 0.75"] if name == "rt-baseline" else ["3 of 5 @ 0.75"]
    for name, b in rnd["benign"].items():
        b["rules_applied"] = ["1 of 1 @ 0.75", "2 of 2 @ 0.75"] if name == "rt-baseline" else ["3 of 5 @ 0.75"]
    page = render(doc).split("## Round 2", 1)[0]
    assert "| `rt-baseline` † |" in page and "| `fused` † |" not in page and "`fused` |" in page
    note = next(line for line in page.splitlines() if line.startswith("† `rt-baseline`"))
    assert "1 of 1 @ 0.75, 2 of 2 @ 0.75, 2 of 3 @ 0.75, 3 of 5 @ 0.75" in note
