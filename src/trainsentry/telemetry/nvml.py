"""GPU telemetry through NVML (the official ``nvidia-ml-py`` binding, imported as ``pynvml``).

Per GPU and read: NVLink payload counters (fields 138/139, KiB, summed over all links) in one
``nvmlDeviceGetFieldValues`` call, then power (mW) and GPU and memory utilization. Energy (field 83,
mJ, asked in the same call when due) every ``energy_period_s`` (1 s): on the H200 VM it costs
~3.9 ms of CPU per read, against ~1.1 ms for both NVLink counters and ~1 µs for power or
utilization (scripts/gpu/nvml_call_costs.py, results/device/), and a cumulative counter read less
often loses nothing but resolution (traces.rates spreads each difference over the samples between
two reads). Slower: gauges that move over seconds (memory used, SM and memory clocks,
temperature, and the PCIe snapshot when enabled) every ``slow_period_s`` (1 s), staggered over the
GPUs so no single tick pays for all of them; GPM metrics (averages over the interval between two
GPM samples, so nothing is lost but resolution) every ``gpm_period_s`` (1 s, never under NVML's
100 ms). A reading carries only the metrics read for it: absent means not read this time, never zero.

Every metric is optional. Each NVML call goes through :meth:`NvmlSource._query`, which turns the
"this GPU cannot do that" errors into a missing metric and remembers it, so an unsupported metric
costs one failed call per GPU, not one per poll; transient errors lose the metric for one read only.

Deliberately not read (see docs/telemetry.md): PCIe byte fields 197/198 (32-bit, wrap several
times a second under load), NVLink with scopeId 0 alone (that is link 0 only: about 1/18 of the
traffic on an H200), and the deprecated ``nvmlDeviceGetNvLinkUtilizationCounter``.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from .base import Reading, SourceError
from .nvml_structs import fields_layout, gpm_layout, util_layout

FI_NVLINK_DATA_TX = 138   # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB, 64-bit
FI_NVLINK_DATA_RX = 139   # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
FI_NVLINK_LINK_COUNT = 91
FI_TOTAL_ENERGY = 83      # NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ: the same counter as the energy call
# Metrics asked as fields in the NVLink call instead of by calls of their own: (metric, field id,
# the call used where the field does not answer). The H200 snapshots (tests/fixtures/h200/
# nvml_*.json) hold field 83 equal to the energy call's answer. Power stays a call of its own: as
# field 185 (POWER_AVERAGE, equal to nvmlDeviceGetPowerUsage in the same snapshots) it measured
# slower through the binding's structures than the call (docs/telemetry.md).
SCALAR_FIELDS = (("energy_mj", FI_TOTAL_ENERGY, "nvmlDeviceGetTotalEnergyConsumption"),)
SCOPE_ALL_LINKS = 0xFFFFFFFF
MAX_LINKS = 18            # NVLink 4 on H100/H200; used only when NVML cannot say how many
GPM_MIN_INTERVAL_S = 0.1  # NVML needs samples >= 100 ms apart for meaningful GPM metrics
SLOW_PERIOD_S = 1.0       # memory used, clocks, temperature: they move over seconds
ENERGY_PERIOD_S = 1.0     # the energy counter: the costliest read (module docstring)
# GPM metrics are averages over the interval between two samples, so a slower rate loses no time
# covered, only resolution; a GPM read costs ~60 µs of CPU per GPU on the H200s (the sample; the
# metrics-get of these eight metrics ~1 µs; metric 1, graphics util, not requested, costs 1.3 ms).
GPM_PERIOD_S = 1.0
TIMESTAMP_TOLERANCE_S = 5.0

# Errors meaning "this GPU/driver/VM cannot give this metric": stop asking.
_PERMANENT = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_FUNCTION_NOT_FOUND",
              "NVML_ERROR_INVALID_ARGUMENT", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_DEPRECATED")

# schema metric name -> NVML GPM metric id (pynvml NVML_GPM_METRIC_*)
GPM_METRIC_IDS: dict[str, int] = {
    "gpm_sm_util_pct": 2,          # SM_UTIL
    "gpm_sm_occupancy_pct": 3,     # SM_OCCUPANCY
    "gpm_tensor_util_pct": 5,      # ANY_TENSOR_UTIL
    "gpm_dram_bw_util_pct": 10,    # DRAM_BW_UTIL
    "gpm_pcie_tx_mibps": 20,       # PCIE_TX_PER_SEC
    "gpm_pcie_rx_mibps": 21,       # PCIE_RX_PER_SEC
    "gpm_nvlink_rx_mibps": 60,     # NVLINK_TOTAL_RX_PER_SEC
    "gpm_nvlink_tx_mibps": 61,     # NVLINK_TOTAL_TX_PER_SEC
    "gpm_fp32_util_pct": 12,       # FP32_UTIL
    "gpm_fp16_util_pct": 13,       # FP16_UTIL
    "gpm_integer_util_pct": 4,     # INTEGER_UTIL
}


_NO_SCALARS: Mapping[str, Any] = MappingProxyType({})   # _fields' answer when no scalar field was asked


class _Missing:
    """The query helper's answer when a metric is not available (never a number)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class _Gpm:
    """Two alternating GPM sample buffers of one GPU; ``last`` holds the newest taken sample."""

    def __init__(self, buffers: list[Any], requests: list[Any]):
        self.buffers = buffers
        # requests[p]: the c_nvmlGpmMetricsGet_t for "buffer p, then the other one", filled once and
        # reused (setting its sample pointers on every read goes through the binding's __setattr__)
        self.requests = requests
        self.last: int | None = None   # index of the buffer holding the newest sample
        self.last_t = 0.0


class NvmlSource:
    """Readings of every (or the chosen) GPU; device names ``gpu0``, ``gpu1`` … by NVML index."""

    name = "nvml"

    def __init__(self, nvml: Any = None, gpus: Sequence[int] | None = None, gpm: bool = True,
                 pcie_snapshot: bool = False, clock: Callable[[], float] = time.time,
                 slow_period_s: float = SLOW_PERIOD_S, gpm_period_s: float = GPM_PERIOD_S,
                 energy_period_s: float = ENERGY_PERIOD_S, nvlink_period_s: float = 0.0):
        if not min(slow_period_s, gpm_period_s, energy_period_s, nvlink_period_s) >= 0:
            raise ValueError(f"periods must be >= 0 s, got slow {slow_period_s}, gpm {gpm_period_s}, "
                             f"energy {energy_period_s}, nvlink {nvlink_period_s}")
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as e:  # pragma: no cover - nvidia-ml-py is a core dependency
                raise SourceError("nvidia-ml-py is not installed") from e
        self.nvml = nvml
        self.clock = clock
        self.pcie_snapshot = pcie_snapshot  # nvmlDeviceGetPcieThroughput: a 20 ms snapshot, off by default
        self.slow_period_s = float(slow_period_s)
        self.energy_period_s = float(energy_period_s)
        # 0: the NVLink counters on every read (the default); > 0: only that often, staggered like
        # energy, for nodes where the field call's CPU cost matters more than 10 Hz resolution
        # (trainsentry eval --counter-period nvlink=S measures what detection loses)
        self.nvlink_period_s = float(nvlink_period_s)
        self.gpm_period_s = max(float(gpm_period_s), GPM_MIN_INTERVAL_S)
        self._gpm_gap_s = max(GPM_MIN_INTERVAL_S, 0.9 * self.gpm_period_s)   # a sample is due this long after the last
        self._unsupported: set[tuple[int, str]] = set()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise SourceError(f"NVML cannot start: {e}") from e
        try:
            count = nvml.nvmlDeviceGetCount()
            self.indices = list(range(count)) if gpus is None else list(gpus)
            bad = [i for i in self.indices if not 0 <= i < count]
            if bad:
                raise SourceError(f"no GPU with index {bad} (NVML sees {count})")
            self.handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices}
        except nvml.NVMLError as e:
            nvml.nvmlShutdown()
            raise SourceError(f"NVML cannot list GPUs: {e}") from e
        self._permanent_codes = {getattr(nvml, n, None) for n in _PERMANENT} - {None}
        self._nvlink_links: dict[int, list[int] | None] = {}  # None: the all-links scope works
        self._by_call: set[tuple[int, str]] = set()   # (GPU, metric) whose field does not answer
        self._plans: dict[int, tuple] = {}            # per GPU: the field request (_field_plan)
        self._layouts: dict[type, Any] = {}           # field-values array type -> its layout (_flat)
        self._gpm: dict[int, _Gpm | None] = {}
        self._gpm_enabled = gpm
        self._slow_due: dict[int, float] = {}    # per GPU: when the slow gauges are next read
        self._energy_due: dict[int, float] = {}  # per GPU: when energy is next read
        self._nvlink_due: dict[int, float] = {}  # per GPU: when NVLink is next read (nvlink_period_s > 0)
        self._uuids: dict[str, str] | None = None
        self._names = [f"gpu{i}" for i in self.indices]
        self._closed = False

    # ---- the one query helper ------------------------------------------------------------
    def _query(self, gpu: int, metric: str, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) or MISSING; a permanent "cannot" is cached per (gpu, metric) and not asked again."""
        if (gpu, metric) in self._unsupported:
            return MISSING
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            if self._is_permanent(getattr(e, "value", None)):
                self._unsupported.add((gpu, metric))
            return MISSING

    def _is_permanent(self, code: int | None) -> bool:
        return code in self._permanent_codes

    def unsupported(self) -> dict[str, list[str]]:
        """Metrics found unsupported so far, per device (for logs and the agent's health report)."""
        out: dict[str, list[str]] = {}
        for gpu, metric in sorted(self._unsupported):
            out.setdefault(f"gpu{gpu}", []).append(metric)
        return out

    # ---- Source protocol -----------------------------------------------------------------
    def devices(self) -> list[str]:
        return [f"gpu{i}" for i in self.indices]

    def uuids(self) -> dict[str, str]:
        """Device name -> NVML UUID (``GPU-…``), asked once; a GPU that will not say is left out."""
        if self._uuids is None:
            self._uuids = {}
            for i in self.indices:
                u = self._query(i, "uuid", self.nvml.nvmlDeviceGetUUID, self.handles[i])
                if u is not MISSING:
                    self._uuids[f"gpu{i}"] = u.decode() if isinstance(u, bytes) else str(u)
        return dict(self._uuids)

    def read(self) -> list[Reading]:
        if self._closed:
            raise SourceError("NvmlSource is closed")
        return [self._read_gpu(k, i) for k, i in enumerate(self.indices)]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for g in self._gpm.values():
            for buf in (g.buffers if g else []):
                try:
                    self.nvml.nvmlGpmSampleFree(buf)
                except self.nvml.NVMLError:
                    pass
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError:
            pass

    def __enter__(self) -> "NvmlSource":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one GPU -------------------------------------------------------------------------
    def _read_gpu(self, k: int, i: int) -> Reading:
        """GPU ``i``, the ``k``-th of this source: every-read metrics, plus the slow ones when due."""
        n, h = self.nvml, self.handles[i]
        host_t = self.clock()
        values: dict[str, float | int] = {}
        # Each periodic group's common answer, "not due", without a call (what _is_due answers first)
        due = self._energy_due.get(i)
        energy = (due is None or not 0 < due - host_t <= 2 * self.energy_period_s) and \
            self._is_due(self._energy_due, k, i, host_t, self.energy_period_s)
        if self.nvlink_period_s <= 0:
            nvlink = True
        else:
            due = self._nvlink_due.get(i)
            nvlink = (due is None or not 0 < due - host_t <= 2 * self.nvlink_period_s) and \
                self._is_due(self._nvlink_due, k, i, host_t, self.nvlink_period_s)
        tx, rx, scalars, field_t = self._fields(i, host_t, energy, nvlink)
        if tx is not MISSING:
            values["nvlink_tx_kib"] = tx
        if rx is not MISSING:
            values["nvlink_rx_kib"] = rx
        if energy:
            for metric, _, call in SCALAR_FIELDS:
                v = scalars.get(metric)
                if v is None:  # field not asked or not answering: the metric's own call
                    v = self._query(i, metric, getattr(n, call), h)
                if v is not MISSING:
                    values[metric] = v
        # power and utilization: _query's work written out (the two calls every GPU makes every tick)
        unsupported = self._unsupported
        if (i, "power_mw") not in unsupported:
            try:
                values["power_mw"] = n.nvmlDeviceGetPowerUsage(h)
            except n.NVMLError as e:
                if getattr(e, "value", None) in self._permanent_codes:
                    unsupported.add((i, "power_mw"))
        if (i, "util") not in unsupported:
            try:
                util = n.nvmlDeviceGetUtilizationRates(h)
            except n.NVMLError as e:
                if getattr(e, "value", None) in self._permanent_codes:
                    unsupported.add((i, "util"))
            else:
                layout = util_layout(type(util))
                gpu, mem = layout.unpack_from(util) if layout is not None else (util.gpu, util.memory)
                values["gpu_util_pct"], values["mem_util_pct"] = float(gpu), float(mem)
        due = self._slow_due.get(i)
        if (due is None or not 0 < due - host_t <= 2 * self.slow_period_s) and \
                self._is_due(self._slow_due, k, i, host_t, self.slow_period_s):
            self._read_slow(i, values)
        if self._gpm_enabled:
            g = self._gpm.get(i)
            # not yet due (what _gpm_read answers first): no call
            if g is None or g.last is None or host_t - g.last_t >= self._gpm_gap_s:
                self._gpm_read(i, values, host_t)
        return Reading(self._names[k], "gpu", host_t if field_t is None else field_t, values)

    def _is_due(self, table: dict[int, float], k: int, i: int, now: float, period: float) -> bool:
        """Whether GPU ``i`` (the ``k``-th) reads a periodic group now; ``table`` keeps its schedule."""
        due = table.get(i)
        if due is not None and 0 < due - now <= 2 * period:
            return False
        if due is None:
            # The first read has everything; after it, GPU k of n takes its turn k/n of a period
            # later, so the costly calls of n GPUs spread over the period instead of one tick.
            table[i] = now + period * (1 + k / max(len(self.indices), 1))
        elif 0 <= now - due < period:
            table[i] = due + period     # on schedule: keep the phase
        else:
            table[i] = now + period     # far behind, or the clock jumped back: from now on
        return True

    def _read_slow(self, i: int, values: dict[str, float | int]) -> None:
        n, h, q = self.nvml, self.handles[i], self._query
        mem = q(i, "mem_used_bytes", n.nvmlDeviceGetMemoryInfo, h)
        if mem is not MISSING:
            values["mem_used_bytes"] = int(mem.used)
        for metric, fn, arg in (("sm_clock_mhz", n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
                                ("mem_clock_mhz", n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
                                ("temp_c", n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU)):
            v = q(i, metric, fn, h, arg)
            if v is not MISSING:
                values[metric] = v
        if self.pcie_snapshot:
            for metric, counter in (("pcie_tx_kbps", n.NVML_PCIE_UTIL_TX_BYTES), ("pcie_rx_kbps", n.NVML_PCIE_UTIL_RX_BYTES)):
                v = q(i, metric, n.nvmlDeviceGetPcieThroughput, h, counter)
                if v is not MISSING:
                    values[metric] = v

    # ---- NVLink and energy: one field-values call -----------------------------------------
    def _field_values(self, i: int, requests: list[tuple[int, int]]) -> list[tuple[int, int, int]] | None:
        """[(nvmlReturn, value, timestamp_us)] per (fieldId, scopeId) request; None if the call failed."""
        flat = self._field_flat(i, requests)
        return None if flat is None else list(zip(flat[1::3], flat[2::3], flat[0::3]))

    def _field_flat(self, i: int, requests: list[tuple[int, int]]) -> tuple[int, ...] | None:
        """(timestamp_us, nvmlReturn, value) of every request, flat in one tuple; None if the call failed."""
        try:
            vals = self.nvml.nvmlDeviceGetFieldValues(self.handles[i], requests)
        except TypeError:
            # A binding too old to take (fieldId, scopeId) tuples cannot scope: no NVLink from it.
            return None
        except self.nvml.NVMLError:
            return None
        return _flat(vals, self._layouts)

    def _field_plan(self, i: int, with_scalars: bool = True,
                    with_nvlink: bool = True) -> tuple[list[tuple[int, int]], int, list[str]]:
        """(the field request, NVLink scopes per direction in it, scalar metrics asked in it) for GPU
        ``i`` and what is due now. The four variants are made once per GPU and made again only after
        something was found unsupported (those sets only grow)."""
        plan = self._plans.get(i)
        if plan is not None and plan[0][0] == len(self._unsupported) and plan[0][1] == len(self._by_call):
            return plan[1][with_scalars, with_nvlink]
        links: list[int] | None = []
        if (i, "nvlink") not in self._unsupported:
            if i not in self._nvlink_links:
                self._nvlink_links[i] = self._nvlink_plan(i)
            links = [] if (i, "nvlink") in self._unsupported else self._nvlink_links[i]
        scopes = [SCOPE_ALL_LINKS] if links is None else links
        k = len(scopes)
        req = [(fid, s) for fid in (FI_NVLINK_DATA_TX, FI_NVLINK_DATA_RX) for s in scopes]
        asked = [(metric, fid) for metric, fid, _ in SCALAR_FIELDS
                 if (i, metric) not in self._by_call and (i, metric) not in self._unsupported]
        req += [(fid, 0) for _, fid in asked]
        metrics = [m for m, _ in asked]
        variants = {(True, True): (req, k, metrics), (False, True): (req[:2 * k], k, []),
                    (True, False): (req[2 * k:], 0, metrics), (False, False): ([], 0, [])}
        self._plans[i] = ((len(self._unsupported), len(self._by_call)), variants)
        return variants[with_scalars, with_nvlink]

    def _fields(self, i: int, host_t: float, with_scalars: bool = True,
                with_nvlink: bool = True) -> tuple[Any, Any, dict[str, Any], float | None]:
        """(tx_kib, rx_kib, {metric: value} of SCALAR_FIELDS, NVLink counter time).

        NVLink: sums over all links, MISSING if unavailable. A scalar field's metric is its value,
        MISSING after a transient error (lost for this read), or absent when the field was not
        asked or will not answer, so the caller uses the metric's own call.
        """
        plan = self._plans.get(i)    # _field_plan's answer when nothing was found unsupported since
        if plan is not None and plan[0][0] == len(self._unsupported) and plan[0][1] == len(self._by_call):
            req, k, asked = plan[1][with_scalars, with_nvlink]
        else:
            req, k, asked = self._field_plan(i, with_scalars, with_nvlink)
        if not req:
            return MISSING, MISSING, {}, None
        # _field_flat written out, the array's layout looked up by its type
        try:
            vals = self.nvml.nvmlDeviceGetFieldValues(self.handles[i], req)
        except TypeError:
            return MISSING, MISSING, {}, None      # a binding too old to take (fieldId, scopeId) tuples
        except self.nvml.NVMLError:
            return MISSING, MISSING, {}, None
        layout = self._layouts.get(type(vals))
        flat = layout.unpack_from(vals) if layout is not None else _flat(vals, self._layouts)
        # flat: (timestamp, nvmlReturn, value) per request: the 2k NVLink scopes (TX then RX), then
        # the scalar fields asked
        scalars: dict[str, Any] = {} if asked else _NO_SCALARS
        if asked:
            for metric, ret, value in zip(asked, flat[6 * k + 1::3], flat[6 * k + 2::3]):
                if ret == 0:
                    scalars[metric] = value
                elif self._is_permanent(ret):
                    self._by_call.add((i, metric))   # this driver has it only through the call
                else:
                    scalars[metric] = MISSING         # transient: lost for this read, like any metric
        if not k:
            return MISSING, MISSING, scalars, None
        if k == 1:
            # the all-links scope (every H100/H200): one TX and one RX element; both answered is the
            # common case, written out (_sane_time's test included) without the slices below
            ts_tx, ret_tx, tx, ts_rx, ret_rx, rx = flat[:6]
            if not (ret_tx or ret_rx):
                ts = (ts_tx if ts_tx > ts_rx else ts_rx) / 1e6
                return tx, rx, scalars, ts if ts and abs(ts - host_t) <= TIMESTAMP_TOLERANCE_S else None
        rets, vals, stamps = flat[1:6 * k:3], flat[2:6 * k:3], flat[0:6 * k:3]
        if any(rets):
            # A total from a subset of the links would silently undercount: all of them or nothing.
            tx = MISSING if any(rets[:k]) else sum(vals[:k])
            rx = MISSING if any(rets[k:]) else sum(vals[k:])
            stamps = [ts for r, ts in zip(rets, stamps) if r == 0]
        else:
            tx, rx = (vals[0], vals[1]) if k == 1 else (sum(vals[:k]), sum(vals[k:]))
        return tx, rx, scalars, self._sane_time(max(stamps) if stamps else None, host_t)

    def _nvlink_plan(self, i: int) -> list[int] | None:
        """None if scopeId 0xFFFFFFFF answers; else the link scopes to sum; marks NVLink unsupported."""
        probe = self._field_values(i, [(FI_NVLINK_DATA_TX, SCOPE_ALL_LINKS), (FI_NVLINK_DATA_RX, SCOPE_ALL_LINKS)])
        if probe is not None and all(r == 0 for r, _, _ in probe):
            return None
        n = self._link_count(i)
        if n <= 0:
            self._unsupported.add((i, "nvlink"))
            return []
        links = [link for link in range(n) if self._link_active(i, link)]
        check = self._field_values(i, [(FI_NVLINK_DATA_TX, link) for link in links])
        if not links or check is None or any(r != 0 for r, _, _ in check):
            # Some active link will not answer: a sum without it (link 0 alone, say) would be wrong.
            self._unsupported.add((i, "nvlink"))
            return []
        return links

    def _link_count(self, i: int) -> int:
        got = self._field_values(i, [(FI_NVLINK_LINK_COUNT, 0)])
        if got is not None and got[0][0] == 0:
            return int(got[0][1] & 0xFFFFFFFF)  # a uint field: read the low word of the union
        n = 0
        for link in range(MAX_LINKS):
            if self._query(i, f"nvlink_state_{link}", self.nvml.nvmlDeviceGetNvLinkState,
                           self.handles[i], link) is MISSING:
                break
            n = link + 1
        return n

    def _link_active(self, i: int, link: int) -> bool:
        state = self._query(i, f"nvlink_state_{link}", self.nvml.nvmlDeviceGetNvLinkState, self.handles[i], link)
        # Without a state answer, count the link in: an inactive link's counter stays constant.
        return state is MISSING or bool(state)

    def _sane_time(self, ts_us: int | None, host_t: float) -> float | None:
        """The counter's own timestamp (µs since the epoch) if it is within a few seconds of ours."""
        if not ts_us:
            return None
        t = ts_us / 1e6
        return t if abs(t - host_t) <= TIMESTAMP_TOLERANCE_S else None

    # ---- GPM -----------------------------------------------------------------------------
    def _gpm_state(self, i: int) -> _Gpm | None:
        if i not in self._gpm:
            n, h = self.nvml, self.handles[i]
            support = self._query(i, "gpm", n.nvmlGpmQueryDeviceSupport, h)
            state = None
            if support is not MISSING and getattr(support, "isSupportedDevice", 0):
                bufs = [self._query(i, "gpm", n.nvmlGpmSampleAlloc) for _ in range(2)]
                if all(b is not MISSING for b in bufs):
                    state = _Gpm(bufs, [self._metrics_request(bufs[p], bufs[1 - p]) for p in (0, 1)])
            self._gpm[i] = state
        return self._gpm[i]

    def _metrics_request(self, sample1: Any, sample2: Any) -> Any:
        """The metrics-get structure for the interval from ``sample1`` to ``sample2``, filled with our
        metric ids once and reused for every read."""
        n = self.nvml
        mg = n.c_nvmlGpmMetricsGet_t()
        mg.version = n.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRIC_IDS)
        mg.sample1, mg.sample2 = sample1, sample2
        for j, mid in enumerate(GPM_METRIC_IDS.values()):
            mg.metrics[j].metricId = mid
        return mg

    def _gpm_read(self, i: int, values: dict[str, float | int], now: float) -> None:
        """Take a sample into the buffer not holding the last one; add the metrics between the two."""
        g = self._gpm[i] if i in self._gpm else self._gpm_state(i)
        # Not yet due (10 % early is due, so tick jitter does not skip a whole period; never under
        # NVML's 100 ms): keep the older sample so the next interval is long enough.
        if g is None or (g.last is not None and now - g.last_t < self._gpm_gap_s) or \
                (i, "gpm") in self._unsupported:
            return
        n, h = self.nvml, self.handles[i]
        nxt = 0 if g.last is None else 1 - g.last
        if self._query(i, "gpm", n.nvmlGpmSampleGet, h, g.buffers[nxt]) is MISSING:
            return
        prev, g.last, g.last_t = g.last, nxt, now
        if prev is None:
            return
        mg = g.requests[prev]   # sample1 = buffers[prev], sample2 = buffers[nxt]
        if self._query(i, "gpm_metrics", n.nvmlGpmMetricsGet, mg) is MISSING:
            return
        layout = gpm_layout(type(mg), len(GPM_METRIC_IDS))
        if layout is not None:
            # (nvmlReturn, value) of each metric from the structure's bytes: three reads per metric
            # through the binding's Python-level __getattribute__ otherwise
            got = layout[0].unpack_from(mg, layout[1])
            answers = zip(got[0::2], got[1::2])
        else:
            answers = ((m.nvmlReturn, m.value) for m in (mg.metrics[j] for j in range(len(GPM_METRIC_IDS))))
        for name, (ret, value) in zip(GPM_METRIC_IDS, answers):
            if ret == 0:
                values[name] = float(value)


def _flat(vals: Any, layouts: dict[type, Any]) -> tuple[int, ...]:
    """:meth:`NvmlSource._field_flat`'s answer from the field-values call's returned values; an array's
    layout is kept in ``layouts`` under the array's type (ctypes makes one array type per element
    type and length, so a request's answers always come in the same type)."""
    if isinstance(vals, ctypes.Array):
        layout = fields_layout(vals._type_, len(vals))
        if layout is not None:
            # The binding's structures read every attribute through a Python-level
            # __getattribute__; three per field, every GPU, ten times a second: unpack the C
            # array's buffer in one go instead.
            layouts[type(vals)] = layout
            return layout.unpack_from(vals)
    return tuple(x for v in vals for x in (int(v.timestamp), int(v.nvmlReturn), int(v.value.ullVal)))
