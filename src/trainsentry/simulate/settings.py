"""The fixed assumptions behind the paper's tables, as data.

Defaults are the settings of the paper's tables: 100 Mbps up and down, 100 ms latency, MFU 0.40,
740 days, compression 150x with error feedback, 131,072 tokens per node per inner step, relay
aggregation for the straggler tail, overtraining between 1x and 100x.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

SECONDS_PER_DAY = 86_400.0

# Straggler tail coefficient c in f(N) = 1 + c * log2(N), per aggregation scheme.
STRAGGLER_COEFFICIENTS = {"synchronous": 0.05, "relay": 0.02, "backup": 0.015, "threshold": 0.0,
                          "async": 0.0}


@dataclass(frozen=True)
class Network:
    """Links between nodes. Regional (hierarchical mode) and pipeline links default to the WAN's
    slower direction and latency, as in the paper's tables (peer-to-peer is upload-bound)."""
    bw_up_bps: float = 100e6
    bw_down_bps: float = 100e6
    latency_s: float = 0.1
    regional_bw_bps: float | None = None
    regional_latency_s: float | None = None
    pp_bw_bps: float | None = None
    pp_latency_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("bw_up_bps", "bw_down_bps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not self.latency_s >= 0:
            raise ValueError(f"latency_s must be >= 0, got {self.latency_s!r}")

    @property
    def peer_bps(self) -> float:
        return min(self.bw_up_bps, self.bw_down_bps)

    @property
    def regional_bps(self) -> float:
        return self.peer_bps if self.regional_bw_bps is None else self.regional_bw_bps

    @property
    def regional_lat_s(self) -> float:
        return self.latency_s if self.regional_latency_s is None else self.regional_latency_s

    @property
    def pipeline_bps(self) -> float:
        return self.peer_bps if self.pp_bw_bps is None else self.pp_bw_bps

    @property
    def pipeline_lat_s(self) -> float:
        return self.latency_s if self.pp_latency_s is None else self.pp_latency_s

    def symmetric(self, bw_bps: float, latency_s: float | None = None) -> "Network":
        """The same network with every link at ``bw_bps`` (and ``latency_s``)."""
        lat = self.latency_s if latency_s is None else latency_s
        return replace(self, bw_up_bps=bw_bps, bw_down_bps=bw_bps, latency_s=lat)


@dataclass(frozen=True)
class Settings:
    """Training assumptions shared by every configuration of a search."""
    mfu: float = 0.40
    wall_time_s: float = 740 * SECONDS_PER_DAY
    compression_ratio: float = 150.0
    error_feedback: bool = True
    quality_scenario: str = "expected"     # compression-quality table column
    local_batch_tokens: float = 131_072.0
    straggler: str = "relay"
    streaming: bool = True                 # outer step = max(H*T_comp, T_sync), else the sum
    goodput: float = 1.0                   # fraction of wall time left after failures
    activation_compression: float = 4.0    # pipeline-group mode, per stage boundary
    micro_batches: int = 8                 # GPipe micro-batches per inner step
    hidden_coeff: float = 0.03             # hidden size ~ 0.03 * sqrt(P)
    ot_min: float = 1.0
    ot_max: float = 100.0

    def __post_init__(self) -> None:
        if self.straggler not in STRAGGLER_COEFFICIENTS:
            raise ValueError(f"straggler must be one of {sorted(STRAGGLER_COEFFICIENTS)}, "
                             f"got {self.straggler!r}")
        if self.quality_scenario not in ("optimistic", "expected", "conservative"):
            raise ValueError(f"quality_scenario must be optimistic|expected|conservative, "
                             f"got {self.quality_scenario!r}")
        for name in ("mfu", "wall_time_s", "compression_ratio", "local_batch_tokens", "goodput",
                     "activation_compression"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.ot_min <= self.ot_max:
            raise ValueError("need 0 < ot_min <= ot_max")

    @property
    def straggler_coeff(self) -> float:
        return STRAGGLER_COEFFICIENTS[self.straggler]
