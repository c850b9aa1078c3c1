"""`trainsentry demo` end to end: real collector, real agents over loopback, the committed H200 trace."""

from __future__ import annotations

from collections import Counter

import pytest
from rich.console import Console

from trainsentry.demo.run import DEFAULT_TRACE, run_demo
from trainsentry.traces.io import read_samples


@pytest.mark.slow
def test_demo_delivers_every_replayed_sample_and_the_live_node():
    result = run_demo(DEFAULT_TRACE, live_s=3.0, speed=8.0, console=Console(quiet=True))
    nodes = result["nodes"]
    assert "h200x2-replay" in nodes and any(n.endswith("-live") for n in nodes)
    trace_devices = Counter(read_samples(DEFAULT_TRACE).column("device").to_pylist())
    assert nodes["h200x2-replay"]["devices"] == sorted(trace_devices)
    # every sample of the trace stored exactly once, none rejected
    assert nodes["h200x2-replay"]["samples"] == dict(trace_devices)
    assert result["stats"]["total"]["rejected"] == {}
    live = next(v for n, v in nodes.items() if n.endswith("-live"))
    assert sum(live["samples"].values()) > 0
