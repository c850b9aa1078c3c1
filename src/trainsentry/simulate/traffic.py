"""What each node of a configuration shows on the wire, and which monitor would see it.

Beyond the paper, whose model has no traffic inside a node. Two layers:

- WAN (the paper's model): pseudo-gradient bursts of V/8 bytes each way per sync, at the outer-step
  cadence (hierarchical: regional bursts every regional cycle, plus the group leader's global
  burst; pipeline groups: activations every inner step, and each stage's 1/S share of the
  pseudo-gradient per outer step).
- In-node (implied by fitting the model): a node of k chips holding P_node parameters must shard
  them over s = ceil(P_node * bytes_per_param / chip_memory) chips (r = k // s replicas inside the
  node, whose gradients are all-reduced every inner step). Per inner step, summed over the node's
  chips (TX bytes; ring collectives, one parameter gather per step: a lower bound):
    FSDP/ZeRO-3   (s-1) P_node (2w + g)        two all-gathers of weights, one reduce-scatter
    tensor par.   8 L_node (s-1) B h a          4 all-reduces of B x h activations per layer
    pipeline par. 2 (s-1) B h a                 activations forward, their gradients backward
  plus 2 (r-1) P_node g for the in-node data-parallel all-reduce. w, a: 1 byte (FP8) or 2;
  g = 2 bytes; h = 0.03 sqrt(P) and L = P / (12 h^2) (the paper's hidden-size rule).
  Chips join in scale-up domains (NVLink/HCCS/ICI) of d chips; ring hops between domains, and
  pipeline boundaries between them, cross a NIC instead, where a host network monitor sees them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from .catalogue import NodeType
from .forward import MODE_HIER, MODE_PIPELINE
from .settings import Network, Settings

GRAD_BYTES = 2.0
STRATEGIES = ("fsdp", "tensor", "pipeline")


@dataclass(frozen=True)
class VisibilityThresholds:
    """What a monitor needs before its communication features would flag a node. Defaults are
    physical floors, to be replaced by the detector's own thresholds (see ``load_thresholds``)."""
    # NVML's NVLink DATA counters count KiB: at 10 Hz that resolves ~10 KiB/s. 100 MB/s per chip is
    # four orders above that, 0.02 % of an H200's ~478 GB/s per direction, and data-parallel
    # inference moves nothing over NVLink at all.
    interconnect_min_bytes_per_s_per_chip: float = 1e8
    # Host NIC counters resolve bytes; a 1 Hz monitor needs a burst to last >= 2 samples, to carry
    # more than ordinary bulk objects (100 MB), and to repeat at least hourly (>= 24 a day) with
    # a regular period to call it a training sync. Continuous traffic counts above 1 MB/s mean.
    network_min_burst_bytes: float = 1e8
    network_min_burst_s: float = 2.0
    network_max_period_s: float = 3600.0
    network_max_period_cv: float = 0.1
    network_min_mean_bytes_per_s: float = 1e6


def load_thresholds(path: str | Path = "results/detector.json") -> VisibilityThresholds:
    """Defaults, overridden by ``simulator_visibility`` in the detector's results when present."""
    p = Path(path)
    if not p.exists():
        return VisibilityThresholds()
    try:
        data = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"cannot read visibility thresholds from {p}: {e}") from e
    over = data.get("simulator_visibility") if isinstance(data, dict) else None
    if not over:
        return VisibilityThresholds()
    known = {f.name for f in fields(VisibilityThresholds)}
    bad = sorted(set(over) - known)
    if bad:
        raise ValueError(f"{p}: unknown simulator_visibility keys {bad}; known: {sorted(known)}")
    return VisibilityThresholds(**{k: float(v) for k, v in over.items()})


def _ring_nic_fraction(members: float, domain: float) -> float:
    # A ring over ``members`` chips laid out domain by domain crosses a NIC once per domain.
    domains = math.ceil(members / domain)
    return 0.0 if domains <= 1 or members <= 1 else min(1.0, domains / members)


def in_node_traffic(row: dict, node: NodeType, st: Settings) -> dict:
    """In-node bytes per inner step per strategy, split into scale-up and NIC bytes."""
    p, stages = row["params"], max(1.0, row["stages"])
    p_node = p / stages
    k = node.chips
    d = min(node.chip.scale_up_chips, k)
    shard = max(1, math.ceil(p_node * node.state_bytes_per_param / (node.chip.memory_gb * 1e9)
                             - 1e-12))
    shard = min(shard, k)
    replicas = max(1, k // shard)
    w = a = 1.0 if node.fp8 else 2.0
    hidden = st.hidden_coeff * math.sqrt(p)
    layers_node = p / (12 * hidden ** 2) / stages
    batch = st.local_batch_tokens
    step_s = row["pp_step_s"] if row["mode_effective"] == MODE_PIPELINE else row["t_comp_s"]
    dp_bytes = 2 * (replicas - 1) * p_node * GRAD_BYTES
    dp_nic = dp_bytes * _ring_nic_fraction(replicas, 1.0) if math.ceil(k / d) > 1 else 0.0
    ring_nic = _ring_nic_fraction(shard, d)
    out = {"chips": k, "scale_up_chips": d, "interconnect": node.chip.interconnect,
           "shard_degree": shard, "replicas_in_node": replicas, "step_s": step_s,
           "strategies": {}}
    per = {
        "fsdp": ((shard - 1) * p_node * (2 * w + GRAD_BYTES), ring_nic),
        "tensor": (8 * layers_node * (shard - 1) * batch * hidden * a, ring_nic),
        "pipeline": (2 * (shard - 1) * batch * hidden * a,
                     0.0 if shard <= 1 else (math.ceil(shard / d) - 1) / (shard - 1)),
    }
    for name, (shard_bytes, nic_frac) in per.items():
        total = shard_bytes + dp_bytes
        nic = shard_bytes * nic_frac + dp_nic
        out["strategies"][name] = {
            "bytes_per_step": total, "scale_up_bytes_per_step": total - nic,
            "nic_bytes_per_step": nic,
            "scale_up_bytes_per_s_per_chip": (total - nic) / step_s / k,
            "nic_bytes_per_s": nic / step_s,
        }
    return out


def wan_traffic(row: dict, net: Network) -> dict:
    """Per-node WAN bytes per sync (each direction) and their cadence."""
    v_bytes = row["v_bits"] / 8
    mode = row["mode_effective"]
    if mode == MODE_PIPELINE:
        s = max(1.0, row["stages"])
        act = row["activation_bits"] / 8          # one boundary's activations per inner step
        sync = v_bytes / s                        # this stage's share of the pseudo-gradient
        period = row["t_outer_s"]
        return {"pattern": "continuous activations + periodic sync",
                "burst_bytes": sync, "burst_period_s": period,
                "burst_s": sync / net.bw_up_bps * 8,
                "continuous_bytes_per_s": act / row["pp_step_s"],
                "mean_bytes_per_s": act / row["pp_step_s"] + sync / period,
                "leader_extra_bytes_per_s": 0.0}
    if mode == MODE_HIER:
        period = row["t_regional_cycle_s"]
        global_period = period * row["h_regional"]
        return {"pattern": "periodic regional bursts (+ leader's global burst)",
                "burst_bytes": v_bytes, "burst_period_s": period,
                "burst_s": v_bytes / net.regional_bps * 8, "continuous_bytes_per_s": 0.0,
                "mean_bytes_per_s": v_bytes / period,
                "leader_extra_bytes_per_s": v_bytes / global_period}
    if row["n_nodes"] <= 1:
        return {"pattern": "none (single node)", "burst_bytes": 0.0, "burst_period_s": 0.0,
                "burst_s": 0.0, "continuous_bytes_per_s": 0.0, "mean_bytes_per_s": 0.0,
                "leader_extra_bytes_per_s": 0.0}
    period = row["t_outer_s"]
    return {"pattern": "periodic bursts", "burst_bytes": v_bytes, "burst_period_s": period,
            "burst_s": v_bytes / net.bw_up_bps * 8, "continuous_bytes_per_s": 0.0,
            "mean_bytes_per_s": v_bytes / period, "leader_extra_bytes_per_s": 0.0}


def _network_sees(wan: dict, nic_bytes_per_s: float, th: VisibilityThresholds) -> bool:
    # The model's syncs are deterministic (period CV 0 <= network_max_period_cv), so a periodic
    # burst is flagged when it is big, long and frequent enough; continuous traffic by its mean.
    bursts = (wan["burst_bytes"] >= th.network_min_burst_bytes
              and wan["burst_s"] >= th.network_min_burst_s
              and 0 < wan["burst_period_s"] <= th.network_max_period_s)
    steady = wan["continuous_bytes_per_s"] + nic_bytes_per_s >= th.network_min_mean_bytes_per_s
    return bool(bursts or steady)


def node_traffic(row: dict, node: NodeType, net: Network, st: Settings,
                 th: VisibilityThresholds | None = None) -> dict:
    """WAN and in-node traffic of one configuration and, per in-node strategy, who would see it.
    ``evasive_strategy`` is the one the fewest monitors see (ties: least scale-up traffic)."""
    th = th or VisibilityThresholds()
    wan = wan_traffic(row, net)
    inner = in_node_traffic(row, node, st)
    seen = {}
    for name, s in inner["strategies"].items():
        layers = []
        if _network_sees(wan, s["nic_bytes_per_s"], th):
            layers.append("network")
        if s["scale_up_bytes_per_s_per_chip"] >= th.interconnect_min_bytes_per_s_per_chip:
            layers.append("interconnect")
        s["seen_by"] = layers or ["neither"]
        seen[name] = (len(layers), s["scale_up_bytes_per_s_per_chip"])
    evasive = min(seen, key=seen.get)
    return {"wan": wan, "in_node": inner, "evasive_strategy": evasive,
            "seen_by": inner["strategies"][evasive]["seen_by"],
            "nvml_can_read_interconnect": node.chip.interconnect == "NVLink",
            "thresholds": asdict(th)}
