"""Runs and their window features, extracted once per run and cached.

Every run directory (``samples.parquet`` + ``manifest.json``, :mod:`trainsentry.traces.io`) gives
two window tables: ours (:func:`trainsentry.features.sliding_windows`) and Rahman & Tajdari's
(:func:`trainsentry.features.rt.rt_sliding_windows`). Each window carries ``in_run``: whether at
least half of it lies inside the labeled workload [start, end]; only those windows are labeled
for fitting and window-level scores, while run-level alerting reads every window of the trace,
idle margins included, as a live monitor would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..features import DEFAULT_HZ, DEFAULT_STRIDE_S, DEFAULT_WINDOW_S, FEATURE_VERSION, sliding_windows
from ..features.rt import RT_STRIDE_S, RT_WINDOW_S, rt_sliding_windows
from ..lab.summary import config_key
from ..traces.io import iter_runs, read_trace, thin_counters

MIN_IN_RUN_OVERLAP = 0.5


@dataclass
class Run:
    run_id: str
    path: str
    cls: str
    family: str
    config: str
    workload: str
    start: float
    end: float
    windows: dict[str, pd.DataFrame]     # feature set name -> window table

    @property
    def is_training(self) -> bool:
        return self.cls == "training"


def _mark(df: pd.DataFrame, start: float, end: float) -> pd.DataFrame:
    if df.empty:
        return df.assign(in_run=pd.Series(dtype=bool))
    lo = np.maximum(df["t_start"].to_numpy(), start)
    hi = np.minimum(df["t_end"].to_numpy(), end)
    width = (df["t_end"] - df["t_start"]).to_numpy()
    return df.assign(in_run=(hi - lo) >= MIN_IN_RUN_OVERLAP * width)


def _cache_key(run_dir: Path, counter_periods: dict[str, float] | None = None) -> str:
    st = (run_dir / "samples.parquet").stat()
    man = (run_dir / "manifest.json").read_bytes()
    raw = json.dumps([str(run_dir.resolve()), st.st_size, st.st_mtime_ns, hashlib.sha1(man).hexdigest(),
                      FEATURE_VERSION, DEFAULT_WINDOW_S, DEFAULT_STRIDE_S, DEFAULT_HZ, RT_WINDOW_S, RT_STRIDE_S]
                     + ([sorted(counter_periods.items())] if counter_periods else []))
    return hashlib.sha1(raw.encode()).hexdigest()[:20]


def extract(run_dir: Path, counter_periods: dict[str, float] | None = None) -> dict[str, pd.DataFrame]:
    """Window tables of one run; ``counter_periods`` ({"nvlink": 1.0}) first thins the recorded
    counters to what an agent reading them that rarely would have seen (traces.io.thin_counters)."""
    table, _ = read_trace(run_dir)
    if counter_periods:
        table = thin_counters(table, counter_periods)
    return {"trainsentry": pd.DataFrame(sliding_windows(table, DEFAULT_WINDOW_S, DEFAULT_STRIDE_S, DEFAULT_HZ)),
            "rt": pd.DataFrame(rt_sliding_windows(table, RT_WINDOW_S, RT_STRIDE_S))}


def load_run(run_dir: Path, cache_dir: Path | None, counter_periods: dict[str, float] | None = None) -> Run:
    table_free_manifest = json.loads((run_dir / "manifest.json").read_text())
    from ..traces.io import validate_manifest
    validate_manifest(table_free_manifest)
    m = table_free_manifest
    windows = None
    if cache_dir is not None:
        key = _cache_key(run_dir, counter_periods)
        paths = {k: cache_dir / f"{key}.{k}.parquet" for k in ("trainsentry", "rt")}
        if all(p.exists() for p in paths.values()):
            windows = {k: pd.read_parquet(p) for k, p in paths.items()}
    if windows is None:
        windows = extract(run_dir, counter_periods)
        if cache_dir is not None:
            cache_dir.mkdir(parents=True, exist_ok=True)
            for k, df in windows.items():
                df.to_parquet(paths[k])
    lab = m["labels"]
    windows = {k: _mark(df, float(m["start"]), float(m["end"])) for k, df in windows.items()}
    return Run(m["run_id"], str(run_dir), lab["class"], lab["family"], config_key(m), lab["workload"],
               float(m["start"]), float(m["end"]), windows)


Roots = str | Path | Sequence[str | Path]


def root_list(root: Roots) -> list[str]:
    return [str(root)] if isinstance(root, (str, Path)) else [str(r) for r in root]


def root_label(root: Roots) -> str:
    """How results name the data: the root, or the roots joined by " + "."""
    return " + ".join(root_list(root))


def _dirs_by_root(root: Roots) -> list[tuple[str, Path]]:
    pairs, roots = [], root_list(root)
    for r in roots:
        found = iter_runs(r)
        if not found:
            raise FileNotFoundError(f"no runs (manifest.json) under {r}")
        pairs += [(r, d) for d in found]
    twice = len(pairs) - len({d.resolve() for _, d in pairs})
    if twice:
        raise ValueError(f"{twice} run directories lie under more than one of the roots {roots}")
    return pairs


def run_dirs(root: Roots) -> list[Path]:
    """Every run directory below the root, or below each of several roots (one dataset of several
    machines' campaigns: ``trainsentry eval --data data/h200 --data data/h200x1``)."""
    return [d for _, d in _dirs_by_root(root)]


def load_dataset(root: Roots, cache_dir: Path | None = None, subset: int | None = None,
                 seed: int = 0, progress=None, counter_periods: dict[str, float] | None = None) -> list[Run]:
    """All runs below root (or roots), or a class-balanced random subset of ``subset`` configurations
    per class. With several roots a run's id is prefixed by its root (``data/h200x1/...``):
    each campaign names its runs workload-overrides-repeat, so ids repeat across machines, and results
    key runs by id."""
    pairs = _dirs_by_root(root)
    several = len(root_list(root)) > 1
    prefix = {d: f"{r.rstrip('/')}/" if several else "" for r, d in pairs}
    dirs = [d for _, d in pairs]
    if subset is not None:
        dirs = _subset(dirs, subset, seed)
    runs = []
    for d in dirs:
        try:
            run = load_run(d, cache_dir, counter_periods)
            runs.append(replace(run, run_id=prefix[d] + run.run_id) if prefix[d] else run)
        except (ValueError, KeyError, OSError) as e:
            raise ValueError(f"{d}: {e}") from e
        if progress is not None:
            progress()
    return runs


def _subset(dirs: list[Path], per_class: int, seed: int) -> list[Path]:
    """Keep every run of ``per_class`` randomly chosen configurations of each class."""
    by_cls: dict[str, dict[str, list[Path]]] = {}
    for d in dirs:
        m = json.loads((d / "manifest.json").read_text())
        by_cls.setdefault(m["labels"]["class"], {}).setdefault(config_key(m), []).append(d)
    rng = np.random.default_rng(seed)
    keep: list[Path] = []
    for cls in sorted(by_cls):
        configs = sorted(by_cls[cls])
        for c in rng.permutation(configs)[:per_class]:
            keep.extend(by_cls[cls][str(c)])
    return sorted(keep)


def stack(runs: list[Run], feature_set: str, in_run_only: bool = True) -> tuple[pd.DataFrame, np.ndarray, list[str], list[str]]:
    """Windows of many runs as one frame: X, y (1 = training), classes, run ids."""
    frames, ys, classes, ids = [], [], [], []
    for r in runs:
        df = r.windows[feature_set]
        if in_run_only and not df.empty:
            df = df[df["in_run"]]
        frames.append(df)
        ys.append(np.full(len(df), int(r.is_training)))
        classes += [r.cls] * len(df)
        ids += [r.run_id] * len(df)
    X = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    return X, (np.concatenate(ys) if ys else np.zeros(0, int)), classes, ids
