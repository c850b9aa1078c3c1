"""scripts/host_study.py on synthetic one-GPU traces with the host source: an exchange over PCIe with
the host's cores busy between the transfers (an optimizer on the host) is gated and witnessed; the
same exchange with only the launching thread busy (copies to a cache in host memory) is gated but not
witnessed; a GPU alone with a busy host is witnessed but not gated."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

from fakes.gpu_trace import gpu_trace

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "host_study.py"


def _run(root: Path, run_id: str, cls: str, family: str, tx: float, rx: float, busy, threads: int = 16) -> None:
    gpu_trace(root, run_id, cls, family, {"power_mw": 400_000, "gpu_util_pct": 60.0, "gpm_sm_util_pct": 50.0,
                                          "gpm_pcie_tx_mibps": tx, "gpm_pcie_rx_mibps": rx},
              {"host_threads": threads} if "offload" in family else {}, samples=400, host_busy_cores=busy)


def test_the_host_witness_tells_the_optimizer_from_the_copies(tmp_path):
    data = tmp_path / "d"
    every_second = lambda t: np.where((t * 10).round() % 10 < 4, 12.0, 1.0)   # noqa: E731  12 cores 0.4 s of each s
    _run(data, "offload", "training", "zero-offload", 2000.0, 2000.0, every_second)
    _run(data, "cache", "inference", "kvswap", 2000.0, 2000.0, 1.0)
    _run(data, "busy-host", "other", "matmul", 0.0, 0.0, 8.0)
    out, docs = tmp_path / "h.json", tmp_path / "host.md"
    docs.write_text("# x\n<!-- host-study:begin -->\nold\n<!-- host-study:end -->\ntail\n")
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--data", str(data), "--out", str(out), "--docs", str(docs), "--cache", str(tmp_path / "c")]) == 0
    res = json.loads(out.read_text())
    off, cache, busy = res["runs"]["offload"], res["runs"]["cache"], res["runs"]["busy-host"]
    assert off["passes_gate"] and off["witnessed"] and off["busy_share"] == pytest.approx(0.4, abs=0.03)
    assert off["busy_cores_p90"] == pytest.approx(12.0) and off["host_threads_used"] == 16
    assert cache["passes_gate"] and not cache["witnessed"] and cache["busy_cores_median"] == pytest.approx(1.0)
    assert busy["witnessed"] and not busy["passes_gate"]
    # where in the run the host was busy: the offload's bursts throughout, the cache never
    assert off["busy_first_s"] == 0.0 and off["busy_last_s"] >= 39.0 and cache["busy_first_s"] is None
    assert res["by_family"]["training zero-offload"] == {"runs": 1, "gate": 1, "witnessed": 1, "gate_and_witness": 1}
    assert res["by_family"]["inference kvswap"]["gate_and_witness"] == 0
    text = docs.read_text()
    assert "old" not in text and text.endswith("<!-- host-study:end -->\ntail\n") and "| `offload` |" in text
    # with the committed detectors' prospective verdicts: the stack is the detectors, or gate and witness
    pro = tmp_path / "p.json"
    pro.write_text(json.dumps({"command": "python scripts/prospective.py ...", "per_run": [
        {"run_id": "offload", "either_alerted": False}, {"run_id": "cache", "either_alerted": False},
        {"run_id": "busy-host", "either_alerted": True}]}))
    assert main(["--data", str(data), "--out", str(out), "--prospective", str(pro), "--cache", str(tmp_path / "c")]) == 0
    res = json.loads(out.read_text())
    assert [res["runs"][r]["stack_alerted"] for r in ("offload", "cache", "busy-host")] == [True, False, True]
    assert res["by_family"]["training zero-offload"]["detectors"] == 0 and res["by_family"]["training zero-offload"]["stack"] == 1


def test_several_datasets_and_verdicts_pool_and_runs_without_the_host_source_are_counted(tmp_path):
    benign, adversarial = tmp_path / "benign", tmp_path / "adv"
    _run(benign, "cache", "inference", "kvswap", 2000.0, 2000.0, 1.0)
    _run(adversarial, "one-thread", "training", "offload", 2000.0, 2000.0, 1.0, threads=1)   # the evader
    _run(adversarial, "older", "training", "online", 0.0, 0.0, None)                         # no host source
    pros = []
    # p3, a later model's verdict on a run p1 judged already, does not replace p1's
    for name, rid, alerted in (("p1", "cache", False), ("p2", "one-thread", True), ("p3", "cache", True)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"command": name, "model": {"rev": f"rev-{name}"},
                                                           "per_run": [{"run_id": rid, "either_alerted": alerted}]}))
        pros += ["--prospective", str(tmp_path / f"{name}.json")]
    out = tmp_path / "h.json"
    main = runpy.run_path(str(SCRIPT))["main"]
    assert main(["--data", str(benign), "--data", str(adversarial), "--out", str(out),
                 "--cache", str(tmp_path / "c"), *pros]) == 0
    res = json.loads(out.read_text())
    assert sorted(res["runs"]) == ["cache", "one-thread"] and res["without_host_source"] == {str(adversarial): 1}
    one = res["runs"]["one-thread"]
    assert one["passes_gate"] and not one["witnessed"] and one["host_threads_used"] == 1
    assert one["detectors_alerted"] is True and res["runs"]["cache"]["detectors_alerted"] is False
    assert res["runs"]["cache"]["detectors_rev"] == "rev-p1" and one["detectors_rev"] == "rev-p2"
    assert res["prospective"] == ["p1", "p2", "p3"] and res["by_family"]["training offload"]["stack"] == 1
    # one run id in two datasets (a baseline recorded again under another root) is two runs, each keyed by
    # its dataset and id, each with the verdict of the result on its own dataset
    again = tmp_path / "again"
    _run(again, "cache", "inference", "kvswap", 2000.0, 2000.0, 0.0)
    for name, root, alerted in (("q1", benign, False), ("q2", again, True)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"command": name, "model": {"rev": name}, "data": str(root),
                                                           "per_run": [{"run_id": "cache", "either_alerted": alerted}]}))
    assert main(["--data", str(benign), "--data", str(again), "--out", str(out), "--cache", str(tmp_path / "c"),
                 "--prospective", str(tmp_path / "q1.json"), "--prospective", str(tmp_path / "q2.json")]) == 0
    res = json.loads(out.read_text())
    assert sorted(res["runs"]) == [f"{again}/cache", f"{benign}/cache"]
    assert res["runs"][f"{benign}/cache"]["detectors_rev"] == "q1" and res["runs"][f"{again}/cache"]["detectors_rev"] == "q2"
    assert res["by_family"]["inference kvswap"]["runs"] == 2
