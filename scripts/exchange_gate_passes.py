"""Share of each run's in-run windows that pass the exchange gate (P >= 0.5), plain and with each
option of rules.exchange_gate (decode veto of fused and of comm-ml, regular exchange), for any
labeled data directory — the evidence, beyond data/h200 (which `trainsentry eval` covers in
results/detector.json "exchange_gate"), that an option closes no training run.

    PYTHONPATH=src python scripts/exchange_gate_passes.py data/redteam-r1 > results/exchange_gate_redteam.json
"""

from __future__ import annotations

import json
import sys

from trainsentry.detect.dataset import load_dataset
from trainsentry.detect.pipeline import default_cache_dir, gate_summary


def main(argv: list[str]) -> None:
    out = {}
    for root in argv:
        out[root] = gate_summary(load_dataset(root, default_cache_dir()))
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
