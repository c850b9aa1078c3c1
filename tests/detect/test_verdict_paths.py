"""scripts/verdict_paths.py on the ZeRO-Offload trainer the live verdict missed in the thirty-seventh
session's second round: the figures docs/lab.md and data/h200x1-verdict/README.md quote, and the alert of
each form of the verdict (the check silent where the GPUs exchange until 2026-12-04, speaking there now)."""

from pathlib import Path

import pytest

from detect.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
OFFLOAD = REPO / "data" / "h200x1-verdict" / "train.offload.w1024-l16-720778-r0"


def test_the_offload_trainer_opens_the_gate_where_the_check_now_speaks():
    d = load_script("verdict_paths").paths(OFFLOAD, REPO / "models")
    assert d["windows"] == 18 and d["gate_open"] == pytest.approx(16 / 18)   # "89 % of its windows"
    assert round(d["fused_p_median"], 2) == 0.16 and d["check_judged"] >= d["gate_open"]
    assert round(d["pcie_Bps_median"] / 1e9, 1) == 3.3


def test_only_the_check_speaking_on_the_exchange_alerts_on_it():
    """The trainer is in the committed check's fit (refitted with the round that recorded it), so this is
    what the artifact says of it, not a held-out score: fused and the gated form stay silent, the verdict
    as it now is alerts."""
    vp = load_script("verdict_paths")
    d = vp.alerts(OFFLOAD, REPO / "models")
    assert (d["class"], d["fused"], d["verdict_gated"], d["verdict"]) == ("training", False, False, True)
    check = vp.load(REPO / "models" / "single-device.joblib")   # pickled before on_exchange existed
    old = check.speaking_on_exchange(False)
    assert check.on_exchange and not old.on_exchange and old.trees is check.trees
