"""9. Limitations: what was not run and why; the missing inputs are computed, not typed."""

import html

from ..inputs import INPUTS as ALL_INPUTS, input_path, is_present

TITLE = "Limitations"
INPUTS: tuple[str, ...] = ()


def render(ctx, figs) -> str:
    missing = [i for i in ALL_INPUTS.values() if not is_present(i, ctx.results, ctx.data)]
    out = []
    if missing:
        items = "".join(f"<li><code>{html.escape(str(input_path(i, ctx.results, ctx.data)))}</code> "
                        f"({html.escape(i.what)}): <code>{html.escape(i.command)}</code></li>" for i in missing)
        out.append("<p><b>This is a draft.</b> These inputs were not measured when it was built, and the "
                   f"sections that need them say so in place of numbers:</p><ul>{items}</ul>")
    out.append(f"""<ul>
<li><b>No power capping or clock limits.</b> The GPUs were lent, shared machines; changing their power
limit or clocks would affect other users and is not allowed there, so strategies that throttle the
hardware were not run. The published work found clock throttling largely detectable once trained on
{ctx.cite('rt')}, but we have not measured it on our signals.</li>
<li><b>One node only.</b> Every recorded run is inside a single node; multi-node training and the
network-only traffic it produces were studied with the simulator, not measured.</li>
<li><b>Up to the GPUs lent.</b> Runs used the machines the project was lent (one and two
{ctx.term('H200')} GPUs); eight-GPU configurations were written and tested on CPU but ran on hardware only
when such a machine was lent.</li>
<li><b>Short runs.</b> Workloads ran for minutes, not weeks; slow drifts and rare events of long jobs are
not represented.</li>
<li><b>No tampering.</b> The red team could reshape workloads but not forge counters or replace the agent;
that layer is protected by signing and would need attestation in practice.</li>
</ul>""")
    return "\n".join(out)
