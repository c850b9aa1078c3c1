"""The host beside the GPU: does the host's CPU time tell an optimizer run on the host (ZeRO-Offload)
from benign work that also moves PCIe both ways? Runs recorded with the agent's host source
(telemetry/host.py; data/h200x1-host). Per run: the share of in-run windows passing the exchange gate
(rules.exchange_gate, as scripts/offload_gate.py counts it), and the host's busy cores (user + system
time per second, all CPUs) between the run's start and end, on the 10 Hz grid: median, 90th percentile,
and the share of bins with at least ``--busy-cores`` cores busy. A run is *host-witnessed* when that
share is at least ``--busy-share`` (``features.host``: the CPU busy beyond the one core a GPU
program's launching thread keeps spinning; the collector's evidence line applies the same rule). Per family: runs, runs passing the gate, runs passing gate and witness together.
Several ``--data`` pool (runs recorded without the host source are counted, not studied). With
``--prospective`` (results of scripts/prospective.py on the same runs, repeatable; a run judged by several keeps
the first one's verdict, ``detectors_rev`` names its models), also what the committed
detectors said (``fused`` or the single-device lead) and the evidence stack: the detectors, or gate and
witness together. Per ZeRO-Offload configuration (host threads and accumulation told apart): how many of its runs the
witness saw, and what offloading cost by the red team's measure (``redteam.cost.offload_costs``, against
the same configuration trained on the GPU alone, in ``--data`` or ``--baseline-data``).

    python scripts/host_study.py --data data/h200x1-host --data data/redteam-x1 --baseline-data data/h200x1 \
        --prospective results/prospective-6784c23-h200x1-host.json \
        --prospective results/prospective-6784c23-redteam-x1.json \
        --prospective results/prospective-9a4dffd-h200x1-host.json --out results/host-study.json \
        --docs docs/host.md --figure results/figures/host_cpu.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from trainsentry.detect.dataset import load_dataset
from trainsentry.detect.pipeline import default_cache_dir
from trainsentry.detect.rules import gate_pass_share
from trainsentry.features.grid import to_grids
from trainsentry.features.host import BUSY_CORES, BUSY_SHARE, host_activity
from trainsentry.features.host import busy_cores as busy_series
from trainsentry.redteam.cost import offload_costs, offload_name
from trainsentry.traces.io import read_trace


def _r(x: float, nd: int = 2) -> float | None:
    return None if x is None or not np.isfinite(x) else round(float(x), nd)


def busy_span(user: np.ndarray, system: np.ndarray, at: float, dt_s: float = 0.1) -> dict:
    """Seconds after the run's start of the first and the last bin with at least ``at`` cores busy (None
    when there is none)."""
    busy = np.flatnonzero(busy_series(user, system) >= at)
    return {"busy_first_s": _r(busy[0] * dt_s, 1) if busy.size else None,
            "busy_last_s": _r(busy[-1] * dt_s, 1) if busy.size else None}


class NoHostSource(ValueError):
    """A run recorded without the agent's host source."""


def host_series(run_dir: Path) -> dict:
    """User and system cores busy, and the GPU's PCIe rates (GPM, B/s), on the 10 Hz grid between the
    manifest's start and end."""
    table, m = read_trace(run_dir)
    grid = next(iter(to_grids(table, hz=10.0).values()))
    inside = (grid.t > m["start"]) & (grid.t <= m["end"])
    h = grid.host
    if "cpu_user_cores" not in h:
        raise NoHostSource(f"{run_dir}: recorded without the host source")
    gpu = next(iter(grid.gpus.values()))
    pcie = sum(gpu.get(k, np.zeros_like(grid.t)) for k in ("gpm_pcie_tx_mibps", "gpm_pcie_rx_mibps")) * 2 ** 20
    return {"user": h["cpu_user_cores"][inside],
            "system": h["cpu_system_cores"][inside], "pcie_Bps": pcie[inside], "manifest": m}


def study(data: list[Path], cache: Path, busy_cores: float, busy_share: float, baselines: list[Path] = (),
          prospective: list[dict] = ()) -> dict:
    """``data``: datasets whose runs recorded with the host source are studied (the others are counted in
    ``without_host_source``); ``prospective``: scripts/prospective.py results covering some of them."""
    runs = [(d, r) for d in data for r in load_dataset(str(d), cache)]
    ids = [r.run_id for _, r in runs]
    # two nodes' campaigns can reuse a run id (a cost baseline recorded again under the red team's root):
    # such a run is keyed by its dataset and id, every other by its id
    key = lambda d, r: r.run_id if ids.count(r.run_id) == 1 else f"{d}/{r.run_id}"  # noqa: E731
    # a run judged by several results keeps the first one's verdict (the earliest models, if given in order);
    # a result names its dataset, so a reused id is matched to its own run
    # (paths compared resolved, so ./data/x and data/x are one dataset)
    where = lambda d: str(Path(d).resolve()) if d is not None else None  # noqa: E731
    judged: dict[tuple[str | None, str], tuple[bool, str]] = {}
    for p in prospective:
        for r in p.get("per_run", []):
            judged.setdefault((where(p.get("data")), r["run_id"]), (r["either_alerted"], (p.get("model") or {}).get("rev")))
    out = {"data": [str(d) for d in data], "busy_cores": busy_cores, "busy_share": busy_share, "by_family": {},
           "runs": {}, "without_host_source": {}}
    for d, r in sorted(runs, key=lambda dr: dr[1].run_id):
        try:
            s = host_series(d / r.run_id)
        except NoHostSource:
            out["without_host_source"][str(d)] = out["without_host_source"].get(str(d), 0) + 1
            continue
        df = r.windows["trainsentry"]
        df = df[df["in_run"]]
        gate = gate_pass_share(df)
        act = host_activity(s["user"], s["system"], busy_cores, busy_share)
        if act is None:
            raise ValueError(f"{r.run_id}: no host measurement inside the run")
        extra = s["manifest"]["ground_truth"]["extra"]["0"]
        labels = s["manifest"]["labels"]
        row = {"class": r.cls, "family": r.family,
               "workload": offload_name(labels) if r.family == "zero-offload" else labels["workload"],
               "gate_pass_share": _r(gate, 3), "passes_gate": gate >= 0.5,
               "busy_cores_median": _r(act["busy_cores_median"]), "busy_cores_p90": _r(act["busy_cores_p90"]),
               "user_cores_median": _r(np.nanmedian(s["user"])), "system_cores_median": _r(np.nanmedian(s["system"])),
               "busy_share": _r(act["busy_share"], 3), "witnessed": act["witnessed"],
               "pcie_GBps_median": _r(np.nanmedian(s["pcie_Bps"]) / 1e9, 3),
               "host_threads_used": extra.get("host_threads"),
               # when in the run (s after its start) the host was busy: start-up work, or every step
               **busy_span(s["user"], s["system"], busy_cores)}
        if prospective:
            # None: no prospective result judged it
            row["detectors_alerted"], row["detectors_rev"] = judged.get(
                (where(d), r.run_id), judged.get((None, r.run_id), (None, None)))
            row["stack_alerted"] = bool(row["detectors_alerted"]) or (row["passes_gate"] and row["witnessed"])
        out["runs"][key(d, r)] = row
        fam = out["by_family"].setdefault(f"{r.cls} {r.family}", {"runs": 0, "gate": 0, "witnessed": 0,
                                                                   "gate_and_witness": 0})
        fam["runs"] += 1
        fam["gate"] += row["passes_gate"]
        fam["witnessed"] += row["witnessed"]
        fam["gate_and_witness"] += row["passes_gate"] and row["witnessed"]
        if prospective:
            fam["detectors"] = fam.get("detectors", 0) + bool(row["detectors_alerted"])
            fam["stack"] = fam.get("stack", 0) + row["stack_alerted"]
    if prospective:
        out["prospective"] = [p["command"] for p in prospective]
    out["offload"] = {}
    for name, c in offload_costs(list(data), list(baselines)).items():
        # a run keyed by dataset and id (a reused id) is matched by its id
        rows = [v for k, v in out["runs"].items() if k.rsplit("/", 1)[-1] in c["runs"]]
        if not rows:
            continue
        out["offload"][name] = {**c, "host_threads_used": rows[0]["host_threads_used"],
                                "witnessed_runs": sum(v["witnessed"] for v in rows),
                                "busy_share_median": _r(np.median([v["busy_share"] for v in rows]), 3),
                                "busy_cores_p90_median": _r(np.median([v["busy_cores_p90"] for v in rows]))}
        if prospective:
            out["offload"][name]["detectors_alerted_runs"] = sum(bool(v["detectors_alerted"]) for v in rows)
            out["offload"][name]["stack_alerted_runs"] = sum(v["stack_alerted"] for v in rows)
    return out


def figure(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 4.8), gridspec_kw={"width_ratios": [1.5, 1]})
    marks = {"training": "o", "inference": "s", "other": "^"}
    def group(v: dict) -> tuple:
        return v["class"], v["family"], "_cfar" in v["workload"], v["workload"].startswith("adv.")

    groups = sorted({group(v) for v in res["runs"].values()})
    for i, g in enumerate(groups):
        rows = [v for v in res["runs"].values() if group(v) == g]
        cls, fam, host_work, adversary = g
        ax.scatter([max(v["pcie_GBps_median"] or 0, 1e-3) for v in rows], [v["busy_share"] for v in rows],
                   marker=marks[cls], color=plt.get_cmap("tab10")(i % 10), alpha=0.85,
                   label=f"{cls} {fam}" + (" + host CFAR" if host_work else "") + (" (red team)" if adversary else ""))
    ax.axhline(res["busy_share"], color="grey", lw=0.8, ls="--")
    ax.set_xscale("log")
    ax.set_xlabel("median PCIe rate in the run, both directions (GB/s, GPM)")
    ax.set_ylabel(f"share of 0.1 s bins with ≥ {res['busy_cores']:g} host cores busy")
    ax.set_title(f"The host's CPU beside the GPU's PCIe ({', '.join(res['data'])})", fontsize=10)
    ax.legend(fontsize=7, loc="upper right")
    cfg = [(k, v) for k, v in res["offload"].items() if v["slowdown"] is not None]
    for k, v in cfg:
        ax2.scatter(v["slowdown"], v["busy_share_median"], color="tab:red" if v["witnessed_runs"] else "tab:gray")
        ax2.annotate(f"{v['host_threads_used']} thr, accum {v['accum']}", (v["slowdown"], v["busy_share_median"]),
                     fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax2.axhline(res["busy_share"], color="grey", lw=0.8, ls="--")
    ax2.set_xlabel("slowdown: GPU-only tokens per GPU-hour over ZeRO-Offload's (redteam.cost)")
    ax2.set_ylabel("median share of bins with the host busy")
    ax2.set_title("ZeRO-Offload 0.2 B: the witness against its cost", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def markdown(res: dict) -> str:
    lines = ["| run | class | family | gate pass share | busy cores median / p90 | user / system median | "
             f"share ≥ {res['busy_cores']:g} cores | PCIe GB/s |", "|---|---|---|---|---|---|---|---|"]
    for rid, v in res["runs"].items():
        lines.append(f"| `{rid}` | {v['class']} | {v['family']} | {v['gate_pass_share']} | {v['busy_cores_median']} / "
                     f"{v['busy_cores_p90']} | {v['user_cores_median']} / {v['system_cores_median']} | "
                     f"{v['busy_share']} | {v['pcie_GBps_median']} |")
    stack = "prospective" in res
    lines += ["", "| class family | runs | pass the gate | host-witnessed | both |"
              + (" detectors alerted | detectors, or gate and witness |" if stack else ""),
              "|---|---|---|---|---|" + ("---|---|" if stack else "")]
    for fam, v in sorted(res["by_family"].items()):
        lines.append(f"| {fam} | {v['runs']} | {v['gate']} | {v['witnessed']} | {v['gate_and_witness']} |"
                     + (f" {v['detectors']} | {v['stack']} |" if stack else ""))
    lines += ["", "| ZeRO-Offload configuration | host threads | accumulation | runs | witnessed | busy share "
              "(median) | busy cores p90 (median) | slowdown | GPU-hour multiplier | baseline |"
              + (" detectors alerted | stack alerted |" if stack else ""),
              "|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if stack else "")]
    for name, v in res["offload"].items():
        lines.append(f"| `{name}` | {v['host_threads_used']} | {v['accum']} | {len(v['runs'])} | {v['witnessed_runs']} | "
                     f"{v['busy_share_median']} | {v['busy_cores_p90_median']} | {v['slowdown']} | "
                     f"{v['gpu_hour_multiplier']} | `{v['baseline_run']}` |"
                     + (f" {v['detectors_alerted_runs']} | {v['stack_alerted_runs']} |" if stack else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", help="a dataset (repeatable; default data/h200x1-host); runs "
                    "recorded without the host source are counted, not studied")
    ap.add_argument("--baseline-data", action="append", default=[],
                    help="datasets holding GPU-only runs of the offloaded configurations (repeatable)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", help="rewrite the generated tables between the markers of this Markdown file")
    ap.add_argument("--figure")
    ap.add_argument("--cache", default=str(default_cache_dir()))
    ap.add_argument("--busy-cores", type=float, default=BUSY_CORES)
    ap.add_argument("--busy-share", type=float, default=BUSY_SHARE)
    ap.add_argument("--prospective", action="append", default=[],
                    help="scripts/prospective.py's result on some of the same runs (repeatable)")
    a = ap.parse_args(argv)
    pro = [json.loads(Path(p).read_text()) for p in a.prospective]
    res = study([Path(d) for d in a.data or ["data/h200x1-host"]], Path(a.cache), a.busy_cores, a.busy_share,
                [Path(b) for b in a.baseline_data], pro)
    res = {"command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]), **res}
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    if a.figure:
        figure(res, Path(a.figure))
    if a.docs:
        doc = Path(a.docs).read_text()
        begin, end = "<!-- host-study:begin -->", "<!-- host-study:end -->"
        i, j = doc.index(begin) + len(begin), doc.index(end)
        Path(a.docs).write_text(doc[:i] + "\n" + markdown(res) + doc[j:])
    for fam, v in sorted(res["by_family"].items()):
        print(fam, v)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
