"""scripts/verdict_paths.py on the ZeRO-Offload trainer the live verdict missed in the thirty-seventh
session's second round: the figures docs/lab.md and data/h200x1-verdict/README.md quote."""

from pathlib import Path

import pytest

from detect.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
OFFLOAD = REPO / "data" / "h200x1-verdict" / "train.offload.w1024-l16-720778-r0"


def test_the_offload_trainer_opens_the_gate_so_the_check_is_silent():
    d = load_script("verdict_paths").paths(OFFLOAD, REPO / "models")
    assert d["windows"] == 18 and d["gate_open"] == pytest.approx(16 / 18)   # "89 % of its windows"
    assert round(d["fused_p_median"], 2) == 0.16 and d["check_judged"] == 0.0
    assert round(d["pcie_Bps_median"] / 1e9, 1) == 3.3
