"""scripts/gpu/nvml_call_costs.py runs its whole logic on the fake NVML (the GPU machine is scarce:
a script that dies there wastes a call)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

from fakes.fake_pynvml import FakeNvml

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "nvml_call_costs.py"


def test_call_costs_back_to_back_and_spaced(tmp_path, monkeypatch):
    out = tmp_path / "costs.json"
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpu_count=2))
    monkeypatch.setattr(sys, "argv", ["nvml_call_costs.py", "--n", "3", "--out", str(out),
                                      "--spaced", "0.005", "--spaced-n", "3"])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    res = json.loads(out.read_text())
    timed = {k for k, v in res["calls"].items() if "cpu_us" in v}
    assert {"fieldvalues_nvlink_txrx_all_links", "total_energy", "gpm_sample_get",
            "gpm_metrics_get_only_1", "gpm_metrics_get_only_61"} <= timed
    # every back-to-back call is also timed spaced, against a loop that only sleeps
    assert set(res["spaced_calls"]) == timed | {"_baseline_loop_cpu_us_per_period"}
    assert res["spaced_period_s"] == 0.005 and res["spaced_n"] == 3
    # each GPM metric's own answer: (return code, value)
    answers = res["gpm_metric_answers"]["gpm_metrics_get_9"]
    assert set(answers) == {"1", "2", "3", "5", "10", "20", "21", "60", "61"}
    assert all(rc == 0 for rc, _ in answers.values())
    assert res["command"].endswith("--spaced 0.005 --spaced-n 3")


def test_without_spaced_no_spaced_section(tmp_path, monkeypatch):
    out = tmp_path / "costs.json"
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(gpu_count=1))
    monkeypatch.setattr(sys, "argv", ["nvml_call_costs.py", "--n", "2", "--out", str(out)])
    runpy.run_path(str(SCRIPT), run_name="__main__")
    assert "spaced_calls" not in json.loads(out.read_text())
