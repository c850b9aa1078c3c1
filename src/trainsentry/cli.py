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
    # (module, name): every sub-app below imports only typer/rich at module level.
    from importlib import import_module
    for module, name in _SUBAPPS:
        sub = import_module(f"trainsentry.{module}.commands")
        if hasattr(sub, "app"):
            app.add_typer(sub.app, name=name)
        for cmd in getattr(sub, "COMMANDS", ()):
            app.command(cmd.__name__.replace("_cmd", "").replace("_", "-"))(cmd)


_SUBAPPS: list[tuple[str, str]] = []
_register()

if __name__ == "__main__":  # pragma: no cover
    app()
