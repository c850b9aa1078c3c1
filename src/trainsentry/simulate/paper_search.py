"""The paper's own search procedure, replayed on this package's forward model, to explain where the
free search (``search.min_cost``) finds a different configuration.

The paper bisects, per node type, the node count N on the predicate "the best OT-valid candidate
reaches the target" over N in [2, 100000], trying a fixed list of model sizes. That predicate is
not monotone in N: past some N the overtraining cap (100x) removes the small models that reach the
target cheaply, and only less efficient larger or pipelined models remain. A bisection step that
lands in such a hole moves the search up, to a node count far above the true minimum.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .catalogue import NodeType, as_arrays, node_types
from .forward import MODE_FLAT, MODE_HIER, MODE_NAMES, MODE_PIPELINE, evaluate, pick
from .search import PAPER_GROUP_SIZES
from .settings import Network, Settings

# The model sizes (billions) the paper's table generator tries.
PAPER_MODEL_SIZES_B = (
    0.5, 1, 2, 5, 10, 25, 28, 30, 32, 35, 40, 45, 50, 60, 70, 78, 85, 91, 92, 100, 110, 120, 130,
    140, 150, 155, 160, 165, 170, 172, 175, 178, 180, 185, 195, 200, 210, 225, 235, 240, 245, 248,
    250, 252, 255, 258, 260, 265, 270, 275, 280, 290, 300, 310, 315, 320, 325, 330, 335, 340, 350,
    375, 400, 450, 500, 625, 750, 1000, 1500, 2500, 5000, 10000)
MAX_NODES = 100_000


@dataclass
class BisectionStep:
    n_nodes: int
    best_c_local: float
    meets: bool


def _all_at(t_index: int, t: NodeType, n: int, arrays, net, st):
    """Every paper candidate of node type ``t`` at ``n`` nodes, OT-filtered."""
    p = np.array(PAPER_MODEL_SIZES_B) * 1e9
    fit = p * t.state_bytes_per_param <= t.memory_bytes
    mode, params, group = [], [], []
    for x, f in zip(p, fit):
        if f:
            mode.append(MODE_FLAT); params.append(x); group.append(0)
            for a in PAPER_GROUP_SIZES:
                if n >= 2 * a:
                    mode.append(MODE_HIER); params.append(x); group.append(a)
        else:
            mode.append(MODE_PIPELINE); params.append(x); group.append(0)
    r = evaluate(arrays, t_index, n, np.array(mode), np.array(params), np.array(group), net, st)
    ok = r["valid"] & (r["overtraining"] >= st.ot_min) & (r["overtraining"] <= st.ot_max)
    return r, ok


def _choose(r, ok, target):
    # Among OT-valid candidates: those meeting the target by C_quality, else the largest C_local.
    meets = ok & (r["c_local"] >= target)
    if meets.any():
        return int(np.flatnonzero(meets)[np.argmax(r["c_quality"][meets])])
    if ok.any():
        return int(np.flatnonzero(ok)[np.argmax(r["c_local"][ok])])
    return None


def bisect_type(t_index: int, t: NodeType, target: float, arrays, net, st):
    """The paper's per-type bisection; returns (chosen row or None, bisection trace)."""
    def best_c(n):
        r, ok = _all_at(t_index, t, n, arrays, net, st)
        return float(r["c_local"][ok].max()) if ok.any() else 0.0

    trace: list[BisectionStep] = []
    r1, ok1 = _all_at(t_index, t, 1, arrays, net, st)
    k = _choose(r1, ok1, target)
    if k is not None and r1["c_local"][k] >= target:
        lo = 1
    else:
        if best_c(MAX_NODES) < target:
            return None, trace
        lo, hi = 2, MAX_NODES
        while lo < hi:
            mid = (lo + hi) // 2
            c = best_c(mid)
            trace.append(BisectionStep(mid, c, c >= target))
            if c >= target:
                hi = mid
            else:
                lo = mid + 1
    r, ok = _all_at(t_index, t, lo, arrays, net, st)
    k = _choose(r, ok, target)
    if k is None:
        return None, trace
    row = pick(r, k)
    row.update(node_type=t.name, mode=MODE_NAMES[int(row["mode_effective"])])
    return row, trace


def paper_search(target: float, network: Network | None = None, settings: Settings | None = None,
                 types: list[NodeType] | None = None):
    """The configuration the paper's procedure would publish, and each type's bisection trace."""
    net, st = network or Network(), settings or Settings()
    types = types or node_types()
    arrays = as_arrays(types)
    best, traces = None, {}
    for i, t in enumerate(types):
        row, trace = bisect_type(i, t, target, arrays, net, st)
        traces[t.name] = trace
        if row is None or row["c_local"] < target:
            continue
        if best is None or row["cost_usd"] < best["cost_usd"] or (
                row["cost_usd"] == best["cost_usd"] and row["c_quality"] > best["c_quality"]):
            best = row
    return best, traces


def non_monotone_steps(trace: list[BisectionStep], true_min_nodes: int) -> list[BisectionStep]:
    """Bisection steps that said "not reached" at a node count above the true minimum."""
    return [s for s in trace if not s.meets and s.n_nodes > true_min_nodes]
