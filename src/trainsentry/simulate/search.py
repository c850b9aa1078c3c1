"""Minimum-cost search: the cheapest node type x node count x mode x model size that reaches a
compute target (C_local or C_quality) within the wall time, overtraining between ot_min and ot_max.

How it searches (vectorised over every candidate at once):
1. A candidate is (node type, mode, group size, model size[, H variant]). Models too small to reach
   the target at the overtraining cap (C <= 6 P * 25.6 P * ot_max) are dropped up front.
2. Each candidate is evaluated on a geometric grid of node counts; the first grid point that meets
   the target with overtraining in range brackets its smallest node count.
3. A bisection inside that bracket finds the smallest node count per candidate (C_local and
   overtraining both grow with N inside a bracket; the grid guards against the rare drop of
   C_local when H steps up).
4. Per node type the smallest node count wins (cost = N x node price); among that type's candidates
   meeting the target at that N the one with the highest C_quality is kept. The cheapest type wins
   (ties: higher C_quality), as in the paper.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .catalogue import NodeType, as_arrays, node_types
from .forward import H_DEFAULT, HALF_H_MIN, MODE_FLAT, MODE_HIER, MODE_NAMES, MODE_PIPELINE
from .forward import evaluate, pick
from .losslaw import FLOP_PER_PARAM_TOKEN, TOKENS_PER_PARAM_OPT
from .settings import Network, Settings

PAPER_GROUP_SIZES = (4, 8, 10, 12, 14, 16, 18, 20, 24, 32)
H_VARIANTS = (10, 30, 50, 100, 200, HALF_H_MIN)
_CHUNK = 250_000  # elements per forward call: bounds memory (~60 float arrays per element)


def default_model_grid() -> np.ndarray:
    """Model sizes tried: every whole billion up to 400B (where the answers lie) and a 2 % geometric
    grid from 0.5B to 10,000B (parameters)."""
    whole = np.arange(1, 401, dtype=float)
    geometric = np.geomspace(0.5, 10_000, int(np.log(20_000) / np.log(1.02)) + 1)
    return np.unique(np.round(np.concatenate([whole, geometric]), 1)) * 1e9


@dataclass
class SearchSpace:
    types: list[NodeType] = field(default_factory=node_types)
    model_params: np.ndarray = field(default_factory=default_model_grid)
    group_sizes: tuple[int, ...] = PAPER_GROUP_SIZES
    modes: tuple[int, ...] = (MODE_FLAT, MODE_HIER, MODE_PIPELINE)
    h_variants: bool = False       # also try H below the compute-bound one (flat mode)
    max_nodes: int = 100_000
    grid_points: int = 40


@dataclass
class SearchResult:
    best: dict | None                       # the cheapest configuration (forward-model fields)
    per_type: dict[str, dict]               # cheapest configuration per node type
    evaluations: int                        # forward-model evaluations spent
    candidates: int


def _candidates(space: SearchSpace, min_params: float):
    arrays = as_arrays(space.types)
    rows = []
    p = space.model_params[space.model_params >= min_params]
    for i, t in enumerate(space.types):
        fit = p[p * t.state_bytes_per_param <= t.memory_bytes]
        big = p[p * t.state_bytes_per_param > t.memory_bytes]
        if MODE_FLAT in space.modes:
            hs = (H_DEFAULT,) + (H_VARIANTS if space.h_variants else ())
            for h in hs:
                rows.append((np.full(fit.size, i), np.full(fit.size, MODE_FLAT), fit,
                             np.zeros(fit.size), np.full(fit.size, h)))
        if MODE_HIER in space.modes:
            for a in space.group_sizes:
                rows.append((np.full(fit.size, i), np.full(fit.size, MODE_HIER), fit,
                             np.full(fit.size, a), np.zeros(fit.size)))
        if MODE_PIPELINE in space.modes:
            rows.append((np.full(big.size, i), np.full(big.size, MODE_PIPELINE), big,
                         np.zeros(big.size), np.zeros(big.size)))
    cols = [np.concatenate([r[k] for r in rows]) if rows else np.zeros(0) for k in range(5)]
    return arrays, cols[0].astype(int), cols[1].astype(int), cols[2], cols[3], cols[4].astype(int)


def _meets(res, metric: str, target: float, st: Settings, upper_ot: bool = True):
    ok = res["valid"] & (res[metric] >= target) & (res["overtraining"] >= st.ot_min)
    return ok & (res["overtraining"] <= st.ot_max) if upper_ot else ok


def _eval_chunked(arrays, idx, n, mode, params, a, h, net, st, metric):
    """Forward model in chunks; returns (valid & fields needed by the search)."""
    keep = ("valid", metric, "overtraining", "c_quality")
    out = {k: np.empty(idx.size, dtype=bool if k == "valid" else float) for k in keep}
    for s in range(0, idx.size, _CHUNK):
        sl = slice(s, s + _CHUNK)
        r = evaluate(arrays, idx[sl], n[sl], mode[sl], params[sl], a[sl], net, st, h[sl])
        for k in keep:
            out[k][sl] = r[k]
    return out


def min_cost(target: float, metric: str = "c_local", space: SearchSpace | None = None,
             network: Network | None = None, settings: Settings | None = None) -> SearchResult:
    """The cheapest configuration reaching ``target`` FLOP of ``metric`` (c_local | c_quality)."""
    if metric not in ("c_local", "c_quality"):
        raise ValueError(f"metric must be c_local or c_quality, got {metric!r}")
    if not target > 0:
        raise ValueError(f"target must be > 0 FLOP, got {target!r}")
    space = space or SearchSpace()
    net, st = network or Network(), settings or Settings()
    # C <= 6 P D and D <= 25.6 P ot_max: smaller models cannot reach the target at any N.
    min_params = np.sqrt(target / (FLOP_PER_PARAM_TOKEN * TOKENS_PER_PARAM_OPT * st.ot_max))
    arrays, idx, mode, params, a, h = _candidates(space, min_params)
    evals = 0
    grid = np.unique(np.round(np.geomspace(1, space.max_nodes, space.grid_points)))
    m = idx.size
    # Stage 1: the grid.
    rep = lambda x: np.repeat(x, grid.size)  # noqa: E731 - candidate-major layout
    res = _eval_chunked(arrays, rep(idx), np.tile(grid, m), rep(mode), rep(params), rep(a),
                        rep(h), net, st, metric)
    evals += m * grid.size
    ok = _meets(res, metric, target, st).reshape(m, grid.size)
    has = ok.any(axis=1)
    first = np.argmax(ok, axis=1)
    sel = np.flatnonzero(has)
    idx, mode, params, a, h, first = idx[sel], mode[sel], params[sel], a[sel], h[sel], first[sel]
    hi = grid[first]
    lo = np.where(first > 0, grid[np.maximum(first - 1, 0)] + 1, hi)
    # Stage 2: bisection inside each bracket (lo, hi], hi known to meet the target.
    while np.any(lo < hi):
        mid = np.floor((lo + hi) / 2)
        active = lo < hi
        r = _eval_chunked(arrays, idx, np.where(active, mid, hi), mode, params, a, h, net, st,
                          metric)
        evals += int(active.sum())
        good = _meets(r, metric, target, st, upper_ot=False)
        hi = np.where(active & good, mid, hi)
        lo = np.where(active & ~good, mid + 1, lo)
    # The bracket's upper end may fail the upper overtraining bound only if OT fell, which it
    # cannot; re-check anyway and drop any candidate that fails at its own minimum.
    final = evaluate(arrays, idx, hi, mode, params, a, net, st, h)
    evals += idx.size
    ok = _meets(final, metric, target, st)
    per_type: dict[str, dict] = {}
    for ti, t in enumerate(space.types):
        mine = np.flatnonzero(ok & (idx == ti))
        if mine.size == 0:
            continue
        n_best = hi[mine].min()
        at = mine[hi[mine] == n_best]
        # Every candidate of this type at that node count (some meet it only there).
        r = evaluate(arrays, idx[mine], n_best, mode[mine], params[mine], a[mine], net, st,
                     h[mine])
        evals += mine.size
        good = np.flatnonzero(_meets(r, metric, target, st))
        if good.size == 0:  # cannot happen: ``at`` meets it; kept for safety
            good = np.searchsorted(mine, at)
        k = good[np.argmax(r["c_quality"][good])]
        row = pick(r, k)
        row.update(node_type=t.name, mode=MODE_NAMES[int(row["mode_effective"])],
                   h_override=int(h[mine][k]))
        per_type[t.name] = row
    best = None
    for row in per_type.values():
        if best is None or row["cost_usd"] < best["cost_usd"] * (1 - 1e-12) or (
                abs(row["cost_usd"] - best["cost_usd"]) <= 1e-9 * best["cost_usd"]
                and row["c_quality"] > best["c_quality"]):
            best = row
    return SearchResult(best=best, per_type=per_type, evaluations=evals, candidates=m)
