"""2. The monitor: agent and signals, signed transport, collector, segmentation, detectors."""

from .. import figures as F

TITLE = "The monitor"
INPUTS = ("gpu_check", "ingest", "agent_real")


def _counter_check(ctx, figs) -> str:
    if not ctx.has("gpu_check"):
        return ctx.missing("gpu_check", "NVLink counter accuracy")
    gc = ctx.load("gpu_check")
    quiet = ctx.num("gpu_check", "send_quiet_direction_max_bytes", "bytes")
    return f"""
<p><b>Are the NVLink counters right?</b> On two {ctx.term('H200')} GPUs we handed NCCL a known number of
bytes (all-reduce and one-way send phases of {ctx.num('gpu_check', 'bytes_per_op', 'bytes')} per operation)
and compared them with the NVLink DATA counters the agent reads. The largest relative error over every GPU,
direction and phase was {ctx.num('gpu_check', 'max_abs_rel_error', 'pctg')}. In the one-way phase the
quiet direction saw at most {quiet}, so the counters tell sending from receiving, which is what separates
pipeline inference from training. Machine: {ctx.num('gpu_check', 'machine')}.</p>
{figs.embed(F.gpu_check_figure(gc), "gpu_check", "Bytes handed to NCCL against the NVLink counters, per GPU, "
            "direction and phase (results/gpu_check.json).")}"""


def _overhead(ctx, figs) -> str:
    if not ctx.has("ingest"):
        return ctx.missing("ingest", "agent overhead and collector ingest")
    a = "agent/fake_8gpu"
    parts = ctx.value("ingest", f"{a}/parts_percent_of_one_core")
    real = ""
    if ctx.has("agent_real"):
        real = (f" On a real {ctx.term('H200')} node the agent used "
                f"{ctx.num('agent_real', 'agent/real/percent_of_one_core', 'f1', '% of one core')}"
                f" while a training launch was starting on the same machine; that measurement is noisy "
                f"(its notes say so) and is reported, not relied on.")
    sh = "collector/shapes/realistic"
    return f"""
<p><b>What the agent costs.</b> Sampling a fake eight-GPU node with network and InfiniBand interfaces at
{ctx.num('ingest', f'{a}/hz', 'g3', 'Hz')}, the agent used {ctx.num('ingest', f'{a}/percent_of_one_core', 'f2', '% of one core')}
(target {ctx.num('ingest', f'{a}/target_percent_of_one_core', 'g2', '%')}), of which the agent's own machinery,
without the recorded driver calls, was {ctx.num('ingest', f'{a}/agent_machinery_percent_of_one_core', 'f2', '%')}.
{real}</p>
{figs.embed(F.agent_parts_figure(parts), "agent_parts", "Where the agent's CPU time goes, percent of one core "
            "per part (results/ingest.json).")}
<p><b>What the collector takes.</b> One collector process ingested
{ctx.num('ingest', f'{sh}/collector_samples_per_s', 'int', 'samples/s')} from
{ctx.num('ingest', f'{sh}/nodes', 'int')} simulated nodes sending realistic batches, at
{ctx.num('ingest', f'{sh}/collector_cpu_us_per_sample', 'f1', 'µs')} of CPU per sample.</p>"""


def render(ctx, figs) -> str:
    t = ctx.term
    return f"""
<p><b>Agent and signals.</b> An agent on each node reads every GPU through {t('NVML')}: NVLink bytes sent and
received (cumulative counters summed over all links), the energy counter, board power, utilisation,
memory use and clocks, and, where the driver offers them, the per-second tensor-pipe and SM activity
metrics. It reads each network and InfiniBand interface's byte counters from the kernel. Counters are kept
raw with their own timestamps; rates are computed later in one place, so counter wraps and driver resets
are handled once.</p>
<p><b>Signed transport.</b> The agent groups readings into batches, signs each batch with a per-node key
({t('HMAC-SHA256')}) and chains it to the previous one by hash, so the collector can reject altered,
replayed, reordered or dropped batches. Batches wait in an on-disk spool until the collector acknowledges
them, so a network outage or a restart loses nothing.</p>
<p><b>Collector.</b> A central service verifies and stores batches, keeps per-node state, and computes
verdicts live over the same windowed features used offline, so the evaluated detector is the deployed
one. A dashboard shows each node's state over time, the evidence behind it, alerts and jobs.</p>
<p><b>Segmentation and detectors.</b> A trace is cut into sliding windows; features describe the
communication shape (volume, symmetry of sent and received bytes, periodicity, burstiness) and
activity. Four detectors share one interface: {t('comm-rules')} (thresholds on communication shape),
{t('comm-ml')} (a learned model on communication features), {t('fused')} (communication plus activity) and
{t('rt-baseline')}, our reproduction of the classifier of {ctx.cite('rt')} on the same splits. A run
alerts when enough consecutive windows look like training.</p>
{_counter_check(ctx, figs)}
{_overhead(ctx, figs)}
"""
