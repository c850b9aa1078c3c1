"""How the single-device lead does near its busy floor, and what a higher floor would trade.

The lead (detect.single_device) speaks on a window whose busiest GPU is busy above
``BUSY_UTIL_PCT`` (5 %), and reads GPM activity per unit of busy share (``features.activity.duty_free``):
just above the floor the division amplifies noise. This fits the lead on configuration-grouped folds
(every window of a configuration on one side: ``GroupKFold`` over configurations), scores each window
out of fold as the live check would, then

* per band of the busiest GPU's utilisation: the share of judged windows at P ≥ the alert threshold, per
  class (training: detection; inference and other: false alerts), and
* per candidate floor: the lead's run-level alerts (3 of 5 windows at 0.75, capped at a run's windows)
  with every window at or below that floor left unjudged, per class, and which runs change against
  the floor in force.

A higher floor can only remove votes, so it never adds an alert (tests/detect/test_busy_floor.py).
The lead alone is scored: where the exchange gate is open it does not speak, so trainers whose
exchange the gate sees (ZeRO-Offload over PCIe) count as missed here and are judged by ``fused``
in the product (``fused+single-device`` in ``trainsentry eval``).

    python scripts/busy_floor.py --data data/h200x1 --data data/h200x1-host --data data/redteam-x1 \
        --out results/busy-floor.json --docs docs/busy-floor.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.detect.alert import AlertRule  # noqa: E402
from trainsentry.detect.base import numeric_matrix  # noqa: E402
from trainsentry.detect.dataset import load_dataset, stack  # noqa: E402
from trainsentry.detect.single_device import BUSY_UTIL_PCT, THRESHOLD, SingleDeviceCheck  # noqa: E402

UTIL = "act.util_pct.mean.max"
BANDS = (5, 8, 10, 15, 20, 30, 50, 80, 101)
FLOORS = (5, 6, 8, 10, 12, 15)
RULE = AlertRule(THRESHOLD, 3, 5)


def out_of_fold(runs, folds: int, seed: int = 0, progress=None) -> dict:
    """Every in-run window's utilisation, class, run and out-of-fold lead score (NaN where it does not
    speak), the lead refitted on each fold's other configurations."""
    from sklearn.model_selection import GroupKFold
    X, y, classes, ids = stack(runs, SingleDeviceCheck.feature_set)
    config = {r.run_id: r.config for r in runs}
    groups = np.array([config[i] for i in ids])
    p = np.full(len(X), np.nan)
    n_groups = len(set(groups))
    if n_groups < 2:
        raise ValueError(f"need at least 2 configurations for grouped folds, got {n_groups}")
    for tr, te in GroupKFold(min(folds, n_groups)).split(X, y, groups):
        check = SingleDeviceCheck().fit(X.iloc[tr], y[tr], groups[tr], [classes[i] for i in tr])
        s = check.scores(X.iloc[te].reset_index(drop=True))
        p[te] = [np.nan if v is None else v for v in s]
        if progress:
            progress()
    util = np.nan_to_num(numeric_matrix(X, [UTIL])[:, 0], nan=0.0)
    return {"util": util, "p": p, "classes": np.array(classes), "ids": np.array(ids)}


def by_band(w: dict, bands=BANDS) -> list[dict]:
    """Share of judged windows at P ≥ the threshold, per utilisation band and class."""
    out = []
    judged = np.isfinite(w["p"])
    for lo, hi in zip(bands[:-1], bands[1:]):
        row = {"util_from_pct": lo, "util_below_pct": hi}
        for cls in sorted(set(w["classes"])):
            m = judged & (w["classes"] == cls) & (w["util"] > lo if lo == bands[0] else w["util"] >= lo) & (w["util"] < hi)
            row[cls] = {"windows": int(m.sum()), "runs": int(len(set(w["ids"][m]))),
                        "at_threshold": float(np.mean(w["p"][m] >= THRESHOLD)) if m.any() else None}
        out.append(row)
    return out


def run_alerts(w: dict, floor: float) -> dict[str, tuple[str, bool]]:
    """run id → (class, alerted) with windows at or below ``floor`` % left unjudged. Windows are in time
    order within a run (``stack`` keeps each run's window table as recorded)."""
    out = {}
    for rid in dict.fromkeys(w["ids"]):
        m = w["ids"] == rid
        p = np.nan_to_num(w["p"][m], nan=0.0)
        p[w["util"][m] <= floor] = 0.0
        out[str(rid)] = (str(w["classes"][m][0]), RULE.capped(len(p)).first_alert(p) is not None)
    return out


def by_floor(w: dict, floors=FLOORS) -> list[dict]:
    base = run_alerts(w, BUSY_UTIL_PCT)
    rows = []
    for f in floors:
        now = run_alerts(w, f)
        counts = {cls: {"runs": sum(1 for c, _ in now.values() if c == cls),
                        "alerted": sum(1 for c, a in now.values() if c == cls and a)}
                  for cls in sorted({c for c, _ in now.values()})}
        rows.append({"floor_pct": f, "counts": counts,
                     "no_longer_alerted": sorted(r for r, (c, a) in now.items() if base[r][1] and not a),
                     "newly_alerted": sorted(r for r, (c, a) in now.items() if a and not base[r][1])})
    return rows


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def render(res: dict) -> str:
    classes = sorted(res["floors"][0]["counts"])
    lines = ["# The single-device lead near its busy floor", "",
             f"*Generated by `{res['command']}` on {res['date']} (results: `{res['out']}`); do not edit by hand.*", "",
             f"The lead refitted on {res['folds']} configuration-grouped folds of {res['runs']} runs "
             f"({', '.join(f'`{d}`' for d in res['data'])}); every window scored out of fold as the live check "
             f"scores it. It speaks where the busiest GPU is busy above {res['floor_in_force_pct']:g} % "
             "(NVML utilisation), no exchange is seen and its features are present; the rest are left out below. "
             "The lead alone is scored: trainers whose exchange the gate sees (ZeRO-Offload over PCIe) are "
             "judged by `fused` in the product and count as missed here.", "",
             "## Judged windows at P ≥ the alert threshold, by the busiest GPU's utilisation", "",
             "| utilisation | " + " | ".join(f"{c}: share (windows, runs)" for c in classes) + " |",
             "|---|" + "---|" * len(classes)]
    for b in res["bands"]:
        lo = f"above {b['util_from_pct']} %" if b["util_from_pct"] == res["floor_in_force_pct"] else f"{b['util_from_pct']} %"
        cells = [f"{_pct(b[c]['at_threshold'])} ({b[c]['windows']}, {b[c]['runs']})" if c in b else "–" for c in classes]
        lines.append(f"| {lo} to {b['util_below_pct']} % | " + " | ".join(cells) + " |")
    lines += ["", "## Runs alerted with windows at or below a floor left unjudged", "",
              "Alert rule: P ≥ 0.75 in 3 of 5 consecutive windows (fewer in a run shorter than 5 windows).", "",
              "| floor | " + " | ".join(f"{c} runs alerted" for c in classes) + " | no longer alerted |",
              "|---|" + "---|" * (len(classes) + 1)]
    for f in res["floors"]:
        lost = ", ".join(f"`{r}`" for r in f["no_longer_alerted"]) or "–"
        lines.append(f"| {f['floor_pct']:g} % | " + " | ".join(f"{f['counts'][c]['alerted']} of {f['counts'][c]['runs']}"
                                                            for c in classes) + f" | {lost} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", required=True, help="a dataset directory (repeat)")
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--floor", type=float, action="append", help=f"a candidate floor, % (repeat; default {FLOORS})")
    ap.add_argument("--cache", default=".cache/features", help="feature cache ('' for none)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", default="", help="generated markdown ('' to skip)")
    args = ap.parse_args(argv)
    from rich.progress import Progress
    runs = load_dataset(args.data, Path(args.cache) if args.cache else None)
    if not runs:
        print("no runs under " + ", ".join(args.data), file=sys.stderr)
        return 1
    with Progress() as bar:
        task = bar.add_task("grouped folds", total=args.folds)
        w = out_of_fold(runs, args.folds, progress=lambda: bar.advance(task))
    floors = tuple(args.floor) if args.floor else FLOORS
    command = "python scripts/busy_floor.py " + " ".join(
        [f"--data {d}" for d in args.data] + ([f"--folds {args.folds}"] if args.folds != 10 else [])
        + [f"--floor {f:g}" for f in args.floor or []] + [f"--out {args.out}"] + ([f"--docs {args.docs}"] if args.docs else []))
    res = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "out": args.out,
           "data": args.data, "runs": len(runs), "folds": args.folds, "floor_in_force_pct": BUSY_UTIL_PCT,
           "threshold": THRESHOLD, "rule": RULE.label(), "bands": by_band(w), "floors": by_floor(w, floors)}
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    if args.docs:
        Path(args.docs).write_text(render(res))
    for f in res["floors"]:
        print(f["floor_pct"], f["counts"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
