"""The forward model: configuration -> inner-step time, sync time, H, eta, chi, C_local, cost.

Every input may be an array (they broadcast), so one call evaluates a whole search grid. Three modes:

- flat: every node is a DiLoCo replica; all sync their pseudo-gradients over the WAN.
- hierarchical ("Hier AxB"): A nodes per group sync regionally every H_inner steps; the B groups
  sync over the WAN every H_regional regional cycles; H_eff = H_inner sqrt(H_regional).
  Fewer than 2 groups falls back to flat, as in the paper.
- pipeline groups ("PP SxG"): a model too big for one node is split over S nodes (GPipe, activations
  over the WAN); G = N // S groups are the DiLoCo replicas.
"""

from __future__ import annotations

import numpy as np

from .catalogue import NodeArrays
from .efficiency import eta_activation, eta_compression, eta_sync_interval, straggler_factor
from .losslaw import FLOP_PER_PARAM_TOKEN, TOKENS_PER_PARAM_OPT, chinchilla_efficiency
from .losslaw import replica_loss_multiplier
from .settings import Network, Settings

MODE_FLAT, MODE_HIER, MODE_PIPELINE = 0, 1, 2
MODE_NAMES = {MODE_FLAT: "flat", MODE_HIER: "hierarchical", MODE_PIPELINE: "pipeline"}

# h_override codes (flat mode only): 0 = the compute-bound H; k > 0 = exactly k (kept only when
# 1 < k < H_min, i.e. below the compute-bound interval); HALF_H_MIN = H_min // 2 when H_min > 60.
H_DEFAULT = 0
HALF_H_MIN = -1


def _ceil_ratio(a, b):
    # ceil(a/b) guarded against float noise right at an integer (188.0000000001 / 9.9 etc. stays).
    return np.ceil(a / b - 1e-12)


def evaluate(nodes: NodeArrays, node_idx, n_nodes, mode, params, group_size=8,
             network: Network | None = None, settings: Settings | None = None,
             h_override=H_DEFAULT) -> dict[str, np.ndarray]:
    """Evaluate configurations. ``node_idx`` indexes ``nodes``; ``params`` in parameters;
    ``group_size`` is A (hierarchical mode); returns a dict of equally shaped arrays."""
    net = network or Network()
    st = settings or Settings()
    idx, n, md, p, a, hov = np.broadcast_arrays(
        np.asarray(node_idx, dtype=int), np.asarray(n_nodes, dtype=float),
        np.asarray(mode, dtype=int), np.asarray(params, dtype=float),
        np.asarray(group_size, dtype=float), np.asarray(h_override, dtype=int))
    flops = nodes.peak_flops[idx] * st.mfu
    mem = nodes.memory_bytes[idx]
    bpp = nodes.state_bytes_per_param[idx]
    c = st.straggler_coeff
    batch = st.local_batch_tokens
    wall = st.wall_time_s * st.goodput

    t_comp = FLOP_PER_PARAM_TOKEN * p * batch / flops
    v_bits = p * nodes.pseudo_grad_bits[idx] / st.compression_ratio
    wan_base = v_bits / net.bw_up_bps + v_bits / net.bw_down_bps + net.latency_s
    fits = p * bpp <= mem * (1 + 1e-12)

    # ---- flat ---------------------------------------------------------------------------------
    t_sync_flat = wan_base * straggler_factor(n, c)
    h_min = np.maximum(1.0, _ceil_ratio(t_sync_flat, t_comp))
    h_flat = np.where(hov > 0, hov.astype(float), np.where(hov == HALF_H_MIN, h_min // 2, h_min))
    override_ok = np.where(hov > 0, (hov > 1) & (hov < h_min),
                           np.where(hov == HALF_H_MIN, h_min > 60, True))
    single = n <= 1
    h_flat = np.where(single, 1.0, h_flat)
    if st.streaming:
        outer_flat = np.where(single, t_comp, np.maximum(h_flat * t_comp, t_sync_flat))
    else:
        outer_flat = np.where(single, t_comp, h_flat * t_comp + t_sync_flat)
    tokens_flat = wall / outer_flat * h_flat * batch * n

    # ---- hierarchical -------------------------------------------------------------------------
    groups_h = np.floor(n / np.maximum(a, 1.0))
    t_reg = (2 * v_bits / net.regional_bps + net.regional_lat_s) * straggler_factor(a, c)
    h_inner = np.maximum(1.0, _ceil_ratio(t_reg, t_comp))
    reg_cycle = np.maximum(h_inner * t_comp, t_reg)
    t_glob = wan_base * straggler_factor(groups_h, c)
    h_regional = np.maximum(1.0, _ceil_ratio(t_glob, reg_cycle))
    h_eff_hier = h_inner * np.sqrt(h_regional)
    tokens_hier = n * flops * wall / (FLOP_PER_PARAM_TOKEN * p)
    is_hier = (md == MODE_HIER) & (groups_h >= 2)

    # ---- pipeline groups ----------------------------------------------------------------------
    stages = np.ceil(p * bpp / mem - 1e-12)
    groups_pp = np.floor(n / np.maximum(stages, 1.0))
    act_bytes_per_value = np.where(bpp >= 16, 2.0, 1.0)  # FP16 or FP8 activations
    hidden = st.hidden_coeff * np.sqrt(p)
    act_bits = batch * hidden * act_bytes_per_value * 8 / st.activation_compression
    mb = float(st.micro_batches)
    t_micro_comm = 2 * act_bits / mb / net.pipeline_bps
    pp_step = (mb + stages - 1) * (t_comp / (stages * mb)
                                   + (t_micro_comm + net.pipeline_lat_s) * straggler_factor(stages, c))
    t_sync_pp = wan_base * straggler_factor(groups_pp, c)
    h_pp = np.maximum(1.0, _ceil_ratio(t_sync_pp, pp_step))
    outer_pp = (np.maximum(h_pp * pp_step, t_sync_pp) if st.streaming
                else h_pp * pp_step + t_sync_pp)
    tokens_pp = wall / outer_pp * h_pp * batch * groups_pp
    is_pp = md == MODE_PIPELINE

    # ---- combine ------------------------------------------------------------------------------
    h_eff = np.select([is_pp, is_hier], [h_pp, h_eff_hier], h_flat)
    tokens = np.select([is_pp, is_hier], [tokens_pp, tokens_hier], tokens_flat)
    replicas = np.select([is_pp], [groups_pp], n)
    c_thr = FLOP_PER_PARAM_TOKEN * p * tokens
    diloco = ~(single & ~is_pp)  # a lone node neither syncs nor compresses
    eta_h = np.where(diloco, eta_sync_interval(h_eff, p), 1.0)
    eta_comp = np.where(diloco, eta_compression(st.compression_ratio, st.error_feedback,
                                                st.quality_scenario), 1.0)
    eta_act = np.where(is_pp, eta_activation(st.activation_compression, stages,
                                             st.quality_scenario), 1.0)
    loss_mult = replica_loss_multiplier(replicas, p, h_eff)
    chi = chinchilla_efficiency(p, tokens, c_thr)
    chi_rep = chinchilla_efficiency(p, tokens, c_thr, loss_mult)
    with np.errstate(invalid="ignore", divide="ignore"):
        eta_rep = np.where(chi > 0, chi_rep / chi, 0.0)
    eta = eta_h * eta_comp * eta_rep * eta_act
    c_local = c_thr * eta
    ot = tokens / (TOKENS_PER_PARAM_OPT * p)

    valid = np.where(is_pp, (stages >= 2) & (groups_pp >= 2) & (hov == H_DEFAULT),
                     fits & np.where(md == MODE_HIER, hov == H_DEFAULT, override_ok)) & (n >= 1)
    t_sync = np.select([is_pp, is_hier], [t_sync_pp, t_glob], t_sync_flat)
    outer = np.select([is_pp, is_hier], [outer_pp, reg_cycle * h_regional], outer_flat)
    return {
        "valid": valid,
        "mode_effective": np.select([is_pp, is_hier], [MODE_PIPELINE, MODE_HIER], MODE_FLAT),
        "n_nodes": n, "params": p, "node_idx": idx, "group_size": np.where(is_hier, a, 0.0),
        "groups": np.select([is_pp, is_hier], [groups_pp, groups_h], n),
        "stages": np.where(is_pp, stages, 1.0), "replicas": replicas,
        "t_comp_s": t_comp, "v_bits": v_bits, "t_sync_s": t_sync, "t_outer_s": outer,
        "t_regional_s": np.where(is_hier, t_reg, 0.0),
        "t_regional_cycle_s": np.where(is_hier, reg_cycle, 0.0),
        "pp_step_s": np.where(is_pp, pp_step, 0.0),
        "activation_bits": np.where(is_pp, act_bits, 0.0),
        "h": h_eff, "h_inner": np.where(is_hier, h_inner, h_eff),
        "h_regional": np.where(is_hier, h_regional, 1.0),
        "tokens": tokens, "c_throughput": c_thr,
        "eta_h": eta_h, "eta_comp": eta_comp, "eta_rep": eta_rep, "eta_act": eta_act,
        "loss_multiplier": loss_mult, "eta": eta, "c_local": c_local,
        "chi": chi, "c_quality": c_local * chi, "overtraining": ot,
        "cost_usd": n * nodes.capital_usd[idx],
    }


def pick(result: dict[str, np.ndarray], i) -> dict[str, float]:
    """One configuration of an evaluated batch as plain Python numbers."""
    out = {}
    for k, v in result.items():
        x = np.asarray(v)[i]
        out[k] = bool(x) if x.dtype == bool else (int(x) if x.dtype.kind == "i" else float(x))
    return out
