"""Prometheus exposition of the agent's latest readings, named like dcgm-exporter and node_exporter.

Existing Grafana dashboards for dcgm-exporter select series by metric name and the labels ``gpu``,
``UUID``, ``device`` (``nvidia0``) and ``Hostname``; those are kept. Units follow dcgm-exporter
(power in W, framebuffer in MiB, energy in mJ, PROF activity as a 0..1 ratio, PROF bandwidth in
bytes per second), converted from the raw readings below. Network counters follow node_exporter
(``node_network_transmit_bytes_total{device="eth0"}``; InfiniBand ports as
``node_infiniband_port_data_transmitted_bytes_total{device="mlx5_0",port="1"}``). The host source's
readings are summed over CPUs and packages, unlike node_exporter's per-CPU ones, so they carry our own
names (``trainsentry_host_cpu_seconds_total{mode="user"}``).

Counters stay cumulative (the reader takes ``rate()``). prometheus-client always appends
``_total`` to a family typed "counter", but dcgm-exporter's counter names have no suffix; to keep
the names dashboards query, those few are exposed as untyped. Our own cumulative NVLink byte
counters, which DCGM has no exact equivalent for, are proper counters
(``trainsentry_nvlink_tx_bytes_total``). The full table is in docs/agent.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, Metric

from ..telemetry.base import Reading

_MIB = 1024.0 * 1024.0

# raw metric -> (exposed name, prometheus type, scale to the exposed unit, help)
GPU_MAP: dict[str, tuple[str, str, float, str]] = {
    "power_mw": ("DCGM_FI_DEV_POWER_USAGE", "gauge", 1e-3, "Power draw (in W)."),
    "energy_mj": ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "unknown", 1.0,
                  "Total energy consumption since boot (in mJ); cumulative."),
    "gpu_util_pct": ("DCGM_FI_DEV_GPU_UTIL", "gauge", 1.0, "GPU utilization (in %)."),
    "mem_util_pct": ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", 1.0, "Memory utilization (in %)."),
    "mem_used_bytes": ("DCGM_FI_DEV_FB_USED", "gauge", 1.0 / _MIB, "Framebuffer memory used (in MiB)."),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK", "gauge", 1.0, "SM clock frequency (in MHz)."),
    "mem_clock_mhz": ("DCGM_FI_DEV_MEM_CLOCK", "gauge", 1.0, "Memory clock frequency (in MHz)."),
    "temp_c": ("DCGM_FI_DEV_GPU_TEMP", "gauge", 1.0, "GPU temperature (in C)."),
    "pcie_tx_kbps": ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "gauge", 1.0,
                     "PCIe TX throughput over a 20 ms driver snapshot (in KB/s)."),
    "pcie_rx_kbps": ("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "gauge", 1.0,
                     "PCIe RX throughput over a 20 ms driver snapshot (in KB/s)."),
    "gpm_sm_util_pct": ("DCGM_FI_PROF_SM_ACTIVE", "gauge", 0.01, "Ratio of cycles an SM has at least 1 warp assigned."),
    "gpm_sm_occupancy_pct": ("DCGM_FI_PROF_SM_OCCUPANCY", "gauge", 0.01, "Ratio of warps resident on an SM."),
    "gpm_tensor_util_pct": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge", 0.01,
                            "Ratio of cycles the tensor (HMMA) pipes are active."),
    "gpm_dram_bw_util_pct": ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge", 0.01,
                             "Ratio of cycles the device memory interface is active."),
    "gpm_pcie_tx_mibps": ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", _MIB, "PCIe TX rate (in B/s)."),
    "gpm_pcie_rx_mibps": ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", _MIB, "PCIe RX rate (in B/s)."),
    "gpm_nvlink_tx_mibps": ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", _MIB, "NVLink TX rate, all links (in B/s)."),
    "gpm_nvlink_rx_mibps": ("DCGM_FI_PROF_NVLINK_RX_BYTES", "gauge", _MIB, "NVLink RX rate, all links (in B/s)."),
    "gpm_fp32_util_pct": ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", 0.01, "Ratio of cycles the fp32 pipes are active."),
    "gpm_fp16_util_pct": ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", 0.01, "Ratio of cycles the fp16 pipes are active."),
    "gpm_integer_util_pct": ("trainsentry_gpm_integer_util", "gauge", 0.01,
                             "Ratio of cycles the integer pipe is active (NVML GPM metric 4)."),
    "nvlink_tx_kib": ("trainsentry_nvlink_tx_bytes", "counter", 1024.0,
                      "NVLink payload bytes sent, all links, since driver load (NVML field 138)."),
    "nvlink_rx_kib": ("trainsentry_nvlink_rx_bytes", "counter", 1024.0,
                      "NVLink payload bytes received, all links, since driver load (NVML field 139)."),
}

NET_MAP: dict[str, tuple[str, str]] = {
    "net_tx_bytes": ("node_network_transmit_bytes", "Network device statistic transmit_bytes."),
    "net_rx_bytes": ("node_network_receive_bytes", "Network device statistic receive_bytes."),
}
IB_MAP: dict[str, tuple[str, str]] = {
    "net_tx_bytes": ("node_infiniband_port_data_transmitted_bytes", "Number of data octets transmitted on all links."),
    "net_rx_bytes": ("node_infiniband_port_data_received_bytes", "Number of data octets received on all links."),
}


def gpu_labels(device: str, hostname: str, uuid: str = "") -> dict[str, str]:
    """dcgm-exporter's labels for a GPU named ``gpuN``."""
    index = device[3:] if device.startswith("gpu") and device[3:].isdigit() else device
    return {"gpu": index, "UUID": uuid, "device": f"nvidia{index}", "Hostname": hostname}


class LatestReadings:
    """The newest value of every metric per device, updated on every tick by the sampler thread.

    A reading carries only the metrics read on its tick (energy, clocks, temperature, memory and GPM
    once a second), so the newest *reading* alone would drop those from most scrapes. Each metric
    keeps its last value; one not read for ``max_age_s`` is left out (a metric the GPU stopped
    giving must not be served forever).

    Kept per device: the newest reading, and the newest reading of each set of metric names, in
    update order; a scrape merges them, oldest first, so each metric's value (and its time) is that
    of the last reading that had it. A tick costs one dictionary entry per reading instead of one per
    value (every GPU, ten times a second). Readings handed over must not be changed afterwards (the
    sampler's are not). A set whose every metric a newer set also has is dropped when the sets grow,
    so they stay as few as the device's metric names at most. Ticks are merged in tens (and before
    every scrape): one list append on most ticks."""

    _COMPACT_AT = 32
    _MERGE_EVERY = 10

    def __init__(self, max_age_s: float = 30.0) -> None:
        self._lock = threading.Lock()
        self.max_age_s = max_age_s
        # device -> [newest reading, {metric names: newest reading with them, oldest first}, compact at,
        #            the newest reading's metric names]
        self._by_device: dict[str, list] = {}
        self._unmerged: list[Iterable[Reading]] = []   # ticks handed over, not yet in _by_device

    def update(self, readings: Iterable[Reading]) -> None:
        with self._lock:
            self._unmerged.append(readings if type(readings) is list else list(readings))
            if len(self._unmerged) >= self._MERGE_EVERY:
                self._merge()

    def _merge(self) -> None:
        by = self._by_device
        for readings in self._unmerged:
            for r in readings:
                entry = by.get(r.device)
                names = tuple(r.values)
                if entry is None:
                    by[r.device] = [r, {names: r}, self._COMPACT_AT, names]
                    continue
                entry[0] = r
                sets = entry[1]
                if names != entry[3]:
                    # to the end, so the dict stays in update order (the set of the previous reading
                    # is at the end already: most ticks repeat it)
                    if names in sets:
                        del sets[names]
                    entry[3] = names
                sets[names] = r
                if len(sets) > entry[2]:
                    entry[2] = max(self._COMPACT_AT, 2 * _compact(sets))
        self._unmerged.clear()

    def snapshot(self) -> list[Reading]:
        with self._lock:
            self._merge()
            out = []
            for d in sorted(self._by_device):
                r, sets = self._by_device[d][:2]
                last: dict[str, tuple[float | int, float]] = {}
                for e in sets.values():      # oldest first: a newer reading's value wins
                    t = e.t
                    for k, v in e.values.items():
                        last[k] = (v, t)
                fresh = {k: v for k, (v, t) in last.items() if r.t - t <= self.max_age_s}
                out.append(Reading(r.device, r.kind, r.t, fresh))
            return out

# host metric -> (exposed name, prometheus type, scale, labels, help)
HOST_MAP: dict[str, tuple[str, str, float, dict[str, str], str]] = {
    "cpu_user_ms": ("trainsentry_host_cpu_seconds", "counter", 1e-3, {"mode": "user"},
                    "CPU seconds, summed over CPUs, by mode (/proc/stat)."),
    "cpu_system_ms": ("trainsentry_host_cpu_seconds", "counter", 1e-3, {"mode": "system"},
                      "CPU seconds, summed over CPUs, by mode (/proc/stat)."),
    "cpu_idle_ms": ("trainsentry_host_cpu_seconds", "counter", 1e-3, {"mode": "idle"},
                    "CPU seconds, summed over CPUs, by mode (/proc/stat)."),
    "cpu_energy_uj": ("trainsentry_host_cpu_package_joules", "counter", 1e-6, {},
                      "RAPL package energy, all packages, since the agent's host source opened (in J)."),
    "host_mem_used_bytes": ("trainsentry_host_memory_used_bytes", "gauge", 1.0, {},
                            "Host memory in use, MemTotal - MemAvailable (in B)."),
}


def _compact(sets: dict[tuple, Reading]) -> int:
    """Drop the readings whose every metric a newer one has (they serve nothing); returns how many
    are left."""
    seen: set[str] = set()
    keep = []
    for names, r in reversed(list(sets.items())):
        if not seen.issuperset(names):
            keep.append((names, r))
            seen.update(names)
    sets.clear()
    sets.update(reversed(keep))
    return len(sets)


class AgentCollector:
    """A prometheus-client custom collector over :class:`LatestReadings` plus the agent's own stats."""

    def __init__(self, latest: LatestReadings, hostname: str, uuids: dict[str, str] | None = None,
                 agent_stats: Callable[[], dict[str, float]] | None = None):
        self.latest = latest
        self.hostname = hostname
        self.uuids = uuids or {}
        self.agent_stats = agent_stats

    def collect(self):
        families: dict[str, Metric] = {}

        def family(name: str, typ: str, doc: str) -> Metric:
            if name not in families:
                families[name] = (CounterMetricFamily(name, doc) if typ == "counter" else Metric(name, doc, typ))
            return families[name]

        for r in self.latest.snapshot():
            if r.kind == "gpu":
                labels = gpu_labels(r.device, self.hostname, self.uuids.get(r.device, ""))
                for raw, (name, typ, scale, doc) in GPU_MAP.items():
                    v = r.values.get(raw)
                    if v is None:
                        continue  # unsupported on this device: absent, never zero
                    sample_name = name + "_total" if typ == "counter" else name
                    family(name, typ, doc).add_sample(sample_name, labels, float(v) * scale)
            elif r.kind == "host":
                for raw, (name, typ, scale, extra, doc) in HOST_MAP.items():
                    v = r.values.get(raw)
                    if v is not None:
                        sample_name = name + "_total" if typ == "counter" else name
                        family(name, typ, doc).add_sample(sample_name, {"Hostname": self.hostname, **extra},
                                                          float(v) * scale)
            else:
                table = IB_MAP if r.kind == "ib" else NET_MAP
                if r.kind == "ib" and ":" in r.device:
                    dev, port = r.device.split(":", 1)
                    labels = {"device": dev, "port": port, "Hostname": self.hostname}
                else:
                    labels = {"device": r.device, "Hostname": self.hostname}
                for raw, (name, doc) in table.items():
                    v = r.values.get(raw)
                    if v is not None:
                        family(name, "counter", doc).add_sample(name + "_total", labels, float(v))
        yield from families.values()
        if self.agent_stats is not None:
            for name, value in sorted(self.agent_stats().items()):
                typ = "counter" if name.endswith("_total") else "gauge"
                base = name.removesuffix("_total")
                m = CounterMetricFamily(base, f"trainsentry agent: {base}") if typ == "counter" \
                    else Metric(name, f"trainsentry agent: {name}", "gauge")
                m.add_sample(name, {"Hostname": self.hostname}, float(value))
                yield m


def make_registry(collector: AgentCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def serve(collector: AgentCollector, port: int, addr: str = "0.0.0.0"):
    """Start the /metrics HTTP server in a daemon thread; returns (server, thread)."""
    from prometheus_client import start_http_server
    return start_http_server(port, addr=addr, registry=make_registry(collector))
