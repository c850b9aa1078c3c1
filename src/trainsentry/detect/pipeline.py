"""One command from run directories to results/detector.json, figures and docs/detector.md."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..features import FEATURE_VERSION
from .alert import AlertRule
from .base import save_detector
from .dataset import Roots, Run, load_dataset, root_label, root_list, run_dirs, stack
from .evaluate import config_splits, detector_factories, either_alert, evaluate_detector

RESULTS_FILE = "detector.json"
# Run-level combinations reported beside the detectors when both are evaluated: fused sees every
# multi-device exchange within seconds but nothing of single-device training (its gate is closed
# there); rt-baseline reads one GPU's activity over 30 s windows and is the only detector here that
# alerts on single-GPU training. Chosen after reading the 200 seed-0 splits of 2026-11-30 (not
# confirmed on other splits yet): see docs/detector.md.
EITHER = (("fused", "rt-baseline"),)


def default_cache_dir() -> Path:
    return Path(os.environ.get("TRAINSENTRY_CACHE", Path.home() / ".cache" / "trainsentry")) / "features"


def _progress():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


def dataset_summary(root: str, runs: list[Run]) -> dict:
    return {"root": str(root), "runs": len(runs), "configs": len({r.config for r in runs}),
            "families": len({r.family for r in runs}),
            "runs_by_class": dict(Counter(r.cls for r in runs)),
            "configs_by_class": {c: len({r.config for r in runs if r.cls == c}) for c in sorted({r.cls for r in runs})},
            "runs_by_family": dict(sorted(Counter(r.family for r in runs).items())),
            "windows": {k: int(sum(len(r.windows[k]) for r in runs)) for k in ("trainsentry", "rt")}}


def segmentation_summary(runs: list[Run]) -> dict:
    """How many workloads each segmenter finds in each run's trace, and its onset error."""
    from ..traces.io import read_trace
    from .segment import baseline_segments, segment_stream
    base_n, jobs_n, seg_n, base_err, ours_err = [], [], [], [], []
    for r in runs:
        if r.cls == "other" and r.family == "idle":
            continue
        table, _ = read_trace(r.path)
        b = next(iter(baseline_segments(table).values()), [])
        o = next(iter(segment_stream(table).values()), {"segments": [], "jobs": []})
        base_n.append(len(b))
        seg_n.append(len(o["segments"]))
        jobs_n.append(len(o["jobs"]))
        if b:
            base_err.append(b[0].start - r.start)
        if o["jobs"]:
            ours_err.append(o["jobs"][0]["start"] - r.start)

    def share(xs, k=1):
        return float(np.mean([x == k for x in xs])) if xs else None

    def med(xs):
        return float(np.median(xs)) if xs else None
    return {"runs": len(base_n),
            "baseline": {"share_one_workload": share(base_n), "share_none": share(base_n, 0),
                         "median_onset_error_s": med(base_err), "median_abs_onset_error_s": med([abs(x) for x in base_err])},
            "ours": {"share_one_job": share(jobs_n), "share_one_segment": share(seg_n), "share_none": share(jobs_n, 0),
                     "median_onset_error_s": med(ours_err), "median_abs_onset_error_s": med([abs(x) for x in ours_err])}}


def resolve_detectors(names: list[str] | None, rt_trees: int = 400,
                      default: tuple[str, ...] | None = None) -> dict:
    """Factories of the named detectors, in the order named (default: the four of `trainsentry eval`):
    the variants of detect.variants (tried, not kept) are reachable only by name."""
    from .variants import VARIANTS
    factories = {**detector_factories(rt_trees), **VARIANTS}
    names = list(names or default or detector_factories(rt_trees))
    unknown = [n for n in names if n not in factories]
    if unknown:
        raise ValueError(f"unknown detectors {unknown}; choose from {list(factories)}")
    return {n: factories[n] for n in names}


def run_eval(data: Roots, out: Path, docs: Path | None, n_splits: int = 200, subset: int | None = None,
             detectors: list[str] | None = None, rt_trees: int = 400, seed: int = 0, lofo: bool = True,
             cache_dir: Path | None = None, command: str = "trainsentry eval", console=None,
             counter_periods: dict[str, float] | None = None, jobs: int = 1) -> dict:
    """``jobs``: processes fitting the splits (``detect.parallel``; 1: all in this one). The results do
    not depend on it."""
    rule = AlertRule()
    factories = resolve_detectors(detectors, rt_trees)
    names = list(factories)
    t0 = time.time()
    n_dirs = len(run_dirs(data))
    with _progress() as prog:
        task = prog.add_task("features (cached per run)", total=n_dirs if subset is None else None)
        runs = load_dataset(data, cache_dir, subset, seed, progress=lambda: prog.advance(task),
                            counter_periods=counter_periods)
    if len({r.is_training for r in runs}) < 2:
        raise ValueError("the dataset needs training and non-training runs")
    splits = config_splits(runs, n_splits, seed)
    results = {}
    with contextlib.ExitStack() as stack_, _progress() as prog:
        pool = None
        if jobs > 1:
            from .parallel import SplitPool
            from .evaluate import lofo_folds
            folds = [fold for _, fold in lofo_folds(runs) if fold is not None] if lofo else []
            pool = stack_.enter_context(SplitPool(jobs, data, cache_dir, subset, seed, counter_periods, rt_trees,
                                                  splits, rule, [r.run_id for r in runs], folds))
            pool.submit(names)
        for name in names:
            task = prog.add_task(f"{name}: {n_splits} splits", total=n_splits)
            results[name] = evaluate_detector(name, factories[name], runs, splits, rule, lofo,
                                              advance=lambda t=task: prog.advance(t),
                                              scored=pool.outcomes(name) if pool else None,
                                              lofo_scored=pool.lofo_outcomes(name) if pool else None)
    curves = {n: r.pop("_curves") for n, r in results.items()}
    outcomes = {n: r.pop("_outcomes") for n, r in results.items()}
    combinations = {f"{a} or {b}": {"rule": f"a run alerts when {a} or {b} alerts (each with its own windows "
                                             "and rule), at the earlier time", **either_alert(outcomes[a], outcomes[b])}
                    for a, b in EITHER if a in outcomes and b in outcomes}
    doc = {"command": command, "results_file": str(out / RESULTS_FILE), "dataset": dataset_summary(root_label(data), runs),
           "protocol": {"splits": n_splits, "train_fraction_of_configs": 2 / 3, "grouping": "labels.config",
                        "seed": seed, "window_label": "in_run (>= 50 % of the window inside [start, end])",
                        "alert_rule": {"threshold": rule.threshold, "k": rule.k, "n": rule.n},
                        "rt_trees": rt_trees, "feature_version": FEATURE_VERSION,
                        # counters thinned to an agent reading them this rarely (s), else as recorded
                        "counter_periods_s": counter_periods or {}},
           "detectors": results,
           **({"combinations": combinations} if combinations else {}),
           "segmentation": segmentation_summary(runs),
           "exchange_gate": gate_summary(runs),
           **simulator_visibility(runs, factories, names),
           "elapsed_s": round(time.time() - t0, 1)}
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULTS_FILE).write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    figs = out / "figures"
    figs.mkdir(parents=True, exist_ok=True)
    from .figures import family_figure, roc_figure, tta_figure
    doc["figures"] = [str(p) for p in (roc_figure(curves, figs / "detector_roc.png"),
                                        tta_figure(curves, figs / "detector_time_to_alert.png"),
                                        family_figure(results, figs / "detector_families.png"))]
    (out / RESULTS_FILE).write_text(json.dumps(doc, indent=1, default=_json_default) + "\n")
    if docs is not None:
        from .docs import companions, render
        docs.parent.mkdir(parents=True, exist_ok=True)
        docs.write_text(render(doc, **companions()))
    return doc


def gate_summary(runs: list[Run]) -> dict:
    """Per run, the share of its in-run windows that pass the exchange gate (P ≥ 0.5): plain, with
    fused's decode veto, with comm-ml's (communication only), and asking for a regular exchange
    (the variant tried and not kept) — rules.exchange_gate over the whole dataset, no fitting."""
    from .rules import gate_pass_share
    out = {}
    for r in runs:
        df = r.windows["trainsentry"]
        df = df[df["in_run"]] if not df.empty else df
        if df.empty:
            continue
        share = lambda **kw: gate_pass_share(df, **kw)  # noqa: E731
        out[r.run_id] = {"class": r.cls, "family": r.family, "windows": int(len(df)), "exchange": share(),
                         "not_decode": share(decode_veto="memory_bound"), "not_decode_comm": share(decode_veto="comm"),
                         "regular_exchange": share(regular=True)}
    return out


def simulator_visibility(runs: list[Run], factories: dict, names: list[str]) -> dict:
    """What the simulator (simulate.traffic.load_thresholds) takes from this evaluation: comm-rules'
    volume threshold fitted on every run, the interconnect rate per GPU above which a node's traffic
    counts as visible. Exported only when the fit constrains it: a threshold at either end of the
    search grid means volume did not separate the classes on these runs (the other rules did), and
    the simulator keeps its physical default. Empty when comm-rules was not evaluated."""
    if "comm-rules" not in names:
        return {}
    from .rules import VOLUME_GRID_BPS
    det = factories["comm-rules"]()
    X, y, classes, ids = stack(runs, det.feature_set)
    det.fit(X, y, groups=ids, classes=classes)
    source = {"detector": "comm-rules", "fitted_on_runs": len(runs), "calibration": det.calibration}
    if det.volume_Bps in (VOLUME_GRID_BPS[0], VOLUME_GRID_BPS[-1]):
        source["not_exported"] = (f"the fitted volume threshold {det.volume_Bps:.0e} B/s is at the end of the "
                                  f"search grid: volume does not separate the classes on these runs")
        return {"simulator_visibility_source": source}
    return {"simulator_visibility": {"interconnect_min_bytes_per_s_per_chip": det.volume_Bps},
            "simulator_visibility_source": source}


def train_final(data: Roots, name: str, models: Path, cache_dir: Path | None, rt_trees: int, command: str,
                factory=None, adversarial: Roots = (), adversarial_families: Sequence[str] = ()) -> Path:
    """Fit one detector (or what ``factory`` makes: the live evidence checks) on every run of the
    dataset and save it for the live path as models/<name>.joblib. Runs under ``adversarial`` roots
    (a red team's) join the fit only when their family is one of ``adversarial_families``."""
    # an unknown name: ValueError before any run is read
    det = factory() if factory is not None else resolve_detectors([name], rt_trees)[name]()
    meta = {"data": root_label(data)}
    red = {str(Path(r)) for r in root_list(adversarial)}
    if red and not adversarial_families:
        raise ValueError("adversarial roots need the families to fit on (adversarial_families)")
    # one load of every root, so runs are named by their root alike; a red-team run only of the named families
    runs = [r for r in load_dataset([*root_list(data), *root_list(adversarial)], cache_dir)
            if str(Path(r.path).parent) not in red or r.family in adversarial_families]
    if red:
        adv = sum(1 for r in runs if str(Path(r.path).parent) in red)
        if not adv:
            raise ValueError(f"no run of families {sorted(adversarial_families)} under {root_label(adversarial)}")
        meta.update(adversarial=root_label(adversarial), adversarial_families=sorted(adversarial_families),
                    adversarial_runs=adv)
    X, y, classes, ids = stack(runs, det.feature_set)
    det.fit(X, y, groups=ids, classes=classes)
    return save_detector(det, models / f"{name}.joblib", command,
                         {**meta, "runs": len(runs), "windows": len(X), "fitted_at": time.time()})


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, set):
        return sorted(o)
    raise TypeError(f"not JSON serialisable: {type(o)}")
