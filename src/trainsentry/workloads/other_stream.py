"""A GPU stream-processing service (family ``stream``, class other): radar pulse compression, as a
signal-processing back end does it on a GPU. Blocks of received pulses arrive in host memory, cross
PCIe to the GPU, are correlated with a bank of chirp filters in the frequency domain (one FFT of every
pulse, then per filter a multiplication and an inverse FFT, the strongest filter's output kept per
pulse), and the compressed pulses, as large as what came in, cross back to the host. Copies in, the
compute and copies out run on three streams, so one block goes in while another comes out.

Why in the benign corpus: PCIe traffic both ways, equally and at the same time, with no model and no
training, the data-service pattern a verifier must not read as ZeRO-Offload's exchange of gradients
and weights (train_offload.py). With ``host_detect`` the host then runs detection on every compressed
block (cell-averaging CFAR, as a radar's detector stage does after pulse compression) on all its
cores: the host's CPU busy in step with the PCIe exchanges, as it is when ZeRO-Offload's AdamW runs
on the host, and the benign case a host-side witness (telemetry/host.py) must not read as training.

The pulses are real: each holds one of the bank's chirps at a known delay in complex noise, and the
run checks on the host that the compressed pulses peak at those delays (``peaks_correct``). Ground
truth: ``blocks``, ``bytes_to_device``, ``bytes_to_host``; with ``host_detect``, ``detected_blocks``,
``detections`` and ``detect_hits`` (the share of pulses whose echo cell the detector flagged). FLOPs are analytic, as for the spectral
solver: 5 · M · log₂M per complex FFT of M points, 6 · M per complex multiplication, per pulse one
forward transform and per filter one multiplication and one inverse transform.
"""

from __future__ import annotations

import math
import time

import torch

from .base import Context, use_host_threads, variants


def chirp(m: int, rate: float, length: int) -> torch.Tensor:
    """A linear-frequency-modulated pulse of ``length`` samples, zero-padded to ``m``, complex64."""
    t = torch.arange(length, dtype=torch.float64)
    phase = math.pi * rate * t * t / length
    out = torch.zeros(m, dtype=torch.complex128)
    out[:length] = torch.polar(torch.ones(length, dtype=torch.float64), phase)
    return out.to(torch.complex64)


def chirp_rates(filters: int) -> list[float]:
    """The bank's chirp rates (cycles per sample at the pulse's end), below the Nyquist limit."""
    return torch.linspace(0.1, 0.45, filters).tolist()


def filter_bank(m: int, filters: int, length: int) -> torch.Tensor:
    """The matched filters' spectra, conj(FFT(chirp)), of ``filters`` chirp rates: [filters, m]."""
    return torch.stack([torch.fft.fft(chirp(m, r, length)).conj() for r in chirp_rates(filters)])


def received(pulses: int, m: int, bank_len: int, filters: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pulses holding chirp ``f`` (a random filter of the bank) at a random delay in unit complex noise
    (the echo 4x the noise's amplitude): the block and the delays."""
    g = torch.Generator().manual_seed(seed)
    delays = torch.randint(0, m - bank_len, (pulses,), generator=g)
    which = torch.randint(0, filters, (pulses,), generator=g)
    rates = chirp_rates(filters)
    x = torch.randn(pulses, m, dtype=torch.complex64, generator=g)
    for f in range(filters):
        rows = (which == f).nonzero().flatten()
        if rows.numel():
            c = chirp(m, rates[f], bank_len) * 4
            idx = (torch.arange(m)[None, :] - delays[rows, None]) % m
            x[rows] += c[idx]
    return x, delays


def compress(x: torch.Tensor, bank: torch.Tensor) -> torch.Tensor:
    """Pulse compression: per pulse, the circular correlation with the bank's filter whose output peaks
    highest (the output has the input's shape and type)."""
    spec = torch.fft.fft(x, dim=-1)
    best = best_peak = None
    for h in bank:
        y = torch.fft.ifft(spec * h, dim=-1)
        peak = y.abs().amax(dim=-1)
        if best is None:
            best, best_peak = y, peak
        else:
            better = peak > best_peak
            best = torch.where(better[:, None], y, best)
            best_peak = torch.maximum(peak, best_peak)
    return best


def cfar(y: torch.Tensor, guard: int, train: int, scale: float) -> torch.Tensor:
    """Cell-averaging CFAR over each pulse (range is circular, as the compression's correlation is): a
    cell is a detection where its power exceeds ``scale`` times the mean power of the ``train`` cells
    on each side beyond ``guard`` cells. ``y``: [pulses, m] complex; the boolean detections, [pulses, m]."""
    p = y.real.square() + y.imag.square()
    m = p.shape[-1]
    reach = guard + train
    c = torch.cat([p[:, -reach - 1:], p, p[:, :reach]], dim=-1).cumsum(dim=-1, dtype=torch.float64)
    idx = torch.arange(m) + reach + 1           # position of each cell in the padded cumulative sum
    window = lambda lo, hi: c[:, idx + hi] - c[:, idx + lo - 1]  # noqa: E731  (sum of cells i+lo..i+hi)
    noise = (window(-reach, -guard - 1) + window(guard + 1, reach)) / (2 * train)
    return p > scale * noise.to(p.dtype)


@torch.inference_mode()
def run_stream(ctx: Context, cfg: dict) -> None:
    """Blocks of ``pulses`` × ``samples`` complex64 streamed through ``compress`` and back, two blocks
    in flight; a pool of ``pool`` distinct input blocks in pinned host memory is cycled (generating new
    noise on the host every block would measure the host, not the service); ``pause_s`` between blocks
    (exponential, mean) makes a service with gaps between dwells. ``host_detect``: once a block is back
    in host memory, the host runs ``cfar`` on it with ``host_threads`` threads (default: all its cores)
    before the next block is issued."""
    pulses, m, filters = int(cfg["pulses"]), int(cfg["samples"]), int(cfg["filters"])
    pool, bank_len = int(cfg.get("pool", 4)), int(cfg.get("chirp_len", m // 8))
    pause_s = float(cfg.get("pause_s", 0.0))
    detect = bool(cfg.get("host_detect", False))
    if detect:
        use_host_threads(cfg)
    pin = ctx.is_cuda
    bank = filter_bank(m, filters, bank_len).to(ctx.device)
    ins, delays = [], []
    for i in range(pool):
        x, d = received(pulses, m, bank_len, filters, ctx.seed * 1000 + ctx.rank * 100 + i)
        ins.append(x.pin_memory() if pin else x)
        delays.append(d)
    outs = [torch.empty(x.shape, dtype=x.dtype, pin_memory=pin) for x in ins]
    dev_in = [torch.empty(pulses, m, dtype=torch.complex64, device=ctx.device) for _ in range(2)]
    dev_out = [torch.empty_like(t) for t in dev_in]
    block_bytes = ins[0].numel() * ins[0].element_size()
    flops = pulses * (5 * m * math.log2(m) * (1 + filters) + 6 * m * filters)
    ctx.ledger.extra.update(method="analytic", pulses=pulses, samples=m, filters=filters, block_bytes=block_bytes)
    streams = [torch.cuda.Stream(ctx.device) for _ in range(2)] if ctx.is_cuda else None
    stored: list = [None, None]       # the event after block k's copy out, per buffer
    rng = torch.Generator().manual_seed(ctx.seed + ctx.rank)
    blocks = 0
    last = [None] * pool               # the block index last written into each host output buffer
    detected_blocks = detections = hits_detected = 0

    def detect_on_host(k: int) -> None:  # block k is back in host memory
        nonlocal detected_blocks, detections, hits_detected
        q = k % pool
        found = cfar(outs[q], guard=4, train=32, scale=20.0)
        detected_blocks += 1
        detections += int(found.sum())
        hits_detected += int(found.gather(1, delays[q][:, None]).sum())

    while ctx.keep_going():
        t0 = time.perf_counter()
        b, p = blocks % 2, blocks % pool
        if streams is None:
            dev_in[b].copy_(ins[p])
            dev_out[b].copy_(compress(dev_in[b], bank))
            outs[p].copy_(dev_out[b])
            if detect:
                detect_on_host(blocks)
        else:
            h2d, d2h = streams
            cur = torch.cuda.current_stream(ctx.device)
            if stored[b] is not None:
                stored[b].synchronize()          # block k-2 is out: its compute and buffers are done
                if detect:
                    detect_on_host(blocks - 2)
            with torch.cuda.stream(h2d):         # in while block k-1 computes or goes out
                dev_in[b].copy_(ins[p], non_blocking=True)
                loaded = torch.cuda.Event()
                loaded.record(h2d)
            cur.wait_event(loaded)
            dev_out[b].copy_(compress(dev_in[b], bank))
            computed = torch.cuda.Event()
            computed.record(cur)
            with torch.cuda.stream(d2h):
                d2h.wait_event(computed)
                outs[p].copy_(dev_out[b], non_blocking=True)
                stored[b] = torch.cuda.Event()
                stored[b].record(d2h)
        last[p] = blocks
        blocks += 1
        ctx.ledger.step(time.perf_counter() - t0, 0, flops=int(flops))
        if pause_s > 0:
            time.sleep(float(torch.empty(1).exponential_(1 / pause_s, generator=rng)))
    ctx.sync()
    if detect and streams is not None:
        for k in range(max(0, blocks - 2), blocks):   # the blocks still in flight when the run ended
            detect_on_host(k)
    written = [p for p in range(pool) if last[p] is not None]
    hits = sum(int((outs[p].abs().argmax(dim=-1) == delays[p]).sum()) for p in written)
    ctx.ledger.extra.update(blocks=blocks, bytes_to_device=blocks * block_bytes, bytes_to_host=blocks * block_bytes,
                            peaks_correct=hits / max(1, len(written) * pulses))
    if detect:
        ctx.ledger.extra.update(host_detect=True, host_threads=torch.get_num_threads(), detected_blocks=detected_blocks,
                                detections=detections, detect_hits=hits_detected / max(1, detected_blocks * pulses))


# Sizes: a block of 2048 pulses × 16 Ki samples is 256 MiB each way; the pool's inputs and outputs
# (4 + 4 blocks) are 2 GiB of pinned host memory. The ``_cfar`` configurations add the host's detector.
variants("other.stream", "other", "stream", run_stream,
         base={"pulses": 2048, "samples": 16384, "filters": 1, "pool": 4},
         toy={"pulses": 8, "samples": 256, "filters": 2, "pool": 2, "pause_s": 0.0}, gpus=1,
         description="radar pulse compression streamed host to GPU and back (FFT matched filters)", grid={
             "p2048_f1": {},
             "p2048_f8": {"filters": 8},
             "p1024_f4_dwell": {"pulses": 1024, "filters": 4, "pause_s": 0.5},
             "p2048_f1_cfar": {"host_detect": True},
             "p1024_f4_cfar": {"pulses": 1024, "filters": 4, "host_detect": True},
         })
