"""Small traces built from the readings taken on the real H200s (``fixtures/samples.csv``).

The probe recorded both GPUs at ~18 Hz through an idle stretch, 40 NCCL all-reduces of 256 MiB,
a one-way 10 GiB send GPU0 → GPU1 and a 2-GPU DDP run (phase times in ``fixtures/load_log.json``).
A test trace is a plan of phases; each phase replays the recorded sample intervals of that phase
(counter increments, power, utilisation) cyclically for the requested length, so every byte and
watt in it was measured. Two derived quantities, stated here rather than hidden:

* NVLink: the probe read link 0 only; NCCL stripes evenly over the 18 links (h200-telemetry.md),
  so the all-link counter is link 0 × 18;
* energy: the integral of the recorded power;
* memory used was not recorded; a phase states the bytes it holds (the scenario's variable).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from trainsentry.telemetry.base import Reading
from trainsentry.traces.io import readings_to_columns, write_trace

FIXTURES = Path(__file__).resolve().parent / "fixtures"
LINKS = 18
IDLE_MEM_BYTES = 600 * 2 ** 20
GIB = 2 ** 30


def _load() -> tuple[dict[int, dict[str, np.ndarray]], dict]:
    per: dict[int, dict[str, list]] = {}
    with open(FIXTURES / "samples.csv") as fh:
        for row in csv.DictReader(fh):
            g = per.setdefault(int(row["gpu"]), {"t": [], "power_mw": [], "util": [], "tx": [], "rx": []})
            g["t"].append(float(row["t"]))
            g["power_mw"].append(float(row["power_mW"]))
            g["util"].append(float(row["util"]))
            g["tx"].append(float(row["NVLINK_THROUGHPUT_DATA_TX"]) * LINKS)
            g["rx"].append(float(row["NVLINK_THROUGHPUT_DATA_RX"]) * LINKS)
    log = json.loads((FIXTURES / "load_log.json").read_text())
    return {k: {n: np.asarray(v) for n, v in g.items()} for k, g in per.items()}, log


PROBE, LOG = _load()
T0 = float(PROBE[0]["t"][0])
PHASES = {  # (from, to) in epoch seconds of the recording
    "idle": (T0 + 0.5, T0 + 8.0),
    "allreduce": (LOG["allreduce"]["start"] - 0.4, LOG["allreduce"]["start"] + 0.6),
    "send": (LOG["send0to1"]["start"] - 0.3, LOG["send0to1"]["start"] + 0.7),
    "ddp": (LOG["ddp"]["start"] + 0.8, min(LOG["ddp"]["end"], float(PROBE[0]["t"][-1]))),
}


def _cycle(gpu: int, phase: str) -> dict[str, np.ndarray]:
    lo, hi = PHASES[phase]
    g = PROBE[gpu]
    sel = (g["t"] >= lo) & (g["t"] <= hi)
    idx = np.flatnonzero(sel)
    return {"dt": np.diff(g["t"][idx]), "dtx": np.diff(g["tx"][idx]), "drx": np.diff(g["rx"][idx]),
            "power_mw": g["power_mw"][idx[1:]], "util": g["util"][idx[1:]]}


def readings(plan: list[tuple[str, float, int]], t_start: float = 1.8e9) -> list[Reading]:
    """Readings of both GPUs for a plan of (phase, seconds, memory bytes held)."""
    out: list[Reading] = []
    for gpu in (0, 1):
        t, tx, rx, energy_mj = t_start, 5e9, 7e9, 3.0e6
        for phase, seconds, mem in plan:
            c = _cycle(gpu, phase)
            end, i = t + seconds, 0
            while t < end:
                k = i % c["dt"].size
                t += float(c["dt"][k])
                tx += float(c["dtx"][k])
                rx += float(c["drx"][k])
                energy_mj += float(c["power_mw"][k]) * float(c["dt"][k])  # mW * s = mJ
                out.append(Reading(f"gpu{gpu}", "gpu", t, {
                    "nvlink_tx_kib": int(tx), "nvlink_rx_kib": int(rx), "energy_mj": int(energy_mj),
                    "power_mw": int(c["power_mw"][k]), "gpu_util_pct": float(c["util"][k]),
                    "mem_used_bytes": int(mem)}))
                i += 1
    return out


def phase_bounds(plan: list[tuple[str, float, int]], t_start: float = 1.8e9) -> list[tuple[str, float, float]]:
    bounds, t = [], t_start
    for phase, seconds, _ in plan:
        bounds.append((phase, t, t + seconds))
        t += seconds
    return bounds


def write_probe_trace(root: Path, run_id: str, plan: list[tuple[str, float, int]], cls: str, family: str,
                      config: str, t_start: float = 1.8e9) -> Path:
    """Write a plan as a labeled run; the workload is every non-idle phase."""
    every = phase_bounds(plan, t_start)
    bounds = [b for b in every if b[0] != "idle"] or every  # an all-idle run is its own workload
    cols = readings_to_columns("node0", readings(plan, t_start))
    manifest = {"run_id": run_id, "node": "node0", "start": bounds[0][1], "end": bounds[-1][2], "sample_hz": 18.0,
                "labels": {"workload": family, "class": cls, "family": family, "config": config}}
    return write_trace(root / run_id, cols, manifest)


def ddp_plan(seconds: float = 40.0) -> list[tuple[str, float, int]]:
    return [("idle", 3.0, IDLE_MEM_BYTES), ("ddp", seconds, 20 * GIB), ("idle", 2.0, IDLE_MEM_BYTES)]


def send_plan(seconds: float = 40.0) -> list[tuple[str, float, int]]:
    return [("idle", 3.0, IDLE_MEM_BYTES), ("send", seconds, 30 * GIB), ("idle", 2.0, IDLE_MEM_BYTES)]
