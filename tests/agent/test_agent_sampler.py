import threading
import time

import pytest
from agent_testkit import CounterSource, FakeClock

from trainsentry.agent.sampler import Sampler


@pytest.fixture
def fake_clock(monkeypatch):
    """The sampler's schedule on a clock that moves only when it sleeps: exact on any machine (on the
    real clock a loaded 2-core CI machine overran ticks these tests count, and the sampler skips
    overrun ticks by design)."""
    from trainsentry.agent import sampler as sampler_module
    clock = FakeClock(1000.0)
    monkeypatch.setattr(sampler_module, "time", clock.as_time_module())
    return clock


def test_schedule_does_not_drift_after_a_slow_read(fake_clock):
    # Read 5 stalls for 2.5 periods: ticks 6 and 7 are skipped (counted), later ticks stay on the grid.
    hz = 40.0
    src = CounterSource(read_delay={5: 2.5 / hz}, timer=fake_clock, sleep=fake_clock.sleep)
    stats = Sampler([src], hz=hz, batch_s=0.25, clock=fake_clock).run(duration_s=1.0)
    assert stats.ticks + stats.missed_ticks == 40
    assert stats.missed_ticks == 2
    t0 = src.read_times[0]
    slots = list(range(0, 6)) + list(range(8, 40))          # after the stall, tick k is read at t0 + k/hz
    assert src.read_times == pytest.approx([t0 + k / hz for k in slots], abs=1e-9)


def test_every_slot_is_read_or_counted_missed_on_the_real_clock_too():
    # The same stall on the real clock, asserting only what load cannot change: every slot is read or
    # counted missed (a pause can add more misses and push the last tick past the end), and the
    # stall's own two slots are among the missed.
    hz = 40.0
    src = CounterSource(read_delay={5: 2.5 / hz})
    stats = Sampler([src], hz=hz, batch_s=0.25).run(duration_s=1.0)
    assert stats.ticks + stats.missed_ticks >= 40 and stats.missed_ticks >= 2
    assert len(src.read_times) == stats.ticks


def test_batches_close_on_tick_boundaries_and_keep_every_reading(fake_clock):
    batches = []
    src = CounterSource(devices=("eth0", "eth1", "eth2"))
    sampler = Sampler([src], hz=50, batch_s=0.1, on_batch=lambda r, i: batches.append((list(r), i)),
                      clock=fake_clock)
    stats = sampler.run(duration_s=0.5)
    assert stats.missed_ticks == 0
    assert [len(b) for b, _ in batches] == [15] * 5       # 5 ticks x 3 devices per 0.1 s batch
    assert all(i == 0.1 for _, i in batches)
    per_dev = {}
    for b, _ in batches:
        for r in b:
            per_dev.setdefault(r.device, []).append(r.values["net_rx_bytes"])
    assert per_dev["eth1"] == [1000 * (n + 1) for n in range(25)]   # nothing dropped or repeated
    assert stats.batches == 5 and stats.readings == 75


def test_stop_from_another_thread_hands_over_the_partial_batch():
    batches, tenth = [], threading.Event()
    sampler = Sampler([CounterSource(devices=("eth0",))], hz=100, batch_s=10, on_batch=lambda r, i: batches.append(r),
                      on_tick=lambda r: sampler.stats.ticks >= 10 and tenth.set())
    stopped = []

    def stop_after_ten_ticks():
        tenth.wait(30)
        stopped.append(time.monotonic())
        sampler.stop()

    threading.Thread(target=stop_after_ten_ticks, daemon=True).start()
    stats = sampler.run()
    assert stopped and time.monotonic() - stopped[0] < 1.0         # stop() is seen within a tick or so
    assert len(batches) == 1 and len(batches[0]) == stats.ticks >= 10


def test_a_failing_source_does_not_stop_the_others():
    # Ten reads each, then the sources end (and so does the run): the counts do not depend on timing.
    good = CounterSource(devices=("eth0",), end_after=10)
    bad = CounterSource(devices=("ib0",), kind="ib", fail_on={1, 2, 3}, end_after=10)
    got = []
    stats = Sampler([bad, good], hz=50, batch_s=1, on_batch=lambda r, i: got.extend(r)).run()
    assert stats.read_errors == 3
    assert sum(r.device == "eth0" for r in got) == 10
    assert sum(r.device == "ib0" for r in got) == 7


def test_run_ends_when_every_source_is_exhausted():
    got = []
    src = CounterSource(devices=("eth0",), end_after=7)
    stats = Sampler([src], hz=200, batch_s=0.01, on_batch=lambda r, i: got.extend(r)).run(duration_s=60)
    assert len(got) == 7 and stats.readings == 7


@pytest.mark.parametrize("kw", [{"hz": 0}, {"hz": -1}, {"batch_s": 0}, {"hz": float("nan")}])
def test_bad_rates_are_refused(kw):
    with pytest.raises(ValueError):
        Sampler([CounterSource()], **kw)


class NanGpmSource(CounterSource):
    """A GPU whose GPM metric reads NaN now and then, as the H200's did over a too-short interval."""

    def __init__(self):
        super().__init__(devices=("gpu0",), kind="gpu")

    def read(self):
        out = super().read()
        for r in out:
            r.values["sm_util_pct"] = float("nan") if self.count % 2 else 50.0
            r.values["power_mw"] = float("inf") if self.count == 3 else 100_000
        return out


def test_non_finite_values_are_dropped_counted_and_the_rest_kept():
    got = []
    src = NanGpmSource()
    src.end_after = 10
    stats = Sampler([src], hz=50, batch_s=1, on_batch=lambda r, i: got.extend(r)).run()
    assert stats.readings == len(got) == 10
    assert stats.dropped_values == 5 + 1
    assert [("sm_util_pct" in r.values) for r in got] == [n % 2 == 0 for n in range(1, 11)]
    assert all(r.values.get("sm_util_pct", 50.0) == 50.0 for r in got)
    assert sum("power_mw" not in r.values for r in got) == 1
    assert all("net_rx_bytes" in r.values for r in got)


@pytest.mark.parametrize("values, dropped", [
    ({"a": float("nan"), "b": 3}, {"a"}),
    ({"a": float("inf"), "b": float("-inf"), "c": 1.5}, {"a", "b"}),      # their sum is NaN
    ({"a": 1e308, "b": 1e308, "c": 7}, set()),                             # finite values whose sum overflows
    ({"a": 2**64 - 1, "b": 0.25, "c": -3}, set()),
    ({"a": float("nan"), "b": 2**1100}, {"a"}),                            # an int no float can hold
    ({}, set()),
])
def test_exactly_the_non_finite_floats_are_dropped(values, dropped):
    from trainsentry.telemetry.base import Reading
    sampler = Sampler([CounterSource()], hz=10)
    r = Reading("gpu0", "gpu", 1.0, dict(values))
    sampler._drop_nonfinite(r)
    assert set(r.values) == set(values) - dropped
    assert all(r.values[k] is values[k] for k in r.values)
    assert sampler.stats.dropped_values == len(dropped)


def test_the_agent_seals_batches_through_non_finite_readings(tmp_path):
    # The spool's canonical JSON refuses NaN: before the sampler dropped them, the agent died on the
    # first NaN GPM reading (bench_agent on the H200s, 2026-11-30, gpm_period_s=0.1).
    from trainsentry.agent.node import Agent, AgentConfig
    agent = Agent(AgentConfig(collector_url="http://127.0.0.1:9", node="n1", key="00" * 32,
                              spool_path=tmp_path / "spool.db", hz=50, batch_s=0.1, drain_s=0),
                  [src := NanGpmSource()])
    src.end_after = 25           # 25 reads, then the source ends and so does the run
    agent.sender.start = lambda: None
    agent.sender.join = lambda timeout=None: None
    summary = agent.run()
    # 5 ticks a batch: 5 batches at least (more if a loaded machine skipped ticks across a boundary);
    # sm_util NaN on the 13 odd reads, power infinite on read 3
    assert summary.batches_sealed >= 5 and summary.dropped_values == 13 + 1
    assert summary.pending_samples == summary.samples_read == 25


@pytest.mark.parametrize("batch_s, ok", [(0.1, True), (10.0, True), (10.5, False), (60.0, False), (0.0, False)])
def test_the_streaming_agent_refuses_batches_longer_than_the_collectors_silence_rule_allows(tmp_path, batch_s, ok):
    """The collector caps a node's stated interval at 10 s for its silence rule (3 intervals without
    samples): an agent sealing 60 s batches would read as silent between them, so it is refused with
    the reason instead. Recording a trace without a collector (Sampler) keeps longer batches."""
    from trainsentry.agent.node import AgentConfig
    from trainsentry.collector.store import MAX_SILENCE_INTERVAL_S
    assert MAX_SILENCE_INTERVAL_S == 10.0
    make = lambda: AgentConfig(collector_url="http://127.0.0.1:9", node="n1", key="00" * 32,  # noqa: E731
                               spool_path=tmp_path / "spool.db", batch_s=batch_s)
    if ok:
        assert make().batch_s == batch_s
    else:
        with pytest.raises(ValueError, match="silent"):
            make()
