"""GPU telemetry through NVML (the official ``nvidia-ml-py`` binding, imported as ``pynvml``).

Per GPU and read: NVLink payload counters (fields 138/139, KiB, summed over all links), energy
(mJ), power (mW), GPU and memory utilization, memory used, SM and memory clocks, temperature and,
where the GPU has them, GPM metrics averaged since the previous read.

Every metric is optional. Each NVML call goes through :meth:`NvmlSource._query`, which turns the
"this GPU cannot do that" errors into a missing metric and remembers it, so an unsupported metric
costs one failed call per GPU, not one per poll; transient errors lose the metric for one read only.

Deliberately not read (see docs/telemetry.md): PCIe byte fields 197/198 (32-bit, wrap several
times a second under load), NVLink with scopeId 0 alone (that is link 0 only: about 1/18 of the
traffic on an H200), and the deprecated ``nvmlDeviceGetNvLinkUtilizationCounter``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .base import Reading, SourceError

FI_NVLINK_DATA_TX = 138   # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB, 64-bit
FI_NVLINK_DATA_RX = 139   # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
FI_NVLINK_LINK_COUNT = 91
SCOPE_ALL_LINKS = 0xFFFFFFFF
MAX_LINKS = 18            # NVLink 4 on H100/H200; used only when NVML cannot say how many
GPM_MIN_INTERVAL_S = 0.1  # NVML needs samples >= 100 ms apart for meaningful GPM metrics
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
}


class _Missing:
    """The query helper's answer when a metric is not available (never a number)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING = _Missing()


class _Gpm:
    """Two alternating GPM sample buffers of one GPU; ``last`` holds the newest taken sample."""

    def __init__(self, buffers: list[Any]):
        self.buffers = buffers
        self.last: int | None = None   # index of the buffer holding the newest sample
        self.last_t = 0.0


class NvmlSource:
    """Readings of every (or the chosen) GPU; device names ``gpu0``, ``gpu1`` … by NVML index."""

    name = "nvml"

    def __init__(self, nvml: Any = None, gpus: Sequence[int] | None = None, gpm: bool = True,
                 pcie_snapshot: bool = False, clock: Callable[[], float] = time.time):
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as e:  # pragma: no cover - nvidia-ml-py is a core dependency
                raise SourceError("nvidia-ml-py is not installed") from e
        self.nvml = nvml
        self.clock = clock
        self.pcie_snapshot = pcie_snapshot  # nvmlDeviceGetPcieThroughput: a 20 ms snapshot, off by default
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
        self._nvlink_links: dict[int, list[int] | None] = {}  # None: the all-links scope works
        self._gpm: dict[int, _Gpm | None] = {}
        self._gpm_enabled = gpm
        self._closed = False

    # ---- the one query helper ------------------------------------------------------------
    def _query(self, gpu: int, metric: str, fn: Callable[[], Any]) -> Any:
        """fn() or MISSING; a permanent "cannot" is cached per (gpu, metric) and not asked again."""
        if (gpu, metric) in self._unsupported:
            return MISSING
        try:
            return fn()
        except self.nvml.NVMLError as e:
            if self._is_permanent(getattr(e, "value", None)):
                self._unsupported.add((gpu, metric))
            return MISSING

    def _is_permanent(self, code: int | None) -> bool:
        return code in {getattr(self.nvml, n, None) for n in _PERMANENT}

    def unsupported(self) -> dict[str, list[str]]:
        """Metrics found unsupported so far, per device (for logs and the agent's health report)."""
        out: dict[str, list[str]] = {}
        for gpu, metric in sorted(self._unsupported):
            out.setdefault(f"gpu{gpu}", []).append(metric)
        return out

    # ---- Source protocol -----------------------------------------------------------------
    def devices(self) -> list[str]:
        return [f"gpu{i}" for i in self.indices]

    def read(self) -> list[Reading]:
        if self._closed:
            raise SourceError("NvmlSource is closed")
        return [self._read_gpu(i) for i in self.indices]

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
    def _read_gpu(self, i: int) -> Reading:
        n, h = self.nvml, self.handles[i]
        host_t = self.clock()
        values: dict[str, float | int] = {}
        tx, rx, field_t = self._nvlink(i)
        values["nvlink_tx_kib"], values["nvlink_rx_kib"] = tx, rx
        values["energy_mj"] = self._query(i, "energy_mj", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h))
        values["power_mw"] = self._query(i, "power_mw", lambda: n.nvmlDeviceGetPowerUsage(h))
        util = self._query(i, "util", lambda: n.nvmlDeviceGetUtilizationRates(h))
        if util is not MISSING:
            values["gpu_util_pct"], values["mem_util_pct"] = float(util.gpu), float(util.memory)
        mem = self._query(i, "mem_used_bytes", lambda: n.nvmlDeviceGetMemoryInfo(h))
        values["mem_used_bytes"] = MISSING if mem is MISSING else int(mem.used)
        values["sm_clock_mhz"] = self._query(i, "sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))
        values["mem_clock_mhz"] = self._query(i, "mem_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM))
        values["temp_c"] = self._query(i, "temp_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU))
        if self.pcie_snapshot:
            values["pcie_tx_kbps"] = self._query(
                i, "pcie_tx_kbps", lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_TX_BYTES))
            values["pcie_rx_kbps"] = self._query(
                i, "pcie_rx_kbps", lambda: n.nvmlDeviceGetPcieThroughput(h, n.NVML_PCIE_UTIL_RX_BYTES))
        if self._gpm_enabled:
            values.update(self._gpm_read(i))
        t = field_t if field_t is not None else host_t
        return Reading(device=f"gpu{i}", kind="gpu", t=t,
                       values={k: v for k, v in values.items() if v is not MISSING})

    # ---- NVLink --------------------------------------------------------------------------
    def _field_values(self, i: int, requests: list[tuple[int, int]]) -> list[tuple[int, int, int]] | None:
        """[(nvmlReturn, value, timestamp_us)] per (fieldId, scopeId) request; None if the call failed."""
        def call():
            return self.nvml.nvmlDeviceGetFieldValues(self.handles[i], requests)
        try:
            vals = call()
        except TypeError:
            # A binding too old to take (fieldId, scopeId) tuples cannot scope: no NVLink from it.
            return None
        except self.nvml.NVMLError:
            return None
        return [(int(v.nvmlReturn), int(v.value.ullVal), int(v.timestamp)) for v in vals]

    def _nvlink(self, i: int) -> tuple[Any, Any, float | None]:
        """(tx_kib, rx_kib, counter time): sums over all links, each MISSING if unavailable."""
        if (i, "nvlink") in self._unsupported:
            return MISSING, MISSING, None
        if i not in self._nvlink_links:
            self._nvlink_links[i] = self._nvlink_plan(i)
            if (i, "nvlink") in self._unsupported:
                return MISSING, MISSING, None
        links = self._nvlink_links[i]
        scopes = [SCOPE_ALL_LINKS] if links is None else links
        req = [(fid, s) for fid in (FI_NVLINK_DATA_TX, FI_NVLINK_DATA_RX) for s in scopes]
        got = self._field_values(i, req)
        if got is None:
            return MISSING, MISSING, None
        k = len(scopes)
        # A total from a subset of the links would silently undercount: all of them or nothing.
        tx = sum(v for _, v, _ in got[:k]) if all(r == 0 for r, _, _ in got[:k]) else MISSING
        rx = sum(v for _, v, _ in got[k:]) if all(r == 0 for r, _, _ in got[k:]) else MISSING
        stamps = [ts for r, _, ts in got if r == 0]
        return tx, rx, self._sane_time(max(stamps) if stamps else None)

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
            if self._query(i, f"nvlink_state_{link}",
                           lambda: self.nvml.nvmlDeviceGetNvLinkState(self.handles[i], link)) is MISSING:
                break
            n = link + 1
        return n

    def _link_active(self, i: int, link: int) -> bool:
        state = self._query(i, f"nvlink_state_{link}", lambda: self.nvml.nvmlDeviceGetNvLinkState(self.handles[i], link))
        # Without a state answer, count the link in: an inactive link's counter stays constant.
        return state is MISSING or bool(state)

    def _sane_time(self, ts_us: int | None) -> float | None:
        """The counter's own timestamp (µs since the epoch) if it is within a few seconds of ours."""
        if not ts_us:
            return None
        t = ts_us / 1e6
        return t if abs(t - self.clock()) <= TIMESTAMP_TOLERANCE_S else None

    # ---- GPM -----------------------------------------------------------------------------
    def _gpm_state(self, i: int) -> _Gpm | None:
        if i not in self._gpm:
            n, h = self.nvml, self.handles[i]
            support = self._query(i, "gpm", lambda: n.nvmlGpmQueryDeviceSupport(h))
            state = None
            if support is not MISSING and getattr(support, "isSupportedDevice", 0):
                bufs = [self._query(i, "gpm", n.nvmlGpmSampleAlloc) for _ in range(2)]
                if all(b is not MISSING for b in bufs):
                    state = _Gpm(bufs)
            self._gpm[i] = state
        return self._gpm[i]

    def _gpm_read(self, i: int) -> dict[str, float]:
        """Take a sample into the buffer not holding the last one; metrics between the two."""
        g = self._gpm_state(i)
        if g is None or (i, "gpm") in self._unsupported:
            return {}
        now = self.clock()
        if g.last is not None and now - g.last_t < GPM_MIN_INTERVAL_S:
            return {}  # too soon: keep the older sample so the next interval is long enough
        n, h = self.nvml, self.handles[i]
        nxt = 0 if g.last is None else 1 - g.last
        if self._query(i, "gpm", lambda: n.nvmlGpmSampleGet(h, g.buffers[nxt])) is MISSING:
            return {}
        prev, g.last, g.last_t = g.last, nxt, now
        if prev is None:
            return {}
        mg = n.c_nvmlGpmMetricsGet_t()
        mg.version = n.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(GPM_METRIC_IDS)
        mg.sample1, mg.sample2 = g.buffers[prev], g.buffers[nxt]
        for j, mid in enumerate(GPM_METRIC_IDS.values()):
            mg.metrics[j].metricId = mid
        if self._query(i, "gpm_metrics", lambda: n.nvmlGpmMetricsGet(mg)) is MISSING:
            return {}
        out = {}
        for j, name in enumerate(GPM_METRIC_IDS):
            if mg.metrics[j].nvmlReturn == 0:
                out[name] = float(mg.metrics[j].value)
        return out
