"""Make tests/ importable so tests can use the shared fakes (``from fakes.fake_pynvml import FakeNvml``)."""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
