"""`trainsentry demo` end to end: real collector, real agents over loopback, the committed H200 trace,
and a live 2-rank gloo run (DDP training, then pipeline inference) judged by the live verdicts."""

from __future__ import annotations

from collections import Counter

import pytest
from rich.console import Console

from trainsentry.demo.run import DEFAULT_TRACE, run_demo
from trainsentry.traces.io import read_samples


@pytest.mark.slow
def test_demo_delivers_every_replayed_sample_and_the_live_node():
    result = run_demo(DEFAULT_TRACE, live_s=3.0, speed=8.0, console=Console(quiet=True), train_s=24.0, infer_s=10.0)
    nodes = result["nodes"]
    assert "h200x2-replay" in nodes and any(n.endswith("-live") for n in nodes)
    trace_devices = Counter(read_samples(DEFAULT_TRACE).column("device").to_pylist())
    assert nodes["h200x2-replay"]["devices"] == sorted(trace_devices)
    # every sample of the trace stored exactly once, none rejected
    assert nodes["h200x2-replay"]["samples"] == dict(trace_devices)
    assert result["stats"]["total"]["rejected"] == {}
    live = next(v for n, v in nodes.items() if n.endswith("-live"))
    assert sum(live["samples"].values()) > 0

    # live verdicts: the replayed NCCL check (class other) is never called training ...
    replay = result["verdicts"]["h200x2-replay"]
    assert replay["states"] and "training" not in replay["states"] and replay["alerts"] == []
    # ... the gloo DDP run is: most of its whole windows say training (on a loaded 2-core machine some
    # lose regularity and read other) and the k-of-n alert fires ...
    verdicts = result["verdicts"][next(n for n in nodes if n.endswith("-live"))]
    assert [c for _, _, c in verdicts["truth"]] == ["training", "inference"]
    training = verdicts["agreement"]["training"]
    assert training["windows"] >= 2 and training["right"] > training["windows"] / 2, training
    # an alert needs 3 of 5 windows at P >= 0.75; whether the short toy run gets there depends on how
    # loaded the 2 cores are, so the test checks that any alert is raised while training ran (plus
    # one window of lag), never during the inference that follows
    (t_train0, t_train1, _), = [span for span in verdicts["truth"] if span[2] == "training"]
    for alert in verdicts["alerts"]:
        assert t_train0 <= alert["raised_t"] <= t_train1 + 10.0, (alert, verdicts["truth"])
    # ... and the pipeline inference after it is not
    assert verdicts["agreement"].get("inference", {}).get("said", {}).get("training", 0) == 0
    assert all(v for v in verdicts["evidence"])
