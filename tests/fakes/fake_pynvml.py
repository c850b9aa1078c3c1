"""A stand-in for the ``pynvml`` module, answering from NVML readings recorded on the lent H200s.

Only the NVML calls live: constants, ctypes structures and the ``NVMLError`` class family are the
real ``pynvml`` objects (importing ``pynvml`` loads no driver library), so error codes, per-field
``nvmlReturn`` values and the structures a caller fills are exactly those of the binding.

The fake plays a :class:`~h200_recording.Recording` along a clock: recording time
``t0 + (clock() - start) * speed``. Counters hold between recorded samples like the driver's do;
with ``loop=True`` the recording repeats and cumulative counters keep growing across the seam.
Field values carry the fake clock's time in µs as their NVML timestamp (plus ``timestamp_offset_s``
to play a driver whose timestamps are off).

Knobs for tests: ``gpu_count`` (recorded GPUs replicated round-robin, e.g. 8 for the agent
benchmark), ``unsupported`` (metric keys answered NotSupported: ``power_mw``, ``energy_mj``,
``util``, ``mem_used``, ``sm_clock``, ``mem_clock``, ``temp``, ``pcie``, ``gpm``, ``nvlink``
(fields 138/139), ``link_count`` (field 91), ``link_state``, ``uuid``; ``energy_mj`` covers both the energy
call and field 83, which answer from the same recorded counter; ``energy_field``: field 83 alone,
as a driver without it), ``sum_scope=False`` (a driver that rejects scopeId 0xFFFFFFFF),
``fail={gate: code}`` (answer that gate with any NVML error code, e.g. a transient Timeout),
``link0_only=True`` (only scope 0 answers: a reader that took link 0 as the total would undercount
about 18-fold, so the source must report NVLink missing instead).
"""

from __future__ import annotations

import ctypes
import hashlib
import inspect
import struct
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable

import pynvml as _real

from .h200_recording import (FI_LINK_COUNT, SCOPE_ALL_LINKS, Err, Recording, is_counter,
                             load_recording)

# c_nvmlFieldValue_t as bytes: fieldId, scopeId, timestamp, latencyUsec, valueType, nvmlReturn, value
# (the union as ullVal, or as uiVal in its first 4 bytes); checked against the binding's offsets.
_FV_ULL, _FV_UINT = struct.Struct("=IIqqIIQ"), struct.Struct("=IIqqIII4x")
_FV_SIZE = ctypes.sizeof(_real.c_nvmlFieldValue_t)
assert _FV_ULL.size == _FV_UINT.size == _FV_SIZE and [getattr(_real.c_nvmlFieldValue_t, n).offset for n in (
    "fieldId", "scopeId", "timestamp", "latencyUsec", "valueType", "nvmlReturn", "value")] == [0, 4, 8, 16, 24, 28, 32]
assert _real.c_nvmlValue_t.uiVal.offset == 0

# field id -> (recorded key and gate it answers from, knob for the field alone)
_CALL_FIELDS = {83: ("energy_mj", "energy_field")}   # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
# What the driver writes into the structures it fills, written the same way (one C-level write):
# the binding's structures set every attribute through a Python-level __setattr__, which the
# binding itself never does for them (the driver fills them), and which made the fake's utilization
# and GPM calls several times the binding's own cost. Checked against the binding's offsets.
_UTIL = struct.Struct("=II")
assert [(n, getattr(_real.c_nvmlUtilization_t, n).offset) for n, _ in _real.c_nvmlUtilization_t._fields_] == \
    [("gpu", 0), ("memory", 4)] and ctypes.sizeof(_real.c_nvmlUtilization_t) == _UTIL.size
_GPM_METRIC_ANSWER = struct.Struct("=Id")   # nvmlReturn, value of one c_nvmlGpmMetric_t
_GPM_METRIC_SIZE = ctypes.sizeof(_real.c_nvmlGpmMetric_t)
assert [getattr(_real.c_nvmlGpmMetric_t, n).offset for n in ("metricId", "nvmlReturn", "value")] == [0, 4, 8]
_GPM_METRICS_OFFSET = _real.c_nvmlGpmMetricsGet_t.metrics.offset
_GPM_MAX_METRICS = _real.c_nvmlGpmMetricsGet_t.metrics.size // _GPM_METRIC_SIZE
# c_nvmlGpmMetricsGet_t's head as bytes: version, numMetrics, the two sample pointers (their targets'
# addresses, 0 for NULL), read in one go instead of through the binding's Python __getattribute__
_GPM_HEAD = struct.Struct("@IIPP")
assert [getattr(_real.c_nvmlGpmMetricsGet_t, n).offset for n in ("version", "numMetrics", "sample1", "sample2")] == \
    [0, 4, 8, 8 + struct.calcsize("@P")] and _GPM_HEAD.size <= _GPM_METRICS_OFFSET
_U32 = struct.Struct("=I")
_VT_ULL, _VT_UINT, _SUCCESS = _real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, _real.NVML_VALUE_TYPE_UNSIGNED_INT, _real.NVML_SUCCESS


def _parse_fields(request: tuple) -> list[tuple]:
    """(fieldId, scopeId, recorded key, gate, knob of the field alone or None, the element's byte offset
    in the array) per element, parsed as pynvml does: (fieldId, scopeId) pairs or bare ids (scope 0),
    kept to what the c_uint members hold."""
    out = []
    for i, fid in enumerate(request):
        try:
            f, scope = fid
        except TypeError:
            f, scope = fid, 0
        f, scope = f & 0xFFFFFFFF, scope & 0xFFFFFFFF
        if f == FI_LINK_COUNT:
            out.append((f, scope, ("field", f, 0), "link_count", None, i * _FV_SIZE))
        elif f in _CALL_FIELDS:
            key, knob = _CALL_FIELDS[f]
            out.append((f, scope, key, key, knob, i * _FV_SIZE))
        else:
            out.append((f, scope, ("field", f, scope), "nvlink", None, i * _FV_SIZE))
    return out


class ManualClock:
    """A clock tests move by hand; pass the same one to the fake and to the source."""

    def __init__(self, t: float = 1_800_000_000.0):
        self.t = float(t)

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        self.t += seconds
        return self.t


class FakeHandle:
    def __init__(self, index: int):
        self.index = index

    def __repr__(self) -> str:
        return f"FakeHandle({self.index})"


def _raise(code: int) -> None:
    raise _real.NVMLError(code)


class FakeNvml:
    """Use as the ``nvml`` module: ``NvmlSource(nvml=FakeNvml(...))``."""

    def __init__(self, recording: Recording | str | None = None, gpu_count: int | None = None,
                 unsupported: Iterable[str] = (), clock: Callable[[], float] | None = None,
                 start: float | None = None, speed: float = 1.0, loop: bool = True,
                 sum_scope: bool = True, link0_only: bool = False, timestamp_offset_s: float = 0.0,
                 fail: dict[str, int] | None = None):
        self.recording = recording if isinstance(recording, Recording) else load_recording(recording)
        self.gpu_count = gpu_count if gpu_count is not None else len(self.recording.gpus)
        self.unsupported = set(unsupported)
        self.fail = dict(fail or {})   # gate -> NVML error code to answer with (transient or not)
        self.clock = clock or time.time
        self.start = self.clock() if start is None else start
        self.speed, self.loop = speed, loop
        self.sum_scope, self.link0_only = sum_scope, link0_only
        self.timestamp_offset_s = timestamp_offset_s
        self.initialized = 0
        # (function name, handle index or None, args): what was asked, the latest 10,000 calls
        self.calls: deque[tuple] = deque(maxlen=10_000)
        self._gpm_samples: dict[int, tuple[int, float] | None] = {}
        self._gpm_keep: dict[int, object] = {}
        # per GPU index: key -> _series_of's answer (recorded keys only), looked up once, not on
        # every call (the recording is not changed while it is played)
        self._series: list[dict[object, tuple]] = [{} for _ in range(self.gpu_count)]
        self._rec_t0, self._rec_span = self.recording.t0, max(self.recording.t1 - self.recording.t0, 1e-9)
        # field-values request -> (_parse_fields of it, its array type, the call log's entry per GPU)
        self._requests: dict[tuple, tuple] = {}

    # Constants, structures and error classes are the real binding's own objects, copied onto the
    # class below; any other name (a call that is not faked) raises AttributeError.

    # ---- timeline -------------------------------------------------------------------------
    def rec_time(self) -> tuple[float, int]:
        """(time inside the recording, completed loops)."""
        return self._at(self.clock())

    def _at(self, now: float) -> tuple[float, int]:
        """:meth:`rec_time` at the fake clock's reading ``now``."""
        t0, span = self._rec_t0, self._rec_span
        tau = (now - self.start) * self.speed
        if 0 <= tau < span:   # inside the first play: what divmod answers below, without it
            return t0 + tau, 0
        if tau < 0:
            return t0, 0
        if not self.loop:
            return t0 + min(tau, span), 0
        k, rem = divmod(tau, span)
        return t0 + rem, int(k)

    def _value(self, handle: FakeHandle, key: object, gate: str) -> object:
        """The recorded ``key`` of ``handle``'s GPU now (:meth:`_answer`), the handle checked as NVML would."""
        if not (self.initialized and isinstance(handle, FakeHandle) and 0 <= handle.index < self.gpu_count):
            self._check(handle)   # raises the error NVML would
        now = self.clock()
        tau = (now - self.start) * self.speed    # _at's first case written out: every call has one
        return self._answer(handle.index, key, gate,
                            (self._rec_t0 + tau, 0) if 0 <= tau < self._rec_span else self._at(now))

    def _answer(self, index: int, key: object, gate: str, at: tuple[float, int]) -> object:
        """The recorded ``key`` of fake GPU ``index`` at ``at`` (a :meth:`rec_time`), logged under
        ``gate`` and answered with the error a test set for that gate. A call answering several values
        answers them all from one instant, as the driver does."""
        series = self._series[index].get(key)
        # the call log's entry, (gate, index, (key,)): the same every time, so made once per series
        self.calls.append(series[4] if series is not None and series[4][0] == gate else (gate, index, (key,)))
        if gate in self.fail:
            _raise(self.fail[gate])
        if gate in self.unsupported:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        if series is None:
            series = self._series_of(index, key, gate)
        # GpuRecording.at: the value held from its time on (the first one before the series starts);
        # ``held`` is the recorded values with the first one repeated in front, so the bisection's
        # answer indexes it directly
        times, held, growth, errors, _ = series
        t, loops = at
        v = held[bisect_right(times, t)]
        if errors and isinstance(v, Err):
            _raise(v.code)
        if loops and growth is not None:
            v = v + loops * growth
        return v

    def _series_of(self, index: int, key: object, gate: str) -> tuple:
        """(times, values with the first repeated in front, what a cumulative counter grows by per
        loop or None, whether any value is a recorded error, the call log's entry for it under
        ``gate``) of ``key`` on fake GPU ``index`` (recorded GPUs replicated round-robin);
        NotSupported if never recorded."""
        gpu = self.recording.gpus[index % len(self.recording.gpus)]
        if key not in gpu.series:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        times, values = gpu.series[key]
        first, last = gpu.span(key)
        counter = is_counter(key) and not isinstance(first, Err) and not isinstance(last, Err)
        series = (list(times), [values[0], *values], last - first if counter else None,
                  any(isinstance(v, Err) for v in values), (gate, index, (key,)))
        self._series[index][key] = series
        return series

    def _check(self, handle: FakeHandle | None = None) -> None:
        if not self.initialized:
            _raise(_real.NVML_ERROR_UNINITIALIZED)
        if handle is not None and not (isinstance(handle, FakeHandle) and 0 <= handle.index < self.gpu_count):
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)

    def _log(self, fn: str, handle: FakeHandle | None, *args) -> None:
        self.calls.append((fn, None if handle is None else handle.index, args))

    # ---- library -------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.recording.driver

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check()
        return "fake (" + self.recording.source + ")"

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return self.gpu_count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._check()
        if not 0 <= index < self.gpu_count:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        """``GPU-`` + 8-4-4-4-12 hex like the driver's; deterministic per index (the recordings hold
        no UUIDs), so replicated GPUs stay distinct."""
        self._check(handle)
        self._log("nvmlDeviceGetUUID", handle)
        if "uuid" in self.unsupported:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        h = hashlib.sha256(f"trainsentry-fake-gpu-{handle.index}".encode()).hexdigest()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        self._check(handle)
        return self.recording.gpus[handle.index % len(self.recording.gpus)].name

    # ---- field values: per-field return codes and timestamps, like the driver --------------
    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list) -> ctypes.Array:
        if not (self.initialized and isinstance(handle, FakeHandle) and 0 <= handle.index < self.gpu_count):
            self._check(handle)   # raises the error NVML would
        request = tuple(fieldIds)
        index = handle.index
        try:
            plan = self._requests.get(request)
        except TypeError:          # an unhashable element (a list as (fieldId, scopeId)): parse anew
            plan = None
        if plan is None:
            self.calls.append(("nvmlDeviceGetFieldValues", index, (request,)))
            plan = (_parse_fields(request), _real.c_nvmlFieldValue_t * len(request),
                    [("nvmlDeviceGetFieldValues", i, (request,)) for i in range(self.gpu_count)])
            try:
                self._requests[request] = plan
            except TypeError:
                pass
        else:
            self.calls.append(plan[2][index])   # the call log's entry, made once per request and GPU
        fields, array, _ = plan
        values = array()
        now = self.clock()         # one instant for the timestamps and the answers, as the driver's
        now_us = int((now + self.timestamp_offset_s) * 1e6)
        tau = (now - self.start) * self.speed    # _at's first case written out
        at = (self._rec_t0 + tau, 0) if 0 <= tau < self._rec_span else self._at(now)
        for f, scope, key, gate, knob, offset in fields:
            ret = _SUCCESS
            try:
                if knob is not None:
                    # A call's own series: in all four H200 snapshots (nvml_before/after.json)
                    # field 83 equals nvmlDeviceGetTotalEnergyConsumption to the millijoule.
                    if knob in self.fail:                  # the field alone failing, the call not
                        _raise(self.fail[knob])
                    if knob in self.unsupported:
                        _raise(_real.NVML_ERROR_NOT_SUPPORTED)
                elif gate == "nvlink" and (self.link0_only and scope != 0 or
                                           scope == SCOPE_ALL_LINKS and not self.sum_scope):
                    _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
                v = int(self._answer(index, key, gate, at))
            except _real.NVMLError as e:
                ret, v = e.value, 0
            # One C-level write per element: the binding's structures set every attribute through
            # a Python __setattr__, which made this fake call several times the real binding's own.
            if gate == "link_count" and ret == _SUCCESS:
                _FV_UINT.pack_into(values, offset, f, scope, now_us, 0, _VT_UINT, ret, v)
            else:
                _FV_ULL.pack_into(values, offset, f, scope, now_us, 0, _VT_ULL, ret, v)
        return values

    # ---- plain calls -------------------------------------------------------------------------
    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return int(self._value(handle, "power_mw", "power_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        return int(self._value(handle, "energy_mj", "energy_mj"))

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle):
        if not (self.initialized and isinstance(handle, FakeHandle) and 0 <= handle.index < self.gpu_count):
            self._check(handle)   # raises the error NVML would
        u = _real.c_nvmlUtilization_t()
        now, index = self.clock(), handle.index
        tau = (now - self.start) * self.speed    # _at's first case written out
        at = (self._rec_t0 + tau, 0) if 0 <= tau < self._rec_span else self._at(now)
        _UTIL.pack_into(u, 0, int(self._answer(index, "gpu_util", "util", at)),
                        int(self._answer(index, "mem_util", "util", at)))
        return u

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle, version=None):
        m = _real.c_nvmlMemory_t()
        m.used = int(self._value(handle, "mem_used", "mem_used"))
        m.total = 143771 * 2**20  # H200 as recorded by nvidia-smi (143,771 MiB)
        m.free = m.total - m.used
        return m

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        if clock_type == _real.NVML_CLOCK_SM:
            return int(self._value(handle, "sm_clock", "sm_clock"))
        if clock_type == _real.NVML_CLOCK_MEM:
            return int(self._value(handle, "mem_clock", "mem_clock"))
        _raise(_real.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        if sensor != _real.NVML_TEMPERATURE_GPU:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._value(handle, "temp", "temp"))

    def nvmlDeviceGetPcieThroughput(self, handle: FakeHandle, counter: int) -> int:
        key = "pcie_tx_kbps" if counter == _real.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kbps"
        return int(self._value(handle, key, "pcie"))

    def nvmlDeviceGetNvLinkState(self, handle: FakeHandle, link: int) -> int:
        self._check(handle)
        if "link_state" in self.unsupported:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        states = self.recording.gpus[handle.index % len(self.recording.gpus)].link_state
        if not 0 <= link < len(states):
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        return states[link]

    def nvmlDeviceGetNvLinkUtilizationCounter(self, handle: FakeHandle, link: int, counter: int):
        # Deprecated; NotSupported on the H200s (h200-telemetry.md). Logged so tests see it unused.
        self._log("nvmlDeviceGetNvLinkUtilizationCounter", handle, link, counter)
        _raise(_real.NVML_ERROR_NOT_SUPPORTED)

    # ---- GPM: two samples, metrics between them ---------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, handle: FakeHandle):
        self._check(handle)
        s = _real.c_nvmlGpmSupport_t()
        s.version = _real.NVML_GPM_SUPPORT_VERSION
        gpu = self.recording.gpus[handle.index % len(self.recording.gpus)]
        s.isSupportedDevice = int(gpu.gpm_supported and "gpm" not in self.unsupported)
        return s

    def nvmlGpmSampleAlloc(self):
        self._check()
        body = _real.struct_c_nvmlGpmSample_t()
        ptr = ctypes.pointer(body)
        key = ctypes.addressof(body)
        self._gpm_keep[key] = body
        self._gpm_samples[key] = None
        return ptr

    def nvmlGpmSampleFree(self, sample) -> None:
        key = ctypes.addressof(sample.contents)
        if key not in self._gpm_samples:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        del self._gpm_samples[key], self._gpm_keep[key]

    def nvmlGpmSampleGet(self, handle: FakeHandle, sample):
        self._check(handle)
        if "gpm" in self.unsupported:
            _raise(_real.NVML_ERROR_NOT_SUPPORTED)
        key = ctypes.addressof(sample.contents)
        if key not in self._gpm_samples:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        self._gpm_samples[key] = (handle.index, self.clock())
        self._log("nvmlGpmSampleGet", handle, key)
        return sample

    def nvmlGpmMetricsGet(self, mg):
        self._check()
        version, count, p1, p2 = _GPM_HEAD.unpack_from(mg)
        if version != _real.NVML_GPM_METRICS_GET_VERSION:
            _raise(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        s1 = self._gpm_samples.get(p1) if p1 else None
        s2 = self._gpm_samples.get(p2) if p2 else None
        if s1 is None or s2 is None or s1[0] != s2[0] or not s2[1] > s1[1] or count > _GPM_MAX_METRICS:
            _raise(_real.NVML_ERROR_INVALID_ARGUMENT)
        index = s2[0]
        self.calls.append(("nvmlGpmMetricsGet", index, (s1[1], s2[1])))
        at = self.rec_time()
        for off in range(_GPM_METRICS_OFFSET, _GPM_METRICS_OFFSET + count * _GPM_METRIC_SIZE, _GPM_METRIC_SIZE):
            (metric_id,) = _U32.unpack_from(mg, off)
            try:
                # The recording holds each metric as the average over the interval ending at its
                # time; the value for (s1, s2) is the one recorded at s2's time.
                value = float(self._answer(index, ("gpm", metric_id), "gpm", at))
                _GPM_METRIC_ANSWER.pack_into(mg, off + 4, _real.NVML_SUCCESS, value)
            except _real.NVMLError as e:
                _U32.pack_into(mg, off + 4, e.value)
        return mg


# The binding's constants, structures and error classes as class attributes, as the module has them
# (functions among them as static methods). Not through a __getattr__ fallback: a class defining
# __getattr__ takes CPython's slow attribute path for every attribute read on its instances, and the
# source and the fake read ~400 a tick, where the real module's reads are plain dict lookups.
for _name in dir(_real):
    if _name.startswith(("NVML", "c_nvml", "struct_c_nvml", "nvmlExceptionClass")) and _name not in vars(FakeNvml):
        _obj = getattr(_real, _name)
        setattr(FakeNvml, _name, staticmethod(_obj) if inspect.isfunction(_obj) else _obj)


def calls_named(fake: FakeNvml, fn: str) -> list[tuple]:
    return [c for c in fake.calls if c[0] == fn]
