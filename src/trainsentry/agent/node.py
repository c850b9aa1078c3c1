"""The running agent: sources -> sampler -> spool (stage every tick, seal every batch) -> sender.

Also the Prometheus endpoint when a port is given. ``trainsentry agent`` and ``trainsentry replay``
both run this one path; replay only differs in its source (a recorded trace) and in ending when
the trace ends.
"""

from __future__ import annotations

import gc
import logging
import re
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..telemetry.base import Reading
from .exporter import AgentCollector, LatestReadings
from .sampler import Sampler
from .sender import Sender
from .spool import Spool

log = logging.getLogger(__name__)

_HEX = re.compile(r"^[0-9a-fA-F]{32,}$")


def read_key_file(path: str | Path) -> str:
    """The node key as hex, from a file written by ``trainsentry enroll --key-out``."""
    path = Path(path)
    try:
        text = path.read_text().strip()
    except OSError as e:
        raise ValueError(f"cannot read key file {path}: {e.strerror}") from None
    if not _HEX.match(text) or len(text) % 2:
        raise ValueError(f"key file {path} must hold the node key as hex (at least 16 bytes), "
                         "as written by `trainsentry enroll NODE --key-out FILE`")
    return text.lower()


def default_node_id() -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "node"
    return name if name[0].isalnum() else "n" + name


@dataclass
class AgentConfig:
    collector_url: str
    node: str
    key: str
    spool_path: Path
    hz: float = 10.0
    batch_s: float = 1.0
    prometheus_port: int | None = None
    prometheus_addr: str = "0.0.0.0"
    duration_s: float | None = None
    drain_s: float = 10.0          # at a clean stop, how long to wait for the spool to empty
    http_timeout_s: float = 10.0

    def __post_init__(self):
        from ..wire.batch import MAX_BATCH_INTERVAL_S
        if not 0 < self.batch_s <= MAX_BATCH_INTERVAL_S:
            raise ValueError(f"batch_s must be in (0, {MAX_BATCH_INTERVAL_S:g}] s, got {self.batch_s:g}: the collector "
                             f"counts a node silent after 3 batch intervals of at most {MAX_BATCH_INTERVAL_S:g} s "
                             "without samples, so longer batches would read as silences between them")


@dataclass
class AgentSummary:
    node: str
    ticks: int
    missed_ticks: int
    samples_read: int
    read_errors: int
    dropped_values: int
    batches_sealed: int
    batches_sent: int
    batches_duplicate: int
    samples_sent: int
    batches_declared_lost: int
    send_failures: int
    pending_batches: int
    pending_samples: int
    stored_not_durable_batches: int   # pending batches the collector has stored but not yet synced to disk
    durable_polls: int                # stored batches resent only to learn the collector's durable_seq
    collector_durable_seq: int        # the collector's last reported durable watermark (-1: none)
    recovered_staged_samples: int
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


class Agent:
    def __init__(self, config: AgentConfig, sources: Sequence):
        self.config = config
        self.sources = list(sources)
        self.spool = Spool(config.spool_path, config.node, config.key)
        # a poll for durable_seq only when no batch is due before it: with long batches it would
        # resend every stored body once between two new ones
        self.sender = Sender(self.spool, config.collector_url, config.node, timeout_s=config.http_timeout_s,
                             durable_poll_s=max(2.0, config.batch_s + 1.0))
        self.latest = LatestReadings()
        self.sampler = Sampler(self.sources, hz=config.hz, batch_s=config.batch_s,
                               on_batch=self._on_batch, on_tick=self._on_tick)
        self._batches_sealed = 0
        self._server = None
        self._started = False

    # Called on the sampler thread.
    def _on_tick(self, readings: list[Reading]) -> None:
        self.spool.stage_readings(readings)
        self.latest.update(readings)

    def _on_batch(self, readings: list[Reading], interval_s: float) -> None:
        self._batches_sealed += len(self.spool.seal(interval_s))
        self.sender.notify()

    def agent_stats(self) -> dict[str, float]:
        s, t = self.sampler.stats, self.sender.stats
        pending, pending_samples, pending_bytes, not_durable = self.spool.pending_stats(self.sender.stored_through)
        return {"trainsentry_agent_spool_pending_batches": pending,
                "trainsentry_agent_spool_pending_samples": pending_samples,
                "trainsentry_agent_spool_pending_bytes": pending_bytes,
                "trainsentry_agent_spool_stored_not_durable_batches": not_durable,
                "trainsentry_agent_collector_durable_seq": t.durable_seq,
                "trainsentry_agent_durable_polls_total": t.durable_polls,
                "trainsentry_agent_ticks_total": s.ticks,
                "trainsentry_agent_missed_ticks_total": s.missed_ticks,
                "trainsentry_agent_read_errors_total": s.read_errors,
                "trainsentry_agent_dropped_values_total": s.dropped_values,
                "trainsentry_agent_batches_acked_total": t.sent + t.duplicates,
                "trainsentry_agent_samples_acked_total": t.samples_sent,
                "trainsentry_agent_batches_declared_lost_total": t.declared_lost,
                "trainsentry_agent_send_failures_total": t.failures}

    def stop(self) -> None:
        """Ask the sampling loop to end (safe from a signal handler or another thread)."""
        self.sampler.stop()

    def run(self) -> AgentSummary:
        cfg = self.config
        t_start = time.monotonic()
        # A previous run killed mid-batch left its last ticks staged: seal them first, so they keep
        # their place in the chain before anything new.
        recovered = self.spool.staged_samples()
        if recovered:
            log.warning("sealing %d samples staged by a previous run that did not stop cleanly", recovered)
            self._batches_sealed += len(self.spool.seal(cfg.batch_s))
        pending = self.spool.pending_stats()
        if pending[0]:
            log.info("spool %s holds %d unsent batches (%d samples); sending them first",
                     cfg.spool_path, pending[0], pending[1])
        if cfg.prometheus_port is not None:
            from .exporter import serve
            self._server = serve(AgentCollector(self.latest, cfg.node, _device_uuids(self.sources),
                                                self.agent_stats), cfg.prometheus_port, cfg.prometheus_addr)
        self.sender.start()
        # Everything made so far (modules, sources, spool) lives as long as the loop: freeze it out of
        # the cyclic collector, which would otherwise rescan it now and then for nothing. No
        # gc.collect() first: a full collection of the whole heap to free a handful of objects.
        gc.freeze()
        try:
            self.sampler.run(cfg.duration_s)
        finally:
            gc.unfreeze()   # an embedding process (tests, replay) gets its collector back as it was
            if cfg.drain_s > 0:
                self.sender.drain(cfg.drain_s)
            self.sender.stop()
            self.sender.join(timeout=cfg.http_timeout_s + 1)
            if self._server is not None:
                self._server[0].shutdown()
            for src in self.sources:
                try:
                    src.close()
                except Exception as e:  # closing is best effort; the data is already spooled
                    log.warning("closing source %s: %s", getattr(src, "name", src), e)
        s, t = self.sampler.stats, self.sender.stats
        pending = self.spool.pending_stats(self.sender.stored_through)
        summary = AgentSummary(node=cfg.node, ticks=s.ticks, missed_ticks=s.missed_ticks, samples_read=s.readings,
                               read_errors=s.read_errors, dropped_values=s.dropped_values,
                               batches_sealed=self._batches_sealed,
                               batches_sent=t.sent, batches_duplicate=t.duplicates, samples_sent=t.samples_sent,
                               batches_declared_lost=t.declared_lost, send_failures=t.failures,
                               pending_batches=pending[0], pending_samples=pending[1],
                               stored_not_durable_batches=pending[3],
                               durable_polls=t.durable_polls, collector_durable_seq=t.durable_seq,
                               recovered_staged_samples=recovered, seconds=time.monotonic() - t_start)
        self.spool.close()
        return summary


def _device_uuids(sources: Sequence) -> dict[str, str]:
    """GPU UUIDs for the ``UUID`` label, from any source that offers ``uuids()`` (NVML does)."""
    out: dict[str, str] = {}
    for src in sources:
        fn = getattr(src, "uuids", None)
        if callable(fn):
            try:
                out.update(fn())
            except Exception as e:  # a label is not worth failing the agent for
                log.warning("source %s: no UUIDs (%s)", getattr(src, "name", src), e)
    return out


def install_stop_signals(agent_or_sampler) -> None:
    """SIGINT/SIGTERM end the loop cleanly: the partial batch is sealed and the spool drained."""
    import signal
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum, frame):
        log.info("signal %d: stopping", signum)
        agent_or_sampler.stop()
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
