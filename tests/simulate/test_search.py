"""The minimum-cost search, the replay of the paper's procedure, and the results file."""

import json
from pathlib import Path

import numpy as np
import pytest

from trainsentry.simulate import catalogue, paper_search, published, search
from trainsentry.simulate.forward import MODE_FLAT, MODE_HIER, evaluate

RESULTS = Path(__file__).resolve().parents[2] / "results" / "simulator.json"


def small_space(names):
    types = [catalogue.find_node_type(n) for n in names]
    return search.SearchSpace(types=types)


def test_search_finds_published_1e24_row():
    res = search.min_cost(1e24, space=small_space(["16x H100 SXM FP8", "16x GH200 FP8"]))
    b = res.best
    assert b["node_type"] == "16x H100 SXM FP8" and b["n_nodes"] == 2
    assert b["params"] == pytest.approx(91e9) and b["h"] == 18
    assert b["cost_usd"] == pytest.approx(1.614e6, rel=1e-3)


def test_search_result_is_minimal_for_its_candidate():
    space = small_space(["16x H100 SXM FP8"])
    b = search.min_cost(1e25, space=space).best
    assert b["c_local"] >= 1e25 and 1 <= b["overtraining"] <= 100
    # One node fewer, no model size or mode reaches the target.
    arrays = catalogue.as_arrays(space.types)
    p = space.model_params
    for mode, group in ((MODE_FLAT, 0), (MODE_HIER, 8), (MODE_HIER, 4)):
        r = evaluate(arrays, 0, b["n_nodes"] - 1, mode, p, group)
        ok = r["valid"] & (r["c_local"] >= 1e25) & (r["overtraining"] <= 100) & (r["overtraining"] >= 1)
        assert not ok.any()


def test_search_never_costs_more_than_published_and_meets_target():
    row = published.HEADLINE[2]
    res = search.min_cost(row.target_c_local, space=small_space(["16x H100 SXM FP8",
                                                                   "16x GH200 FP8"]))
    assert res.best["cost_usd"] <= row.cost_usd * 1.001
    assert res.best["c_local"] >= row.target_c_local


def test_paper_replay_reproduces_published_1e25_and_shows_the_hole():
    types = [catalogue.find_node_type(n) for n in ("16x H100 SXM FP8", "16x GH200 FP8")]
    best, traces = paper_search.paper_search(1e25, types=types)
    assert best["node_type"] == "16x GH200 FP8" and best["n_nodes"] == 34
    # The H100 bisection said "no" at a node count above the true minimum (36).
    holes = paper_search.non_monotone_steps(traces["16x H100 SXM FP8"], 36)
    assert holes and holes[0].n_nodes > 36


def test_memory_cap_shrinks_nodes():
    capped = {t.name: t for t in catalogue.node_types(1280)}
    assert capped["16x A100 80GB"].memory_bytes == 1280e9
    assert capped["8x GH200 FP8"].chips == 8
    assert "16x H100 SXM FP8" in capped            # exactly 1,280 GB: unchanged
    assert all(t.memory_bytes <= 1280e9 for t in capped.values())


def test_bad_search_input():
    with pytest.raises(ValueError, match="metric"):
        search.min_cost(1e25, metric="c_total")
    with pytest.raises(ValueError, match="target"):
        search.min_cost(-1)


@pytest.mark.skipif(not RESULTS.exists(), reason="results/simulator.json not generated")
def test_results_file_reproduces_every_row():
    data = json.loads(RESULTS.read_text())
    assert data["all_within_2pct"]
    assert len(data["headline"]) == len(published.HEADLINE)
    for r in data["headline"]:
        assert r["max_relative_error"] <= 0.02
    for s in data["search"]:
        assert s["free"]["c_local"] >= s["target"]
        assert s["cost_ratio_free_to_published"] <= 1.0005
        assert s["explanation"]
    assert np.isfinite([b["free"]["cost_usd"] for b in data["bandwidth"]]).all()
