"""Published work the report cites, and the few published figures it sets beside our results.

These are other people's numbers, printed in their papers (summarised in the project's reference
notes); they are never inputs to our measurements. The report marks each one as published.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Citation:
    short: str
    full: str


@dataclass(frozen=True)
class Published:
    value: float
    cite: str
    what: str


CITATIONS = {
    "rt": Citation("Rahman & Tajdari, arXiv 2606.19262",
                   "A. Rahman and Tajdari, Detecting Hidden ML Training With Zero-Overhead Telemetry, arXiv 2606.19262."),
    "seed": Citation("seed FLOP study",
                     "The seed FLOP-estimation study: system-level FLOP estimation on two NVLink-connected V100 GPUs "
                     "(board power, DRAM activity, NVLink bytes, duration), with its own red team."),
    "rahman-dist": Citation("Rahman, arXiv 2605.29359",
                            "A. Rahman, Does Distributed Training Undermine Compute Governance? arXiv 2605.29359."),
    "seferis": Citation("Seferis & Fist, AAAI-26",
                        "Seferis and Fist, compute structuring (splitting or modifying workloads to dodge regulation), "
                        "AAAI-26, doi 10.1609/aaai.v40i44.41127."),
    "diloco": Citation("DiLoCo, arXiv 2311.08105", "Douillard et al., DiLoCo: Distributed Low-Communication Training "
                                                    "of Language Models, arXiv 2311.08105."),
    "sdiloco": Citation("Streaming DiLoCo, arXiv 2501.18512", "Douillard et al., Streaming DiLoCo, arXiv 2501.18512."),
    "intellect": Citation("INTELLECT-1, arXiv 2412.01152", "Prime Intellect, INTELLECT-1 technical report, arXiv 2412.01152."),
    "demo": Citation("DeMo, arXiv 2411.19870", "Peng et al., DeMo: Decoupled Momentum Optimization, arXiv 2411.19870."),
}

PUBLISHED = {
    "rt.accuracy": Published(0.9821, "rt", "window accuracy, 30 s windows"),
    "rt.fpr": Published(0.0306, "rt", "false-positive rate"),
    "rt.tta_median_s": Published(60, "rt", "median time to alert of the run-level rule"),
    "rt.runs": Published(1404, "rt", "runs in the corpus"),
    "rt.window_s": Published(30, "rt", "window length (s) of their 1 Hz features"),
    "rt.stride_s": Published(15, "rt", "stride between windows (s)"),
    "rt.alert_k": Published(3, "rt", "windows above the threshold needed to alert (k of n)"),
    "rt.alert_n": Published(5, "rt", "consecutive windows of the alert vote (k of n)"),
    "rt.signals": Published(9, "rt", "NVML counters used"),
    "rt.features": Published(166, "rt", "features per window"),
    "rt.lora_whitebox_detection": Published(0.43, "rt", "held-out detection of white-box diluted LoRA"),
    "rt.pid_baseline_detection": Published(0.0, "rt", "baseline detection of PID-shaped telemetry"),
    "seed.three_input": Published(15.1, "seed", "median abs. error, 3-input energy model (%)"),
    "seed.power_only": Published(12.9, "seed", "median abs. error, power only (%)"),
    "seed.mlp": Published(10.4, "seed", "median abs. error, MLP (%)"),
    "seed.redteam_median": Published(25, "seed", "median error under the strongest red-team strategy (%)"),
    "diloco.h": Published(500, "diloco", "inner steps between syncs that matched synchronous training"),
}
