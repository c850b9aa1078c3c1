"""`trainsentry demo`."""

from __future__ import annotations

from pathlib import Path

import typer


def demo_cmd(trace: Path = typer.Option(None, help="recorded trace to replay (default: the committed H200 one)"),
             live_s: float = typer.Option(15.0, help="seconds the live agent runs"),
             speed: float = typer.Option(2.0, help="replay speed")) -> None:
    """Run collector + replaying H200 agent + live network agent on loopback and show what arrived."""
    from .run import DEFAULT_TRACE, run_demo
    run_demo(trace or DEFAULT_TRACE, live_s=live_s, speed=speed)


COMMANDS = [demo_cmd]
