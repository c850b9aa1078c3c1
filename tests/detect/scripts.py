"""The repository's scripts (scripts/*.py) loaded as modules, for the tests that call their functions."""

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_script(name: str):
    """scripts/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
