"""How the live verdict's two paths read whole runs, with the committed artifacts as they are:

    python scripts/verdict_paths.py data/h200x1-verdict/train.offload.w1024-l16-720778-r0 ...

per run, over its in-run windows: the share where the exchange gate is open (until 2026-12-04 the
single-device check was silent there), the median of ``fused``'s P, the share the check
judges, the median of the check's trees on every window (what they would say where the check is
silent), the busiest GPU's median NVML utilisation and the median of the busiest GPU's PCIe traffic. The
gate, ``fused`` and the traffic do not depend on the check's refits; the trees' median does (the artifact
read is the one in ``--models``). docs/lab.md and data/h200x1-verdict/README.md quote it for the
thirty-seventh session's misses.

``--alerts`` adds, per run over all its windows, whether the alert rule fires on ``fused`` alone, on the
live verdict (``verdict_p``: ``fused`` or the check where it speaks) and on the verdict with the check
silent where the GPUs exchange (its form until 2026-12-04), and a tally over the runs given, by class:

    python scripts/verdict_paths.py --alerts data/redteam-r1/adv.*
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainsentry.threads import one_native_thread  # noqa: E402

one_native_thread()

from trainsentry.detect.base import load_detector, numeric_matrix  # noqa: E402
from trainsentry.detect.dataset import load_run  # noqa: E402
from trainsentry.detect.rules import exchange_gate  # noqa: E402
from trainsentry.detect.alert import AlertRule  # noqa: E402
from trainsentry.detect.single_device import UTIL_COL, duty_free, load, verdict_p  # noqa: E402

PCIE_COL = "comm.pcie.Bps.max"


def paths(run_dir: Path, models: Path = Path("models")) -> dict:
    fused, check = load_detector(models / "fused.joblib"), load(models / "single-device.joblib")
    w = load_run(run_dir, None).windows["trainsentry"]
    w = w[w["in_run"]].reset_index(drop=True)
    med = lambda col: float(np.nanmedian(numeric_matrix(w, [col])[:, 0]))  # noqa: E731
    return {"run": run_dir.name, "windows": len(w),
            "gate_open": float((exchange_gate(w)[0] >= 0.5).mean()),
            "fused_p_median": float(np.median(fused.predict_proba(w))),
            "check_judged": float(check.judged(w).mean()),
            "trees_p_median": float(np.median(check.trees.predict_proba(duty_free(w)))),
            "util_pct_median": med(UTIL_COL), "pcie_Bps_median": med(PCIE_COL)}


def alerts(run_dir: Path, models: Path = Path("models"), rule: AlertRule = AlertRule()) -> dict:
    """Whether the alert rule (capped at the run's windows, as the evaluation's headline) fires on the
    run's windows under ``fused`` alone, the live verdict, and the verdict with the check gated."""
    fused, check = load_detector(models / "fused.joblib"), load(models / "single-device.joblib")
    run = load_run(run_dir, None)
    w = run.windows["trainsentry"]
    p = fused.predict_proba(w)
    reads = {"fused": p, "verdict": verdict_p(p, check.predict_proba(w)),
             "verdict_gated": verdict_p(p, check.speaking_on_exchange(False).predict_proba(w))}
    t_end, capped = w["t_end"].to_numpy(), rule.capped(len(w))
    return {"run": run_dir.name, "class": run.cls, "family": run.family,
            **{k: bool(capped.evaluate(t_end, v, run.start)["alerted"]) for k, v in reads.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories")
    ap.add_argument("--models", type=Path, default=Path("models"))
    ap.add_argument("--alerts", action="store_true", help="whether each form of the verdict alerts, and a tally")
    args = ap.parse_args()
    if args.alerts:
        rows = [alerts(r, args.models) for r in args.runs]
        for d in rows:
            print(f"{d['run']} ({d['class']}): " + ", ".join(f"{k} {'alerts' if d[k] else 'silent'}"
                                                          for k in ("fused", "verdict", "verdict_gated")))
        for cls in sorted({d["class"] for d in rows}):
            mine = [d for d in rows if d["class"] == cls]
            print(f"{cls}: {len(mine)} runs; alerted by " + ", ".join(
                f"{k} {sum(d[k] for d in mine)}" for k in ("fused", "verdict", "verdict_gated")))
        return
    for r in args.runs:
        d = paths(r, args.models)
        print(f"{d['run']}: {d['windows']} windows; gate open {d['gate_open']:.0%}; fused P median "
              f"{d['fused_p_median']:.2f}; check judged {d['check_judged']:.0%}; its trees median "
              f"{d['trees_p_median']:.2f}; busiest GPU {d['util_pct_median']:.0f} % busy, PCIe "
              f"{d['pcie_Bps_median'] / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
