"""Property tests on the wire parser (and the collector's fast path, which must agree with it exactly)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainsentry.collector import fastparse
from trainsentry.traces.schema import DEVICE_KINDS, METRICS
from trainsentry.wire.batch import (GENESIS_PREV, Batch, BatchError, digest, encode_batch, new_key, parse_batch,
                                    sign, verify)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e18, max_value=1e18)
metric_value = st.one_of(st.integers(min_value=-(2 ** 63), max_value=2 ** 64 - 1), finite)
sample = st.fixed_dictionaries({
    "dev": st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,20}\Z"),
    "kind": st.sampled_from(DEVICE_KINDS),
    "t": st.floats(min_value=0, max_value=4e9, allow_nan=False),
    "m": st.dictionaries(st.sampled_from([m.name for m in METRICS]), metric_value, max_size=6),
})
batch_args = st.fixed_dictionaries({
    "node": st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,30}\Z"),
    "seq": st.integers(min_value=1, max_value=2 ** 63 - 1),
    "prev": st.one_of(st.just(GENESIS_PREV), st.text("0123456789abcdef", min_size=64, max_size=64)),
    "samples": st.lists(sample, max_size=8),
    "created": st.floats(min_value=0, max_value=4e9, allow_nan=False),
    "interval_s": st.floats(min_value=1e-3, max_value=3600, allow_nan=False),
    "gap_from": st.one_of(st.none(), st.just(0)),
})
json_value = st.recursive(st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
                          | finite | st.text(max_size=8),
                          lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                      max_size=3),
                          max_leaves=6)


def _outcome(fn, body: bytes):
    """('ok', fields) or ('error', code): anything else propagates and fails the test."""
    try:
        b = fn(body)
    except BatchError as e:
        return "error", e.code
    assert isinstance(b, Batch)
    return "ok", (b.node, b.seq, b.prev, b.created, b.interval_s, b.samples, b.gap_from, b.body, b.digest)


@SETTINGS
@given(st.binary(max_size=512))
def test_any_bytes_give_a_batch_or_a_batch_error(body):
    assert _outcome(parse_batch, body) == _outcome(fastparse.parse, body)


@SETTINGS
@given(batch_args)
def test_valid_batches_round_trip(args):
    body = encode_batch(**args)
    b = parse_batch(body)
    assert (b.node, b.seq, b.prev, b.gap_from, b.body) == (args["node"], args["seq"], args["prev"],
                                                           args["gap_from"], body)
    assert b.samples == args["samples"] and b.created == args["created"] and b.interval_s == args["interval_s"]
    assert b.digest == digest(body)
    key = new_key()
    assert verify(key, body, sign(key, body)) and not verify(new_key(), body, sign(key, body))
    assert _outcome(fastparse.parse, body) == _outcome(parse_batch, body)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@SETTINGS
@given(batch_args, st.data())
def test_fast_path_agrees_with_the_contract_on_mutated_batches(args, data):
    obj = json.loads(encode_batch(**args))
    paths = [p for p in _paths(obj) if p]
    path = data.draw(st.sampled_from(paths))
    target = obj
    for k in path[:-1]:
        target = target[k]
    if data.draw(st.booleans()) or isinstance(target, list):
        target[path[-1]] = data.draw(json_value)
    else:
        del target[path[-1]]
    body = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    assert _outcome(fastparse.parse, body) == _outcome(parse_batch, body)


@pytest.mark.parametrize("value, code", [
    (2 ** 64 - 1, None), (-(2 ** 63), None), (True, "bad_field"), (None, "bad_field"), ("1", "bad_field"),
    (1e300, "bad_field"), ([1], "bad_field"),
])
def test_edge_values_same_verdict(value, code):
    body = encode_batch("n", 0, GENESIS_PREV, [{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"energy_mj": value}}],
                        1.0, 1.0)
    assert _outcome(fastparse.parse, body) == _outcome(parse_batch, body)
    assert _outcome(parse_batch, body)[0] == ("ok" if code is None else "error")
    if code:
        assert _outcome(parse_batch, body)[1] == code


def test_nan_literal_and_oversize_same_verdict():
    nan = b'{"created":1.0,"interval_s":1.0,"node":"n","prev":"' + GENESIS_PREV.encode() + \
        b'","samples":[{"dev":"g","kind":"gpu","m":{"power_mw":NaN},"t":1}],"seq":0,"v":1}'
    assert _outcome(fastparse.parse, nan) == _outcome(parse_batch, nan) == ("error", "bad_json")
    big = encode_batch("n", 0, GENESIS_PREV, [], 1.0, 1.0) + b" " * 100
    with pytest.raises(BatchError) as e:
        fastparse.parse(big, max_bytes=50)
    assert e.value.code == "too_large"
