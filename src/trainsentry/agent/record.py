"""Record a trace locally, without a collector: the sampler's readings -> ``samples.parquet`` + manifest.

While recording, each batch of readings is appended to ``samples.partial.jsonl`` in the output
directory and fsynced (once per batch, about once a second), next to ``manifest.partial.json``.
A recording that dies (crash, SIGKILL, power loss) therefore keeps everything up to its last
batch; :func:`recover` turns those two files into a normal trace. A clean stop writes the trace
through :mod:`trainsentry.traces.io` and removes the partial files.

:class:`Recorder` is the Python API (the lab campaign runner records while a workload runs):
``start()`` samples in a background thread, ``stop()`` ends it and returns the readings, and
``write()`` stores them as a trace. pyarrow is imported only when a trace is written.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ..telemetry.base import Reading
from .sampler import Sampler, SamplerStats

PARTIAL_SAMPLES = "samples.partial.jsonl"
PARTIAL_MANIFEST = "manifest.partial.json"
REQUIRED_LABELS = ("workload", "class")
DEFAULT_LABELS = {"family": "unspecified", "config": "unspecified"}


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels completed with defaults; ValueError naming what is missing or wrong."""
    missing = [k for k in REQUIRED_LABELS if not labels.get(k)]
    if missing:
        raise ValueError(f"labels {missing} are required (e.g. --label workload=gpt-ddp --label class=training)")
    from ..traces.io import CLASSES  # pulls pyarrow: fine, recording needs it to write the trace anyway
    if labels["class"] not in CLASSES:
        raise ValueError(f"label class must be one of {CLASSES}, got {labels['class']!r}")
    return {**DEFAULT_LABELS, **labels}


class Recorder:
    """Sample ``sources`` at ``hz`` in a background thread; keep every reading in memory and on disk."""

    def __init__(self, sources: Sequence, hz: float = 10.0, node: str | None = None,
                 out_dir: str | Path | None = None, labels: dict[str, str] | None = None,
                 batch_s: float = 1.0):
        from .node import default_node_id
        self.sources = list(sources)
        self.hz = hz
        self.node = node or default_node_id()
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.labels = dict(labels or {})
        self.readings: list[Reading] = []
        self.sampler = Sampler(self.sources, hz=hz, batch_s=batch_s, on_batch=self._on_batch)
        self.stats: SamplerStats = self.sampler.stats
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._thread: threading.Thread | None = None
        self._partial = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, duration_s: float | None = None) -> "Recorder":
        if self._thread is not None:
            raise RuntimeError("recorder already started")
        self.started_at = time.time()
        if self.out_dir is not None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            if (self.out_dir / PARTIAL_SAMPLES).exists():
                raise FileExistsError(f"{self.out_dir} holds an unfinished recording; "
                                      f"run `trainsentry record {self.out_dir} --recover` first")
            _write_json(self.out_dir / PARTIAL_MANIFEST, self._manifest(partial=True))
            self._partial = open(self.out_dir / PARTIAL_SAMPLES, "a", encoding="ascii")
        self._thread = threading.Thread(target=self._run, args=(duration_s,), name="trainsentry-recorder",
                                        daemon=True)
        self._thread.start()
        return self

    def _run(self, duration_s: float | None) -> None:
        try:
            self.sampler.run(duration_s)
        except BaseException as e:  # surfaced by stop()/wait(), never swallowed
            self._error = e
        finally:
            self.stopped_at = time.time()
            if self._partial is not None:
                self._partial.close()

    def _on_batch(self, readings: list[Reading], interval_s: float) -> None:
        with self._lock:
            self.readings.extend(readings)
        if self._partial is not None:
            self._partial.write(json.dumps([r.to_wire() for r in readings], separators=(",", ":")) + "\n")
            self._partial.flush()
            os.fsync(self._partial.fileno())

    def snapshot(self) -> list[Reading]:
        """A copy of the readings so far (safe while recording: a campaign cuts runs as they end)."""
        with self._lock:
            return list(self.readings)

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the recording ends by itself (duration reached, sources exhausted)."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def stop(self) -> list[Reading]:
        """End the recording (the partial batch included) and return every reading."""
        self.sampler.stop()
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise RuntimeError(f"recording failed: {self._error}") from self._error
        return self.readings

    # -- output --------------------------------------------------------------------------------
    def columns(self) -> dict[str, list]:
        from ..traces.io import readings_to_columns
        return readings_to_columns(self.node, self.readings)

    def _manifest(self, partial: bool = False) -> dict:
        ts = [r.t for r in self.readings]
        m = {"run_id": self.out_dir.name if self.out_dir is not None else uuid.uuid4().hex[:12],
             "node": self.node, "start": min(ts) if ts else self.started_at,
             "end": max(ts) if ts else (self.stopped_at or self.started_at),
             "labels": self.labels, "sample_hz": self.hz,
             "sources": [getattr(s, "name", type(s).__name__) for s in self.sources],
             "devices": sorted({r.device for r in self.readings}),
             "recorded_by": "trainsentry record"}
        if not partial:
            m.update(ticks=self.stats.ticks, missed_ticks=self.stats.missed_ticks, read_errors=self.stats.read_errors,
                     dropped_values=self.stats.dropped_values, samples=len(self.readings))
        return m

    def write(self, out_dir: str | Path | None = None, extra_manifest: dict | None = None) -> Path:
        """Write ``samples.parquet`` + ``manifest.json``; remove the partial files once that succeeded."""
        out = Path(out_dir) if out_dir is not None else self.out_dir
        if out is None:
            raise ValueError("no output directory")
        self.labels = check_labels(self.labels)
        from ..traces.io import write_trace
        path = write_trace(out, self.columns(), {**self._manifest(), **(extra_manifest or {})})
        for name in (PARTIAL_SAMPLES, PARTIAL_MANIFEST):
            (out / name).unlink(missing_ok=True)
        return path


def recover(out_dir: str | Path) -> Path:
    """Turn an interrupted recording's partial files into a trace; returns the run directory."""
    out = Path(out_dir)
    try:
        manifest = json.loads((out / PARTIAL_MANIFEST).read_text())
        lines = (out / PARTIAL_SAMPLES).read_text(encoding="ascii").splitlines()
    except FileNotFoundError as e:
        raise ValueError(f"{out} holds no unfinished recording ({e.filename} is missing)") from None
    readings: list[Reading] = []
    for i, line in enumerate(lines):
        try:
            readings.extend(Reading.from_wire(d) for d in json.loads(line))
        except (ValueError, KeyError, TypeError):
            if i == len(lines) - 1:  # the batch being written when the recorder died: torn, skip it
                break
            raise ValueError(f"{out / PARTIAL_SAMPLES}: line {i + 1} is corrupt") from None
    from ..traces.io import readings_to_columns, write_trace
    ts = [r.t for r in readings]
    manifest.update(start=min(ts) if ts else manifest["start"], end=max(ts) if ts else manifest["start"],
                    devices=sorted({r.device for r in readings}), samples=len(readings), recovered=True)
    manifest["labels"] = check_labels(manifest.get("labels", {}))
    path = write_trace(out, readings_to_columns(manifest["node"], readings), manifest)
    for name in (PARTIAL_SAMPLES, PARTIAL_MANIFEST):
        (out / name).unlink(missing_ok=True)
    return path


def _write_json(path: Path, obj: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True, default=float) + "\n")
    os.replace(tmp, path)
