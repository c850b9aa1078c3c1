"""2. The monitor: agent and signals, signed transport, collector, segmentation, detectors."""

import html

from .. import figures as F
from ..context import TERMS
from ..summary import sec

TITLE = "The monitor"
INPUTS = ("gpu_check", "ingest", "agent_real", "traces", "state_rule")


def _counter_check(ctx, figs) -> str:
    if not ctx.has("gpu_check"):
        return ctx.missing("gpu_check", "NVLink counter accuracy")
    gc = ctx.load("gpu_check")
    quiet = ctx.num("gpu_check", "send_quiet_direction_max_bytes", "bytes")
    gpus = ctx.derived(len({r["gpu"] for r in gc["rows"]}), "int", [("gpu_check", "rows")])
    tells = ("so the counters tell sending from receiving, which is what separates pipeline inference from "
             "training" if gc.get("send_direction_visible") else
             "which the check does not count as telling sending from receiving")
    return f"""
<p><b>Are the NVLink counters right?</b> On {gpus} {ctx.term('H200')} GPUs we handed NCCL a known number of
bytes (all-reduce and one-way send phases of {ctx.num('gpu_check', 'bytes_per_op', 'bytes')} per operation)
and compared them with the NVLink DATA counters the agent reads. The largest relative error over every GPU,
direction and phase was {ctx.num('gpu_check', 'max_abs_rel_error', 'pctg')}. In the one-way phase the
quiet direction saw at most {quiet}, {tells}. Machine: {ctx.num('gpu_check', 'machine')}.</p>
{figs.embed(F.gpu_check_figure(gc), "gpu_check", "NVLink counter check. Left: bytes handed to NCCL against the "
            "bytes the NVLink DATA counters counted, per phase, GPU and direction (TX sent, RX received); in the "
            "one-way send phase the idle direction of each GPU stays near zero. Right: the relative error of each "
            "row that carried bytes, in parts per million (results/gpu_check.json).")}"""


def _gpus(devices: list) -> int:
    return sum(1 for d in devices if str(d).startswith("gpu"))


def _target(ctx, key: str, entry: str) -> str:
    """"(target 1 %, met)" from the benchmark's own verdict."""
    met = "met" if ctx.value(key, f"{entry}/meets_target") else "not met"
    return f"target {ctx.num(key, f'{entry}/target_percent_of_one_core', 'g2', '%')}, {met}"


def _real_node(ctx) -> str:
    """The agent on a real GPU node: results/ingest.json → agent/real, the one current measurement."""
    if not ctx.has("agent_real"):
        return ctx.missing("agent_real", "the agent on a real GPU node")
    r = "agent/real"
    real = ctx.value("agent_real", r)
    energy = (f", reading the energy counter every {ctx.num('agent_real', f'{r}/nvml_read_periods/energy_period_s', 'g2', 's')}"
              if (real.get("nvml_read_periods") or {}).get("energy_period_s") else "")
    day = ctx.derived(str(real["date"])[:10], "str", [("agent_real", f"{r}/date")])
    return (f"<p>On a real node with {ctx.derived(_gpus(real['devices']), 'int', [('agent_real', f'{r}/devices')])} "
            f"GPUs (measured {day}), the agent sampled at {ctx.num('agent_real', f'{r}/hz', 'g3', 'Hz')}{energy} and "
            f"used {ctx.num('agent_real', f'{r}/percent_of_one_core', 'f1', '% of one core')} "
            f"({_target(ctx, 'agent_real', r)}). Reading the sources alone took "
            f"{ctx.num('agent_real', f'{r}/sources_only_percent_of_one_core', 'f1', '%')} and the agent's own "
            f"machinery {ctx.num('agent_real', f'{r}/agent_machinery_percent_of_one_core', 'f2', '%')}"
            + (": on that machine nearly all of the cost is the driver answering the reads, not the agent's own work"
               if real["sources_only_percent_of_one_core"] >= 0.9 * real["percent_of_one_core"] else "") + ".</p>")


def _overhead(ctx, figs) -> str:
    if not ctx.has("ingest"):
        return ctx.missing("ingest", "agent overhead and collector ingest")
    a = "agent/fake_8gpu"
    parts = ctx.value("ingest", f"{a}/parts_percent_of_one_core")
    gpus = ctx.derived(_gpus(ctx.value("ingest", f"{a}/devices")), "int", [("ingest", f"{a}/devices")])
    sh = "collector/shapes/realistic"
    total = next((k for k in parts if k.strip().startswith("total")), None)
    profiled = (f" The breakdown comes from one extra run with every part timed, whose total was "
                f"{ctx.num('ingest', f'{a}/parts_percent_of_one_core/{total}', 'f2', '%')} (timing adds its own cost); "
                f"the headline figure above is the median of "
                f"{ctx.num('ingest', f'{a}/repeats', 'int')} untimed runs.") if total else ""
    return f"""
<p><b>What the agent costs.</b> Sampling a simulated node of {gpus} GPUs with network and InfiniBand interfaces
at {ctx.num('ingest', f'{a}/hz', 'g3', 'Hz')}, the agent used {ctx.num('ingest', f'{a}/percent_of_one_core', 'f2', '% of one core')}
({_target(ctx, 'ingest', a)}), of which the agent's own machinery (everything but reading the sources) was
{ctx.num('ingest', f'{a}/agent_machinery_percent_of_one_core', 'f2', '%')}.</p>
{figs.embed(F.agent_parts_figure(parts), "agent_parts", "Where the agent's CPU time goes on the simulated node, "
            "percent of one core per part, in one profiled run (grey: that run's total; results/ingest.json)." + profiled)}
{_real_node(ctx)}
<p><b>What the collector takes.</b> One collector process ingested
{ctx.num('ingest', f'{sh}/collector_samples_per_s', 'int', 'samples/s')} from
{ctx.num('ingest', f'{sh}/nodes', 'int')} simulated nodes sending realistic batches, at
{ctx.num('ingest', f'{sh}/collector_cpu_us_per_sample', 'f1', 'µs')} of CPU per sample.</p>"""


# What each detector is, for the names `trainsentry eval` evaluates (a name not here is listed bare).
DETECTORS = {"comm-rules": "thresholds on communication shape",
             "comm-ml": "a learned model on communication features",
             "fused": "communication plus activity"}


def _detectors(ctx) -> str:
    """The detectors as evaluated (results/detector.json), else as the evaluation would run them."""
    if ctx.has("detector"):
        names = list(ctx.value("detector", "detectors"))
    else:
        from ...detect.evaluate import detector_factories
        names = list(detector_factories())
    out = []
    for n in names:
        if n == "rt-baseline":
            out.append(f"{ctx.term(n)} (our reproduction of the classifier of {ctx.cite('rt')}, on the same splits)")
        else:
            out.append(f"{ctx.term(n) if n in TERMS else html.escape(n)}"
                       + (f" ({DETECTORS[n]})" if n in DETECTORS else ""))
    return ", ".join(out)


def _alert_rule(ctx) -> str:
    if not ctx.has("detector"):
        return "A run alerts when enough of its recent windows look like training."
    p = "protocol/alert_rule"
    return (f"A run alerts when at least {ctx.num('detector', f'{p}/k', 'int')} of "
            f"{ctx.num('detector', f'{p}/n', 'int')} consecutive windows give training a probability of "
            f"{ctx.num('detector', f'{p}/threshold', 'g2')} or more.")


def _rates(ctx) -> str:
    """The sampling rate of the recorded runs, from their manifests."""
    hz = sorted({m["sample_hz"] for _, m in ctx.runs("traces")})
    if not hz:
        return ""
    return f" The recorded runs in this report were sampled at {ctx.spread(hz, 'g3', [('traces', 'sample_hz')], 'Hz')}."


def _segmentation(ctx) -> str:
    """How the segmenters did on the benign runs (results/detector.json → segmentation)."""
    if not ctx.has("detector") or "segmentation" not in ctx.load("detector"):
        return ""
    p = "segmentation"
    return (f" On the {ctx.num('detector', f'{p}/runs', 'int')} benign runs (each one workload), our segmenter "
            f"found exactly one job in {ctx.num('detector', f'{p}/ours/share_one_job', 'pct')} of runs and one "
            f"segment in {ctx.num('detector', f'{p}/ours/share_one_segment', 'pct')}, with a median onset error of "
            f"{ctx.num('detector', f'{p}/ours/median_abs_onset_error_s', 'f1', 's')}; the seed FLOP study's rule "
            f"found one workload in {ctx.num('detector', f'{p}/baseline/share_one_workload', 'pct')} of runs "
            f"(median onset error {ctx.num('detector', f'{p}/baseline/median_abs_onset_error_s', 'f1', 's')}). "
            f"Each of these runs holds one workload: they test where a job starts, not linking across deliberate pauses.")


def _states(ctx) -> str:
    """How a window that is not training is named: the tensor-core share of SM activity."""
    if not ctx.has("state_rule"):
        return ""
    return (f" A window the detector does not call training is named inference or other from the GPU's own "
            f"work: neural-network compute spends part of its SM time in tensor-core matrix multiplies, copies, "
            f"collectives and single-precision numerics spend none, a pure matrix-multiply burn little else. On the benign "
            f"runs this names {ctx.num('state_rule', 'rules/tensor_share/inference', 'pct')} of inference and "
            f"{ctx.num('state_rule', 'rules/tensor_share/other', 'pct')} of other windows by their class (thresholds "
            f"chosen on these windows), where reading a large symmetric exchange as other named "
            f"{ctx.num('state_rule', 'rules/exchange_only/inference', 'pct')} and "
            f"{ctx.num('state_rule', 'rules/exchange_only/other', 'pct')}. Every verdict also says whether its window "
            f"is like the data the detector was fitted on ({sec('s8_recommendations')}).")


def render(ctx, figs) -> str:
    t = ctx.term
    return f"""
<p><b>Agent and signals.</b> An agent on each node reads every GPU through {t('NVML')}: NVLink bytes sent and
received (cumulative counters summed over all links), the energy counter, board power, utilisation,
memory use and clocks, and, where the driver offers them, the per-second tensor-pipe and SM activity
metrics. It reads each network and InfiniBand interface's byte counters from the kernel. Counters are kept
raw with their own timestamps; rates are computed later in one place, so counter wraps and driver resets
are handled once.{_rates(ctx)}</p>
<p><b>Signed transport.</b> The agent groups readings into batches, signs each batch with a per-node key
({t('HMAC-SHA256')}) and chains it to the previous one by hash, so the collector can reject altered,
replayed, reordered or dropped batches. Batches wait in an on-disk spool until the collector acknowledges
them, so a network outage or a restart loses nothing.</p>
<p><b>Collector.</b> A central service verifies and stores batches, keeps per-node state, and computes
verdicts live over the same windowed features used offline, so the evaluated detector is the deployed
one. A dashboard shows each node's state over time, the evidence behind it, alerts and jobs.{_states(ctx)}</p>
<p><b>Segmentation.</b> A segmenter finds where workloads start and end in a node's stream, and links
segments separated by idle gaps into one job when the GPUs keep their memory and the activity resumes
with the same signature, so that pausing does not split a job.{_segmentation(ctx)}</p>
<p><b>Detectors.</b> A trace is cut into sliding windows; features describe the
communication shape (volume, symmetry of sent and received bytes, periodicity, burstiness) and
activity: power, utilisation, tensor work per DRAM byte, and the share of the SMs' busy time the tensor
cores work, which training's matmuls over whole batches of sequences keep high and decode's one row per
sequence keeps low (a share of busy time, so idle gaps do not scale it; dense forward work such as
prefill and embedding reads like training on it). The detectors share one interface: {_detectors(ctx)}. {_alert_rule(ctx)}</p>
{_counter_check(ctx, figs)}
{_overhead(ctx, figs)}
"""
