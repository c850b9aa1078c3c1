"""NVML readings recorded on the lent H200s, as one time series per recorded GPU and metric.

Two recording formats load into the same :class:`Recording`:

* the first probe (``tests/fixtures/h200/``, copied from ``/work/shared/reference/h200-probe/``):
  ``samples.csv`` (20 Hz: NVLink DATA TX/RX of **link 0**, power, GPU util, 2 GPUs, all-reduce +
  one-way send + DDP), ``nvml_before.json`` / ``nvml_after.json`` (snapshots of every NVML field and
  call at the two ends), ``probe2.json`` (per-link TX counters, GPM metrics at idle and under load,
  memory used);
* the richer format written by ``scripts/gpu/nvml_fixture.py`` (every field and scope we query, with
  NVML's own return codes and timestamps, GPM, power, energy, util, clocks, temperature at 10 Hz).

What the probe did not record directly is derived from what it did record, never made up:

* per-link and all-link NVLink counters: the recorded link-0 counter times each link's share of the
  traffic measured in ``probe2.json`` (``per_link_after``: NCCL striped the 20 GiB all-reduce over
  all 18 links, link l carried ``per_link[l] / per_link[0]`` of link 0's bytes);
* energy: the ``nvml_before`` energy counter plus the trapezoid integral of the recorded 20 Hz power
  (a test checks this against the ``nvml_after`` counter);
* GPM: the ``probe2`` idle metrics while the recorded GPU util is 0, its under-load metrics otherwise;
* snapshots (memory util, SM clock, PCIe throughput): held from the snapshot's time on.

A metric absent from a recording (GPU temperature and memory clock in the first probe) stays absent:
the fake answers NotSupported for it, as a driver would.
"""

from __future__ import annotations

import bisect
import csv
import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

FI_DATA_TX = 138
FI_DATA_RX = 139
FI_LINK_COUNT = 91
SCOPE_ALL_LINKS = 0xFFFFFFFF
FIXTURE_FORMAT = "trainsentry.nvml-fixture/1"
PROBE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
# 45 s on 2 x H200 at ~8 Hz: idle, all-reduce, one-way send, bf16 matmul, DDP (h200x2_load_log.json).
FIXTURE_FILE = PROBE_DIR / "h200x2_nvml_fixture.json.gz"

# GPM metric ids (pynvml NVML_GPM_METRIC_*) the probe recorded by name.
_GPM_IDS = {"GRAPHICS_UTIL": 1, "SM_UTIL": 2, "SM_OCCUPANCY": 3, "ANY_TENSOR_UTIL": 5, "DRAM_BW_UTIL": 10,
            "PCIE_TX_PER_SEC": 20, "PCIE_RX_PER_SEC": 21, "NVLINK_TOTAL_RX_PER_SEC": 60,
            "NVLINK_TOTAL_TX_PER_SEC": 61}


@dataclass(frozen=True)
class Err:
    """A recorded NVML error code in place of a value."""
    code: int


@dataclass
class GpuRecording:
    """Time series of one recorded GPU: key -> (times, values), values held until the next time."""
    name: str = "NVIDIA H200"
    link_count: int = 18
    link_state: list[int] = field(default_factory=lambda: [1] * 18)
    gpm_supported: bool = True
    series: dict[object, tuple[list[float], list[object]]] = field(default_factory=dict)

    def add(self, key: object, t: float, value: object) -> None:
        times, values = self.series.setdefault(key, ([], []))
        if times and t < times[-1]:
            raise ValueError(f"recording times go backwards for {key!r}")
        times.append(t)
        values.append(value)

    def at(self, key: object, t: float) -> object | None:
        """The value recorded at or before t (the first one before the series starts); None if never."""
        if key not in self.series:
            return None
        times, values = self.series[key]
        i = bisect.bisect_right(times, t) - 1
        return values[max(i, 0)]

    def span(self, key: object) -> tuple[object, object] | None:
        if key not in self.series:
            return None
        return self.series[key][1][0], self.series[key][1][-1]


@dataclass
class Recording:
    gpus: list[GpuRecording]
    t0: float
    t1: float
    source: str
    driver: str = ""


def is_counter(key: object) -> bool:
    """Cumulative keys: the fake keeps these growing when it loops over the recording."""
    return key == "energy_mj" or (isinstance(key, tuple) and key[0] == "field" and key[1] in (FI_DATA_TX, FI_DATA_RX))


def load_recording(path: str | Path | None = None) -> Recording:
    """A probe directory (holding samples.csv) or a nvml_fixture.py JSON (.gz) file; default: FIXTURE_FILE."""
    path = Path(path) if path is not None else FIXTURE_FILE
    if path.is_dir():
        return load_probe(path)
    return load_fixture(path)


def load_probe(d: Path) -> Recording:
    before = json.loads((d / "nvml_before.json").read_text())
    after = json.loads((d / "nvml_after.json").read_text())
    probe2 = json.loads((d / "probe2.json").read_text())
    rows = list(csv.DictReader((d / "samples.csv").open()))
    n = int(before["count"])
    gpus: list[GpuRecording] = []
    for g in range(n):
        snap_b, snap_a = before["snap"][g], after["snap"][g]
        rec = GpuRecording(name=snap_b.get("name", "NVIDIA H200"),
                           link_count=int(snap_b.get("NVML_FI_DEV_NVLINK_LINK_COUNT", 18)),
                           link_state=list(snap_b.get("nvlink_state", [1] * 18)),
                           gpm_supported=snap_b.get("gpm_support") == 1)
        per_link = [v for _, v in probe2["per_link_after"][g]]
        shares = [v / per_link[0] for v in per_link]  # traffic on link l relative to link 0
        mine = [r for r in rows if int(r["gpu"]) == g]
        energy = float(snap_b["energy_mJ"])
        prev: tuple[float, float] | None = None
        gpm = probe2["gpm"]["idle"], probe2.get("gpm_load") if isinstance(probe2.get("gpm_load"), dict) else None
        for r in mine:
            t, power = float(r["t"]), float(r["power_mW"])
            energy += (t - before["t"]) * float(snap_b["power_mW"]) if prev is None else \
                (t - prev[0]) * (prev[1] + power) / 2.0
            prev = (t, power)
            rec.add("power_mw", t, int(power))
            rec.add("energy_mj", t, int(round(energy)))
            rec.add("gpu_util", t, int(r["util"]))
            for fid, col in ((FI_DATA_TX, "NVLINK_THROUGHPUT_DATA_TX"), (FI_DATA_RX, "NVLINK_THROUGHPUT_DATA_RX")):
                link0 = int(r[col])
                links = [int(round(link0 * s)) for s in shares]
                for link, v in enumerate(links):
                    rec.add(("field", fid, link), t, v)
                rec.add(("field", fid, SCOPE_ALL_LINKS), t, sum(links))
            phase = gpm[1] if (int(r["util"]) > 0 and gpm[1] is not None) else gpm[0]
            for name, mid in _GPM_IDS.items():
                v = phase.get("NVML_GPM_METRIC_" + name)
                if v is not None:
                    rec.add(("gpm", mid), t, float(v))
        rec.add(("field", FI_LINK_COUNT, 0), before["t"], rec.link_count)
        for snap, t in ((snap_b, before["t"]), (snap_a, after["t"])):
            rec.add("mem_util", t, int(snap["util"][1]))
            rec.add("sm_clock", t, int(snap["clock_sm"]))
            rec.add("pcie_tx_kbps", t, int(snap["pcie_tx_KBps"]))
            rec.add("pcie_rx_kbps", t, int(snap["pcie_rx_KBps"]))
        rec.add("mem_used", before["t"], int(probe2["mem"][g]))
        gpus.append(rec)
    t0 = min(float(r["t"]) for r in rows)
    t1 = max(float(r["t"]) for r in rows)
    return Recording(gpus=gpus, t0=t0, t1=t1, source=str(d), driver=before.get("driver", ""))


_CALL_KEYS = ("power_mw", "energy_mj", "mem_used", "sm_clock", "mem_clock", "temp", "pcie_tx_kbps", "pcie_rx_kbps")


def load_fixture(p: Path) -> Recording:
    """The JSON written by scripts/gpu/nvml_fixture.py (see that script for the format)."""
    doc = json.loads(gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_text())
    if doc.get("format") != FIXTURE_FORMAT:
        raise ValueError(f"{p}: not a {FIXTURE_FORMAT} file")
    gpus = [GpuRecording(name=g.get("name", ""), link_count=int(g.get("link_count", 0)),
                         link_state=list(g.get("link_state", [])), gpm_supported=bool(g.get("gpm_supported")))
            for g in doc["gpus"]]

    def val(x: object) -> object:
        return Err(int(x["err"])) if isinstance(x, dict) and "err" in x else x

    times = []
    for s in doc["samples"]:
        rec, t = gpus[int(s["gpu"])], float(s["t"])
        times.append(t)
        for fid, scope, ret, value, _ts in s.get("fields", []):
            rec.add(("field", int(fid), int(scope)), t, Err(int(ret)) if ret else value)
        calls = s.get("calls", {})
        for key in _CALL_KEYS:
            if key in calls:
                rec.add(key, t, val(calls[key]))
        if "util" in calls:
            u = val(calls["util"])
            rec.add("gpu_util", t, u if isinstance(u, Err) else int(u[0]))
            rec.add("mem_util", t, u if isinstance(u, Err) else int(u[1]))
        for mid, v in (s.get("gpm") or {}).items():
            rec.add(("gpm", int(mid)), t, val(v))
    if not times:
        raise ValueError(f"{p}: no samples")
    return Recording(gpus=gpus, t0=min(times), t1=max(times), source=str(p), driver=doc.get("driver", ""))


def summarize(path: Path = FIXTURE_FILE) -> dict:
    """The numbers docs/telemetry.md quotes about a nvml_fixture.py recording."""
    import statistics as st
    doc = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())
    samples = doc["samples"]
    lags, spreads, equal = [], [], 0
    for s in samples:
        stamps = [f[4] for f in s["fields"] if f[2] == 0]
        lags += [ts / 1e6 - s["t"] for ts in stamps]
        spreads.append((max(stamps) - min(stamps)) / 1e3)
        f = {(a, b): v for a, b, ret, v, _ in s["fields"] if ret == 0}
        links = [f[(FI_DATA_TX, link)] for link in range(doc["gpus"][s["gpu"]]["link_count"])]
        equal += sum(links) == f.get((FI_DATA_TX, SCOPE_ALL_LINKS))
    calls = sorted({k for s in samples for k in s.get("call_s", {})})
    return {
        "samples": len(samples), "gpus": doc["count"], "seconds": round(doc["end"] - doc["start"], 1),
        "polls_per_s_per_gpu": round(len(samples) / doc["count"] / (doc["end"] - doc["start"]), 2),
        "field_ts_minus_host_s": [round(min(lags), 4), round(max(lags), 4)],
        "field_ts_spread_in_one_call_ms": {"median": round(st.median(spreads), 1), "max": round(max(spreads), 1)},
        "all_links_equals_sum_of_links": f"{equal}/{len(samples)}",
        "call_ms_mean": {k: round(1e3 * st.mean(s["call_s"][k] for s in samples if k in s["call_s"]), 3)
                         for k in calls},
    }


if __name__ == "__main__":  # python tests/fakes/h200_recording.py [recording]
    import sys
    print(json.dumps(summarize(Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE_FILE), indent=1))
