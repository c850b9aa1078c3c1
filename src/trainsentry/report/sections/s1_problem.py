"""1. The verification problem and the threat model (prose; cites published work)."""

TITLE = "The verification problem and the threat model"
INPUTS: tuple[str, ...] = ()


def render(ctx, figs) -> str:
    t, c = ctx.term, ctx.cite
    return f"""
<p>An agreement that permits running existing models but forbids training new ones needs a way to tell the
two apart on hardware the verifier does not control. The verifier may not read code, weights or data;
it sees only what the machines reveal from the outside: how many bytes each GPU moves over NVLink and PCIe,
how many bytes each node moves over its network interfaces, and how much power and activity each GPU shows.
Compute structuring, the practice of splitting or reshaping a workload so that it slips under a rule, is
the behaviour such a regime has to withstand {c('seferis')}.</p>
<p>The physical argument is simple. Training synchronises state across accelerators: data-parallel
training all-reduces every gradient on every step, sharded training gathers parameters and scatters
gradients layer by layer, and tensor-parallel training exchanges activations both forward and backward.
That traffic is large, symmetric (each GPU sends about what it receives) and periodic at the step rate.
Serving a model mostly does not look like that: data-parallel replicas exchange nothing, pipeline inference
moves activations one way, and tensor-parallel decoding exchanges many small, symmetric messages with no
parameter-sized collective.</p>
<p><b>Threat model.</b> The adversary owns the workload and has root on the GPUs. They want to train a
model while the monitor reports inference or idle. They may reshape their training in any way the
hardware allows: fewer synchronisations (low-communication methods such as {t('DiLoCo')} {c('diloco')} and
its streaming variant {c('sdiloco')}), compressed synchronisation ({t('PowerSGD')}, {t('DeMo')}
{c('demo')}), dilution with inference, shaping of activity, power and timing, and, in the white-box case,
training only while a copy of our detector says the telemetry looks benign. They may not tamper with the
counters or the monitor itself: that is a separate layer (attested monitor code, authenticated telemetry),
which we build the transport for but do not red-team. Every evasion costs the adversary something
(more GPU-hours, worse loss at equal compute), and the question this report answers is how much.</p>
<p>Prior work classified hidden training from {ctx.pub('rt.signals', 'int')} low-rate {t('NVML')} counters
without any interconnect or network signal {c('rt')}. Our monitor adds what that work named as missing:
per-GPU NVLink bytes, per-interface network bytes, energy counters and tensor-pipe activity, recorded
at high rate, signed on the node and judged centrally.</p>
"""
