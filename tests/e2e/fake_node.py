"""Run the real ``trainsentry`` CLI on a machine without GPUs: NVML answers from recorded H200 readings.

Usage: ``python tests/e2e/fake_node.py [--gpus N] <trainsentry args...>``. The only change from a
real node is ``sys.modules["pynvml"]``; sampler, spool, sender and CLI are the shipped code.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for fakes/

from fakes.fake_pynvml import FakeNvml  # noqa: E402

args = sys.argv[1:]
gpus = 2
if args[:1] == ["--gpus"]:
    gpus, args = int(args[1]), args[2:]
sys.modules["pynvml"] = FakeNvml(gpu_count=gpus)

from trainsentry.cli import app  # noqa: E402

app(args=args, prog_name="trainsentry")
