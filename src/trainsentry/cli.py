"""The ``trainsentry`` command. Thin: every command delegates to the package that owns the work.

Each sub-package keeps its commands in a ``commands.py`` that imports only typer and rich at the
top, so ``trainsentry agent`` starts without torch, pyarrow or the collector's packages.
"""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Tell LLM training from inference on GPU clusters from outside telemetry.")


@app.callback()
def _main() -> None:
    """trainsentry: agent, collector, lab, detectors, red team, simulator, report."""


def _register() -> None:
    """Attach every ``trainsentry.<package>.commands`` module found in the package.

    A commands module offers top-level commands as ``COMMANDS = [func, ...]`` (the command is the
    function's name without a trailing ``_cmd``, underscores as dashes) and/or a command group as
    ``app`` (a typer.Typer) with its name in ``NAME``.
    """
    from importlib import import_module
    from pathlib import Path

    root = Path(__file__).parent
    # Look for the file first: importing a package without commands would run its __init__ (and
    # pull in numpy or torch on a node that only runs the agent).
    for path in sorted(root.glob("*/commands.py")):
        sub = import_module(f"trainsentry.{path.parent.name}.commands")
        if hasattr(sub, "app"):
            app.add_typer(sub.app, name=sub.NAME)
        for cmd in getattr(sub, "COMMANDS", ()):
            name = cmd.__name__.removesuffix("_cmd").replace("_", "-")
            app.command(name)(cmd)


_register()

if __name__ == "__main__":  # pragma: no cover
    app()
