"""Read and write traces: ``samples.parquet`` (one row per device reading) + ``manifest.json``.

The same columns serve live streams (the collector's store and read API), recorded datasets and
tests. Derived rate columns (``nvlink_tx_Bps``, ``energy_W``, ``net_rx_Bps`` …) are computed per
device from the raw counters with :func:`trainsentry.traces.rates.derive_rates` when a trace is
written, so a reader never needs to repeat the wrap/reset logic.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..telemetry.base import Reading
from .rates import derive_rates
from .schema import METRICS, RATE_NAMES

TRACE_SCHEMA_VERSION = "trainsentry.trace/1"
SAMPLES_FILE = "samples.parquet"
MANIFEST_FILE = "manifest.json"
CLASSES = ("training", "inference", "other")


def arrow_schema() -> pa.Schema:
    fields = [pa.field("node", pa.string(), nullable=False), pa.field("device", pa.string(), nullable=False),
              pa.field("kind", pa.string(), nullable=False), pa.field("t", pa.float64(), nullable=False)]
    for m in METRICS:
        fields.append(pa.field(m.name, pa.int64() if m.integer else pa.float64()))
    for r in RATE_NAMES:
        fields.append(pa.field(r, pa.float64()))
    return pa.schema(fields)


SCHEMA = arrow_schema()
# a late counter's derived rate column is as late as the counter
_LATE = frozenset(m.name for m in METRICS if m.late) | frozenset(m.rate_name for m in METRICS if m.late and m.rate_name)


def readings_to_columns(node: str, readings: Iterable[Reading]) -> dict[str, list]:
    """Raw readings (any order, any devices) to column lists sorted by (device, t), rates added."""
    rows = sorted(readings, key=lambda r: (r.device, r.t))
    cols: dict[str, list] = {"node": [node] * len(rows), "device": [r.device for r in rows],
                             "kind": [r.kind for r in rows], "t": [r.t for r in rows]}
    for m in METRICS:
        cols[m.name] = [r.values.get(m.name) for r in rows]
    add_rates(cols)
    return cols


def add_rates(cols: dict[str, list]) -> None:
    """Fill the derived-rate columns in place; rows must be sorted by (device, t)."""
    n = len(cols["t"])
    for r in RATE_NAMES:
        cols[r] = [None] * n
    devices = cols["device"]
    start = 0
    while start < n:
        end = start
        while end < n and devices[end] == devices[start]:
            end += 1
        t = np.asarray(cols["t"][start:end], dtype=np.float64)
        raw = {m.name: np.asarray([np.nan if v is None else v for v in cols[m.name][start:end]], dtype=np.float64)
               for m in METRICS if m.kind == "counter" and any(v is not None for v in cols[m.name][start:end])}
        for name, values in derive_rates(t, raw).items():
            cols[name][start:end] = [None if math.isnan(x) else float(x) for x in values]
        start = end


# Counters an agent can read at a rate of their own (what `thin_counters` accepts, by group).
COUNTER_GROUPS = {"nvlink": ("nvlink_tx_kib", "nvlink_rx_kib"), "energy": ("energy_mj",),
                  "net": ("net_tx_bytes", "net_rx_bytes")}


def check_counter_periods(periods: dict[str, float]) -> None:
    """ValueError naming what is wrong with a {group: seconds} map for :func:`thin_counters`."""
    unknown = set(periods) - set(COUNTER_GROUPS)
    if unknown:
        raise ValueError(f"unknown counter groups {sorted(unknown)}; known: {sorted(COUNTER_GROUPS)}")
    if any(not p > 0 for p in periods.values()):
        raise ValueError(f"counter periods must be > 0 s, got {periods}")


def thin_counters(table: pa.Table, periods: dict[str, float]) -> pa.Table:
    """The trace an agent reading each counter group only every ``periods[group]`` seconds would
    have recorded: per device, the group's counters keep the first reading of every period (from
    the device's first sample) and are absent elsewhere; the derived rates are recomputed
    (:func:`add_rates`, which spreads each difference over the samples between two reads). Gauges
    are untouched. For studies of what detection loses when costly counters are read less often."""
    check_counter_periods(periods)
    if table.num_rows == 0 or not periods:
        return table
    dev, t = table["device"].to_pylist(), table["t"].to_pylist()
    order = sorted(range(table.num_rows), key=lambda i: (dev[i], t[i]))
    table = table.take(pa.array(order))
    cols = table.to_pydict()
    devices, t = cols["device"], cols["t"]
    for group, period in periods.items():
        keep = [False] * len(t)
        last_dev, last_bucket = None, None
        for i, (d, ti) in enumerate(zip(devices, t)):
            if d != last_dev:
                last_dev, t0, last_bucket = d, ti, None
            bucket = int((ti - t0) // period)
            if bucket != last_bucket:
                keep[i], last_bucket = True, bucket
        for name in COUNTER_GROUPS[group]:
            cols[name] = [v if k else None for v, k in zip(cols[name], keep)]
    add_rates(cols)
    return columns_to_table(cols)


_INT_FIELDS = tuple(f.name for f in SCHEMA if pa.types.is_integer(f.type))
_FLOAT_FIELDS = tuple(f.name for f in SCHEMA if pa.types.is_floating(f.type))
_INT64_MIN, _INT64_END = -2 ** 63, 2 ** 63


def _int64_or_none(v):
    """An integer column's value as int64 can hold it, else missing. The wire accepts |v| < 2**64 (NVML
    counters are unsigned 64-bit) and any number in any metric; the store keeps such a value (as REAL).
    No real counter reads that high, so a trace reads it as a reading it does not have."""
    if isinstance(v, int):
        return v if _INT64_MIN <= v < _INT64_END else None
    if isinstance(v, float):
        return int(v) if math.isfinite(v) and _INT64_MIN <= v < _INT64_END else None
    return None


def columns_to_table(cols: dict[str, list]) -> pa.Table:
    """Columns (lists) in :data:`SCHEMA`. A value an integer column cannot hold (beyond int64, or not a
    finite number) is read as missing, and an integer beyond int64 in a floating column is taken as the
    float it is (pyarrow refuses it), so one wild value a node sent never stops a table from being
    built (the live collector builds one per window: collector/live.py)."""
    data = {f.name: cols.get(f.name, [None] * len(cols["t"])) for f in SCHEMA}
    try:
        return pa.Table.from_pydict(data, schema=SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):   # rare: checked value by value only then
        for name in _INT_FIELDS:
            data[name] = [None if v is None else _int64_or_none(v) for v in data[name]]
        for name in _FLOAT_FIELDS:
            data[name] = [float(v) if isinstance(v, int) else v for v in data[name]]
        return pa.Table.from_pydict(data, schema=SCHEMA)


def validate_manifest(manifest: dict) -> None:
    """Raise ValueError naming the first problem in a run manifest."""
    if manifest.get("schema") != TRACE_SCHEMA_VERSION:
        raise ValueError(f"manifest schema must be {TRACE_SCHEMA_VERSION!r}")
    for key in ("run_id", "node", "start", "end", "labels", "sample_hz"):
        if key not in manifest:
            raise ValueError(f"manifest lacks {key!r}")
    labels = manifest["labels"]
    for key in ("workload", "class", "family", "config"):
        if key not in labels:
            raise ValueError(f"manifest labels lack {key!r}")
    if labels["class"] not in CLASSES:
        raise ValueError(f"labels.class must be one of {CLASSES}")
    if not manifest["end"] >= manifest["start"]:
        raise ValueError("manifest end precedes start")


def write_trace(run_dir: str | Path, cols_or_table: dict[str, list] | pa.Table, manifest: dict) -> Path:
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    manifest = {"schema": TRACE_SCHEMA_VERSION, **manifest}
    validate_manifest(manifest)
    table = cols_or_table if isinstance(cols_or_table, pa.Table) else columns_to_table(cols_or_table)
    pq.write_table(table, run_dir / SAMPLES_FILE, compression="zstd")
    (run_dir / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1, sort_keys=True, default=float) + "\n")
    return run_dir


def read_manifest(run_dir: str | Path) -> dict:
    manifest = json.loads((Path(run_dir) / MANIFEST_FILE).read_text())
    validate_manifest(manifest)
    return manifest


def read_samples(run_dir: str | Path) -> pa.Table:
    """A trace's samples in :data:`SCHEMA`'s columns. A trace recorded before a ``late`` metric existed
    lacks that column: it reads as nulls (not reported), every other missing column is an error."""
    table = pq.read_table(Path(run_dir) / SAMPLES_FILE)
    missing = [f.name for f in SCHEMA if f.name not in table.column_names]
    if [m for m in missing if m not in _LATE]:
        raise ValueError(f"{run_dir}: samples lack columns {[m for m in missing if m not in _LATE][:5]}")
    if missing:
        cols = {f.name: table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type)
                for f in SCHEMA}
        table = pa.Table.from_pydict(cols, schema=SCHEMA)
    return table


def read_trace(run_dir: str | Path) -> tuple[pa.Table, dict]:
    return read_samples(run_dir), read_manifest(run_dir)


def iter_runs(root: str | Path) -> list[Path]:
    """Every run directory (one holding a manifest) below root, sorted."""
    return sorted(p.parent for p in Path(root).rglob(MANIFEST_FILE))
