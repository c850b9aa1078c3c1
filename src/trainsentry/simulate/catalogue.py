"""Node catalogue: accelerators, and nodes built from them just under the registration threshold.

A node is as many chips of one kind as fit under 16 H100-equivalents of FP16 compute
(16 x 990 TFLOP/s = 15,840 TFLOP/s). FP8-capable chips give a second node type with twice the
FLOP/s, 8-bit pseudo-gradients and 14 bytes of training state per parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

# The threshold the paper's evader stays under: 16 H100-equivalents of FP16 compute.
THRESHOLD_FP16_TFLOPS = 15_840.0
H100_FP16_TFLOPS = 990.0

# Capital cost multipliers (Cottier et al. 2024, as used by the paper): chip -> server -> cluster.
CHIP_TO_SERVER = 1.64
SERVER_TO_CLUSTER = 1.23

# Bytes of training state per parameter: FP16 mixed precision (2 weights + 2 grads + 12 Adam/master)
# and FP8 (1 + 1 + 4 + 4 + 4); bits per pseudo-gradient value sent in a sync.
FP16_STATE_BYTES_PER_PARAM = 16.0
FP8_STATE_BYTES_PER_PARAM = 14.0
FP16_PSEUDO_GRAD_BITS = 16.0
FP8_PSEUDO_GRAD_BITS = 8.0


@dataclass(frozen=True)
class Chip:
    """One accelerator model. ``scale_up_chips``: chips joined by the fast in-server fabric
    (NVLink, HCCS, ICI); traffic between such groups inside a node crosses a NIC instead."""
    name: str
    fp16_tflops: float
    fp8_tflops: float | None
    memory_gb: float
    price_usd: float
    scale_up_chips: int
    interconnect: str


# FP16 peak and memory are the published figures the paper uses; prices are its early-2026
# estimates (TPU prices are capital equivalents of rental rates). Scale-up domains are the common
# server builds: HGX boards of 8, quad-GH200 nodes, Atlas 800 with 8 Ascends; a TPU slice shares ICI.
CHIPS: dict[str, Chip] = {c.name: c for c in (
    Chip("A100 80GB", 312.0, None, 80.0, 7_000.0, 8, "NVLink"),
    Chip("GH200", 990.0, 1980.0, 144.0, 28_000.0, 4, "NVLink"),
    Chip("H100 SXM", 990.0, 1980.0, 80.0, 25_000.0, 8, "NVLink"),
    Chip("Ascend 910B", 320.0, None, 64.0, 16_000.0, 8, "HCCS"),
    Chip("Ascend 910C", 600.0, None, 128.0, 26_000.0, 8, "HCCS"),
    Chip("TPU v4", 275.0, None, 32.0, 12_000.0, 10_000, "ICI"),
    Chip("TPU v5e", 197.0, None, 16.0, 6_000.0, 10_000, "ICI"),
    Chip("TPU v5p", 459.0, None, 95.0, 20_000.0, 10_000, "ICI"),
    Chip("TPU v6e", 918.0, 1836.0, 32.0, 25_000.0, 10_000, "ICI"),
)}


# FP8 rates the repository gives for the Ascend chips (640 and 1,200 TFLOP/s). The node catalogue of
# the paper's tables has FP8 only for GH200, H100 and TPU v6e (with these the replayed paper search
# picks an Ascend 910C FP8 node at 3.8e25, not the published A100 one), so they are opt-in.
ASCEND_FP8_TFLOPS = {"Ascend 910B": 640.0, "Ascend 910C": 1200.0}


@dataclass(frozen=True)
class NodeType:
    """A node: ``chips`` accelerators of one kind, trained at FP16 or FP8."""
    name: str
    chip: Chip
    chips: int
    fp8: bool

    @property
    def peak_flops(self) -> float:
        per_chip = self.chip.fp8_tflops if self.fp8 else self.chip.fp16_tflops
        return self.chips * float(per_chip) * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.chips * self.chip.memory_gb * 1e9

    @property
    def state_bytes_per_param(self) -> float:
        return FP8_STATE_BYTES_PER_PARAM if self.fp8 else FP16_STATE_BYTES_PER_PARAM

    @property
    def pseudo_grad_bits(self) -> float:
        return FP8_PSEUDO_GRAD_BITS if self.fp8 else FP16_PSEUDO_GRAD_BITS

    @property
    def max_params(self) -> float:
        """Largest dense model whose training state fits in the node's memory."""
        return self.memory_bytes / self.state_bytes_per_param

    @property
    def capital_usd(self) -> float:
        """Capital cost of one node: chips x price x chip->server x server->cluster."""
        return self.chips * self.chip.price_usd * CHIP_TO_SERVER * SERVER_TO_CLUSTER

    @property
    def h100_equivalents(self) -> float:
        return self.chips * self.chip.fp16_tflops / H100_FP16_TFLOPS


def node_types(memory_cap_gb: float | None = None, ascend_fp8: bool = False) -> list[NodeType]:
    """Every node type: per chip the most chips under the compute threshold (and, with a memory
    cap, with aggregate accelerator memory at most ``memory_cap_gb``), FP16 and, where the chip
    has FP8, an FP8 variant. A cap below one chip's memory drops that chip."""
    out: list[NodeType] = []
    for chip in CHIPS.values():
        if ascend_fp8 and chip.name in ASCEND_FP8_TFLOPS:
            chip = replace(chip, fp8_tflops=ASCEND_FP8_TFLOPS[chip.name])
        n = math.floor(THRESHOLD_FP16_TFLOPS / chip.fp16_tflops + 1e-9)
        if memory_cap_gb is not None:
            n = min(n, math.floor(memory_cap_gb / chip.memory_gb + 1e-9))
        if n < 1:
            continue
        out.append(NodeType(f"{n}x {chip.name}", chip, n, fp8=False))
        if chip.fp8_tflops is not None:
            out.append(NodeType(f"{n}x {chip.name} FP8", chip, n, fp8=True))
    return out


def find_node_type(name: str, types: list[NodeType] | None = None) -> NodeType:
    """Look a node type up by name ("16x GH200 FP8"); a clear error lists the known names."""
    types = node_types() if types is None else types
    for t in types:
        if t.name == name:
            return t
    known = ", ".join(t.name for t in types)
    raise KeyError(f"unknown node type {name!r}; known: {known}")


@dataclass(frozen=True)
class NodeArrays:
    """The catalogue as column arrays, so the forward model can index many node types at once."""
    peak_flops: np.ndarray
    memory_bytes: np.ndarray
    state_bytes_per_param: np.ndarray
    pseudo_grad_bits: np.ndarray
    capital_usd: np.ndarray
    chips: np.ndarray
    chip_memory_bytes: np.ndarray
    scale_up_chips: np.ndarray


def as_arrays(types: list[NodeType]) -> NodeArrays:
    return NodeArrays(
        peak_flops=np.array([t.peak_flops for t in types]),
        memory_bytes=np.array([t.memory_bytes for t in types]),
        state_bytes_per_param=np.array([t.state_bytes_per_param for t in types]),
        pseudo_grad_bits=np.array([t.pseudo_grad_bits for t in types]),
        capital_usd=np.array([t.capital_usd for t in types]),
        chips=np.array([t.chips for t in types], dtype=float),
        chip_memory_bytes=np.array([t.chip.memory_gb * 1e9 for t in types]),
        scale_up_chips=np.array([min(t.chip.scale_up_chips, t.chips) for t in types], dtype=float),
    )
