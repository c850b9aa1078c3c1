"""scripts/unseen_family.py: one family held out of every fit, each run of it judged."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "unseen_family.py"


def test_the_held_out_family_is_judged_by_detectors_fitted_on_every_other_run(tiny_dataset, feature_cache, tmp_path):
    ns = runpy.run_path(str(SCRIPT))
    out, docs = tmp_path / "u.json", tmp_path / "u.md"
    ns["main"](["--data", str(tiny_dataset), "--family", "idle", "--detector", "comm-rules", "--detector", "fused",
                "--out", str(out), "--docs", str(docs), "--cache", str(feature_cache)])
    res = json.loads(out.read_text())
    assert res["family"] == "idle" and res["class"] == ["other"]
    assert res["runs_judged"] == 6 and res["runs_fitted"] == 12          # 3 lengths x 2 repeats per family
    for name in ("comm-rules", "fused"):
        d = res["detectors"][name]
        assert len(d["runs"]) == 6 and all(r["run_id"].startswith("idle-") for r in d["runs"])
        assert d["correct"] == sum(not r["alerted"] for r in d["runs"])   # benign: right when not alerted
    page = docs.read_text()
    assert "`fused`" in page and "| run |" in page and page.count("| `idle-") == 6
    with pytest.raises(ValueError, match="no run of family"):
        ns["main"](["--data", str(tiny_dataset), "--family", "diffusion", "--detector", "fused",
                    "--out", str(out), "--cache", str(feature_cache)])
