"""The signed batch: what an agent sends and what the collector accepts, in one module.

A batch is canonical JSON (sorted keys, no spaces, ASCII, no NaN) with::

    {"v": 1, "node": "node-a", "seq": 17, "prev": "<sha256 hex of batch 16's bytes>",
     "created": 1796000000.25, "interval_s": 1.0,
     "gap_from": 12,                      # optional: the agent declares batches 12..16 lost
     "samples": [{"dev": "gpu0", "kind": "gpu", "t": 1796000000.2, "m": {"nvlink_tx_kib": 1234, ...}}, ...]}

The HTTP body *is* those bytes; the HMAC-SHA256 of the body under the node's key travels in the
``X-TS-Signature`` header and the node id in ``X-TS-Node``. Signing the exact bytes sent means the
collector never re-serialises before verifying. ``prev`` chains every batch to its predecessor
(SHA-256 of the predecessor's bytes) and ``seq`` increases by one per batch, so the collector can
tell forged (bad MAC), altered (bad MAC), replayed (old seq), reordered (seq ahead) and missing
(a hole, declared with ``gap_from`` or never filled) batches apart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
import secrets
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

from ..traces.schema import DEVICE_KINDS, METRIC_BY_NAME

try:  # the collector has orjson; the agent may not, and the standard library is enough for it
    import orjson as _orjson
except ImportError:  # pragma: no cover - exercised on agent-only installs
    _orjson = None

WIRE_VERSION = 1
GENESIS_PREV = "0" * 64
NODE_HEADER = "X-TS-Node"
SIGNATURE_HEADER = "X-TS-Signature"
MAX_BATCH_BYTES = 4 * 1024 * 1024
MAX_SAMPLES = 20_000
_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_DEV_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}\Z")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MAX_ABS = float(2 ** 64)
_SURELY_IN_RANGE = float(2 ** 63)
_NUMBER_TYPES = frozenset((int, float))
_SAMPLE_KEYS = frozenset(("dev", "kind", "t", "m"))
_METRIC_KEYS = frozenset(METRIC_BY_NAME)
_KIND_SET = frozenset(DEVICE_KINDS)
_DEV, _KIND, _T, _M = itemgetter("dev"), itemgetter("kind"), itemgetter("t"), itemgetter("m")


class BatchError(ValueError):
    """A batch that cannot be accepted; ``code`` is a stable machine-readable reason."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(slots=True)
class Batch:
    node: str
    seq: int
    prev: str
    created: float
    interval_s: float
    samples: list[dict]
    gap_from: int | None
    body: bytes
    digest: str  # sha256 hex of body: what the next batch's ``prev`` must be


def new_key() -> str:
    """A fresh node key: 32 random bytes, hex."""
    return secrets.token_hex(32)


def _key_bytes(key: str | bytes) -> bytes:
    return bytes.fromhex(key) if isinstance(key, str) else key


def canonical_bytes(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def encode_batch(node: str, seq: int, prev: str, samples: list[dict], created: float,
                 interval_s: float, gap_from: int | None = None) -> bytes:
    obj = {"v": WIRE_VERSION, "node": node, "seq": seq, "prev": prev, "created": created,
           "interval_s": interval_s, "samples": samples}
    if gap_from is not None:
        obj["gap_from"] = gap_from
    return canonical_bytes(obj)


# The longest batch interval a streaming agent may use: the collector caps the interval a node states
# at this for its silence rule (3 intervals without samples are unmonitored; collector/store.py), so a
# node cannot declare an hour and go quiet for three. An agent sealing longer batches would read as
# silent between them. (The wire itself accepts up to 3600 s: older agents, recorded traces.)
MAX_BATCH_INTERVAL_S = 10.0


def sign(key: str | bytes, body: bytes) -> str:
    return hmac.new(_key_bytes(key), body, hashlib.sha256).hexdigest()


def verify(key: str | bytes, body: bytes, signature: str | None) -> bool:
    """Whether ``signature`` is this key's HMAC of ``body``. Anything that is not a 64-character hex
    string (non-ASCII bytes a client put in the header included) is simply not a match."""
    if not signature:
        return False
    sig = signature.strip().lower()
    if len(sig) != 64 or not sig.isascii():
        return False
    return hmac.compare_digest(sign(key, body), sig)


def digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _reject_constant(name: str):
    raise BatchError("bad_json", f"non-finite number {name} is not allowed")


def _loads(body: bytes):
    try:
        if _orjson is not None:
            return _orjson.loads(body)
        return json.loads(body, parse_constant=_reject_constant)
    except BatchError:
        raise
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise BatchError("bad_json", f"body is not valid JSON: {str(e)[:200]}") from None


def _number(v, where: str) -> float | int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise BatchError("bad_field", f"{where} must be a number")
    if isinstance(v, float) and not math.isfinite(v):
        raise BatchError("bad_field", f"{where} must be finite")
    if abs(v) >= _MAX_ABS:
        raise BatchError("bad_field", f"{where} is out of range")
    return v


def parse_batch(body: bytes, max_bytes: int = MAX_BATCH_BYTES, max_samples: int = MAX_SAMPLES) -> Batch:
    """Validate a batch body completely or raise :class:`BatchError`. Does not check the MAC or chain."""
    if not isinstance(body, (bytes, bytearray)):
        raise BatchError("bad_json", "body must be bytes")
    if len(body) > max_bytes:
        raise BatchError("too_large", f"batch of {len(body)} bytes exceeds the limit of {max_bytes}")
    if not body:
        raise BatchError("bad_json", "empty body")
    obj = _loads(bytes(body))
    if not isinstance(obj, dict):
        raise BatchError("bad_schema", "batch must be a JSON object")
    allowed = {"v", "node", "seq", "prev", "created", "interval_s", "samples", "gap_from"}
    extra = set(obj) - allowed
    if extra:
        raise BatchError("bad_schema", f"unknown batch fields: {sorted(extra)[:5]}")
    if obj.get("v") != WIRE_VERSION:
        raise BatchError("bad_version", f"wire version must be {WIRE_VERSION}")
    node = obj.get("node")
    if not isinstance(node, str) or not _NODE_RE.match(node):
        raise BatchError("bad_field", "node must match [A-Za-z0-9][A-Za-z0-9._-]{0,127}")
    seq = obj.get("seq")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0 or seq >= 2 ** 63:
        raise BatchError("bad_field", "seq must be a non-negative integer")
    prev = obj.get("prev")
    if not isinstance(prev, str) or not _HEX64.match(prev):
        raise BatchError("bad_field", "prev must be 64 lowercase hex digits")
    created = float(_number(obj.get("created"), "created"))
    interval_s = float(_number(obj.get("interval_s"), "interval_s"))
    if not 0 < interval_s <= 3600:
        raise BatchError("bad_field", "interval_s must be in (0, 3600]")
    gap_from = obj.get("gap_from")
    if gap_from is not None and (isinstance(gap_from, bool) or not isinstance(gap_from, int)
                                 or not 0 <= gap_from < seq):
        raise BatchError("bad_field", "gap_from must be an integer below seq")
    samples = obj.get("samples")
    if not isinstance(samples, list):
        raise BatchError("bad_schema", "samples must be a list")
    if len(samples) > max_samples:
        raise BatchError("too_large", f"{len(samples)} samples exceed the limit of {max_samples}")
    if not _samples_certainly_valid(samples):
        _check_samples(samples)
    return Batch(node=node, seq=seq, prev=prev, created=created, interval_s=interval_s,
                 samples=samples, gap_from=gap_from, body=bytes(body), digest=digest(bytes(body)))


def _check_samples(samples: list) -> None:
    """The per-sample rules, one sample at a time: raises the BatchError of the first bad sample.

    This is the definition of a valid sample; :func:`_samples_certainly_valid` is only a faster way
    to reach the same "valid" verdict for the common case, and every body it is unsure of comes here.
    """
    for i, s in enumerate(samples):
        if not isinstance(s, dict) or set(s) != _SAMPLE_KEYS:
            raise BatchError("bad_schema", f"samples[{i}] must have exactly dev, kind, t, m")
        dev = s["dev"]
        if not isinstance(dev, str) or not _DEV_RE.match(dev):
            raise BatchError("bad_field", f"samples[{i}].dev is not a valid device name")
        if s["kind"] not in DEVICE_KINDS:
            raise BatchError("bad_field", f"samples[{i}].kind must be one of {DEVICE_KINDS}")
        if s["kind"] == "host" and dev != "host":
            raise BatchError("bad_field", f"samples[{i}]: a node has one host device, named 'host'")
        _number(s["t"], f"samples[{i}].t")
        m = s["m"]
        if not isinstance(m, dict):
            raise BatchError("bad_schema", f"samples[{i}].m must be an object")
        for k, v in m.items():
            if k not in METRIC_BY_NAME:
                raise BatchError("bad_field", f"samples[{i}].m has unknown metric {k[:64]!r}")
            _number(v, f"samples[{i}].m.{k}")


def _samples_certainly_valid(samples: list) -> bool:
    """True only if :func:`_check_samples` would accept every sample; False means "not sure".

    Per-sample Python work caps ingest: the loop above costs ~8 µs for a GPU sample with twenty
    metrics. Here each rule is checked for the whole batch at once with C-level map/set passes
    (~0.9 µs per sample of a realistic batch). Parsed JSON holds only dict, list, str, int, float,
    bool and None, which is what makes the shortcuts below exact.
    """
    try:
        if set(map(type, samples)) != {dict} or set(map(len, samples)) != {4}:
            return False
        # Four keys each, and each of dev/kind/t/m present (else KeyError): exactly those four.
        # (kind, dev) pairs in one C-level pass (TypeError when either is unhashable): a handful per node
        pairs = set(zip(map(_KIND, samples), map(_DEV, samples)))
        devs = {d for _, d in pairs}
        if not {k for k, _ in pairs} <= _KIND_SET:  # str-only set: anything else is not a subset
            return False
        if any(k == "host" and d != "host" for k, d in pairs):  # one host device per node, named "host"
            return False
        ms = list(map(_M, samples))
        if set(map(type, ms)) != {dict}:
            return False
        for d in devs:  # distinct names only: a node has a handful of devices
            if type(d) is not str or _DEV_RE.match(d) is None:
                return False
        # Every metric name of the batch at once: set.union takes a dict's keys with their stored
        # hashes (half the cost of a tuple of names per sample).
        if not _METRIC_KEYS.issuperset(set().union(*ms)):
            return False
        values = [*map(_T, samples), *chain.from_iterable(map(dict.values, ms))]
        # Exact types: int and float only, so no bool (an int subclass, which _number refuses),
        # str, None, list or dict.
        if not _NUMBER_TYPES.issuperset(map(type, values)):
            return False
        # Range, in one C pass: hypot >= the largest |value| (inf or nan when one is) to within an
        # ulp, and a value of magnitude >= 2**64 converts to a double >= 2**64 (rounding is
        # monotone, 2**64 is a double); so a hypot below 2**63 puts every value inside |v| < 2**64.
        if math.hypot(*values) < _SURELY_IN_RANGE:
            return True
        # Large counters (or many of them) can reach 2**63 while each is in range: compare one by
        # one (exact: float-vs-int comparison is exact in Python, and nan compares False).
        return all(map(_MAX_ABS.__gt__, map(abs, values)))
    except (KeyError, TypeError, OverflowError):  # OverflowError: an int beyond a double (json, not orjson)
        return False
