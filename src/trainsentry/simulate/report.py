"""Tables from a results dict: markdown for docs/simulator.md, rich tables for the terminal."""

from __future__ import annotations

import re
from pathlib import Path


def _usd(x: float) -> str:
    return f"${x / 1e9:.2f}B" if x >= 1e9 else f"${x / 1e6:.1f}M"


def _bw(x: float) -> str:
    return f"{x / 1e9:g} Gbps" if x >= 1e9 else f"{x / 1e6:g} Mbps"


def headline_rows(results: dict) -> list[list[str]]:
    rows = []
    for r in results["headline"]:
        f, p, e = r["forward"], r["published"], r["relative_error"]
        rows.append([f"{r['target_c_local']:.2g}", f["node_type"], f"{int(f['n_nodes']):,}",
                     f["mode_label"], f"{f['params'] / 1e9:g}B",
                     f"{f['h']:.0f} ({p['h']:g})", f"{f['eta']:.4f} ({p['eta']:.4f})",
                     f"{f['chi']:.4f} ({p['chi']:.4f})",
                     f"{f['c_local']:.3g} ({p['c_local']:.2g})",
                     f"{_usd(f['cost_usd'])} ({_usd(p['cost_usd'])})",
                     f"{100 * r['max_relative_error']:.2f} %"])
    return rows


HEADLINE_HEADER = ["target", "node", "nodes", "mode", "model", "H (pub)", "eta (pub)",
                   "chi (pub)", "C_local (pub)", "cost (pub)", "max rel. err"]


def search_rows(results: dict) -> list[list[str]]:
    rows = []
    for s in results["search"]:
        f = s["free"]
        rep = s.get("paper_replay") or {}
        rows.append([f"{s['target']:.2g}", f["node_type"], f"{int(f['n_nodes']):,}",
                     f["mode_label"], f"{f['params'] / 1e9:g}B", f"{f['h']:.0f}",
                     f"{f['eta']:.4f}", f"{f['chi']:.4f}", _usd(f["cost_usd"]),
                     f"{s['cost_ratio_free_to_published']:.3f}",
                     f"{rep.get('node_type', '-')} x{int(rep.get('n_nodes', 0)):,} "
                     f"{_usd(rep['cost_usd']) if rep else ''}"])
    return rows


SEARCH_HEADER = ["target", "node", "nodes", "mode", "model", "H", "eta", "chi", "cost",
                 "free/published", "paper's procedure replayed"]


def bandwidth_rows(results: dict) -> list[list[str]]:
    rows = []
    for r in results.get("bandwidth", []):
        f, p, pf = r["free"], r["published"], r["published_forward"]
        rows.append([_bw(r["bw_bps"]), f"{1e3 * r['latency_s']:g} ms",
                     f"{p['node_type']} x{p['n_nodes']:,} {pf['mode_label']} "
                     f"{p['params'] / 1e9:g}B",
                     f"{pf['h']:.0f} ({p['h']:g})", f"{pf['eta']:.4f} ({p['eta']:.4f})",
                     f"{_usd(pf['cost_usd'])} ({_usd(p['cost_usd'])})",
                     f"{f['node_type']} x{int(f['n_nodes']):,} {f['mode_label']} "
                     f"{f['params'] / 1e9:g}B H={f['h']:.0f}", _usd(f["cost_usd"])])
    return rows


BANDWIDTH_HEADER = ["bandwidth", "latency", "published config", "H fwd (pub)", "eta fwd (pub)",
                    "cost fwd (pub)", "free search", "free cost"]


def latency_rows(results: dict) -> list[list[str]]:
    return [[f"{1e3 * r['latency_s']:g} ms", f"{r['free']['node_type']} x{int(r['free']['n_nodes'])}"
             f" {r['free']['mode_label']}", _usd(r["free"]["cost_usd"]),
             f"{r['published_forward']['eta']:.4f}", _usd(r["paper_replay"]["cost_usd"])]
            for r in results.get("latency", [])]


LATENCY_HEADER = ["latency", "free search", "free cost", "eta of published 1e25 config",
                  "paper's procedure replayed"]


def memory_rows(results: dict) -> list[list[str]]:
    rows = []
    for m in results.get("memory_cap", []):
        u, c = m["uncapped"], m["capped"]
        rows.append([f"{m['target_c_quality']:.2g}", f"{u['node_type']} x{int(u['n_nodes'])} "
                     f"{u['mode_label']} {u['params'] / 1e9:g}B", _usd(u["cost_usd"]),
                     f"{c['node_type']} x{int(c['n_nodes'])} {c['mode_label']} "
                     f"{c['params'] / 1e9:g}B", _usd(c["cost_usd"]), f"{m['cost_factor']:.2f}x",
                     f"{m['published_cost_factor']:g}x"])
    return rows


MEMORY_HEADER = ["C_quality target", "no cap", "cost", f"cap 1,280 GB per node", "cost",
                 "factor", "paper's factor"]


def traffic_table(results: dict, key: str = "traffic_published") -> list[list[str]]:
    rows = []
    for t in results.get(key, []):
        w, strat = t["wan"], t["in_node"]["strategies"]
        ev = t["evasive_strategy"]
        rows.append([f"{t['node_type']} x{int(t['n_nodes']):,} {t['mode_label']}",
                     f"{w['burst_bytes'] / 1e9:.2f} GB / {w['burst_period_s']:.0f} s",
                     f"{8 * w['mean_bytes_per_s'] / 1e6:.1f}",
                     f"{t['in_node']['shard_degree']}",
                     " / ".join(f"{strat[s]['bytes_per_step'] / 1e9:,.0f}" for s in
                                ("fsdp", "tensor", "pipeline")),
                     f"{ev}: {strat[ev]['scale_up_bytes_per_s_per_chip'] / 1e6:,.0f} MB/s/chip, "
                     f"NIC {strat[ev]['nic_bytes_per_s'] / 1e6:,.0f} MB/s",
                     ", ".join(t["seen_by"])])
    return rows


TRAFFIC_HEADER = ["configuration", "WAN burst / period", "WAN mean Mbit/s", "shards",
                  "in-node GB/step FSDP / TP / PP", "least visible strategy", "seen by"]


def markdown(header: list[str], rows: list[list[str]]) -> str:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def blocks(results: dict) -> dict[str, str]:
    """Markdown blocks keyed by the marker name they replace in docs/simulator.md."""
    explanations = "\n".join(f"- {s['target']:.2g}: {s.get('explanation', '')}"
                             for s in results["search"])
    bench = results.get("benchmark")
    bench_md = (f"{bench['configs_per_s']:,.0f} configurations per second on one core "
                f"({bench['configs']:,} configurations, best of {bench['repeats']}; "
                f"`{bench['command']}`)") if bench else "not run yet"
    return {
        "headline": markdown(HEADLINE_HEADER, headline_rows(results)),
        "search": markdown(SEARCH_HEADER, search_rows(results)) + "\n\n" + explanations,
        "bandwidth": markdown(BANDWIDTH_HEADER, bandwidth_rows(results)),
        "latency": markdown(LATENCY_HEADER, latency_rows(results)),
        "memory": markdown(MEMORY_HEADER, memory_rows(results)),
        "traffic": markdown(TRAFFIC_HEADER, traffic_table(results)) + "\n\nFree-search rows:\n\n"
                   + markdown(TRAFFIC_HEADER, traffic_table(results, "traffic_free")),
        "benchmark": bench_md,
    }


def update_doc(doc: Path, results: dict) -> bool:
    """Replace each ``<!-- BEGIN name -->...<!-- END name -->`` block of ``doc``; True if changed."""
    if not doc.exists():
        return False
    text = old = doc.read_text()
    for name, body in blocks(results).items():
        pat = re.compile(rf"(<!-- BEGIN {name} -->).*?(<!-- END {name} -->)", re.S)
        text = pat.sub(lambda m: m.group(1) + "\n" + body + "\n" + m.group(2), text)
    if text != old:
        doc.write_text(text)
    return text != old


def rich_table(title: str, header: list[str], rows: list[list[str]]):
    from rich.table import Table
    t = Table(title=title, show_lines=False)
    for h in header:
        t.add_column(h)
    for r in rows:
        t.add_row(*[str(c) for c in r])
    return t
