"""scripts/compare_leads.py: committed single-device leads side by side on the runs all of them judged."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compare_leads.py"


def _doc(rev: str, runs: list[tuple[str, str, float, bool, bool]], data: str = "data/x") -> dict:
    return {"command": f"python scripts/prospective.py --model-rev {rev} --data {data}", "model": {"rev": rev},
            "data": data,
            "judged_from": 1.0,
            "per_run": [{"run_id": rid, "class": cls, "family": "f", "config_seen_before": seen,
                         "single-device_p_in_run_median": p, "single-device_alerted_capped_rule": alerted,
                         "alerted": False} for rid, cls, p, alerted, seen in runs]}


def test_only_runs_every_lead_judged_pooled_over_datasets(tmp_path):
    ns = runpy.run_path(str(SCRIPT))
    # b: alerted in a burst although its median is low (the alert flag is read, not the median)
    new = [_doc("new", [("a", "inference", 0.1, False, False), ("b", "inference", 0.2, True, True)]),
           _doc("new", [("t", "training", 0.95, True, False)], "data/rt")]
    old = [_doc("old", [("a", "inference", 0.8, True, False), ("b", "inference", 0.2, False, False),
                        ("z", "inference", 0.1, False, False)]),       # z: recorded before "new" was fitted
           _doc("old", [("t", "training", 0.5, False, False)], "data/rt")]
    res = ns["compare"](new + old)
    assert res["revisions"] == ["new", "old"]
    assert [r["run_id"] for r in res["runs"]] == ["a", "b", "t"]
    assert res["counts"]["new"] == {"inference": {"runs": 2, "alerted": 1}, "training": {"runs": 1, "alerted": 1}}
    assert res["counts"]["old"] == {"inference": {"runs": 2, "alerted": 1}, "training": {"runs": 1, "alerted": 0}}
    page = ns["render"](res, "cmd")
    assert "| `b` | inference | f | **0.20** † | 0.20 |" in page             # alerted in bold, seen config marked
    assert "| `new` | 1 of 2 | 1 of 1 |" in page and "| `old` | 1 of 2 | 0 of 1 |" in page
    paths = []
    for i, d in enumerate(new + old):
        paths += ["--prospective", str(tmp_path / f"{i}.json")]
        (tmp_path / f"{i}.json").write_text(json.dumps(d))
    assert ns["main"]([*paths, "--out", str(tmp_path / "out.json"), "--docs", str(tmp_path / "out.md")]) == 0
    assert json.loads((tmp_path / "out.json").read_text())["counts"] == res["counts"]


def test_a_file_without_the_lead_is_refused():
    ns = runpy.run_path(str(SCRIPT))
    doc = _doc("x", [("a", "inference", 0.1, False, False)])
    del doc["per_run"][0]["single-device_p_in_run_median"]
    with pytest.raises(ValueError, match="--also single-device"):
        ns["compare"]([doc])


def test_runs_at_keeps_a_comparison_reproducible_after_later_runs():
    """Prospective files are re-run as runs are added: ``runs_at`` keeps the comparison to the runs
    committed then, so its command still gives the same answer."""
    ns = runpy.run_path(str(SCRIPT))
    docs = [_doc("new", [("a", "inference", 0.1, False, False), ("later", "training", 0.9, True, False)]),
            _doc("old", [("a", "inference", 0.8, True, False), ("later", "training", 0.2, False, False)])]
    assert [r["run_id"] for r in ns["compare"](docs)["runs"]] == ["a", "later"]
    res = ns["compare"](docs, runs_at={("data/x", "a"), ("data/x", "elsewhere"), ("data/y", "later")})
    assert [r["run_id"] for r in res["runs"]] == ["a"]
    assert res["counts"]["old"] == {"inference": {"runs": 1, "alerted": 1}}


def test_committed_runs_reads_the_tree_at_a_revision(tmp_path):
    import subprocess
    ns = runpy.run_path(str(SCRIPT))
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    (tmp_path / "data/x/run-a").mkdir(parents=True)
    (tmp_path / "data/x/run-a/manifest.json").write_text("{}")
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "a"], check=True)
    (tmp_path / "data/x/run-b").mkdir()
    (tmp_path / "data/x/run-b/manifest.json").write_text("{}")
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "b"], check=True)
    assert ns["committed_runs"]("HEAD~1", "data/x", tmp_path) == {"run-a"}
    assert ns["committed_runs"]("HEAD", "data/x", tmp_path) == {"run-a", "run-b"}
    with pytest.raises(ValueError, match="ls-tree"):
        ns["committed_runs"]("HEAD", "data/no-such-root", tmp_path)


def test_one_run_id_under_two_roots_is_two_runs():
    """A cost baseline recorded again under the red team's root can carry a lab run's id: both are kept,
    and the page names each with its root."""
    ns = runpy.run_path(str(SCRIPT))
    docs = [_doc("new", [("same", "training", 0.9, True, False)], "data/lab"),
            _doc("new", [("same", "training", 0.8, True, False)], "data/rt"),
            _doc("old", [("same", "training", 0.7, False, False)], "data/lab"),
            _doc("old", [("same", "training", 0.2, False, False)], "data/rt")]
    res = ns["compare"](docs)
    assert [(r["data"], r["run_id"]) for r in res["runs"]] == [("data/lab", "same"), ("data/rt", "same")]
    assert res["counts"]["new"] == {"training": {"runs": 2, "alerted": 2}}
    page = ns["render"](res, "cmd")
    assert "| `same` (data/lab) | training | f | **0.90** | 0.70 |" in page
    assert "| `same` (data/rt) | training | f | **0.80** | 0.20 |" in page
