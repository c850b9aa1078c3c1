"""scripts/busy_floor.py on recorded one-GPU runs: the single-device lead scored out of fold on
configuration-grouped folds, per utilisation band and per candidate floor."""

import json
from pathlib import Path

import numpy as np
import pytest

from detect.scripts import load_script
from trainsentry.detect.dataset import load_run

REPO = Path(__file__).resolve().parents[2]
H200X1 = REPO / "data" / "h200x1"
HOST = REPO / "data" / "h200x1-host"
RUNS = [H200X1 / r for r in ("train.single.w1024-l16-base-r0", "train.single.w2048-l24-base-r0",
                             "infer.embed.m350m_b32_l2048-base-r0", "infer.attribute.s125m_b64_l512-base-r0",
                             "other.idle.bare-base-r0")] + [
    HOST / r for r in ("infer.attribute.s125m_b64_l512-b062ed-r0",      # 0.5 s gaps: near the floor
                       "infer.embed.l1b_b128_l1024_x2-2b4430-r0")]


def _script():
    return load_script("busy_floor")


@pytest.fixture(scope="module")
def scored():
    bf = _script()
    runs = [load_run(p, None) for p in RUNS if p.exists()]
    assert len(runs) == len(RUNS)
    return bf, bf.out_of_fold(runs, folds=3)


def test_the_lead_is_silent_at_or_below_the_floor_in_force(scored):
    bf, w = scored
    assert np.isnan(w["p"][w["util"] <= bf.BUSY_UTIL_PCT]).all()
    assert np.isfinite(w["p"]).any()


def test_every_judged_window_lands_in_one_band(scored):
    bf, w = scored
    bands = bf.by_band(w)
    counted = sum(b[c]["windows"] for b in bands for c in set(w["classes"]))
    assert counted == int(np.isfinite(w["p"]).sum())


def test_a_higher_floor_never_adds_an_alert(scored):
    bf, w = scored
    floors = bf.by_floor(w, (5, 6, 8, 10, 20, 50))
    assert floors[0]["no_longer_alerted"] == [] and all(not f["newly_alerted"] for f in floors)
    alerted = [{r for r, (_, a) in bf.run_alerts(w, f["floor_pct"]).items() if a} for f in floors]
    assert all(hi <= lo for lo, hi in zip(alerted, alerted[1:]))
    # a floor above every window's utilisation silences the lead entirely
    assert not any(a for _, a in bf.run_alerts(w, 101).values())


def test_render_names_every_floor_and_band(scored, tmp_path):
    bf, w = scored
    res = {"command": "python scripts/busy_floor.py ...", "date": "2026-12-03", "out": "x.json", "data": ["d"],
           "runs": len(set(w["ids"])), "folds": 3, "floor_in_force_pct": bf.BUSY_UTIL_PCT,
           "bands": bf.by_band(w), "floors": bf.by_floor(w, (5, 8))}
    text = bf.render(json.loads(json.dumps(res)))
    assert "| 5 % |" in text and "| 8 % |" in text and "| above 5 % to 8 % |" in text


def test_the_2s_gap_trainer_runs_under_the_floor():
    """docs/duty-cycle.md: the 125 M-sized trainer with exponential 2 s gaps (call s26-1) keeps its GPU
    busy above the 5 % floor in 1 of its 19 windows, its window utilisation 0.5-6 %, so the live lead
    judges almost none of it."""
    bf = _script()
    run = load_run(REPO / "data" / "redteam-x1" / "adv.throttle.pause200ms-bd147a-r0", None)
    df = run.windows["trainsentry"]
    util = df[df["in_run"]]["act.util_pct.mean.max"].to_numpy(dtype=float)
    assert len(util) == 19 and int((util > bf.BUSY_UTIL_PCT).sum()) == 1
    assert 0.4 <= util.min() and util.max() <= 6.5
