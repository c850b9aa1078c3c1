"""The live buffer of one node (collector/nodestate.py): what it holds after samples arrive in any
order must be what a restart reads back from the store (by time), or the two judge different data."""

from __future__ import annotations

from trainsentry.collector import nodestate
from trainsentry.collector.nodestate import NodeState


def _s(t: float, dev: str = "gpu0") -> dict:
    return {"dev": dev, "kind": "gpu", "t": t, "m": {"power_mw": 1}}


def test_a_full_buffer_drops_its_oldest_samples_by_time_even_when_one_arrives_late(monkeypatch):
    monkeypatch.setattr(nodestate, "MAX_BUFFER_SAMPLES", 5)
    st = NodeState()
    st.samples = type(st.samples)(maxlen=5)
    st.add([_s(t) for t in (10.0, 11.0, 12.0, 13.0, 14.0)], buffer_s=30.0)
    # a late sample (10.5) and a new one (15.0): the two oldest by time go, 10.0 and 10.5 (the deque's
    # bound alone dropped 10.0 and 11.0 by position and kept the late 10.5, which a restart, reading
    # the latest samples by time, does not: the live and the restored buffer then judged different data)
    st.add([_s(10.5), _s(15.0)], buffer_s=30.0)
    assert [s["t"] for s in st.samples] == [11.0, 12.0, 13.0, 14.0, 15.0]
    # in order, the deque's own bound does the same
    st.add([_s(16.0)], buffer_s=30.0)
    assert [s["t"] for s in st.samples] == [12.0, 13.0, 14.0, 15.0, 16.0]


def test_samples_older_than_the_buffer_never_enter():
    st = NodeState()
    st.add([_s(100.0)], buffer_s=30.0)
    st.add([_s(50.0), _s(101.0)], buffer_s=30.0)
    assert [s["t"] for s in st.samples] == [100.0, 101.0]
