"""The report builder: sections and figures present, missing inputs named, every number traced."""

from __future__ import annotations

import html
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
from trainsentry.report.location import DRAFT_MARK, report_location
from trainsentry.report.published import PUBLISHED
from trainsentry.report.sections import SECTIONS
from trainsentry.targets import TARGETS

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


CONFIGS = ROOT / "configs"


@pytest.fixture(scope="module")
def draft(tmp_path_factory):
    return build(RESULTS, DATA, tmp_path_factory.mktemp("draft"), allow_missing=True, pdf=False, configs=CONFIGS)


def _sections(text: str) -> dict[str, str]:
    """Section anchor -> its HTML, heading included."""
    return dict(re.findall(r'<section id="([^"]+)">(.*?)</section>', text, re.S))


def test_every_section_heading_present(draft):
    text = draft.html_path.read_text()
    for i, s in enumerate(SECTIONS, 1):
        assert re.search(rf'<span class="secno">{i}.</span> {re.escape(s.TITLE)}(<span[^>]*>[^<]*</span>)?</h2>', text)


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


def _missing_in(html_text: str) -> set[str]:
    return set(re.findall(r'<div class="missing">.*?<code>([^<]+)</code> is missing', html_text, re.S))


def test_draft_marks_each_incomplete_section_and_names_its_command(tmp_path):
    """Every section that shows a missing input is tagged at its heading and in the contents, and the
    banner at the top names it with the file and the command; complete sections are not tagged."""
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    (res / "gpu_check.json").unlink()  # section 2 (and 8) then wait for it too
    for f in ("detector.json", "flops.json", "redteam.json"):
        (res / f).unlink(missing_ok=True)
    b = build(res, DATA, tmp_path / "out", allow_missing=True, pdf=False, configs=CONFIGS)
    text = b.html_path.read_text()
    banner = text[text.index("<div class='draft'>"):text.index("<nav>")]
    nav = text[text.index("<nav>"):text.index("</nav>")]
    secs = _sections(text)
    waiting = {a for a, body in secs.items() if 'class="missing"' in body}
    assert {"s2_monitor", "s3_benign", "s4_flops", "s5_redteam", "s6_ranking", "s8_recommendations"} <= waiting
    for anchor, body in secs.items():
        head = body[:body.index("</h2>")]
        assert ("drafttag" in head) == (anchor in waiting), anchor
        assert (f'href="#{anchor}"' in banner) == (anchor in waiting), anchor
        li = re.search(rf'<li><a href="#{anchor}">.*?</li>', nav).group(0)
        assert ("drafttag" in li) == (anchor in waiting), anchor
        for path in _missing_in(body):
            cmd = next(i.command for i in INPUTS.values() if path.startswith(str(res / i.rel_path)))
            assert path in banner and html.escape(cmd) in banner


def test_strict_build_fails_naming_every_missing_file(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    (res / "gpu_check.json").unlink()
    with pytest.raises(MissingInputs) as e:
        build(res, tmp_path / "nodata", tmp_path / "out", allow_missing=False, pdf=False)
    msg = str(e.value)
    assert "gpu_check.json" in msg and INPUTS["gpu_check"].command in msg
    assert "nodata/h200" in msg and INPUTS["traces"].command in msg
    assert "nodata/redteam-r1" in msg and INPUTS["redteam_traces"].command in msg
    assert not (tmp_path / "out" / "report.html").exists()


def test_an_entry_of_a_shared_file_is_an_input(tmp_path):
    """The real-node agent measurement is results/ingest.json → agent/real: without that entry the
    strict build names the entry and its command, though ingest.json is there."""
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    doc = json.loads((res / "ingest.json").read_text())
    del doc["agent"]["real"]
    (res / "ingest.json").write_text(json.dumps(doc))
    with pytest.raises(MissingInputs) as e:
        build(res, DATA, tmp_path / "out", allow_missing=False, pdf=False)
    assert "ingest.json → agent/real" in str(e.value) and INPUTS["agent_real"].command in str(e.value)


def _check_numbers(built, results: Path, data: Path = DATA, configs: Path = CONFIGS):
    scan = TextScan()
    scan.feed(built.html_path.read_text())
    free = re.sub(r"\s+", " ", "".join(scan.free))
    stray = re.findall(r".{0,30}\d.{0,30}", free)
    assert not stray, f"digits outside injected spans: {stray[:5]}"
    assert set(scan.terms) <= TERMS
    for inj in built.ctx.injected:
        for src in inj.sources:
            if src.startswith("published:"):  # a published figure, or a value computed from published ones
                key = src.split(":", 1)[1]
                assert key in PUBLISHED, src
                assert inj.kind == "derived" or PUBLISHED[key].value == inj.value, src
                continue
            if src.startswith("target:"):  # a project target, shown beside a measurement
                assert inj.kind == "target" and TARGETS[src.split(":", 1)[1]].value == inj.value, src
                continue
            f, path = src.split("#", 1)
            if src.startswith(("data:", "config:")):  # recorded runs' manifests, a campaign file
                assert inj.kind == "derived", src
                root = data if src.startswith("data:") else configs
                assert list(root.glob(f.split(":", 1)[1])) or inj.value == 0, src  # 0: none recorded
                continue
            v = lookup(json.loads((results / f).read_text()), path)
            if inj.kind == "result":
                assert v == inj.value, src


def test_every_number_traces_to_results(draft):
    assert draft.ctx.injected
    _check_numbers(draft, RESULTS)


def _texts(built) -> str:
    scan = TextScan()
    scan.feed(built.html_path.read_text())
    return re.sub(r"\s+", " ", "".join(scan.free))


def test_run_lengths_come_from_the_manifests(draft):
    """Limitations states how long runs ran, computed from manifest start and end, not typed."""
    lengths = [m["end"] - m["start"] for m in map(lambda p: json.loads(p.read_text()),
                                                   (DATA / "h200").glob("*/manifest.json"))]
    med = sorted(lengths)[len(lengths) // 2]
    inj = [i for i in draft.ctx.injected if "data:h200/*/manifest.json#end-start" in i.sources]
    assert inj and any(abs(i.value - med) < 1.0 for i in inj)
    assert {round(min(lengths)), round(max(lengths))} <= {round(i.value) for i in inj}
    assert "minutes" not in draft.html_path.read_text()


def test_real_node_overhead_is_the_current_ingest_entry(draft):
    """Section 2 reads the real-node agent cost from results/ingest.json → agent/real only."""
    real = json.loads((RESULTS / "ingest.json").read_text())["agent"]["real"]
    inj = {s: i.value for i in draft.ctx.injected for s in i.sources}
    assert inj["ingest.json#agent/real/percent_of_one_core"] == real["percent_of_one_core"]
    assert inj["ingest.json#agent/real/nvml_read_periods/energy_period_s"] == real["nvml_read_periods"]["energy_period_s"]
    assert not any("agent_real_h200" in s for s in inj)


def test_redteam_intro_without_results_claims_nothing_about_rounds(draft):
    sec = _sections(draft.html_path.read_text())["s5_redteam"]
    if (RESULTS / "redteam.json").is_file():
        pytest.skip("results/redteam.json exists")
    assert "tuned" not in sec and "refitted" not in sec and "adapt" not in sec
    adv = [p for p in (DATA / "redteam-r1").glob("adv.*/manifest.json")]
    for p in adv:  # every recorded adversarial run is listed, and has its strategy's subsection
        m = json.loads(p.read_text())
        assert m["run_id"] in sec and f"<h3>{m['labels']['family']}</h3>" in sec


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
    (res / "detector.json").write_text(json.dumps({"detectors": det, "protocol": {
        "alert_rule": {"threshold": 0.75, "k": 3, "n": 5}}}))
    (res / "dataset.json").write_text(json.dumps({"runs": 3, "by_class": {"training": 2, "inference": 1},
                                                  "configs_by_class": {"training": 2, "inference": 1},
                                                  "families_by_class": {"training": ["ddp"], "inference": ["serve"]}}))
    (res / "flops.json").write_text(json.dumps({"estimators": {
        "three_input": {"median_abs_pct_error": 12.0, "p90_abs_pct_error": 30.0},
        "tensor": {"median_abs_pct_error": 8.0, "p90_abs_pct_error": 20.0},
        "power_only": {"median_abs_pct_error": None, "p90_abs_pct_error": None, "splits_attempted": 200,
                       "splits_failed": 101, "failures": [{"reason": "energy does not constrain FLOPs", "splits": 101}]}},
        "protocol": {"splits": 200, "cal_fraction": 2 / 3, "configurations": 30, "runs": 34}, "best": "tensor"}))
    strat = lambda n, d: {"name": n, "setting": "h=50", "window_detection": d, "run_detection": d,  # noqa: E731
                          "median_time_to_alert_s": 60.0, "gpu_hour_overhead": 0.2,
                          "loss_penalty_equal_tokens": 0.01, "loss_penalty_equal_gpu_hours": 0.05,
                          "run_ids": [f"adv.{n}.h50-base-r0"]}
    (res / "redteam.json").write_text(json.dumps({
        "protocol": {"primary_detector": "fused", "scoring_rounds_2_plus": "leave one strategy out",
                     "gpu_hour_overhead": "baseline tokens per GPU-hour / adversary's - 1"},
        "rounds": [{"round": 1, "hardening": HARDENING[1], "strategies": [strat("diloco", 0.2), strat("dilute", 0.9)]},
                   {"round": 2, "hardening": HARDENING[2], "strategies": [strat("diloco", 0.4), strat("dilute", 1.0)]}]}))
    return res


HARDENING = {1: "as delivered: fitted on the benign runs only",
             2: "adds the recorded adversarial runs of every other strategy to the fitting data"}


def test_redteam_rounds_told_as_the_results_record_them(tmp_path):
    """Section 5 says how each round hardened the detectors from results/redteam.json, and says the
    strategies did not adapt only when every round scored the same runs."""
    res = _full_results(tmp_path)
    b = build(res, DATA, tmp_path / "out", allow_missing=False, pdf=False, configs=CONFIGS)
    sec = _sections(b.html_path.read_text())["s5_redteam"]
    for h in HARDENING.values():
        assert html.escape(h) in sec
    assert "leave one strategy out" in sec and "did not adapt" in sec and "tuned" not in sec
    doc = json.loads((res / "redteam.json").read_text())
    doc["rounds"][1]["strategies"][0]["run_ids"] = ["adv.diloco.h50-base-r1"]  # a new recording in round 2
    (res / "redteam.json").write_text(json.dumps(doc))
    b = build(res, DATA, tmp_path / "out2", allow_missing=False, pdf=False, configs=CONFIGS)
    assert "did not adapt" not in _sections(b.html_path.read_text())["s5_redteam"]


def test_redteam_benign_verdicts_are_the_red_teams_own(tmp_path):
    """Section 5 states each round's met / missed as results/redteam.json records it (the red team judged
    them against trainsentry.targets); it does not judge them again."""
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    doc = json.loads((res / "redteam.json").read_text())
    primary = doc["protocol"]["primary_detector"]
    for rnd in doc["rounds"]:
        rnd["benign"][primary]["targets"]["run_accuracy"]["met"] = True
        rnd["benign"][primary]["targets"]["inference_fpr"]["met"] = None
    (res / "redteam.json").write_text(json.dumps(doc))
    b = build(res, DATA, tmp_path / "out", allow_missing=True, pdf=False, configs=CONFIGS)
    sec = _sections(b.html_path.read_text())["s5_redteam"]
    table = sec[sec.index("Hardening must not cost benign accuracy"):]
    table = table[:table.index("</table>")]
    rows = table.count("<tr>") - 1
    assert rows == len(doc["rounds"])
    assert table.count("<span class='met'>met</span>") == rows and table.count("not measured") == rows


def test_best_flop_estimator_is_the_one_flops_eval_chose(tmp_path):
    """Section 4 and the summary name results/flops.json's ``best``, chosen once by flops-eval."""
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    doc = json.loads((res / "flops.json").read_text())
    other = next(n for n, e in doc["estimators"].items() if n != doc["best"] and e.get("median_abs_pct_error"))
    doc["best"] = other
    (res / "flops.json").write_text(json.dumps(doc))
    text = build(res, DATA, tmp_path / "out", allow_missing=True, pdf=False, configs=CONFIGS).html_path.read_text()
    from trainsentry.report.figures import flop_label
    label = html.escape(flop_label(other))
    assert f"The most accurate was <b>{label}</b>" in _sections(text)["s4_flops"]
    assert f"The best estimator, {label}, had" in text[text.index("<div class='summary'>"):text.index("<nav>")]


FRACTION_WORDS = re.compile(r"\b(all|every one of the) (two|three|four|five|six)\b|\b(a|one|two) (third|quarter)s?\b|"
                            r"\bhalf of\b|\bone to a few\b", re.I)


def test_no_hand_typed_fractions_in_sections_3_and_4():
    """A share or count in words is computed from the numbers (format ``frac``, ``derived``), never typed."""
    from trainsentry.report.sections import s3_benign, s4_flops
    for mod in (s3_benign, s4_flops):
        typed = FRACTION_WORDS.findall(Path(mod.__file__).read_text())
        assert not typed, (mod.__name__, typed)


def test_shares_in_words_follow_the_protocols(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(RESULTS, res)
    det = json.loads((res / "detector.json").read_text())
    det["protocol"]["train_fraction_of_configs"] = 0.5
    (res / "detector.json").write_text(json.dumps(det))
    flops = json.loads((res / "flops.json").read_text())
    flops["protocol"]["cal_fraction"] = 0.75
    (res / "flops.json").write_text(json.dumps(flops))
    secs = _sections(build(res, DATA, tmp_path / "out", allow_missing=True, pdf=False,
                           configs=CONFIGS).html_path.read_text())
    s3 = re.sub(r"<[^>]+>", "", secs["s3_benign"])
    assert "each holding about half of the configurations" in s3 and "fitted on about half of their" in s3
    assert "held out in about a quarter of them" in re.sub(r"<[^>]+>", "", secs["s4_flops"])


def test_full_build_has_no_missing_blocks_and_traces(tmp_path):
    res = _full_results(tmp_path)
    b = build(res, DATA, tmp_path / "out", allow_missing=False, pdf=False, configs=CONFIGS)
    text = b.html_path.read_text()
    assert not b.missing and 'class="missing"' not in text
    assert "class='drafttag'" not in text and "This is a draft" not in text and DRAFT_MARK not in text
    names = {n for n, _ in b.figures.items}
    assert {"detection_by_round", "evasion_cost", "telemetry_diloco"} <= names
    assert "<b>diloco</b>" in text  # ranked first: detected less at the same cost
    flops = _sections(text)["s4_flops"]  # an estimator without a bounded median says why
    assert re.search(r"unbounded for <b>power only</b> \(<span[^>]*>energy does not constrain FLOPs</span>\)", flops)
    _check_numbers(b, res)


@pytest.mark.skipif(find_chromium() is None and not os.environ.get("CI"), reason="no Chromium outside CI")
def test_pdf_printed(tmp_path):
    b = build(RESULTS, DATA, tmp_path, allow_missing=True, pdf=True)
    assert b.pdf_path.read_bytes()[:5] == b"%PDF-" and b.pdf_path.stat().st_size > 50_000


def test_ranking_is_the_red_teams_own():
    from trainsentry.redteam.rounds import effectiveness
    from trainsentry.report.ranking import rank
    s = lambda setting, det, over, loss=0.1: {"name": "diloco", "setting": setting, "run_detection": det,  # noqa: E731
                                              "window_detection": det, "gpu_hour_overhead": over,
                                              "loss_penalty_equal_tokens": loss, "loss_penalty_equal_gpu_hours": loss}
    doc = {"rounds": [{"round": 1, "strategies": [s("h=50", 1.0, 0.1), s("h=500", 1.0, 0.3)]},
                      {"round": 2, "strategies": [s("h=50", 0.5, 0.1), s("h=500", 0.0, 0.3), s("h=10", None, 0.0),
                                                  s("h=200", 0.0, 0.0, loss=None)]}]}
    ranked = rank(doc)   # computed by the red team's rank_strategies when the file has no ranking yet
    # h=10: no detection rate; h=200: no loss penalty, so the red team leaves both unranked
    assert [(r["setting"], r["round"], r["rank"]) for r in ranked] == [("h=500", 2, 1), ("h=50", 2, 2)]
    assert ranked[0]["score"] == effectiveness(0.0, 0.3) == 1 / 1.3
    assert ranked[0]["_path"] == "rounds/1/strategies/1"
    # a stored ranking is read as stored (its order and scores), not recomputed
    doc["ranking"] = [{"rank": 1, "name": "diloco", "setting": "h=50", "score": 0.5}]
    assert [(r["setting"], r["score"]) for r in rank(doc)] == [("h=50", 0.5)]


def test_campaign_progress_counts_planned_and_recorded_runs(tmp_path):
    """Runs are counted once per dataset: a slice file repeats runs of its campaign, a file of hard
    negatives adds its own to the same dataset; a run directory no file plans is not counted."""
    from trainsentry.report.sections.s9_limitations import campaign_progress
    a, b, h = "other.idle.bare", "other.matmul.n8192_x2", "other.stencil.n1024_z512"
    camp = tmp_path / "configs" / "campaigns"
    camp.mkdir(parents=True)
    (camp / "c.yaml").write_text(f"name: c\nruns:\n- {{workload: {a}, repeats: 3}}\n- {{workload: {b}}}\n")
    (camp / "c-slice.yaml").write_text(f"name: c\nruns:\n- {{workload: {a}}}\n")
    (camp / "c-hard.yaml").write_text(f"name: c\nruns:\n- {{workload: {h}, repeats: 2}}\n")
    (camp / "notes.yaml").write_text("just: notes\n")
    for run in (f"{a}-base-r0", f"{h}-base-r1", "unplanned-base-r0"):
        (tmp_path / "data" / "c" / run).mkdir(parents=True)
        (tmp_path / "data" / "c" / run / "manifest.json").write_text("{}")
    [c] = campaign_progress(tmp_path / "configs", tmp_path / "data")
    assert (c["name"], [f.name for f in c["files"]], c["planned"], c["recorded"]) == (
        "c", ["c-hard.yaml", "c-slice.yaml", "c.yaml"], 6, 2)


def test_report_location_says_where_or_how(draft, tmp_path):
    """What `trainsentry demo` prints at its end: the files and whether they are a draft, or the command."""
    assert "not built yet" in report_location(tmp_path) and "trainsentry report" in report_location(tmp_path)
    line = report_location(draft.html_path.parent)
    assert str(draft.html_path) in line and "report.pdf" not in line  # built without the PDF
    assert ("a draft" in line) == bool(draft.missing)
    (tmp_path / "report.html").write_text("<html>complete</html>")
    (tmp_path / "report.pdf").write_bytes(b"%PDF-")
    line = report_location(tmp_path)
    assert "a draft" not in line and str(tmp_path / "report.pdf") in line


# ----- every section the report issue lists, and every figure, on the committed results

def _strict_or_draft(tmp_path_factory):
    from trainsentry.report.build import check_inputs
    strict = not check_inputs(RESULTS, DATA)
    return build(RESULTS, DATA, tmp_path_factory.mktemp("committed"), allow_missing=not strict, pdf=False,
                 configs=CONFIGS)


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    return _strict_or_draft(tmp_path_factory)


def _adv_families() -> set[str]:
    return {json.loads(p.read_text())["labels"]["family"] for p in (DATA / "redteam-r1").glob("adv.*/manifest.json")}


def expected_figures() -> dict[str, set[str]]:
    """Per section, the figures the committed inputs call for (computed here, independently of the builder)."""
    exp: dict[str, set[str]] = {s.__name__.rsplit(".", 1)[-1]: set() for s in SECTIONS}
    if (RESULTS / "gpu_check.json").is_file():
        exp["s2_monitor"].add("gpu_check")
    ingest = json.loads((RESULTS / "ingest.json").read_text()) if (RESULTS / "ingest.json").is_file() else {}
    if ingest.get("agent", {}).get("fake_8gpu", {}).get("parts_percent_of_one_core"):
        exp["s2_monitor"].add("agent_parts")
    if (RESULTS / "detector.json").is_file():
        exp["s3_benign"] |= {n for n in ("detector_roc.png", "detector_time_to_alert.png")
                             if (RESULTS / "figures" / n).is_file()}
        exp["s3_benign"].add("detector_families")
    if (RESULTS / "flops.json").is_file():
        exp["s4_flops"] |= {"flops_est_vs_true", "flops_errors"}
        if (RESULTS / "figures" / "flops_tensor_rate.png").is_file():
            exp["s4_flops"].add("flops_tensor_rate.png")
    if (RESULTS / "redteam.json").is_file():
        exp["s5_redteam"].add("detection_by_round")
        exp["s5_redteam"] |= {f"telemetry_{f}" for f in _adv_families()}
        exp["s6_ranking"].add("evasion_cost")
    exp["s7_scale"] |= {p.name for p in (RESULTS / "figures").glob("simulator_*.png")}
    return exp


def test_every_section_and_figure_present(committed):
    """CI's check on the report built from the committed results: each of the nine sections the report
    issue lists has its heading and a body, and each figure its inputs call for is embedded in that
    section with an image and a numbered caption."""
    text = committed.html_path.read_text()
    secs = _sections(text)
    assert list(secs) == [s.__name__.rsplit(".", 1)[-1] for s in SECTIONS]
    for anchor, body in secs.items():
        assert len(re.sub(r"<[^>]+>", "", body[body.index("</h2>"):])) > 200, f"{anchor} is nearly empty"
    for anchor, names in expected_figures().items():
        got = set(re.findall(r'<figure data-name="([^"]+)"><img alt="[^"]*" src="data:image/png;base64,[^"]+">'
                             r'<figcaption><span class="figno">Figure \d+\.</span> [^<]', secs[anchor]))
        assert names <= got, f"{anchor}: missing figures {sorted(names - got)}"
    numbers = [int(n) for n in re.findall(r'<span class="figno">Figure (\d+)\.</span>', text)]
    assert numbers == list(range(1, len(numbers) + 1))  # numbered in page order


def test_the_issues_contents_are_there(committed):
    """What each section must show (issue 8), in words a reader would look for."""
    s = _sections(committed.html_path.read_text())
    assert "Threat model." in s["s1_problem"]
    if (RESULTS / "gpu_check.json").is_file():
        assert "Are the NVLink counters right?" in s["s2_monitor"]
    if (RESULTS / "ingest.json").is_file():
        assert "What the agent costs." in s["s2_monitor"]
    if (RESULTS / "detector.json").is_file():
        det = json.loads((RESULTS / "detector.json").read_text())
        b = s["s3_benign"]
        assert ("rt-baseline" in det["detectors"]) != ("missing from this table" in b)  # a row, or why there is none
        if "rt-baseline" in det["detectors"]:
            assert "<td>rt-baseline</td>" in b
        assert "Against the targets." in b and "Per family" in b
        assert f'title="detector.json#protocol/splits">{det["protocol"]["splits"]}<' in b  # the sample sizes
        assert f'title="detector.json#dataset/runs">{det["dataset"]["runs"]}<' in b
    if (RESULTS / "flops.json").is_file():
        assert "seed FLOP study" in s["s4_flops"]
    if (RESULTS / "redteam.json").is_file():
        rt = s["s5_redteam"]
        proto = json.loads((RESULTS / "redteam.json").read_text()).get("protocol", {})
        if str(proto.get("scoring_rounds_2_plus", "")).startswith("leave one strategy out"):
            assert "was never fitted on that strategy's runs" in rt   # the held-out protocol is said
        for fam in _adv_families():
            sub = rt[rt.index(f"<h3>{fam}</h3>"):]
            assert "GPU-hours per token" in sub[:sub.index("</table>")]  # detection by round and cost
        assert "Why " in s["s6_ranking"] or "No strategy setting evaded" in s["s6_ranking"]
    assert "What each layer would see" in s["s7_scale"] or 'class="missing"' in s["s7_scale"]
    assert "<ol class='recs'>" in s["s8_recommendations"]
    lim = s["s9_limitations"]
    assert "No power capping or clock limits." in lim and "Multi-node" in lim


def test_missed_targets_are_said(committed):
    """The detector's targets (issue 4) beside its numbers, each met or missed as computed; a build that
    misses one says so in the summary, section 3 and the limitations."""
    if not (RESULTS / "detector.json").is_file():
        pytest.skip("no detector results")
    from trainsentry.targets import DETECTOR_DATASET, LIVE_DETECTOR
    dets = json.loads((RESULTS / "detector.json").read_text())["detectors"]
    name = next((n for n in (LIVE_DETECTOR, "fused") if n in dets), None)
    if name is None:
        pytest.skip("neither the live verdict nor fused evaluated")
    # judged on the target dataset's test runs where the evaluation read several datasets
    row = next((v for v in dets[name].get("per_dataset") or [] if v["dataset"] == DETECTOR_DATASET), dets[name])
    text = committed.html_path.read_text()
    missed = [k for k in ("run_accuracy", "inference_fpr", "median_time_to_alert_s")
              if not TARGETS[f"detector.{k}"].met(row[k])]
    summary = text[text.index("<div class='summary'>"):text.index("<nav>")]
    secs = _sections(text)
    for part in (summary, secs["s3_benign"], secs["s9_limitations"]):
        assert part.count("<span class='missed'>missed</span>") >= len(missed)
    if missed:
        assert "Detector targets missed." in secs["s9_limitations"]
        assert "not reached yet" in summary
    assert 'data-kind="target" title="target:detector.run_accuracy"' in secs["s3_benign"]


def test_preliminary_when_campaigns_are_unfinished(committed):
    from trainsentry.report.sections.s9_limitations import campaign_progress
    text = committed.html_path.read_text()
    summary = text[text.index("<div class='summary'>"):text.index("<nav>")]
    if any(c["recorded"] < c["planned"] for c in campaign_progress(CONFIGS, DATA)):
        assert "<b>Preliminary.</b>" in summary


def test_full_build_shows_the_reproduced_baseline_row(tmp_path):
    """With rt-baseline in results/detector.json its row stands in the table and no 'missing' statement does."""
    res = _full_results(tmp_path)
    b = build(res, DATA, tmp_path / "out", allow_missing=False, pdf=False, configs=CONFIGS)
    s3 = _sections(b.html_path.read_text())["s3_benign"]
    assert "<td>rt-baseline</td>" in s3 and "missing from this table" not in s3


def test_number_formats():
    from trainsentry.report.context import fmt_value
    assert fmt_value(1 / 3, "frac") == "a third" and fmt_value(2 / 3, "frac") == "two thirds"
    assert fmt_value(0.5, "frac") == "half" and fmt_value(0.4, "frac") == "40\u202f%"
    assert fmt_value(0.9036, "x") == "0.90\u00d7" and fmt_value(18.99, "x") == "19\u00d7"
    assert fmt_value(-2.9e-5, "s3") == "0.000" and fmt_value(0.616, "s3") == "+0.616"
    assert fmt_value(-0.0153, "s3") == "\u22120.015"


# ----- the red team on a one-GPU node (results/redteam-x1.json): an optional input

def _one_gpu_redteam(res: Path, overhead: float = 3.25) -> dict:
    """A small results/redteam-x1.json in the schema `trainsentry redteam rounds` writes (test inputs,
    not findings): two settings, two rounds; the online one evades the single-device trees."""
    def strat(name, setting, det, over, loss, at=0.01):
        return {"name": name, "setting": setting, "window_detection": det, "run_detection": det,
                "median_time_to_alert_s": 9.0 if det else None, "gpu_hour_overhead": over,
                "loss_penalty_equal_tokens": loss, "loss_penalty_equal_gpu_hours": loss,
                "equal_gpu_hours_at": None if loss is None else at,
                "baseline_run_dir": "data/h200/train.ddp.w1536-l24-base-r0",
                "run_ids": [f"adv.{name}.{setting}-base-r0"]}
    doc = {"protocol": {"primary_detector": "fused+single-device"},
           "data": {"strategy_settings": 2, "strategies": ["online", "throttle"]},
           "rounds": [{"round": r, "strategies": [strat("online", "lora-k4", 0.0, overhead, None),
                                                  strat("throttle", "pause50ms", 1.0, 0.19, -0.053)]}
                      for r in (1, 2)],
           "unranked": [{"name": "online", "setting": "lora-k4", "why": "no loss penalty: the curves share no training"}]}
    (res / "redteam-x1.json").write_text(json.dumps(doc))
    return doc


def test_one_gpu_red_team_told_from_its_results(tmp_path):
    """Section 5's "On a one-GPU node" and section 8's sentence read results/redteam-x1.json: a changed
    value shows changed, every number traces to the file, and the lead is said to raise no alert."""
    res = _full_results(tmp_path)
    _one_gpu_redteam(res, overhead=3.25)
    b = build(res, DATA, tmp_path / "out", allow_missing=False, pdf=False, configs=CONFIGS)
    secs = _sections(b.html_path.read_text())
    sub = secs["s5_redteam"][secs["s5_redteam"].index("<h3>On a one-GPU node</h3>"):]
    words = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", sub))
    assert "missed 1 of them: online lora-k4 at 4.25× the GPU-hours per token of DDP" in words
    assert "are the live verdict's single-device path" in words and "raises the live alert as well" in words
    assert "online lora-k4 is not ranked (no loss penalty: the curves share no training)" in words
    assert 'title="redteam-x1.json#rounds/1/strategies/0/gpu_hour_overhead">4.25×<' in sub
    assert "runs detected, round 1" in words and "runs detected, round 2" in words
    assert "−0.053" in words                                  # the throttle's penalty, shown
    assert re.search(r"4.25×</span></td><td>—</td>", sub)   # the online run logged one loss: no penalty to show
    assert "still missed 1 of 2 strategy settings" in re.sub(r"<[^>]+>", "", secs["s8_recommendations"])
    _check_numbers(b, res)
    _one_gpu_redteam(res, overhead=6.5)  # the text follows the file, not a typed number
    sub = _sections(build(res, DATA, tmp_path / "out2", allow_missing=False, pdf=False,
                          configs=CONFIGS).html_path.read_text())["s5_redteam"]
    assert ">7.50×<" in sub and ">4.25×<" not in sub


def test_report_builds_without_the_one_gpu_red_team(tmp_path):
    """results/redteam-x1.json is optional: without it the strict build succeeds, is no draft, and
    shows neither the subsection nor section 8's sentence."""
    assert INPUTS["redteam_x1"].optional
    assert all("redteam_x1" not in s.INPUTS for s in SECTIONS)  # declared inputs are required
    res = _full_results(tmp_path)
    (res / "redteam-x1.json").unlink(missing_ok=True)
    b = build(res, DATA, tmp_path / "out", allow_missing=False, pdf=False, configs=CONFIGS)
    text = b.html_path.read_text()
    assert not b.missing and "This is a draft" not in text and "redteam-x1.json" not in text
    assert "<h3>On a one-GPU node</h3>" not in text and "Against the red team on one GPU" not in text
    _check_numbers(b, res)


def test_pipes_sentence_follows_where_the_fp16_pipe_read(tmp_path):
    """Section 8's pipe sentence names the FP16 lead only while the pipe read above zero in pure-bf16
    training alone, and says it is no training signal once benign work read it higher."""
    import runpy

    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s8_recommendations import _pipes

    # the study stores where each pipe read above zero; the report reads that, not the groups
    above_zero_in = runpy.run_path(str(ROOT / "scripts" / "pipes_study.py"))["above_zero_in"]

    def write(doc):
        doc["above_zero_in"] = above_zero_in(doc["groups"])
        (res / "pipes.json").write_text(json.dumps(doc))

    res = tmp_path / "results"
    res.mkdir()
    doc = json.loads((RESULTS / "pipes.json").read_text())
    groups = doc["groups"]
    fp16 = "gpm_fp16_util_pct"
    groups["inference (fp16)"] = {**groups["training (bf16)"], "above_zero": {fp16: 1.0},
                                  fp16: [0.8, 2.5]}   # serving reads it higher than training
    write(doc)
    said = _pipes(Ctx(res, DATA, True, CONFIGS))
    assert "no training signal" in said and "a lead to test" not in said
    for k, g in groups.items():   # now only pure-bf16 training reads it
        g["above_zero"][fp16] = 1.0 if k == "training (bf16)" else 0.0
    write(doc)
    said = _pipes(Ctx(res, DATA, True, CONFIGS))
    assert "a lead to test against" in said and "no training signal" not in said
    groups["inference (fp16)"]["above_zero"][fp16] = 1.0   # read above zero, lower than training's
    groups["inference (fp16)"][fp16] = [0.0001, 0.0002]
    write(doc)
    said = _pipes(Ctx(res, DATA, True, CONFIGS))
    assert "highest in training, but not in training alone" in said
    for g in groups.values():   # every group reads it: the study names none, nor does the report
        g["above_zero"][fp16] = 1.0
    write(doc)
    said = _pipes(Ctx(res, DATA, True, CONFIGS))
    assert "above zero" not in said


def test_backward_pass_without_update_is_told_only_where_attribution_was_judged(tmp_path):
    """Section 8 says a backward pass is not enough (attribution on frozen weights read as training) from
    results/one_gpu.json's own per-family numbers, and says nothing of it where attribution is absent."""
    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s8_recommendations import _backward_without_update

    res = tmp_path / "results"
    res.mkdir()
    doc = json.loads((RESULTS / "one_gpu.json").read_text())
    fam = doc["frozen"]["fused+single-device"]["per_family"]
    fam["attribute"] = {"class": "inference", "test_instances": 9, "alerted_frac": 0.5}
    (res / "one_gpu.json").write_text(json.dumps(doc))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = _backward_without_update(ctx)
    assert "input attribution on a" in said and "evidence that weights change" in said
    added = doc["added"]["fused+single-device"]["per_family"]["attribute"]["alerted_frac"]
    assert [i.value for i in ctx.injected] == [0.5, 9, added] and "with its other configurations in the fit" in said
    del doc["added"]["fused+single-device"]["per_family"]["attribute"]   # not judged with it in the fit: not said
    (res / "one_gpu.json").write_text(json.dumps(doc))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = _backward_without_update(ctx)
    assert [i.value for i in ctx.injected] == [0.5, 9] and "in the fit" not in said
    assert "same computation as fine-tuning adapters" in said   # no matched-shape study: the physical argument
    (res / "pipes.json").write_text(json.dumps({}))   # a pipes.json written before the matched shapes
    assert "same computation as fine-tuning adapters" in _backward_without_update(Ctx(res, DATA, True, CONFIGS))
    # the pipes study's matched shapes (results/pipes.json matched_summary): said from its numbers
    comp = {"training": "lora", "other": "inference attribute", "shapes": 3, "above": 3,
            "training_ratio": [0.69, 2.18], "other_ratio": [0.36, 0.96], "overlap": True}
    pipes = {"matched_summary": {"comparisons": [
        {**comp, "training": "single-gpu", "above": 0}, comp]}}
    (res / "pipes.json").write_text(json.dumps(pipes))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = _backward_without_update(ctx)
    assert [i.value for i in ctx.injected][2:] == [3, 3, 0.69, 2.18, 0.36, 0.96]
    assert 'matched_summary/comparisons/1/above' in ctx.injected[2].sources[0]
    assert "which an inspector does not know" in said and "evidence that weights change" in said
    for above, overlap, words in ((3, False, "apart even across shapes"), (2, True, "parts them only sometimes"),
                                  (0, True, "it does not part them")):
        comp.update(above=above, overlap=overlap)
        (res / "pipes.json").write_text(json.dumps(pipes))
        said = _backward_without_update(Ctx(res, DATA, True, CONFIGS))
        assert words in said and "inspector does not know" not in said
    # LoRA with fewer adapters (pipes_study's "lora (...)" groups): each said from its numbers
    comp.update(above=3, overlap=True)
    pipes["matched_summary"]["comparisons"] += [
        {**comp, "training": "lora (q, v)", "above": 2},
        {**comp, "training": "lora (q, v; last 4 of 20 blocks)", "shapes": 1, "above": 0}]
    (res / "pipes.json").write_text(json.dumps(pipes))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = _backward_without_update(ctx)
    assert ("With fewer adapters the gap closes (adapters on q, v above at 2 of 3; q, v; last 4 of 20 blocks above "
            "at 0 of 1)") in re.sub(r"<[^>]+>", "", said)
    assert "matched_summary/comparisons/3/training" in ctx.injected[-3].sources[0]   # the label is data, not typed
    for c in pipes["matched_summary"]["comparisons"][2:]:
        c["above"] = c["shapes"]
    (res / "pipes.json").write_text(json.dumps(pipes))
    assert "With fewer adapters it holds" in _backward_without_update(Ctx(res, DATA, True, CONFIGS))
    del fam["attribute"]
    (res / "one_gpu.json").write_text(json.dumps(doc))
    assert _backward_without_update(Ctx(res, DATA, True, CONFIGS)) == ""


def test_docs_report_lists_every_input_the_report_reads():
    """docs/report.md's inputs table is written by hand: every file inputs.py declares is in it, with the
    optional ones named optional, so a strict build never fails on a file the page does not mention."""
    page = (ROOT / "docs" / "report.md").read_text()
    table = [line for line in page.splitlines() if line.startswith("| `")]
    for inp in INPUTS.values():
        path = f"{inp.root}/{inp.rel_path}"
        rows = [line for line in table if line.startswith(f"| `{path}")]
        assert rows, f"docs/report.md lists no row for {path}"
        if inp.optional:
            assert any("optional" in r.split("|")[1] for r in rows), f"{path} is optional in inputs.py"


def test_flops_on_one_gpu_told_from_its_results_and_optional(tmp_path):
    """Section 4's one-GPU subsection reads results/flops-one-gpu.json (every number traced); without
    the file the strict build is no draft and leaves the subsection out."""
    assert INPUTS["flops_one_gpu"].optional and all("flops_one_gpu" not in s.INPUTS for s in SECTIONS)
    res = _full_results(tmp_path)
    b = build(res, DATA, tmp_path / "out", allow_missing=False, pdf=False, configs=CONFIGS)
    sub = _sections(b.html_path.read_text())["s4_flops"]
    doc = json.loads((res / "flops-one-gpu.json").read_text())
    seed = doc["time_base"]["by_time_base"]["duration_s"]["three_input"]["median_pct_error"]
    from trainsentry.report.context import fmt_value
    assert "<h3>FLOPs on a one-GPU node</h3>" in sub
    assert ('title="flops-one-gpu.json#time_base/by_time_base/duration_s/three_input/median_pct_error">'
            f"{fmt_value(seed, 's1')}\u202f%<") in sub
    _check_numbers(b, res)
    (res / "flops-one-gpu.json").unlink()
    b = build(res, DATA, tmp_path / "out2", allow_missing=False, pdf=False, configs=CONFIGS)
    text = b.html_path.read_text()
    assert not b.missing and "This is a draft" not in text and "FLOPs on a one-GPU node" not in text


def test_host_link_item_told_from_the_offload_gate_and_optional(tmp_path):
    """Section 8's host-link item reads results/offload-gate.json (optional) and the fused detector's
    per-family alert rate from results/one_gpu.json; every number is traced. Benign runs that pass the
    gate are named, family by family, and then the gate is not offered as an alert on its own; without
    them the item says the corpus lacks such work; the cost of offloading is said when measured; without
    the family or the file nothing is said."""
    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s8_recommendations import _host_link

    assert INPUTS["offload_gate"].optional and all("offload_gate" not in s.INPUTS for s in SECTIONS)
    res = tmp_path / "results"
    res.mkdir()
    gate = {"by_family": {"training zero-offload": {"runs": 6, "passing_runs": 5, "max_pass_share": 1.0},
                          "inference kvswap": {"runs": 4, "passing_runs": 1, "max_pass_share": 0.6},
                          "training lora": {"runs": 7, "passing_runs": 0, "max_pass_share": 0.0}},
            "cost": {"train.offload.a": {"slowdown": 3.6}, "train.offload.b": {"slowdown": 7.7},
                     "train.offload.c": {"slowdown": None}}}
    (res / "offload-gate.json").write_text(json.dumps(gate))
    doc = json.loads((RESULTS / "one_gpu.json").read_text())
    doc["frozen"]["fused"]["per_family"]["zero-offload"] = {"class": "training", "test_instances": 6, "alerted_frac": 0.25}
    (res / "one_gpu.json").write_text(json.dumps(doc))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = re.sub(r"<[^>]+>", "", _host_link(ctx))
    assert "in 5 of its 6 runs" in said and "alerted on 25" in said and "ran 3.60× to 7.70× as many tokens per GPU-hour" in said
    assert "1 of the node's 4 benign runs passed it too" in said and "(1 of 4 kvswap runs (inference: a chat server" in said
    assert "signal-processing" not in said      # only the families that passed are described
    assert "cannot be the answer" in said and "might separate them" in said
    assert [i.value for i in ctx.injected] == [4, 0.25, 3.6, 7.7, 5, 6, 1, 4, 1]
    # a training family passing is not counted as benign; accumulation's cost is told apart
    gate["by_family"]["training lora"]["passing_runs"] = 2
    gate["cost"]["train.offload.d"] = {"slowdown": 1.5, "accum": 8}
    (res / "offload-gate.json").write_text(json.dumps(gate))
    said = re.sub(r"<[^>]+>", "", _host_link(Ctx(res, DATA, True, CONFIGS)))
    assert "1 of the node's 4 benign runs passed it too" in said and "(1.50× with gradient accumulation" in said
    gate["by_family"]["inference kvswap"]["passing_runs"] = 0     # benign look-alikes recorded, none passes
    del gate["cost"]
    (res / "offload-gate.json").write_text(json.dumps(gate))
    del doc["frozen"]["fused"]["per_family"]["zero-offload"]   # not judged by the fused detector: no rate
    (res / "one_gpu.json").write_text(json.dumps(doc))
    said = re.sub(r"<[^>]+>", "", _host_link(Ctx(res, DATA, True, CONFIGS)))
    assert "alerted on" not in said and "decide whether it alerts" in said and "the host's update in every step" in said
    assert "None of that node's 4 benign runs passed the gate." in said and "cannot be trusted" not in said
    gate["by_family"]["inference offload"] = gate["by_family"].pop("inference kvswap")   # no look-alike recorded
    (res / "offload-gate.json").write_text(json.dumps(gate))
    said = re.sub(r"<[^>]+>", "", _host_link(Ctx(res, DATA, True, CONFIGS)))
    assert "None of that node's 4 benign runs passed the gate, but none of them moved" in said
    assert "cannot be trusted to alert alone" in said
    del gate["by_family"]["training zero-offload"]
    (res / "offload-gate.json").write_text(json.dumps(gate))
    assert _host_link(Ctx(res, DATA, True, CONFIGS)) == ""


def test_host_link_item_says_what_the_host_source_measured(tmp_path):
    """With results/host-study.json (optional), the host-link item replaces "might separate them" by what
    the host source measured: the benign runs it witnessed (named by family), how busy the others were,
    the ZeRO-Offload configurations it never saw and their cost (accumulation told apart), and what the
    committed detectors with gate and witness beside them caught; every number traced."""
    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s8_recommendations import _host_link

    assert INPUTS["host_study"].optional and all("host_study" not in s.INPUTS for s in SECTIONS)
    res = tmp_path / "results"
    res.mkdir()
    gate = {"by_family": {"training zero-offload": {"runs": 6, "passing_runs": 6, "max_pass_share": 1.0},
                          "other stream": {"runs": 4, "passing_runs": 2, "max_pass_share": 0.9}}}
    (res / "offload-gate.json").write_text(json.dumps(gate))
    ctx = Ctx(res, DATA, True, CONFIGS)
    assert "might separate them" in re.sub(r"<[^>]+>", "", _host_link(ctx))
    study = {"busy_cores": 3.0, "busy_share": 0.1,
             "by_family": {"training zero-offload": {"runs": 9, "gate": 8, "witnessed": 5, "gate_and_witness": 5,
                                                     "detectors": 3, "stack": 7},
                           "other stream": {"runs": 5, "gate": 3, "witnessed": 3, "gate_and_witness": 2,
                                            "detectors": 0, "stack": 2},
                           "inference kvswap": {"runs": 3, "gate": 2, "witnessed": 0, "gate_and_witness": 0,
                                                "detectors": 0, "stack": 0}},
             "runs": {"a": {"class": "inference", "witnessed": False, "busy_cores_median": 1.02},
                      "b": {"class": "other", "witnessed": False, "busy_cores_median": 1.07},
                      "c": {"class": "other", "witnessed": True, "busy_cores_median": 9.0},
                      "d": {"class": "training", "witnessed": False, "busy_cores_median": 2.0}},
             "offload": {"x": {"witnessed_runs": 2, "slowdown": 2.8, "accum": 1, "host_threads": None},
                         "y": {"witnessed_runs": 0, "slowdown": 7.6, "accum": 1, "host_threads": 1,
                               "gpu_hour_multiplier": 7.6},
                         "z": {"witnessed_runs": 0, "slowdown": 4.5, "accum": 1, "host_threads": 2,
                               "gpu_hour_multiplier": 5.2},
                         "w": {"witnessed_runs": 0, "slowdown": 1.9, "accum": 8, "host_threads": 1,
                               "gpu_hour_multiplier": 5.0}}}
    (res / "host-study.json").write_text(json.dumps(study))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = re.sub(r"<[^>]+>", "", _host_link(ctx))
    assert "might separate them" not in said
    assert "kept a median of 1.04 core(s) busy" in said     # the training run d is not benign
    assert "saw 3 of the 8 benign runs (3 of 5 stream runs: in its detector configurations" in said
    assert "kvswap" not in said.split("saw ")[1][:40]
    assert ("an update on 1 or 2 host thread(s) was never witnessed, at 4.50× to 7.60× fewer tokens per GPU-hour than "
            "on the GPU alone (1.90× with gradient accumulation) and 5.00× to 7.60× the GPU-hours") in said
    assert "alerted on 3 of the 9 ZeRO-Offload runs recorded with the host source, and with gate and witness beside them on 7, at the price of 2 false alerts in the 8 benign runs" in said
    assert "evidence to show beside a verdict, not an alert" in said
    study["by_family"]["other stream"]["witnessed"] = 0
    del study["offload"]
    (res / "host-study.json").write_text(json.dumps(study))
    said = re.sub(r"<[^>]+>", "", _host_link(Ctx(res, DATA, True, CONFIGS)))
    assert "the witness saw none of the 8 benign runs" in said and "never witnessed" not in said


def test_the_targets_are_judged_on_the_committed_two_gpu_datasets_rows_for_the_live_verdict(tmp_path):
    """With several datasets in results/detector.json, the targets paragraph and the summary judge the live
    verdict's detector (fused with the single-device path) on `data/h200`'s test runs, say what fused alone
    reaches there, and trace every number to the per-dataset rows; with one dataset, the pooled row."""
    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s3_benign import _targets
    from trainsentry.report.summary import meets_detector_targets, primary_detector, target_path
    from trainsentry.targets import LIVE_DETECTOR

    def row(dataset, acc, fpr, tta):
        return {"dataset": dataset, "run_accuracy": acc, "inference_fpr": fpr, "median_time_to_alert_s": tta,
                "training_detection": acc, "other_fpr": 0.0, "splits_with_test_runs": 5}

    res = tmp_path / "results"
    res.mkdir()
    pooled = {"run_accuracy": 0.9, "inference_fpr": 0.04, "median_time_to_alert_s": 9.0}
    doc = {"dataset": {"runs": 618, "root": "data/h200 + data/h200x1"},
           "protocol": {"splits": 200, "train_fraction_of_configs": 2 / 3},
           "detectors": {"fused": {**pooled, "per_dataset": [row("data/h200", 0.95, 0.001, 9.0),
                                                             row("data/h200x1", 0.6, 0.0, 9.0)]},
                         LIVE_DETECTOR: {**pooled, "per_dataset": [row("data/h200", 0.993, 0.004, 9.1),
                                                                   row("data/h200x1", 0.93, 0.06, 9.0)]}}}
    (res / "detector.json").write_text(json.dumps(doc))
    ctx = Ctx(res, DATA, True, CONFIGS)
    assert primary_detector(ctx) == LIVE_DETECTOR and meets_detector_targets(ctx, LIVE_DETECTOR)
    assert not meets_detector_targets(ctx, "fused")
    assert target_path(ctx, "fused") == "detectors/fused/per_dataset/0"
    said = re.sub(r"<[^>]+>", "", _targets(ctx))
    assert "What the collector runs is fused with the single-device check" in said
    assert f"evaluated as {LIVE_DETECTOR}: on the test runs of data/h200: run accuracy 99.3" in said
    assert "fused alone: on the test runs of data/h200: run accuracy 95" in said
    assert {s for i in ctx.injected for s in i.sources if s.startswith("detector.json#detectors/")} >= {
        f"detector.json#detectors/{LIVE_DETECTOR}/per_dataset/0/run_accuracy",
        "detector.json#detectors/fused/per_dataset/0/run_accuracy"}
    # one dataset: the pooled row, the old wording for fused
    doc = {"dataset": {"runs": 148, "root": "data/h200"}, "protocol": {}, "detectors": {"fused": pooled}}
    (res / "detector.json").write_text(json.dumps(doc))
    ctx = Ctx(res, DATA, True, CONFIGS)
    assert primary_detector(ctx) == "fused" and target_path(ctx, "fused") == "detectors/fused"
    said = re.sub(r"<[^>]+>", "", _targets(ctx))
    assert "set targets for the fused detector; on this data it reaches run accuracy 90" in said


def test_the_hardened_lead_is_told_from_its_comparison_when_present(tmp_path):
    """Section 5's one-GPU paragraph adds the live lead hardened with the red team's trainers from
    results/leads-hardened.json (optional): its revision and counts, each traced; nothing without it."""
    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s5_redteam import _hardened

    assert INPUTS["leads_hardened"].optional and all("leads_hardened" not in s.INPUTS for s in SECTIONS)
    res = tmp_path / "results"
    res.mkdir()
    assert _hardened(Ctx(res, DATA, True, CONFIGS)) == ""
    run = lambda cls, fam, hit: {"run_id": ("adv." if fam == "throttle" else "x.") + fam, "class": cls,  # noqa: E731
                                 "family": fam, "leads": {"abc1234": {"alerted": hit}}}
    doc = {"revisions": ["abc1234", "old"],
           "runs": [run("inference", "embed", False)] * 3 + [run("training", "throttle", True)] * 3,
           "counts": {"abc1234": {"inference": {"runs": 3, "alerted": 0}, "training": {"runs": 3, "alerted": 3}},
                      "old": {"inference": {"runs": 3, "alerted": 2}, "training": {"runs": 3, "alerted": 2}}}}
    (res / "leads-hardened.json").write_text(json.dumps(doc))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = re.sub(r"<[^>]+>", "", _hardened(ctx))
    assert "committed at abc1234 judged the 6 runs recorded after it: it alerted on 0 of 3 services (embed) and found 3 of 3" in said
    assert [i.value for i in ctx.injected] == ["abc1234", 6, 0, 3, 3, 3]
    assert all(s.startswith("leads-hardened.json#") for i in ctx.injected for s in i.sources)
    # gapless single-GPU training (the trainers' cost baselines) is counted apart from the trainers that hide
    doc["runs"] = doc["runs"] + [run("training", "single-gpu", True), run("training", "single-gpu", False)]
    (res / "leads-hardened.json").write_text(json.dumps(doc))
    said = re.sub(r"<[^>]+>", "", _hardened(Ctx(res, DATA, True, CONFIGS)))
    assert "found 3 of 3 throttled trainers, 1 of 2 single-GPU training runs without gaps" in said
    # lab training of a family the lead never saw (a diffusion transformer) is not a throttled trainer
    doc["runs"] = doc["runs"] + [run("training", "dit", True)] * 2
    (res / "leads-hardened.json").write_text(json.dumps(doc))
    said = re.sub(r"<[^>]+>", "", _hardened(Ctx(res, DATA, True, CONFIGS)))
    assert ("found 3 of 3 throttled trainers, 1 of 2 single-GPU training runs without gaps (their cost "
            "baselines) and 2 of 2 runs of lab training it had never seen (dit)") in said


def test_the_decode_rounds_are_told_from_their_prospective_checks(tmp_path):
    """Section 5's one-GPU paragraph tells the live lead's check on the decode dataset
    (results/prospective-<rev>-h200x1-decode.json, optional ``decode_first``) and the refitted lead's on
    the later rounds (``decode_second``, ``decode_third``, where present): counts from the checks' runs,
    each traced; nothing without the first."""
    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s5_redteam import _decode_leads

    assert INPUTS["decode_first"].optional and all("decode_first" not in s.INPUTS for s in SECTIONS)
    res = tmp_path / "results"
    res.mkdir()
    assert _decode_leads(Ctx(res, DATA, True, CONFIGS)) == ""
    run = lambda cls, hit, fam="generate": {"class": cls, "family": fam, "config": "x",  # noqa: E731
                                            "single-device_alerted_capped_rule": hit}
    first = {"model": {"rev": "abc1234"}, "per_run": [run("training", True)] * 4 + [run("training", False)]
             + [run("inference", False)] * 7 + [run("inference", True)]}
    (res / INPUTS["decode_first"].rel_path).write_text(json.dumps(first))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = re.sub(r"<[^>]+>", "", _decode_leads(ctx))
    assert "the lead committed at abc1234, live when they were recorded, alerted on 1 of 8, and found 4 of 5 single-GPU trainers" in said
    assert said.endswith(".")
    assert [i.value for i in ctx.injected] == [4, 5, 1, 8, "abc1234"]
    assert INPUTS["decode_second"].optional and all("decode_second" not in s.INPUTS for s in SECTIONS)
    latest = {"model": {"rev": "def5678"}, "per_run": [run("training", True)] * 3 + [run("inference", False)] * 6}
    (res / INPUTS["decode_second"].rel_path).write_text(json.dumps(latest))
    said = re.sub(r"<[^>]+>", "", _decode_leads(Ctx(res, DATA, True, CONFIGS)))
    assert ("refitted with them, the lead committed at def5678 found 3 of 3 trainers recorded after it and "
            "alerted on 0 of 6 services (generate).") in said
    latest["per_run"][-1] = run("inference", True, "attribute")
    (res / INPUTS["decode_second"].rel_path).write_text(json.dumps(latest))
    said = re.sub(r"<[^>]+>", "", _decode_leads(Ctx(res, DATA, True, CONFIGS)))
    assert "alerted on 1 of 6 services (alerted: attribute; quiet: generate; input attribution runs" in said
    assert INPUTS["decode_third"].optional and all("decode_third" not in s.INPUTS for s in SECTIONS)
    third = {"model": {"rev": "fed9876"}, "per_run": [run("training", True)] * 2 + [run("inference", False, "serve")] * 6}
    (res / INPUTS["decode_third"].rel_path).write_text(json.dumps(third))
    said = re.sub(r"<[^>]+>", "", _decode_leads(Ctx(res, DATA, True, CONFIGS)))
    assert ("; refitted again, the lead committed at fed9876 found 2 of 2 trainers recorded after it and alerted "
            "on 0 of 6 services (serve).") in said


def test_the_unseen_family_is_told_when_present(tmp_path):
    """Section 3's targets paragraph adds the benign family held out of every fit
    (results/unseen-diffusion.json, optional): each detector's alerts, traced; nothing without it."""
    from trainsentry.report.context import Ctx
    from trainsentry.report.sections.s3_benign import _unseen_family

    assert INPUTS["unseen_diffusion"].optional and all("unseen_diffusion" not in s.INPUTS for s in SECTIONS)
    res = tmp_path / "results"
    res.mkdir()
    assert _unseen_family(Ctx(res, DATA, True, CONFIGS)) == ""
    doc = {"family": "diffusion", "runs_fitted": 469, "runs_judged": 6,
           "detectors": {"fused": {"alerted": 0, "correct": 6, "runs": []},
                         "fused+single-device-tensor": {"alerted": 3, "correct": 3, "runs": []}}}
    (res / "unseen-diffusion.json").write_text(json.dumps(doc))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = re.sub(r"<[^>]+>", "", _unseen_family(ctx))
    assert "fitted on the other 469 runs and judging its 6, fused alerted on 0; fused+single-device-tensor alerted on 3" in said
    assert sorted(i.value for i in ctx.injected) == [0, 3, 6, 469]
    assert all(s.startswith("unseen-diffusion.json#") for i in ctx.injected for s in i.sources)
    # a second held-out family follows the first, its numbers traced to its own file
    assert INPUTS["unseen_video"].optional
    (res / "unseen-video.json").write_text(json.dumps({**doc, "family": "video", "runs_fitted": 483, "runs_judged": 4,
                                                       "detectors": {"fused": {"alerted": 0, "correct": 4, "runs": []}}}))
    ctx = Ctx(res, DATA, True, CONFIGS)
    said = re.sub(r"<[^>]+>", "", _unseen_family(ctx))
    assert "So was a second one, video generation" in said
    assert "fitted on the other 483 runs and judging its 4, fused alerted on 0 (docs/unseen-video.md)." in said
    assert sum(s.startswith("unseen-video.json#") for i in ctx.injected for s in i.sources) == 3
