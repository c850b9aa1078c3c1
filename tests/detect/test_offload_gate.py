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
    assert train["ground_truth"] == {"offload_bytes_d2h": 5, "offload_bytes_h2d": 5}
    assert infer["ground_truth"] == {"bytes_to_device": 9}
    assert res["by_family"]["training zero-offload"] == {"runs": 1, "passing_runs": 1, "max_pass_share": train["gate_pass_share"]}
    assert res["by_family"]["inference offload"]["passing_runs"] == 0


def test_the_cost_of_offloading_is_read_against_the_same_configuration_on_the_gpu_alone(tmp_path):
    """Tokens per second (tokens per step over the median step time) of each ZeRO-Offload configuration,
    beside the GPU-only runs of the same configuration but for the offload keys (accumulation included);
    a GPU-only run of another optimizer is no baseline."""
    data = tmp_path / "d"
    base = {"d_model": 64, "n_layers": 2, "batch": 4, "param_dtype": "bf16", "optimizer": "adamw"}

    def steps(n, dt, tokens_per_step):
        return {"steps": n, "step_times_s": [dt] * n, "tokens": n * tokens_per_step}

    _trace(data, "off", "training", "zero-offload", 500.0, 500.0, {}, {**base, "offload": True}, steps(10, 1.0, 100))
    _trace(data, "off-x4", "training", "zero-offload", 200.0, 200.0, {}, {**base, "offload": True, "accum": 4},
           steps(5, 2.0, 400))
    _trace(data, "alone", "training", "single-gpu", 0.0, 0.0, {}, dict(base), steps(40, 0.25, 100))
    _trace(data, "alone-sgd", "training", "single-gpu", 0.0, 0.0, {}, {**base, "optimizer": "sgd"}, steps(40, 0.1, 100))
    out = tmp_path / "g.json"
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--data", str(data), "--out", str(out), "--cache", str(tmp_path / "c")]) == 0
    cost = json.loads(out.read_text())["cost"]
    assert cost["off"]["tokens_per_s"] == 100.0 and cost["off"]["baseline_runs"] == ["alone"]
    assert cost["off"]["baseline_tokens_per_s"] == 400.0 and cost["off"]["slowdown"] == 4.0
    assert cost["off-x4"]["accum"] == 4 and cost["off-x4"]["tokens_per_s"] == 200.0 and cost["off-x4"]["slowdown"] == 2.0
