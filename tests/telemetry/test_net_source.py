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
    src = NetSource(root, include=["eth*"], clock=clock, rescan_s=2.0)
    stats = root / "class/net/eth0/statistics"
    readings = src.read()
    (stats / "tx_bytes").write_text(str(12345678901 + 500_000_000) + "\n")  # rewritten in place
    clock.advance(0.5)
    readings += src.read()
    new = root / "class/net/eth1/statistics"
    new.mkdir(parents=True)
    (new / "tx_bytes").write_text("10\n")
    clock.advance(0.5)
    assert [x.device for x in src.read()] == ["eth0"]          # directories are listed every 2 s only
    clock.advance(1.0)
    r = by_dev(src.read())
    assert set(r) == {"eth0", "eth1"} and r["eth1"].values == {"net_tx_bytes": 10}
    shutil.rmtree(root / "class/net/eth1")
    clock.advance(2.0)
    assert [x.device for x in src.read()] == ["eth0"]
    cols = readings_to_columns("n1", readings)
    assert cols["net_tx_Bps"][1] == pytest.approx(1e9)  # 500 MB in 0.5 s


def test_counter_files_stay_open_between_reads(root, monkeypatch):
    import os
    clock = ManualClock()
    src = NetSource(root, clock=clock)
    src.read()
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    for _ in range(20):
        clock.advance(0.1)
        src.read()
    assert opened == []                               # 2 s of 10 Hz: re-read, never reopened
    clock.advance(5.0)
    src.read()
    assert opened == [str(root / "class/infiniband/mlx5_1/ports/1/counters/port_rcv_data")]  # the garbage one
    src.close()


def test_a_device_whose_folder_vanishes_is_dropped_at_once(root):
    clock = ManualClock()
    src = NetSource(root, clock=clock)
    assert "mlx5_0:1" in by_dev(src.read())
    counters = root / "class/infiniband/mlx5_0/ports/1/counters"
    for f in counters.iterdir():   # a vanished sysfs device fails its reads: make the open files fail
        f.write_text("gone\n")
    shutil.rmtree(root / "class/infiniband/mlx5_0")
    clock.advance(0.1)
    assert "mlx5_0:1" not in by_dev(src.read())        # not waiting for the rescan
    src.close()


def test_close_releases_every_file(root):
    import os
    src = NetSource(root)
    src.read()
    fds = [c.fd for d in src._devices for c in d.counters if c.fd is not None]
    assert len(fds) == 6
    src.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def test_unreadable_file_is_missing(root):
    f = root / "class/net/eth0/statistics/rx_bytes"
    f.unlink()
    f.mkdir()  # reading it fails with an OSError whoever we are (a chmod 0 file would not, as root)
    assert by_dev(NetSource(root).read())["eth0"].values == {"net_tx_bytes": 12345678901}
