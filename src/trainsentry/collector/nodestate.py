"""What the live processor keeps per node: its sample buffer, its window clock and its job.

The buffer holds the last ``buffer_s`` (30 s) of samples; segmentation runs over it every window.
A workload outlives the buffer, and a pause can too, so a node's *job* is tracked here beyond it
(:class:`NodeJob`): the latest segment's first-seen start, its end, its signature and memory, and
the lowest memory each GPU showed since that segment ended. A segment seen again in a later buffer
(it overlaps the tracked one) continues it, whatever start the buffer shows; a segment that begins
after the tracked one ended joins the same job under the offline rule,
:func:`trainsentry.detect.segment.links` (gap ≤ 10 min, same GPUs and signature, every GPU kept
≥ 80 % of its memory above its idle floor through the gap), else it starts a new job.

What the live rule sees differs from the offline one in three places, all from the buffer: a
segment's signature is measured over the longest latest view of it (its last ≤ 30 s) rather than
over all of it; the resumed segment's signature over what has been seen of it when the job is
decided (its first seconds: a job name must not change under verdicts already written); and a GPU's
idle floor is its lowest memory the processor has seen from the node rather than over the trace.

What outlives the buffer (the job, the idle floors, the window clock, and the last stored batch the
buffer has read, ``seq``) is written to the store with every verdict, in the same transaction
(:meth:`NodeState.snapshot`, table ``live_node_state``), and read back when the collector restarts
(:func:`trainsentry.collector.warm.restore`): a restart does not start a running job over, and the
batches stored after ``seq`` are read back and judged as if they had just arrived (see
docs/collector.md, "Restart" and "Catching up from the store").
"""

from __future__ import annotations

import datetime
import math
from collections import deque
from dataclasses import dataclass, field, replace

import pyarrow as pa

from ..detect.segment import HELD_FRAC, MAX_GAP_S, Segment, links, memory_held
from ..telemetry.base import Reading
from ..traces.io import columns_to_table, readings_to_columns

MAX_BUFFER_SAMPLES = 30 * 10 * 256  # bounded however a node stamps its samples
LOOPBACK_LINK = "lo-as-link"
# A boundary seen in two buffers can move by a bin of the 2 Hz segmentation grid (it starts at each
# buffer's first sample); two bins of slack tell "the same segment again" from "a new one" (a new
# one follows at least 2 s of idle, segment_stream's off time).
SAME_SEGMENT_TOL_S = 1.0
SNAPSHOT_VERSION = 2   # of NodeState.snapshot(); a snapshot of another version is not restored
# Version 1 (before ``seq``) is still read: which stored batches it had judged is then derived from
# its last verdict (warm.restore), as for a node without a usable snapshot.
READABLE_VERSIONS = (1, 2)


def _T_DEV(s: dict) -> tuple:
    return s["t"], s["dev"]


def _utc(t: float) -> str:
    return f"{datetime.datetime.fromtimestamp(t, datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC"


@dataclass
class NodeJob:
    """A node's job across segments and pauses (see the module's docstring)."""
    start: float | None = None          # the job's start: its first segment's
    seg_start: float | None = None      # the latest segment's start, as first seen
    seg_end: float | None = None        # ... and its end, as last seen
    view: Segment | None = None         # its signature: the longest latest view a buffer gave of it
    gap_min: dict = field(default_factory=dict)  # lowest memory per GPU after seg_end (the pause so far)
    pauses: int = 0                     # pauses the job was linked across ...
    last_pause: tuple = ()              # ... and the latest one's (end of segment, start of the next)

    def _fold_gap(self, mem: list[tuple[float, str, float]], t_to: float) -> None:
        for t, d, b in mem:
            if self.seg_end <= t < t_to and b < self.gap_min.get(d, math.inf):
                self.gap_min[d] = b

    def see(self, segs: list[Segment], e: float, mem: list[tuple[float, str, float]], floor: dict) -> None:
        """Fold the buffer's segments that began before ``e`` into the job. ``mem``: the buffer's
        (t, GPU, memory bytes) readings; ``floor``: each GPU's lowest memory seen from the node."""
        for seg in segs:
            if seg.start >= e:
                break
            if self.view is not None and seg.end < self.seg_start - SAME_SEGMENT_TOL_S:
                continue                                    # an earlier segment, already folded
            if self.view is not None and seg.start <= self.seg_end + SAME_SEGMENT_TOL_S:
                if seg.duration_s >= self.view.duration_s - SAME_SEGMENT_TOL_S:
                    self.view = seg                         # sees as much of it as before, and later
                if seg.end > self.seg_end:
                    self.seg_end, self.gap_min = seg.end, {}
                continue
            linked = False
            if self.view is not None:                       # a new segment after a pause: the job rule
                self._fold_gap(mem, seg.start)
                linked = links(replace(self.view, end=self.seg_end), seg, floor, self.gap_min)
            if linked:
                self.pauses, self.last_pause = self.pauses + 1, (self.seg_end, seg.start)
            else:
                self.start, self.pauses = seg.start, 0
            self.seg_start, self.seg_end, self.view, self.gap_min = seg.start, seg.end, seg, {}
        if self.view is not None:
            self._fold_gap(mem, e)

    def may_resume(self, e: float, floor: dict) -> bool:
        """At ``e``, after the latest segment ended, can a segment that begins now still continue
        the job by the job rule as far as it depends on the pause (at most 10 min so far, every GPU
        holding >= 80 % of its memory above its idle floor through all of it)? The signature is
        only known when the next segment begins. A GPU without a reading in the pause yet counts
        as holding; a node without GPUs has no memory to show and never may (any pause ends its job)."""
        if self.view is None or self.seg_end is None or e < self.seg_end or e - self.seg_end > MAX_GAP_S:
            return False
        seg = replace(self.view, end=self.seg_end)
        gap = {d: self.gap_min.get(d, m) for d, m in seg.mem_bytes.items()}
        return memory_held(seg, floor, gap, HELD_FRAC)

    def to_dict(self) -> dict:
        view = None if self.view is None else {**vars(self.view), "gpus": list(self.view.gpus),
                                               "mem_bytes": dict(self.view.mem_bytes)}
        return {"start": self.start, "seg_start": self.seg_start, "seg_end": self.seg_end, "view": view,
                "gap_min": dict(self.gap_min), "pauses": self.pauses, "last_pause": list(self.last_pause)}

    @classmethod
    def from_dict(cls, d: dict) -> "NodeJob":
        view = d["view"]
        return cls(start=d["start"], seg_start=d["seg_start"], seg_end=d["seg_end"],
                   view=None if view is None else Segment(**view), gap_min=dict(d["gap_min"]),
                   pauses=int(d["pauses"]), last_pause=tuple(d["last_pause"]))

    def evidence(self, e: float) -> list[str]:
        out = [f"segment active since {_utc(self.seg_start)} ({e - self.seg_start:.0f} s before this window's end)"]
        if self.pauses:
            gap = self.last_pause[1] - self.last_pause[0]
            out.append(f"one job since {_utc(self.start)} across {self.pauses} pause(s), the latest {gap:.0f} s: "
                       f"resumed within {MAX_GAP_S / 60:.0f} min on the same GPUs with the same power and NVLink "
                       "signature, memory held through the pause (the offline job rule)")
        return out


@dataclass
class NodeState:
    samples: deque = field(default_factory=lambda: deque(maxlen=MAX_BUFFER_SAMPLES))
    t_latest: float = -math.inf
    next_k: int | None = None       # next window ends at next_k * stride_s
    active_since: float | None = None  # the job's start while a segment is active, else None
    last_end: float | None = None
    job: str | None = None
    gaps: list = field(default_factory=list)   # (start, end, reason) of unmonitored intervals in the buffer
    table: pa.Table | None = None
    track: NodeJob = field(default_factory=NodeJob)
    mem_floor: dict = field(default_factory=dict)   # lowest memory each GPU reported (the idle floor)
    seq: int | None = -1            # the last stored batch of the node read into the buffer (None: unknown)
    last_job: str | None = None     # the job it was last in (kept while it is idle)
    paused_in: str | None = None    # that job, while the node's pause may still resume it (NodeJob.may_resume)

    def add(self, samples: list[dict], buffer_s: float) -> None:
        """Add samples (any order) and drop those older than ``buffer_s`` before the latest. The
        buffer is kept in (t, device) order, the order the store reads them back in, so a buffer
        filled from events and one filled from the store hold the same samples in the same order."""
        samples = sorted(samples, key=_T_DEV)
        for s in samples:
            if s["t"] > self.t_latest:
                self.t_latest = s["t"]
            b = s["m"].get("mem_used_bytes") if s["kind"] == "gpu" else None
            if b is not None and b < self.mem_floor.get(s["dev"], math.inf):
                self.mem_floor[s["dev"]] = b
        cutoff = self.t_latest - buffer_s
        # samples older than the window never enter (a node could otherwise stamp them old and grow
        # the buffer without bound: the trim below only looks at the left end)
        tail = self.samples[-1]["t"] if self.samples else -math.inf
        new = [s for s in samples if s["t"] >= cutoff]
        if new and new[0]["t"] < tail:
            # stamped before samples already held: merge in time order first, then keep the latest
            # MAX_BUFFER_SAMPLES, so a full buffer drops its oldest samples by time (as the store
            # reads them back after a restart), not whichever sat at the left end of the deque
            ordered = sorted([*self.samples, *new], key=_T_DEV)[-MAX_BUFFER_SAMPLES:]
            self.samples.clear()
            self.samples.extend(ordered)
        else:
            self.samples.extend(new)   # in order: the deque's bound drops the oldest by time
        while self.samples and self.samples[0]["t"] < cutoff:
            self.samples.popleft()

    def snapshot(self) -> dict:
        """What this state knows beyond its sample buffer, as JSON-able data: the job, each GPU's
        idle floor, the window clock and the job the node was last put in. (The buffer itself is
        re-read from the samples table; see :func:`trainsentry.collector.warm.restore`.)"""
        return {"v": SNAPSHOT_VERSION, "track": self.track.to_dict(), "mem_floor": dict(self.mem_floor),
                "active_since": self.active_since, "last_end": self.last_end, "job": self.job,
                "seq": self.seq, "t_latest": self.t_latest if math.isfinite(self.t_latest) else None,
                "last_job": self.last_job, "paused_in": self.paused_in}

    @classmethod
    def from_snapshot(cls, d: dict) -> "NodeState":
        """The state a snapshot describes, with an empty buffer; ValueError if it is not one.
        ``t_latest`` is the latest sample time the buffer had held (the buffer is re-read up to it)."""
        if not isinstance(d, dict) or d.get("v") not in READABLE_VERSIONS:
            raise ValueError(f"not a version-{SNAPSHOT_VERSION} node state snapshot")
        try:
            st = cls(track=NodeJob.from_dict(d["track"]), mem_floor=dict(d["mem_floor"]),
                     active_since=d["active_since"], last_end=d["last_end"], job=d["job"],
                     seq=int(d["seq"]) if d["v"] >= 2 else None, last_job=d.get("last_job", d["job"]),
                     paused_in=d.get("paused_in"))
            t = d.get("t_latest") if d["v"] >= 2 else None
            st.t_latest = -math.inf if t is None else float(t)
            return st
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed node state snapshot: {e!r}") from None

    def memory(self) -> list[tuple[float, str, float]]:
        """(t, GPU, memory bytes) of the buffer's GPU readings."""
        return [(s["t"], s["dev"], s["m"]["mem_used_bytes"]) for s in self.samples
                if s["kind"] == "gpu" and s["m"].get("mem_used_bytes") is not None]

    def pending_ends(self, cfg) -> tuple[list[float], tuple[float, float, int] | None]:
        """(ends of the windows to judge now, the windows skipped as (first end, last end, count)).

        At most ``max_catchup`` windows are judged at once, the latest ones: more are completed
        together only when the node's samples jump ahead (a silence, or samples stamped far apart);
        the earlier ones are skipped, and the caller records them as unjudged."""
        if not self.samples:
            return [], None
        if self.next_k is None:
            t_first = min(s["t"] for s in self.samples)
            self.next_k = math.ceil((t_first + cfg.window_s) / cfg.stride_s - 1e-9)
        last_k = math.floor(self.t_latest / cfg.stride_s + 1e-9)
        if last_k < self.next_k:
            return [], None
        first_k = max(self.next_k, last_k - cfg.max_catchup + 1)
        skipped = None
        if first_k > self.next_k:
            skipped = (self.next_k * cfg.stride_s, (first_k - 1) * cfg.stride_s, first_k - self.next_k)
        self.next_k = last_k + 1
        return [k * cfg.stride_s for k in range(first_k, last_k + 1)], skipped

    def build_table(self, node: str, loopback_as_link: bool) -> pa.Table:
        readings = [Reading.from_wire(s) for s in self.samples]
        if loopback_as_link:
            # the feature grid ignores `lo` (it never carries traffic between nodes); on a
            # single-machine run the ranks' traffic is there, so it is counted as a link by name
            readings = [Reading(LOOPBACK_LINK, r.kind, r.t, r.values) if r.device == "lo" else r for r in readings]
        return columns_to_table(readings_to_columns(node, readings))
