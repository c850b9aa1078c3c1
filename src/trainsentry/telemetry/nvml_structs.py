"""Reading the binding's ctypes structures from their bytes, with offsets taken from the binding.

``pynvml``'s structures (``_PrintableStructure``) read every field through a Python-level
``__getattribute__``: three reads per field value, two per utilization, three per GPM metric, for
every GPU ten times a second. :mod:`trainsentry.telemetry.nvml` unpacks them instead with the
Structs below, each built from (and checked against) the binding's own field offsets and types, so a
binding with another layout gets ``None`` and the source falls back to attribute reads.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from typing import Any


@functools.cache
def field_layout(t: Any) -> struct.Struct | None:
    """A Struct reading (timestamp, nvmlReturn, value as u64) from one element of the binding's
    c_nvmlFieldValue_t array, built from the binding's own field offsets; None if it cannot."""
    try:
        parts = sorted((getattr(t, name).offset, code) for name, code in
                       (("nvmlReturn", "I"), ("value", "Q"), ("timestamp", "q")))
        size = ctypes.sizeof(t)
    except (AttributeError, TypeError):
        return None
    fmt, pos = "=", 0
    for off, code in parts:
        fmt += f"{off - pos}x{code}"
        pos = off + struct.calcsize("=" + code)
    s = struct.Struct(fmt + f"{size - pos}x")
    order = [c for _, c in parts]
    if order != ["q", "I", "Q"] or s.size != size:  # the layout every pynvml release has had
        return None
    return s


@functools.cache
def fields_layout(t: Any, n: int) -> struct.Struct | None:
    """``n`` elements of :func:`field_layout` in one Struct: a flat (timestamp, nvmlReturn, value) × n,
    unpacked straight from the C array's buffer (no copy of its bytes, no tuple per element)."""
    one = field_layout(t)
    return None if one is None else struct.Struct("=" + one.format[1:] * n)


@functools.cache
def util_layout(t: Any) -> struct.Struct | None:
    """(gpu, memory) from a c_nvmlUtilization_t's bytes, checked against the binding's own offsets:
    two reads through the binding's Python-level ``__getattribute__`` cost several times more."""
    try:
        fields = [(name, c, getattr(t, name).offset) for name, c in t._fields_]
    except (AttributeError, TypeError, ValueError):
        return None
    ok = fields == [("gpu", ctypes.c_uint, 0), ("memory", ctypes.c_uint, 4)] and ctypes.sizeof(ctypes.c_uint) == 4
    return struct.Struct("=II") if ok else None


@functools.cache
def gpm_layout(t: Any, n: int) -> tuple[struct.Struct, int] | None:
    """(a Struct reading (nvmlReturn, value) of the first ``n`` metrics of a c_nvmlGpmMetricsGet_t flat
    from its bytes, the offset of its metrics array), from the binding's own offsets; None if it cannot."""
    try:
        metric = dict(t._fields_)["metrics"]._type_
        fields = [(name, c, getattr(metric, name).offset) for name, c in metric._fields_[:3]]
        offset, size = t.metrics.offset, ctypes.sizeof(metric)
    except (AttributeError, TypeError, KeyError):
        return None
    if fields != [("metricId", ctypes.c_uint, 0), ("nvmlReturn", ctypes.c_uint, 4), ("value", ctypes.c_double, 8)] \
            or size < 16 or ctypes.sizeof(ctypes.c_uint) != 4:
        return None
    return struct.Struct("=" + f"4xId{size - 16}x" * n), offset
