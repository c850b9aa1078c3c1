"""The report builder: sections and figures present, missing inputs named, every number traced."""

from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from trainsentry.report.build import build, find_chromium
from trainsentry.report.context import TERMS, lookup
from trainsentry.report.inputs import INPUTS, MissingInputs
from trainsentry.report.published import PUBLISHED
from trainsentry.report.sections import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
RESULTS, DATA = ROOT / "results", ROOT / "data"
ALLOWED = {"n", "cite", "term", "secno", "figno"}  # spans whose digits are not hand-typed measurements


class TextScan(HTMLParser):
    """Collects page text outside number/citation/term spans, <code>, <style> and <title>."""

    def __init__(self):
        super().__init__()
        self.stack: list[bool] = []  # per open element: does it exempt its text?
        self.free: list[str] = []
        self.terms: list[str] = []
        self._term = False

    def handle_starttag(self, tag, attrs):
        cls = dict(attrs).get("class", "") or ""
        self._term = tag == "span" and cls == "term"
        if tag in ("img", "meta", "br"):
            return
        self.stack.append(tag in ("code", "style", "title") or (tag == "span" and cls in ALLOWED))

    def handle_endtag(self, tag):
        if tag not in ("img", "meta", "br") and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self._term:
            self.terms.append(data)
            self._term = False
        if not any(self.stack):
            self.free.append(data)


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    return build(RESULTS, DATA, tmp_path_factory.mktemp("draft"), allow_missing=True, pdf=False)


def test_every_section_heading_present(draft):
    text = draft.html_path.read_text()
    for i, s in enumerate(SECTIONS, 1):
        assert f'<span class="secno">{i}.</span> {s.TITLE}</h2>' in text


def test_available_figures_embedded(draft):
    text = draft.html_path.read_text()
    names = {n for n, _ in draft.figures.items}
    for png in (RESULTS / "figures").glob("simulator_*.png"):
        assert png.name in names
    if (RESULTS / "gpu_check.json").is_file():
        assert "gpu_check" in names
    assert text.count("data:image/png;base64,") == len(names)
    assert 'src="http' not in text and "<link" not in text  # self-contained


def test_missing_inputs_named_with_their_commands(draft):
    text = draft.html_path.read_text()
    for inp, path in draft.missing:
        assert str(path) in text
        assert inp.command.replace("'", "&#x27;") in text
    assert not draft.missing or "This is a draft" in text


def test_strict_build_fails_naming_every_missing_file(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    (res / "gpu_check.json").unlink()
    with pytest.raises(MissingInputs) as e:
        build(res, tmp_path / "nodata", tmp_path / "out", allow_missing=False, pdf=False)
    msg = str(e.value)
    assert "gpu_check.json" in msg and INPUTS["gpu_check"].command in msg
    assert "nodata/h200" in msg and INPUTS["traces"].command in msg
    assert not (tmp_path / "out" / "report.html").exists()


def _check_numbers(built, results: Path):
    scan = TextScan()
    scan.feed(built.html_path.read_text())
    free = re.sub(r"\s+", " ", "".join(scan.free))
    stray = re.findall(r".{0,30}\d.{0,30}", free)
    assert not stray, f"digits outside injected spans: {stray[:5]}"
    assert set(scan.terms) <= TERMS
    for inj in built.ctx.injected:
        for src in inj.sources:
            if src.startswith("published:"):
                assert PUBLISHED[src.split(":", 1)[1]].value == inj.value
                continue
            f, path = src.split("#", 1)
            v = lookup(json.loads((results / f).read_text()), path)
            if inj.kind == "result":
                assert v == inj.value, src


def test_every_number_traces_to_results(draft):
    assert draft.ctx.injected
    _check_numbers(draft, RESULTS)


def test_number_check_catches_a_typed_number(draft, tmp_path):
    bad = tmp_path / "report.html"
    bad.write_text(draft.html_path.read_text().replace("<p>", "<p>accuracy 97 % ", 1))
    draft2 = type(draft)(bad, None, draft.ctx, draft.figures, draft.missing)
    with pytest.raises(AssertionError, match="digits outside"):
        _check_numbers(draft2, RESULTS)


def _full_results(tmp_path: Path) -> Path:
    """Committed results plus the not-yet-measured files, written in the schemas their commands use,
    so that sections 3–6 render their tables and figures (values are test inputs, not findings)."""
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    det = {k: {"run_accuracy": 0.5 + i / 10, "inference_fpr": 0.1, "median_time_to_alert_s": 40.0 + i,
               "window_auc": 0.8, "lofo_min_family_detection": 0.6,
               "per_family": {"ddp": {"class": "training", "test_instances": 4, "alerted_frac": 0.75}}}
           for i, k in enumerate(("comm-rules", "comm-ml", "fused", "rt-baseline"))}
    (res / "detector.json").write_text(json.dumps({"detectors": det}))
    (res / "dataset.json").write_text(json.dumps({"runs": 3, "by_class": {"training": 2, "inference": 1},
                                                  "configs_by_class": {"training": 2, "inference": 1},
                                                  "families_by_class": {"training": ["ddp"], "inference": ["serve"]}}))
    (res / "flops.json").write_text(json.dumps({"estimators": {
        "three_input": {"median_abs_pct_error": 12.0, "p90_abs_pct_error": 30.0},
        "tensor": {"median_abs_pct_error": 8.0, "p90_abs_pct_error": 20.0}}}))
    strat = lambda n, d: {"name": n, "setting": "h=50", "window_detection": d, "run_detection": d,  # noqa: E731
                          "median_time_to_alert_s": 60.0, "gpu_hour_overhead": 0.2,
                          "loss_penalty_equal_tokens": 0.01, "loss_penalty_equal_gpu_hours": 0.05}
    (res / "redteam.json").write_text(json.dumps({"rounds": [
        {"round": 1, "strategies": [strat("diloco", 0.2), strat("dilute", 0.9)]},
        {"round": 2, "strategies": [strat("diloco", 0.4), strat("dilute", 1.0)]}]}))
    return res


def test_full_build_has_no_missing_blocks_and_traces(tmp_path):
    res = _full_results(tmp_path)
    data = tmp_path / "data"
    shutil.copytree(ROOT / "data" / "gpu_check", data / "h200")  # any recorded run
    b = build(res, data, tmp_path / "out", allow_missing=False, pdf=False)
    text = b.html_path.read_text()
    assert not b.missing and 'class="missing"' not in text
    names = {n for n, _ in b.figures.items}
    assert {"detection_by_round", "evasion_cost"} <= names
    assert "<b>diloco</b>" in text  # ranked first: detected less at the same cost
    _check_numbers(b, res)


@pytest.mark.skipif(find_chromium() is None and not os.environ.get("CI"), reason="no Chromium outside CI")
def test_pdf_printed(tmp_path):
    b = build(RESULTS, DATA, tmp_path, allow_missing=True, pdf=True)
    assert b.pdf_path.read_bytes()[:5] == b"%PDF-" and b.pdf_path.stat().st_size > 50_000


def test_ranking_keeps_each_setting_and_uses_the_red_teams_formula():
    from trainsentry.redteam.rounds import effectiveness
    from trainsentry.report.ranking import rank
    s = lambda setting, det, over: {"name": "diloco", "setting": setting, "run_detection": det,  # noqa: E731
                                    "gpu_hour_overhead": over}
    doc = {"rounds": [{"round": 1, "strategies": [s("h=50", 1.0, 0.1), s("h=500", 1.0, 0.3)]},
                      {"round": 2, "strategies": [s("h=50", 0.5, 0.1), s("h=500", 0.0, 0.3), s("h=10", None, 0.0)]}]}
    ranked = rank(doc)
    assert [(r["setting"], r["round"]) for r in ranked] == [("h=500", 2), ("h=50", 2)]   # h=10: no detection rate
    assert ranked[0]["score"] == effectiveness(0.0, 0.3) == 1 / 1.3
