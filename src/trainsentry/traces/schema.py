"""The one set of metric names shared by sources, the wire format, the store and trace files.

A *sample* is one reading of one device (a GPU, a network interface or the host) at one instant:
``node``, ``device`` (``gpu0``, ``eth0``, ``mlx5_0:1``, ``host``), ``kind`` (``gpu`` | ``net`` | ``ib`` | ``host``),
``t`` (seconds since the epoch, taken from the counter's own timestamp where the source gives one)
and a subset of the metrics below. A metric a device cannot report is absent, never zero.

Counters are cumulative and raw (as the hardware reports them). Rates are derived later
(:mod:`trainsentry.traces.rates`) so that wrap and reset handling lives in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["counter", "gauge", "rate"]


@dataclass(frozen=True)
class Metric:
    name: str
    kind: Kind          # counter: cumulative raw value; gauge: instantaneous; rate: averaged over an interval
    unit: str
    help: str
    integer: bool = False
    # For counters: the scale from raw units to the base unit of its derived rate (bytes or joules).
    scale: float = 1.0
    rate_name: str | None = None  # name of the derived rate column for counters
    wrap_bits: int | None = None  # known hardware width, else a decrease means a reset
    # Added after traces and collector databases already existed: older traces lack the column
    # (readers fill it with nulls, i.e. "not reported") and older databases gain it in a migration.
    late: bool = False


GPU_METRICS: tuple[Metric, ...] = (
    Metric("nvlink_tx_kib", "counter", "KiB", "NVLink payload sent, sum over all links (NVML field 138, scope 0xFFFFFFFF)",
           integer=True, scale=1024.0, rate_name="nvlink_tx_Bps", wrap_bits=64),
    Metric("nvlink_rx_kib", "counter", "KiB", "NVLink payload received, sum over all links (NVML field 139)",
           integer=True, scale=1024.0, rate_name="nvlink_rx_Bps", wrap_bits=64),
    Metric("energy_mj", "counter", "mJ", "Total energy since driver load (nvmlDeviceGetTotalEnergyConsumption)",
           integer=True, scale=1e-3, rate_name="energy_W", wrap_bits=64),
    Metric("power_mw", "gauge", "mW", "Board power, ~1 s average on Hopper (nvmlDeviceGetPowerUsage)", integer=True),
    Metric("gpu_util_pct", "gauge", "%", "Kernel-active time fraction over the driver's sample period"),
    Metric("mem_util_pct", "gauge", "%", "Memory-controller busy fraction over the driver's sample period"),
    Metric("mem_used_bytes", "gauge", "B", "Device memory in use", integer=True),
    Metric("sm_clock_mhz", "gauge", "MHz", "SM clock"),
    Metric("mem_clock_mhz", "gauge", "MHz", "Memory clock"),
    Metric("temp_c", "gauge", "C", "GPU temperature"),
    Metric("pcie_tx_kbps", "gauge", "KB/s", "PCIe TX throughput over a 20 ms driver snapshot (nvmlDeviceGetPcieThroughput)"),
    Metric("pcie_rx_kbps", "gauge", "KB/s", "PCIe RX throughput over a 20 ms driver snapshot"),
    # GPM metrics: averages over the interval between two GPM samples (Hopper and newer).
    Metric("gpm_sm_util_pct", "rate", "%", "GPM SM utilization"),
    Metric("gpm_sm_occupancy_pct", "rate", "%", "GPM SM occupancy"),
    Metric("gpm_tensor_util_pct", "rate", "%", "GPM any-tensor-pipe utilization"),
    Metric("gpm_dram_bw_util_pct", "rate", "%", "GPM DRAM bandwidth utilization"),
    Metric("gpm_pcie_tx_mibps", "rate", "MiB/s", "GPM PCIe TX bandwidth"),
    Metric("gpm_pcie_rx_mibps", "rate", "MiB/s", "GPM PCIe RX bandwidth"),
    Metric("gpm_nvlink_tx_mibps", "rate", "MiB/s", "GPM NVLink TX bandwidth, all links"),
    Metric("gpm_nvlink_rx_mibps", "rate", "MiB/s", "GPM NVLink RX bandwidth, all links"),
    # The arithmetic pipes outside the tensor cores (added 2026-12-01, twelfth session): what share of
    # cycles the FP32, FP16 and integer pipes are busy. Recorded to test whether mixed-precision
    # training's fp32 master weights and optimizer show there; on one H200 they did not (docs/pipes.md).
    Metric("gpm_fp32_util_pct", "rate", "%", "GPM FP32 pipe utilization", late=True),
    Metric("gpm_fp16_util_pct", "rate", "%", "GPM FP16 pipe utilization", late=True),
    Metric("gpm_integer_util_pct", "rate", "%", "GPM integer pipe utilization", late=True),
)

NET_METRICS: tuple[Metric, ...] = (
    Metric("net_tx_bytes", "counter", "B", "Bytes sent (sysfs statistics/tx_bytes, or IB port_xmit_data x 4)",
           integer=True, rate_name="net_tx_Bps"),
    Metric("net_rx_bytes", "counter", "B", "Bytes received (sysfs statistics/rx_bytes, or IB port_rcv_data x 4)",
           integer=True, rate_name="net_rx_Bps"),
)

# The host beside the GPUs (added 2026-12-02, twenty-first session; telemetry/host.py): CPU time and
# package energy, to tell an optimizer run on the host (ZeRO-Offload) from copies that cost the CPU
# nothing (a KV cache kept in host memory, a streaming service), which PCIe bytes alone do not.
HOST_METRICS: tuple[Metric, ...] = (
    Metric("cpu_user_ms", "counter", "ms", "CPU time in user mode (user + nice), all CPUs (/proc/stat)",
           integer=True, scale=1e-3, rate_name="cpu_user_cores", wrap_bits=64, late=True),
    Metric("cpu_system_ms", "counter", "ms", "CPU time in the kernel (system + irq + softirq), all CPUs",
           integer=True, scale=1e-3, rate_name="cpu_system_cores", wrap_bits=64, late=True),
    Metric("cpu_idle_ms", "counter", "ms", "CPU time idle (idle + iowait), all CPUs",
           integer=True, scale=1e-3, rate_name="cpu_idle_cores", wrap_bits=64, late=True),
    Metric("cpu_energy_uj", "counter", "uJ", "RAPL package energy, all packages, counted by the agent since its "
           "source opened (RAPL's own counters wrap at max_energy_range_uj; the agent unwraps them)",
           integer=True, scale=1e-6, rate_name="cpu_energy_W", wrap_bits=64, late=True),
    Metric("host_mem_used_bytes", "gauge", "B", "Host memory in use (MemTotal - MemAvailable, /proc/meminfo)",
           integer=True, late=True),
)

METRICS: tuple[Metric, ...] = GPU_METRICS + NET_METRICS + HOST_METRICS
METRIC_BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}
METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)
COUNTERS: tuple[Metric, ...] = tuple(m for m in METRICS if m.kind == "counter")
RATE_NAMES: tuple[str, ...] = tuple(m.rate_name for m in COUNTERS if m.rate_name)

DEVICE_KINDS = ("gpu", "net", "ib", "host")
KEY_COLUMNS = ("node", "device", "kind", "t")
