"""The red-team campaign lists every strategy once with the baselines the strategies name."""

from pathlib import Path

from trainsentry.lab.campaign import Campaign
from trainsentry.workloads import adversarial
from trainsentry.workloads.base import WORKLOADS

CAMPAIGN = Path(__file__).resolve().parents[2] / "configs" / "campaigns" / "redteam-r1.yaml"


def test_campaign_covers_every_strategy_and_its_baseline():
    runs = Campaign.load(CAMPAIGN).expand()
    names = {r["workload"] for r in runs}
    assert set(adversarial.names()) <= names
    assert {WORKLOADS[n].config["baseline"] for n in adversarial.names()} <= names
    assert max(r["seconds"] for r in runs if r["workload"] == "adv.diloco.h500") >= 200
