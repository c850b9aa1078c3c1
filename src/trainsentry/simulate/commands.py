"""``trainsentry simulate``: the distributed-evasion model (Rahman, arXiv 2605.29359).

Only typer, rich and the standard library at the top: numpy and matplotlib load inside commands.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

NAME = "simulate"
app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Distributed-evasion simulator: efficiency, cost and traffic of "
                       "low-communication training spread over sub-threshold nodes.")
console = Console()

RESULTS = Path("results/simulator.json")
BENCH = Path("results/simulator_bench.json")
FIGURES = Path("results/figures")
DOC = Path("docs/simulator.md")


def _net(bw_mbps: float, latency_ms: float):
    from .settings import Network
    try:
        return Network(bw_mbps * 1e6, bw_mbps * 1e6, latency_ms / 1e3)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e


def _json_default(x):
    import numpy as np
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x)}")


@app.command()
def table(json_out: bool = typer.Option(False, "--json", help="print JSON instead of a table")):
    """The published minimum-cost table through the forward model, with relative errors."""
    from . import report
    from .experiments import reproduce_headline
    rows = reproduce_headline()
    if json_out:
        console.print_json(json.dumps(rows, default=_json_default))
        return
    console.print(report.rich_table("Published table (paper values in brackets)",
                                    report.HEADLINE_HEADER, report.headline_rows({"headline": rows})))


@app.command()
def forward(node: str = typer.Option("16x GH200 FP8", help="node type, e.g. '16x H100 SXM FP8'"),
            nodes: int = typer.Option(34, min=1), mode: str = typer.Option("hierarchical"),
            params_b: float = typer.Option(160.0, help="model size, billions of parameters"),
            group_size: int = typer.Option(8, help="nodes per group (hierarchical mode)"),
            bw_mbps: float = typer.Option(100.0), latency_ms: float = typer.Option(100.0)):
    """One configuration: H, the eta factors, chi, C_local, cost, and what each node shows."""
    from .catalogue import find_node_type
    from .experiments import describe, forward_row
    from .settings import Settings
    from .traffic import load_thresholds, node_traffic
    net = _net(bw_mbps, latency_ms)
    try:
        row = forward_row(node, nodes, mode, params_b * 1e9, group_size, net)
    except (KeyError, ValueError) as e:
        raise typer.BadParameter(str(e)) from e
    if not row["valid"]:
        console.print("[red]invalid configuration[/red]: the model does not fit this mode "
                      "(flat/hierarchical need it to fit one node; pipeline needs >= 2 groups)")
        raise typer.Exit(2)
    out = describe(row)
    out["traffic"] = node_traffic(row, find_node_type(node), net, Settings(), load_thresholds())
    console.print_json(json.dumps(out, default=_json_default))


@app.command()
def search(target: float = typer.Option(1e25, help="target FLOP"),
           metric: str = typer.Option("c_local", help="c_local or c_quality"),
           bw_mbps: float = typer.Option(100.0), latency_ms: float = typer.Option(100.0),
           memory_cap_gb: float = typer.Option(0.0, help="aggregate memory cap per node, 0 = none"),
           h_variants: bool = typer.Option(False, help="also try H below the compute-bound one")):
    """The cheapest configuration reaching a target, and the best per node type."""
    from .catalogue import node_types
    from .search import SearchSpace, min_cost
    try:
        space = SearchSpace(types=node_types(memory_cap_gb or None), h_variants=h_variants)
        res = min_cost(target, metric, space, _net(bw_mbps, latency_ms))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    if res.best is None:
        console.print("[red]no configuration reaches the target[/red]")
        raise typer.Exit(1)
    from . import report
    from .experiments import describe
    rows = sorted(res.per_type.values(), key=lambda r: r["cost_usd"])
    fake = {"search": [{"target": target, "free": describe(r), "cost_ratio_free_to_published":
                        r["cost_usd"] / res.best["cost_usd"]} for r in rows]}
    header = report.SEARCH_HEADER[:-2] + ["cost / cheapest", ""]
    console.print(report.rich_table(f"{metric} >= {target:.3g}: cheapest per node type "
                                    f"({res.evaluations:,} evaluations)", header,
                                    report.search_rows(fake)))
    b = describe(res.best)
    console.print(f"cheapest: {b['node_type']} x{int(b['n_nodes'])} {b['mode_label']} "
                  f"{b['params'] / 1e9:g}B, H {b['h']:.0f}, eta {b['eta']:.4f}, "
                  f"chi {b['chi']:.4f}, ${b['cost_usd']:,.0f}", soft_wrap=True)


@app.command()
def sensitivity():
    """Bandwidth (10 Mbps ... 1000 Gbps) and latency sensitivity at C_local = 1e25."""
    from . import report
    from .experiments import bandwidth_sensitivity, latency_sensitivity
    from .settings import Settings
    res = {"bandwidth": bandwidth_sensitivity(Settings()), "latency": latency_sensitivity(Settings())}
    console.print(report.rich_table("Bandwidth", report.BANDWIDTH_HEADER, report.bandwidth_rows(res)))
    console.print(report.rich_table("Latency", report.LATENCY_HEADER, report.latency_rows(res)))


@app.command("all")
def all_(out: Path = typer.Option(RESULTS, help="results JSON to write"),
         figures: Path = typer.Option(FIGURES), doc: Path = typer.Option(DOC),
         quick: bool = typer.Option(False, help="headline only, no sweeps (smoke test)")):
    """Regenerate results/simulator.json, the simulator figures and the tables in docs."""
    from . import figures as figs
    from . import report
    from .experiments import run_all
    from .traffic import load_thresholds
    try:
        th = load_thresholds()
    except ValueError as e:
        raise typer.BadParameter(str(e)) from e
    res = run_all(th=th, quick=quick)
    if BENCH.exists():
        res["benchmark"] = json.loads(BENCH.read_text())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".json.tmp")  # write then rename: a failed run keeps the old file
    tmp.write_text(json.dumps(res, indent=1, default=_json_default))
    tmp.replace(out)
    written = figs.write_all(res, figures)
    changed = report.update_doc(doc, res)
    console.print(report.rich_table("Published table (paper values in brackets)",
                                    report.HEADLINE_HEADER, report.headline_rows(res)))
    console.print(report.rich_table("Free search vs published", report.SEARCH_HEADER,
                                    report.search_rows(res)))
    console.print(f"all rows within 2 %: {res['all_within_2pct']}; wrote {out}, "
                  f"{', '.join(map(str, written))}{'; updated ' + str(doc) if changed else ''}")
