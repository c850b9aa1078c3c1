"""scripts/offload_gate.py on synthetic one-GPU traces with a known answer: a GPU that sends over PCIe
what it receives (host-staged training's gradients out, weights back) passes the exchange gate, one
that only receives (weights streamed in for inference) does not, and the ground truth rides along."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

from fakes.gpu_trace import gpu_trace

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "offload_gate.py"


def _trace(root: Path, run_id: str, cls: str, family: str, tx_mibps: float, rx_mibps: float, extra: dict,
           config: dict | None = None, ground_truth: dict | None = None) -> None:
    gpu_trace(root, run_id, cls, family, {"power_mw": 400_000, "gpu_util_pct": 60.0, "gpm_sm_util_pct": 50.0,
                                             "gpm_pcie_tx_mibps": tx_mibps, "gpm_pcie_rx_mibps": rx_mibps},
              extra, config=config, samples=400, ground_truth=ground_truth)


def test_a_symmetric_pcie_exchange_passes_the_gate_and_one_way_streaming_does_not(tmp_path):
    data = tmp_path / "d"
    _trace(data, "zero-offload", "training", "zero-offload", 2000.0, 2000.0, {"offload_bytes_d2h": 5, "offload_bytes_h2d": 5})
    _trace(data, "streamed", "inference", "offload", 5.0, 20000.0, {"bytes_to_device": 9})
    out = tmp_path / "g.json"
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--data", str(data), "--family", "offload", "--family", "zero-offload", "--out", str(out), "--cache", str(tmp_path / "c")]) == 0
    res = json.loads(out.read_text())
    train, infer = res["runs"]["zero-offload"], res["runs"]["streamed"]
    assert train["gate_pass_share"] > 0.9 and infer["gate_pass_share"] == 0.0
    assert train["pcie_factors_median"]["symmetry"] > 0.9 > 0.1 > infer["pcie_factors_median"]["symmetry"]
    # (no steps recorded in these fakes: no rates; the run's span from its manifest)
    assert train["ground_truth"] == {"offload_bytes_d2h": 5, "offload_bytes_h2d": 5, "run_s": 39.9, "steps_s": 0.0}
    assert infer["ground_truth"] == {"bytes_to_device": 9, "run_s": 39.9, "steps_s": 0.0}
    assert res["by_family"]["training zero-offload"] == {"runs": 1, "passing_runs": 1, "max_pass_share": train["gate_pass_share"]}
    assert res["by_family"]["inference offload"]["passing_runs"] == 0


def test_the_cost_of_offloading_is_read_against_the_same_configuration_on_the_gpu_alone(tmp_path):
    """The red team's cost measure (redteam.cost) of each ZeRO-Offload configuration against the longest
    GPU-only run of the same configuration but for the offload keys (accumulation included): every fake
    run lasts as long, so tokens per GPU-hour go as tokens; a GPU-only run of another optimizer is no
    baseline. The PCIe bytes come with their rate over the steps' time."""
    data = tmp_path / "d"
    base = {"d_model": 64, "n_layers": 2, "batch": 4, "param_dtype": "bf16", "optimizer": "adamw"}

    def steps(n, tokens, last_loss):
        return {"steps": n, "step_times_s": [0.5] * n, "tokens": tokens, "loss_curve": [[1, 6.0], [n, last_loss]]}

    _trace(data, "off", "training", "zero-offload", 500.0, 500.0, {"offload_bytes_d2h": 100, "offload_bytes_h2d": 100},
           {**base, "offload": True}, steps(10, 1000, 4.0))
    _trace(data, "off-x4", "training", "zero-offload", 200.0, 200.0, {}, {**base, "offload": True, "accum": 4},
           steps(5, 2000, 3.5))
    _trace(data, "alone", "training", "single-gpu", 0.0, 0.0, {}, dict(base), steps(40, 4000, 3.0))
    _trace(data, "alone-short", "training", "single-gpu", 0.0, 0.0, {}, dict(base), steps(4, 400, 5.0))
    _trace(data, "alone-sgd", "training", "single-gpu", 0.0, 0.0, {}, {**base, "optimizer": "sgd"}, steps(40, 9000, 3.0))
    out = tmp_path / "g.json"
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--data", str(data), "--out", str(out), "--cache", str(tmp_path / "c")]) == 0
    res = json.loads(out.read_text())
    cost = res["cost"]
    assert cost["off"]["baseline_run"] == "alone" and cost["off"]["slowdown"] == 4.0
    assert cost["off-x4"]["accum"] == 4 and cost["off-x4"]["slowdown"] == 2.0
    assert cost["off"]["gpu_hour_multiplier"] > 1    # the baseline reached the offloaded run's loss sooner
    assert res["runs"]["off"]["ground_truth"]["steps_s"] == 5.0
    assert res["runs"]["off"]["ground_truth"]["offload_bytes_d2h_per_step_s"] == 20.0
