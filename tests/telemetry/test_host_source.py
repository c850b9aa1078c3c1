"""HostSource on procfs/sysfs fixture trees (tests/fixtures/hostfs/) and on this machine's own /proc."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fakes.fake_pynvml import ManualClock
from trainsentry.features.grid import to_grids
from trainsentry.telemetry import open_sources
from trainsentry.telemetry.host import HostSource, parse_meminfo, parse_stat_cpu
from trainsentry.traces.io import add_rates, columns_to_table, readings_to_columns
from trainsentry.traces.schema import HOST_METRICS

TREE = Path(__file__).resolve().parents[1] / "fixtures" / "hostfs" / "node1"
RAPL = ("sys", "class", "powercap")


@pytest.fixture
def root(tmp_path):
    return Path(shutil.copytree(TREE, tmp_path / "host"))


def source(root, **kw):
    return HostSource(root / "proc", root / "sys", ticks_per_s=100, **kw)


def test_stat_line_is_cpu_time_by_mode_in_ms():
    text = (TREE / "proc" / "stat").read_text()
    # user 174987 + nice 428223; system 58109 + irq 0 + softirq 1336; idle 1391854 + iowait 2911 (ticks of 10 ms)
    assert parse_stat_cpu(text, 100) == {"cpu_user_ms": 6_032_100, "cpu_system_ms": 594_450, "cpu_idle_ms": 13_947_650}
    # a tick rate that does not divide 1000 converts the cumulative count, so rounding never accumulates
    assert parse_stat_cpu("cpu  3 0 0 0\n", 64)["cpu_user_ms"] == 46
    with pytest.raises(ValueError):
        parse_stat_cpu("cpu0 1 2 3 4\n", 100)
    assert parse_meminfo((TREE / "proc" / "meminfo").read_text()) == (24683568 - 24235404) * 1024
    with pytest.raises(ValueError):
        parse_meminfo("MemTotal: 5 kB\n")


def test_reads_cpu_memory_and_package_energy_only(root):
    src = source(root)
    assert src.devices() == ["host"]
    (r,) = src.read()
    assert (r.device, r.kind) == ("host", "host")
    assert set(r.values) == {m.name for m in HOST_METRICS}
    assert r.values["cpu_energy_uj"] == 0          # energy is counted from the source's first reading
    rapl = root.joinpath(*RAPL)
    (rapl / "intel-rapl:0" / "energy_uj").write_text("81232200513\n")   # package-0: +100,000 uJ
    (rapl / "intel-rapl:2" / "energy_uj").write_text("5000300\n")       # package-1: +300 uJ
    (rapl / "intel-rapl:0:0" / "energy_uj").write_text("9999999\n")     # core sub-zone: inside package-0
    (rapl / "intel-rapl:1" / "energy_uj").write_text("99999999\n")      # psys: contains the packages
    (root / "proc" / "stat").write_text("cpu  175087 428223 58109 1391954 2911 0 1336 557 0 0\n")
    (r,) = src.read()
    assert r.values["cpu_energy_uj"] == 100_300
    assert r.values["cpu_user_ms"] == 6_033_100 and r.values["cpu_idle_ms"] == 13_948_650
    src.close()


def test_rapl_wrap_is_unwrapped_at_the_zone_range(root):
    src = source(root)
    src.read()
    zone = root.joinpath(*RAPL, "intel-rapl:2")
    top = int((zone / "max_energy_range_uj").read_text())
    (zone / "energy_uj").write_text(f"{top - 10}\n")
    first = src.read()[0].values["cpu_energy_uj"]
    assert first == top - 10 - 5_000_000
    (zone / "energy_uj").write_text("20\n")        # wrapped: 10 to the top, 20 after
    second = src.read()[0].values["cpu_energy_uj"]
    assert second - first == 10 + 20
    (zone / "energy_uj").write_text("5\n")         # down from below half the range: a reset, +5
    assert src.read()[0].values["cpu_energy_uj"] - second == 5


def test_unreadable_pieces_are_absent_never_zero(root):
    rapl = root.joinpath(*RAPL)
    for z in ("intel-rapl:0", "intel-rapl:2"):
        (rapl / z / "energy_uj").write_text("permission denied?\n")
    (root / "proc" / "meminfo").unlink()
    (r,) = source(root).read()
    assert "cpu_energy_uj" not in r.values and "host_mem_used_bytes" not in r.values
    assert r.values["cpu_user_ms"] > 0
    assert HostSource(root / "nowhere", root / "nowhere").read() == []   # nothing readable: no reading
    (root / "proc" / "meminfo").write_text("MemTotal:\nMemAvailable: 5 kB\n")
    root.joinpath(*RAPL, "intel-rapl:2", "name").write_bytes(b"\xff\xfe")
    (r,) = source(root).read()                        # broken texts drop their metric, not the reading
    assert set(r.values) == {"cpu_user_ms", "cpu_system_ms", "cpu_idle_ms"}


def test_a_zone_that_fails_drops_the_energy_until_it_reads_again_after_a_rescan(root):
    clock = ManualClock()
    src = source(root, clock=clock, rescan_s=5.0)
    src.read()
    zone = root.joinpath(*RAPL, "intel-rapl:0")
    other = root.joinpath(*RAPL, "intel-rapl:2", "energy_uj")
    (zone / "energy_uj").write_text("garbage\n")
    other.write_text("5000100\n")
    (r,) = src.read()
    assert "cpu_energy_uj" not in r.values          # one package unread: no sum over the other alone
    (zone / "energy_uj").write_text("81232300513\n")
    assert "cpu_energy_uj" not in src.read()[0].values   # not reopened before the rescan
    clock.advance(6.0)
    other.write_text("5000200\n")
    (r,) = src.read()                                # reopened: a new start for it, nothing counted
    assert "cpu_energy_uj" not in r.values
    (zone / "energy_uj").write_text("81232300600\n")
    other.write_text("5000250\n")
    assert src.read()[0].values["cpu_energy_uj"] == 87 + 50


def test_rates_are_busy_cores_and_watts_and_land_on_the_grid(root):
    clock = ManualClock()
    src = source(root, clock=clock)
    stat = root / "proc" / "stat"
    energy = root.joinpath(*RAPL, "intel-rapl:0", "energy_uj")
    readings = []
    user, idle, uj = 174987, 1391854, 81232100513
    for _ in range(30):               # 3 s at 10 Hz: 1.5 cores busy in user mode, 0.5 idle, 40 W
        readings += src.read()
        clock.advance(0.1)
        user, idle, uj = user + 15, idle + 5, uj + 4_000_000
        stat.write_text(f"cpu  {user} 428223 58109 {idle} 2911 0 1336 557 0 0\n")
        energy.write_text(f"{uj}\n")
    cols = readings_to_columns("n1", readings)
    add_rates(cols)
    assert np.allclose(cols["cpu_user_cores"][1:], 1.5) and np.allclose(cols["cpu_idle_cores"][1:], 0.5)
    assert np.allclose(cols["cpu_system_cores"][1:], 0.0) and np.allclose(cols["cpu_energy_W"][1:], 40.0)
    grid = to_grids(columns_to_table(cols), hz=10.0)["n1"]
    assert grid.nets == {} and grid.gpus == {}
    assert np.nanmedian(grid.host["cpu_user_cores"]) == pytest.approx(1.5)
    assert np.nanmedian(grid.host["cpu_energy_W"]) == pytest.approx(40.0)
    assert set(grid.slice(2, 5).host) == set(grid.host)


def test_open_sources_and_agent_specs_know_the_host(root):
    (src,) = open_sources(["host"], host_proc_root=str(root / "proc"), host_sysfs_root=str(root / "sys"))
    assert isinstance(src, HostSource) and src.read()[0].values["cpu_energy_uj"] == 0
    from trainsentry.agent.sources import DEFAULT_SPECS
    from trainsentry.agent.sources import open_sources as agent_open
    assert "host" in DEFAULT_SPECS
    (src,) = agent_open([f"host:{root}/"])
    assert src.proc == root / "proc" and src.sys == root / "sys"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads this machine's /proc")
def test_this_machines_cpu_time_rises_with_a_busy_loop():
    src = HostSource()
    before, cpu0 = src.read()[0].values, time.process_time()
    end = time.monotonic() + 0.4
    x = 0
    while time.monotonic() < end:
        x += 1
    after, cpu1 = src.read()[0].values, time.process_time()
    busy = lambda v: v["cpu_user_ms"] + v["cpu_system_ms"]  # noqa: E731
    own_ms = (cpu1 - cpu0) * 1000
    # the machine's busy time rose at least by this process's own (less a few ticks of rounding)
    assert own_ms > 200 and busy(after) - busy(before) >= own_ms - 50
    assert after["host_mem_used_bytes"] > 0


def test_old_traces_without_host_columns_still_make_grids():
    t = pa.table({"node": ["n"] * 3, "device": ["eth0"] * 3, "kind": ["net"] * 3, "t": [0.0, 0.1, 0.2],
                  "net_tx_Bps": [None, 5.0, 5.0], "net_rx_Bps": [None, 1.0, 1.0]})
    g = to_grids(t, hz=10.0)["n"]
    assert g.host == {} and "eth0" in g.nets
