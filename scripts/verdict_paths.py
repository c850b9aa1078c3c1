"""How the live verdict's two paths read whole runs, with the committed artifacts as they are:

    python scripts/verdict_paths.py data/h200x1-verdict/train.offload.w1024-l16-720778-r0 ...

per run, over its in-run windows: the share where the exchange gate is open (so the single-device
check is silent), the median of ``fused``'s P, the share the check judges, the median of the check's
trees on every window (what they would say where the check is silent), the busiest GPU's median NVML
utilisation and the median of the busiest GPU's PCIe traffic. The gate, ``fused`` and the traffic do not
depend on the check's refits; the trees' median does (the artifact read is the one in ``--models``).
docs/lab.md and data/h200x1-verdict/README.md quote it for the thirty-seventh session's misses.
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
from trainsentry.detect.single_device import UTIL_COL, duty_free, load  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run directories")
    ap.add_argument("--models", type=Path, default=Path("models"))
    args = ap.parse_args()
    for r in args.runs:
        d = paths(r, args.models)
        print(f"{d['run']}: {d['windows']} windows; gate open {d['gate_open']:.0%}; fused P median "
              f"{d['fused_p_median']:.2f}; check judged {d['check_judged']:.0%}; its trees median "
              f"{d['trees_p_median']:.2f}; busiest GPU {d['util_pct_median']:.0f} % busy, PCIe "
              f"{d['pcie_Bps_median'] / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
