"""``trainsentry eval``: evaluate the detectors (and ``--train-final`` to save one for live use)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer


def _periods(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        group, sep, value = item.partition("=")
        try:
            out[group] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise ValueError(f"--counter-period wants GROUP=SECONDS (e.g. nvlink=1), got {item!r}")
    from ..traces.io import check_counter_periods
    check_counter_periods(out)      # before any run is loaded
    return out


def eval_cmd(
    data: list[Path] = typer.Option([Path("data/h200")], "--data",
                                    help="Root holding run directories (manifest.json + samples.parquet); "
                                         "repeatable: the runs of every root are one dataset"),
    splits: int = typer.Option(200, "--splits", help="Random 2/3–1/3 splits by configuration"),
    subset: int | None = typer.Option(None, "--subset", help="Use only N random configurations per class (CI)"),
    out: Path = typer.Option(Path("results"), "--out", help="Where detector.json and figures/ go"),
    docs: Path | None = typer.Option(Path("docs/detector.md"), "--docs", help="Markdown report to write ('' to skip)"),
    detector: list[str] = typer.Option([], "--detector", help="Evaluate only these (repeatable)"),
    rt_trees: int = typer.Option(400, "--rt-trees", help="Trees per stage of rt-baseline (400 as published)"),
    no_lofo: bool = typer.Option(False, "--no-lofo", help="Skip leave-one-family-out"),
    seed: int = typer.Option(0, "--seed"),
    cache: Path | None = typer.Option(None, "--cache", help="Feature cache directory (default ~/.cache/trainsentry/features)"),
    train_final: str | None = typer.Option(None, "--train-final", help="Instead of evaluating: fit this detector on all data and save it"),
    models: Path = typer.Option(Path("models"), "--models", help="Where --train-final saves the detector"),
    counter_period: list[str] = typer.Option([], "--counter-period",
                                             help="GROUP=SECONDS (nvlink, energy, net): evaluate as if the agent "
                                                  "read those counters only that often (repeatable)"),
    jobs: int = typer.Option(1, "--jobs", help="Processes fitting the splits (each loads the dataset from the "
                                               "feature cache); the results do not depend on it"),
) -> None:
    """Evaluate comm-rules, comm-ml, fused and rt-baseline on configuration-grouped splits."""
    from ..threads import one_native_thread
    one_native_thread()
    from rich.console import Console

    from .pipeline import default_cache_dir, run_eval, train_final as fit_final
    console = Console(stderr=True)
    command = "trainsentry eval " + shlex.join(sys.argv[2:]) if len(sys.argv) > 1 and sys.argv[1] == "eval" else \
        "trainsentry eval"
    cache_dir = cache or default_cache_dir()
    roots = [str(d) for d in data]
    try:
        if train_final:
            path = fit_final(roots, train_final, models, cache_dir, rt_trees, command)
            console.print(f"saved {path} (and {path.with_suffix('.json').name} naming the command)")
            return
        doc = run_eval(roots, out, docs if docs and str(docs) not in ("", ".") else None, splits, subset, detector or None,
                       rt_trees, seed, not no_lofo, cache_dir, command, counter_periods=_periods(counter_period),
                       jobs=jobs)
    except (FileNotFoundError, ValueError) as e:
        console.print(f"[red]eval: {e}[/red]")
        raise typer.Exit(2)
    for name, r in doc["detectors"].items():
        console.print(f"{name:12s} run_acc={r['run_accuracy']}  inf_fpr={r['inference_fpr']}  "
                      f"tta50={r['median_time_to_alert_s']}  auc={r['window_auc']}  "
                      f"lofo_min={r['lofo_min_family_detection']}")
    console.print(f"wrote {out / 'detector.json'}")


def eval_transfer(
    base: Path = typer.Option(Path("data/h200"), "--base", help="Dataset the detectors are fitted on"),
    target: Path = typer.Option(..., "--target", help="Dataset they are judged on (e.g. data/h200x8)"),
    splits: int = typer.Option(50, "--splits", help="Splits of the target's configurations for the 'added' reading (0: frozen only)"),
    out: Path = typer.Option(Path("results/eight_gpu.json"), "--out", help="Results JSON"),
    docs: Path | None = typer.Option(Path("docs/eight-gpu.md"), "--docs", help="Markdown report ('' to skip)"),
    detector: list[str] = typer.Option([], "--detector", help="Only these (repeatable; default all four)"),
    rt_trees: int = typer.Option(400, "--rt-trees"),
    seed: int = typer.Option(0, "--seed"),
    cache: Path | None = typer.Option(None, "--cache", help="Feature cache directory"),
) -> None:
    """Detectors fitted on --base, judged on --target: frozen, then with the target's runs added."""
    from ..threads import one_native_thread
    one_native_thread()
    from rich.console import Console

    from .pipeline import default_cache_dir
    from .transfer import run_transfer
    console = Console(stderr=True)
    command = "trainsentry " + shlex.join(sys.argv[1:]) if len(sys.argv) > 1 and sys.argv[1] == "eval-transfer" else \
        "trainsentry eval-transfer"
    try:
        doc = run_transfer(str(base), str(target), out, docs if docs and str(docs) not in ("", ".") else None, splits,
                           detector or None, rt_trees, seed, cache or default_cache_dir(), command)
    except (FileNotFoundError, ValueError) as e:
        console.print(f"[red]eval-transfer: {e}[/red]")
        raise typer.Exit(2)
    for name, r in doc["frozen"].items():
        a = doc["added"].get(name, {})
        console.print(f"{name:12s} frozen: run_acc={r['run_accuracy']} inf_fpr={r['inference_fpr']}  "
                      f"added: run_acc={a.get('run_accuracy')} inf_fpr={a.get('inference_fpr')}")
    console.print(f"wrote {out}")


COMMANDS = [eval_cmd, eval_transfer]
