"""The forward model against the paper's worked example and published table."""

import numpy as np
import pytest

from trainsentry.simulate import catalogue, forward, published
from trainsentry.simulate.settings import Network, Settings

TYPES = catalogue.node_types()
ARRAYS = catalogue.as_arrays(TYPES)
NAMES = [t.name for t in TYPES]
MODES = {"flat": forward.MODE_FLAT, "hierarchical": forward.MODE_HIER,
         "pipeline": forward.MODE_PIPELINE}


def run(name, n, mode, params, group=0, **kw):
    r = forward.evaluate(ARRAYS, NAMES.index(name), n, MODES[mode], params, group, **kw)
    return forward.pick(r, ())


def test_worked_1e25_example():
    r = run("16x GH200 FP8", 34, "hierarchical", 160e9, 8)
    assert r["t_comp_s"] == pytest.approx(9.93, abs=0.005)
    assert r["v_bits"] / 8 == pytest.approx(1.067e9, rel=1e-3)   # ~1.07 GB per direction
    assert r["h"] == 19
    assert r["eta_h"] == pytest.approx(0.929, abs=5e-4)
    assert r["loss_multiplier"] == pytest.approx(1.008, abs=5e-4)
    assert r["eta_rep"] == pytest.approx(0.40, abs=0.005)
    assert r["eta"] == pytest.approx(0.370, abs=5e-4)
    # Flat at the same size: T_sync = (85 + 85 + 0.1) s * 1.10 ~ 188 s -> H = 19 too.
    flat = run("16x GH200 FP8", 34, "flat", 160e9)
    assert flat["t_sync_s"] == pytest.approx(188.1, abs=0.1)
    assert flat["h"] == 19


@pytest.mark.parametrize("row", published.HEADLINE, ids=lambda r: f"{r.target_c_local:.1e}")
def test_published_rows_within_2_percent(row):
    r = run(row.node_type, row.n_nodes, row.mode, row.params, row.group_size)
    assert r["valid"]
    assert r["h"] == pytest.approx(row.h, rel=0.02)
    for key, pub in (("eta", row.eta), ("chi", row.chi), ("c_local", row.c_local),
                     ("cost_usd", row.cost_usd)):
        assert r[key] == pytest.approx(pub, rel=0.02), key
    assert r["c_local"] >= row.target_c_local


def test_pipeline_row_structure():
    r = run("16x H100 SXM FP8", 2880, "pipeline", 180e9)
    assert (r["stages"], r["groups"], r["replicas"]) == (2, 1440, 1440)
    assert r["eta_act"] == pytest.approx(0.995 ** 2)


def test_hierarchical_falls_back_to_flat_with_one_group():
    h = run("16x GH200 FP8", 12, "hierarchical", 160e9, 8)
    f = run("16x GH200 FP8", 12, "flat", 160e9)
    assert h["mode_effective"] == forward.MODE_FLAT
    assert h["c_local"] == pytest.approx(f["c_local"])


def test_model_too_big_for_node_is_invalid_flat_and_pipeline_needs_two_groups():
    assert not run("16x H100 SXM FP8", 10, "flat", 200e9)["valid"]
    assert not run("16x H100 SXM FP8", 3, "pipeline", 180e9)["valid"]   # 2 stages, 1 group
    assert not run("16x H100 SXM FP8", 10, "pipeline", 50e9)["valid"]   # fits: not pipeline


def test_single_node_has_no_sync_penalty():
    r = run("16x H100 SXM FP8", 1, "flat", 50e9)
    assert r["eta"] == 1.0 and r["h"] == 1


def test_bandwidth_raises_h_and_lowers_eta():
    slow = run("16x H100 SXM FP8", 20, "flat", 91e9, network=Network(10e6, 10e6))
    fast = run("16x H100 SXM FP8", 20, "flat", 91e9, network=Network(1e9, 1e9))
    assert slow["h"] > fast["h"] and slow["eta"] < fast["eta"]


def test_h_override_below_h_min_is_comm_bound():
    base = run("16x H100 SXM FP8", 20, "flat", 91e9)
    r = run("16x H100 SXM FP8", 20, "flat", 91e9, h_override=10)
    assert base["h"] > 10 and r["h"] == 10 and r["valid"]
    assert r["t_outer_s"] == pytest.approx(r["t_sync_s"])      # waits on the sync
    assert r["c_throughput"] < base["c_throughput"]
    assert not run("16x H100 SXM FP8", 20, "flat", 91e9, h_override=50)["valid"]  # above H_min


def test_vectorised_matches_scalar():
    i = NAMES.index("16x GH200 FP8")
    n = np.array([7, 34, 101])
    vec = forward.evaluate(ARRAYS, i, n, forward.MODE_HIER, 160e9, 8)
    for k, nn in enumerate(n):
        assert vec["eta"][k] == pytest.approx(run("16x GH200 FP8", nn, "hierarchical", 160e9, 8)["eta"])


def test_settings_reject_bad_input():
    with pytest.raises(ValueError, match="straggler"):
        Settings(straggler="fast")
    with pytest.raises(ValueError, match="bw_up_bps"):
        Network(bw_up_bps=0)
    with pytest.raises(KeyError, match="known"):
        catalogue.find_node_type("16x B300")
