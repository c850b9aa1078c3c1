"""Property tests on the one wire parser, ``parse_batch``.

``parse_batch`` reaches its "valid" verdict on samples by one of two routes: a bulk shortcut
(``_samples_certainly_valid``) or the per-sample rules (``_check_samples``), which alone name the
error. The tests below hold the whole function to: any bytes give a Batch or a BatchError; valid
batches round-trip; invalidating mutations are rejected with the right code; and the shortcut never
accepts samples that the per-sample rules reject.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainsentry.traces.schema import DEVICE_KINDS, METRICS
from trainsentry.wire import batch as wire
from trainsentry.wire.batch import (GENESIS_PREV, Batch, BatchError, digest, encode_batch, new_key, parse_batch,
                                    sign, verify)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CODES = {"bad_json", "bad_schema", "bad_version", "bad_field", "too_large"}

finite = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e18, max_value=1e18)
metric_value = st.one_of(st.integers(min_value=-(2 ** 63), max_value=2 ** 64 - 1), finite)
_sample_rest = {
    "t": st.floats(min_value=0, max_value=4e9, allow_nan=False),
    "m": st.dictionaries(st.sampled_from([m.name for m in METRICS]), metric_value, max_size=6),
}
sample = st.one_of(
    st.fixed_dictionaries({"dev": st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,20}\Z"),
                           "kind": st.sampled_from([k for k in DEVICE_KINDS if k != "host"]), **_sample_rest}),
    st.fixed_dictionaries({"dev": st.just("host"), "kind": st.just("host"), **_sample_rest}),  # one per node
)
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
not_a_number = st.one_of(st.none(), st.booleans(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
                         st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                         st.sampled_from([2 ** 64, -(2 ** 64), 1e20, -1e300]))


def _outcome(body: bytes):
    """('ok', Batch) or ('error', code): any other exception propagates and fails the test."""
    try:
        b = parse_batch(body)
    except BatchError as e:
        assert e.code in CODES and e.message
        return "error", e.code
    assert isinstance(b, Batch)
    return "ok", b


def _rules_accept(samples) -> bool:
    try:
        wire._check_samples(samples)
    except BatchError:
        return False
    return True


def _dump(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


@SETTINGS
@given(st.binary(max_size=512))
def test_any_bytes_give_a_batch_or_a_batch_error(body):
    _outcome(body)


@SETTINGS
@given(batch_args)
def test_valid_batches_round_trip(args):
    body = encode_batch(**args)
    verdict, b = _outcome(body)
    assert verdict == "ok"
    assert (b.node, b.seq, b.prev, b.gap_from, b.body) == (args["node"], args["seq"], args["prev"],
                                                           args["gap_from"], body)
    assert b.samples == args["samples"] and b.created == args["created"] and b.interval_s == args["interval_s"]
    assert b.digest == digest(body)
    key = new_key()
    assert verify(key, body, sign(key, body)) and not verify(new_key(), body, sign(key, body))


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
def test_random_mutations_give_a_verdict_and_the_shortcut_never_overrules_the_rules(args, data):
    obj = json.loads(encode_batch(**args))
    path = data.draw(st.sampled_from([p for p in _paths(obj) if p]))
    target = obj
    for k in path[:-1]:
        target = target[k]
    if data.draw(st.booleans()) or isinstance(target, list):
        target[path[-1]] = data.draw(json_value)
    else:
        del target[path[-1]]
    body = _dump(obj)
    verdict, _ = _outcome(body)
    samples = obj.get("samples") if isinstance(obj, dict) else None
    if isinstance(samples, list) and wire._samples_certainly_valid(samples):
        assert _rules_accept(samples)
    if isinstance(samples, list) and not _rules_accept(samples):
        assert verdict == "error"


def _mutated_sample(args, data, mutate) -> bytes:
    obj = json.loads(encode_batch(**args))
    i = data.draw(st.integers(min_value=0, max_value=len(obj["samples"]) - 1))
    mutate(obj["samples"], i)
    return _dump(obj)


nonempty = batch_args.filter(lambda a: a["samples"])


@SETTINGS
@given(nonempty, st.data(), not_a_number, st.booleans())
def test_a_bad_value_anywhere_is_rejected(args, data, bad, in_t):
    def mutate(samples, i):
        if in_t or not samples[i]["m"]:
            samples[i]["t"] = bad
        else:
            samples[i]["m"][data.draw(st.sampled_from(sorted(samples[i]["m"])))] = bad
    assert _outcome(_mutated_sample(args, data, mutate)) == ("error", "bad_field")


@SETTINGS
@given(nonempty, st.data(), st.sampled_from(["unknown_metric", "bad_dev", "bad_kind", "second_host", "drop_key", "extra_key",
                                             "not_object", "m_not_object"]))
def test_structural_mutations_are_rejected_with_their_code(args, data, how):
    def mutate(samples, i):
        s = samples[i]
        if how == "unknown_metric":
            s["m"]["nvlink_tx_mib"] = 1
        elif how == "bad_dev":
            s["dev"] = data.draw(st.sampled_from(["", "-gpu", "gpu 0", "g" * 65, 7, None, ["gpu0"]]))
        elif how == "bad_kind":
            s["kind"] = data.draw(st.sampled_from(["GPU", "cpu", "", 1, None]))
        elif how == "second_host":    # a node has one host device, named "host"
            s["kind"], s["dev"] = "host", data.draw(st.sampled_from(["gpu0", "host2", "Host"]))
        elif how == "drop_key":
            del s[data.draw(st.sampled_from(sorted(s)))]
        elif how == "extra_key":
            s["x"] = 1
        elif how == "not_object":
            samples[i] = data.draw(st.sampled_from([[], 1, "s", None, True]))
        else:
            s["m"] = data.draw(st.sampled_from([[], 1, "m", None]))
    want = "bad_field" if how in ("unknown_metric", "bad_dev", "bad_kind", "second_host") else "bad_schema"
    assert _outcome(_mutated_sample(args, data, mutate)) == ("error", want)


def _one(value, dev="gpu0") -> bytes:
    return encode_batch("n", 0, GENESIS_PREV, [{"dev": dev, "kind": "gpu", "t": 1.0, "m": {"energy_mj": value}}],
                        1.0, 1.0)


@pytest.mark.parametrize("value, code", [
    (2 ** 64 - 1, None), (-(2 ** 63), None), (0, None), (-1.5, None), (True, "bad_field"), (False, "bad_field"),
    (None, "bad_field"), ("1", "bad_field"), (1e300, "bad_field"), ([1], "bad_field"), (float(2 ** 64), "bad_field"),
])
def test_edge_values(value, code):
    assert _outcome(_one(value))[0] == ("ok" if code is None else "error")
    if code:
        assert _outcome(_one(value)) == ("error", code)


def test_true_inside_a_device_name_is_accepted_by_the_shortcut():
    # The shortcut looks at the parsed values' types, not at the text: "true" in a name is no bool.
    body = _one(5, dev="gpu-true-false")
    assert wire._samples_certainly_valid(json.loads(body)["samples"])
    verdict, b = _outcome(body)
    assert verdict == "ok" and b.samples[0]["dev"] == "gpu-true-false"


@pytest.mark.parametrize("value", [True, False, None, "1", [1], {"a": 1}])
def test_the_shortcut_steps_aside_for_every_value_that_is_not_int_or_float(value):
    for where in ("t", "m"):
        s = {"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"energy_mj": 5, "power_mw": 1.5}}
        if where == "t":
            s["t"] = value
        else:
            s["m"]["power_mw"] = value
        assert not wire._samples_certainly_valid([s, dict(s, dev="gpu1")])
        assert not _rules_accept([s])


@pytest.mark.parametrize("value, ok", [
    (2 ** 63 - 1, True), (2 ** 63, True), (2 ** 64 - 1, True), (-(2 ** 63), True), (2.0 ** 63, True),
    (float(2 ** 64), False), (-float(2 ** 64), False), (1.8446744073709550e19, True), (1e19, True), (2e19, False),
])
def test_the_range_shortcut_near_the_bounds_agrees_with_the_rules(value, ok):
    # hypot bounds every |value| only below 2**63; from there each value is compared exactly.
    samples = [{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"energy_mj": value, "power_mw": 3.5}}]
    assert wire._samples_certainly_valid(samples) is ok
    assert _rules_accept(samples) is ok


def test_without_orjson_huge_numbers_are_refused_not_crashed(monkeypatch):
    # The standard library's json gives ints of any size and inf for 1e400: the shortcut says "not
    # sure" (hypot overflows, or sees inf) and the rules refuse them.
    monkeypatch.setattr(wire, "_orjson", None)
    head = b'{"created":1.0,"interval_s":1.0,"node":"n","prev":"' + GENESIS_PREV.encode() + b'","samples":['
    for number in (b"1" + b"0" * 400, b"-1" + b"0" * 400, b"1e400", b"18446744073709551616"):
        body = head + b'{"dev":"g","kind":"gpu","m":{"energy_mj":' + number + b'},"t":1}],"seq":0,"v":1}'
        assert _outcome(body) == ("error", "bad_field")
    assert _outcome(_one(2 ** 64 - 1))[0] == "ok"


def test_counters_whose_sum_passes_2_64_are_accepted_each_in_range():
    samples = [{"dev": f"gpu{i}", "kind": "gpu", "t": 1.0, "m": {"nvlink_tx_kib": 2 ** 63 + i}} for i in range(4)]
    body = encode_batch("n", 0, GENESIS_PREV, samples, 1.0, 1.0)
    assert wire._samples_certainly_valid(json.loads(body)["samples"])
    assert _outcome(body)[0] == "ok"


def test_nan_literal_and_oversize():
    nan = b'{"created":1.0,"interval_s":1.0,"node":"n","prev":"' + GENESIS_PREV.encode() + \
        b'","samples":[{"dev":"g","kind":"gpu","m":{"power_mw":NaN},"t":1}],"seq":0,"v":1}'
    assert _outcome(nan) == ("error", "bad_json")
    big = encode_batch("n", 0, GENESIS_PREV, [], 1.0, 1.0) + b" " * 100
    with pytest.raises(BatchError) as e:
        parse_batch(big, max_bytes=50)
    assert e.value.code == "too_large"


def test_names_with_a_trailing_newline_are_refused():
    """`$` would match before a final newline: a node could add a device that looks like gpu0."""
    import pytest

    from trainsentry.wire.batch import BatchError, encode_batch, parse_batch
    good = [{"dev": "gpu0", "kind": "gpu", "t": 1.0, "m": {"power_mw": 1}}]
    parse_batch(encode_batch("n1", 0, "0" * 64, good, 1.0, 1.0))
    for node, dev in (("n1", "gpu0\n"), ("n1\n", "gpu0")):
        body = encode_batch(node, 0, "0" * 64, [{**good[0], "dev": dev}], 1.0, 1.0)
        with pytest.raises(BatchError):
            parse_batch(body)
