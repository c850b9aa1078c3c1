"""NetSource on sysfs fixture trees (tests/fixtures/sysfs/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fakes.fake_pynvml import ManualClock
from trainsentry.telemetry.net import NetSource
from trainsentry.traces.io import readings_to_columns
from trainsentry.traces.schema import NET_METRICS

TREE = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs" / "node1"


@pytest.fixture
def root(tmp_path):
    return Path(shutil.copytree(TREE, tmp_path / "sys"))


def by_dev(readings):
    return {r.device: r for r in readings}


def test_reads_interfaces_and_ib_ports():
    src = NetSource(TREE)
    assert src.devices() == ["eth0", "ifb0", "mlx5_0:1", "mlx5_1:1"]  # lo excluded by default
    r = by_dev(src.read())
    assert r["eth0"].kind == "net" and r["eth0"].values == {"net_tx_bytes": 12345678901, "net_rx_bytes": 98765432100}
    assert r["ifb0"].values == {"net_rx_bytes": 0}                     # tx_bytes file absent: missing
    assert r["mlx5_0:1"].kind == "ib"
    assert r["mlx5_0:1"].values == {"net_tx_bytes": 4 * 250000000000, "net_rx_bytes": 4 * 125000000000}
    assert r["mlx5_1:1"].values == {"net_tx_bytes": 28}                # garbage rcv counter: missing
    names = {m.name for m in NET_METRICS}
    assert all(set(x.values) <= names for x in r.values())


def test_include_exclude_patterns():
    assert NetSource(TREE, include=["eth*", "mlx5_0:*"]).devices() == ["eth0", "mlx5_0:1"]
    assert "lo" in NetSource(TREE, exclude=()).devices()
    assert NetSource(TREE, exclude=("lo", "ifb*", "mlx5_1:*")).devices() == ["eth0", "mlx5_0:1"]


def test_missing_root_gives_no_devices(tmp_path):
    src = NetSource(tmp_path / "nowhere")
    assert src.devices() == [] and src.read() == []


def test_interfaces_come_and_go_and_rates_follow(root):
    clock = ManualClock()
    src = NetSource(root, include=["eth*"], clock=clock)
    stats = root / "class/net/eth0/statistics"
    readings = src.read()
    (stats / "tx_bytes").write_text(str(12345678901 + 500_000_000) + "\n")
    clock.advance(0.5)
    readings += src.read()
    new = root / "class/net/eth1/statistics"
    new.mkdir(parents=True)
    (new / "tx_bytes").write_text("10\n")
    clock.advance(0.5)
    r = by_dev(src.read())
    assert set(r) == {"eth0", "eth1"} and r["eth1"].values == {"net_tx_bytes": 10}
    shutil.rmtree(root / "class/net/eth1")
    assert [x.device for x in src.read()] == ["eth0"]
    cols = readings_to_columns("n1", readings)
    assert cols["net_tx_Bps"][1] == pytest.approx(1e9)  # 500 MB in 0.5 s


def test_unreadable_file_is_missing(root):
    f = root / "class/net/eth0/statistics/rx_bytes"
    f.unlink()
    f.mkdir()  # reading it fails with an OSError whoever we are (a chmod 0 file would not, as root)
    assert by_dev(NetSource(root).read())["eth0"].values == {"net_tx_bytes": 12345678901}
