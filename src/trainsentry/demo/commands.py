"""`trainsentry demo`."""

from __future__ import annotations

from pathlib import Path

import typer


def demo_cmd(trace: Path = typer.Option(None, help="recorded trace to replay (default: the committed H200 one)"),
             live_s: float = typer.Option(15.0, help="seconds the live agent runs"),
             speed: float = typer.Option(2.0, help="replay speed"),
             gloo: bool = typer.Option(True, help="live CPU run: 2-rank gloo training then inference over loopback"),
             train_s: float = typer.Option(20.0, help="seconds of gloo DDP training"),
             infer_s: float = typer.Option(15.0, help="seconds of gloo pipeline inference"),
             keep: Path = typer.Option(Path(".demo"), help="keep the collector's database here for the dashboard"),
             hold: bool = typer.Option(False, help="keep the collector serving the dashboard until Ctrl-C")) -> None:
    """Collector + replaying H200 agent + live agent on loopback; what arrived and the live verdicts."""
    from .run import DEFAULT_TRACE, run_demo
    run_demo(trace or DEFAULT_TRACE, live_s=live_s, speed=speed, gloo=gloo, train_s=train_s, infer_s=infer_s,
             keep=keep, hold=hold)


COMMANDS = [demo_cmd]
