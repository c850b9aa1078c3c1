"""``trainsentry agent``, ``trainsentry record`` and ``trainsentry replay`` (typer/rich/stdlib at top level)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import typer

DEFAULT_SPOOL = Path("trainsentry-spool.db")


def _setup_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


def _run_agent(collector: str, node: str, key_file: Path, spool: Path, hz: float, batch_s: float,
               sources: list, prometheus_port: int | None, duration: float | None, drain_s: float) -> None:
    from .node import Agent, AgentConfig, install_stop_signals, read_key_file
    from .spool import SpoolError
    try:
        key = read_key_file(key_file)
        agent = Agent(AgentConfig(collector_url=collector, node=node, key=key, spool_path=spool, hz=hz,
                                  batch_s=batch_s, prometheus_port=prometheus_port, duration_s=duration,
                                  drain_s=drain_s), sources)
    except (ValueError, SpoolError) as e:
        for s in sources:
            s.close()
        _fail(str(e))
    install_stop_signals(agent)
    summary = agent.run()
    typer.echo(json.dumps(summary.to_dict(), sort_keys=True))


def _open(specs: list[str], speed: float = 1.0) -> list:
    from ..telemetry.base import SourceError
    from .sources import open_sources
    try:
        return open_sources(specs, replay_speed=speed)
    except (SourceError, OSError, ValueError) as e:
        _fail(f"cannot open sources {specs}: {e}")


def agent_cmd(
    collector: str = typer.Option(..., "--collector", help="Collector base URL, e.g. http://collector:8470"),
    node: str = typer.Option(..., "--node", help="This node's id, as enrolled on the collector"),
    key_file: Path = typer.Option(..., "--key-file", help="The node key written by `trainsentry enroll --key-out`"),
    spool: Path = typer.Option(DEFAULT_SPOOL, "--spool", help="Durable local spool (SQLite); one per node"),
    hz: float = typer.Option(10.0, "--hz", help="Samples per second"),
    batch_s: float = typer.Option(1.0, "--batch-s", help="Seconds of samples per signed batch"),
    source: list[str] = typer.Option([], "--source", help="nvml[:nvlink_period_s=S,...], net[:SYSFS_ROOT], host[:ROOT], replay:RUN_DIR "
                                     "(repeatable; default: nvml, net and host)"),
    prometheus_port: int | None = typer.Option(None, "--prometheus-port", help="Serve /metrics here (e.g. 9400)"),
    duration: float | None = typer.Option(None, "--duration", help="Stop after this many seconds (default: run "
                                          "until SIGINT/SIGTERM)"),
    drain_s: float = typer.Option(10.0, "--drain-s", help="At a clean stop, wait this long for the spool to empty"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Sample GPUs and network, sign batches, spool them durably and push them to the collector."""
    _setup_logging(verbose)
    _run_agent(collector, node, key_file, spool, hz, batch_s, _open(source), prometheus_port, duration, drain_s)


def replay_cmd(
    run_dir: Path = typer.Argument(..., help="A recorded trace (samples.parquet + manifest.json)"),
    collector: str = typer.Option(..., "--collector", help="Collector base URL"),
    node: str = typer.Option(..., "--node", help="Node id to send as (enrolled on the collector)"),
    key_file: Path = typer.Option(..., "--key-file", help="That node's key file"),
    speed: float = typer.Option(1.0, "--speed", help="Playback speed (2.0: twice as fast as recorded)"),
    spool: Path | None = typer.Option(None, "--spool", help="Spool file (default: replay-NODE.spool.db)"),
    hz: float = typer.Option(10.0, "--hz", help="How often the replay source is read"),
    drain_s: float = typer.Option(30.0, "--drain-s", help="After the trace ends, wait this long for delivery"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Send a recorded trace to a collector as a live node would (same sampler, spool and sender)."""
    _setup_logging(verbose)
    if not speed > 0:
        _fail("--speed must be positive")
    if not (run_dir / "manifest.json").is_file():
        _fail(f"{run_dir} is not a trace directory (no manifest.json)")
    sources = _open([f"replay:{run_dir}"], speed)
    _run_agent(collector, node, key_file, spool or Path(f"replay-{node}.spool.db"), hz, 1.0, sources,
               None, None, drain_s)


def _parse_labels(labels: list[str]) -> dict[str, str]:
    out = {}
    for item in labels:
        k, sep, v = item.partition("=")
        if not sep or not k:
            _fail(f"--label expects key=value, got {item!r}")
        out[k] = v
    return out


def record_cmd(
    out_dir: Path = typer.Argument(..., help="Run directory to write samples.parquet + manifest.json into"),
    hz: float = typer.Option(10.0, "--hz", help="Samples per second"),
    source: list[str] = typer.Option([], "--source", help="nvml[:nvlink_period_s=S,...], net[:SYSFS_ROOT], host[:ROOT] (repeatable; "
                                     "default: all three)"),
    duration: float | None = typer.Option(None, "--duration", help="Seconds to record (default: until "
                                          "SIGINT/SIGTERM)"),
    label: list[str] = typer.Option([], "--label", help="key=value; workload and class "
                                    "(training|inference|other) are required"),
    node: str | None = typer.Option(None, "--node", help="Node id for the trace (default: host name)"),
    recover_: bool = typer.Option(False, "--recover", help="Finish a recording that was interrupted"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Record telemetry to a local trace, no collector needed."""
    _setup_logging(verbose)
    from .record import PARTIAL_SAMPLES, Recorder, check_labels, recover
    if recover_:
        try:
            path = recover(out_dir)
        except ValueError as e:
            _fail(str(e))
        typer.echo(f"recovered {path}")
        return
    try:
        labels = check_labels(_parse_labels(label))
    except ValueError as e:
        _fail(str(e))
    if (out_dir / "manifest.json").exists():
        _fail(f"{out_dir} already holds a trace; choose a new directory")
    if (out_dir / PARTIAL_SAMPLES).exists():
        _fail(f"{out_dir} holds an unfinished recording; finish it with `trainsentry record {out_dir} --recover`")
    from .node import install_stop_signals
    rec = Recorder(_open(source), hz=hz, node=node, out_dir=out_dir, labels=labels)
    install_stop_signals(rec.sampler)
    rec.start(duration)
    while not rec.wait(0.5):
        pass
    rec.stop()
    for s in rec.sources:
        s.close()
    path = rec.write()
    typer.echo(json.dumps({"run_dir": str(path), "samples": len(rec.readings), "ticks": rec.stats.ticks,
                           "missed_ticks": rec.stats.missed_ticks}, sort_keys=True))


COMMANDS = [agent_cmd, record_cmd, replay_cmd]
