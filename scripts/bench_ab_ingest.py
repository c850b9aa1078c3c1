"""Ingest A/B of two checkouts: alternating runs of benchmarks/bench_ingest.py (--repeats 1 --no-write),
each checkout's own benchmark and code (its src on PYTHONPATH), under flock so no other benchmark
overlaps; every run's output kept under OUTDIR, then every run and the medians per side written to
--out and printed.

    python scripts/bench_ab_ingest.py BEFORE_CHECKOUT AFTER_CHECKOUT OUTDIR [--rounds 6] [--out FILE]
    python scripts/bench_ab_ingest.py BEFORE AFTER OUTDIR --summarize-only   # from OUTDIR's runs
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("collector_samples_per_s", "collector_cpu_us_per_sample", "raw_sqlite_samples_per_s", "ratio")


def run(before: Path, after: Path, out_dir: Path, rounds: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for i in range(1, rounds + 1):
        for side, tree in (("before", before), ("after", after)):
            with open(out_dir / f"{side}-{i}.txt", "w") as f:
                subprocess.run(["flock", "/tmp/bench.lock", sys.executable, str(tree / "benchmarks" / "bench_ingest.py"),
                                "--repeats", "1", "--no-write"], stdout=f, stderr=subprocess.STDOUT, check=True,
                               env=dict(os.environ, PYTHONPATH=str(tree / "src")))


def summarize(out_dir: Path, before: Path, after: Path) -> dict:
    runs = []
    for f in sorted(out_dir.glob("*-*.txt"), key=lambda f: (int(f.stem.split("-")[1]), f.stem)):
        text = f.read_text()
        d = json.loads(text[text.index("{"):])
        runs.append({"side": f.stem.split("-")[0], "round": int(f.stem.split("-")[1]), "date": d["date"],
                     "load_average_1min": d["load_average_1min"],
                     "shapes": {k: {kk: v[kk] for kk in KEYS} for k, v in d["shapes"].items()}})
    medians = {side: {shape: {k: statistics.median(r["shapes"][shape][k] for r in runs if r["side"] == side)
                              for k in KEYS}
                      for shape in runs[0]["shapes"]}
               for side in ("before", "after")}
    return {"what": f"collector ingest A/B: {before} (before) vs {after} (after), alternating runs of "
                    "benchmarks/bench_ingest.py --repeats 1 --no-write under flock /tmp/bench.lock",
            "command": "python scripts/bench_ab_ingest.py " + " ".join(sys.argv[1:]),
            "medians": medians, "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "ingest-durable-ab.json")
    ap.add_argument("--summarize-only", action="store_true")
    args = ap.parse_args()
    if not args.summarize_only:
        run(args.before, args.after, args.out_dir, args.rounds)
    doc = summarize(args.out_dir, args.before, args.after)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["medians"], indent=1))


if __name__ == "__main__":
    main()
