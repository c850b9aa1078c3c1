"""Fit the live collector's single-device check (trainsentry.detect.single_device) and save it.

    python scripts/single_device.py --data data/h200 --data data/h200x1 --data data/h200x1-host \
        --save models/single-device.joblib

Fitted on every run of every --data root (the 2-GPU dataset and the one-GPU node's), by the same
`pipeline.train_final` that saves the detectors. ``--adversarial data/redteam-x1 --adversarial-family
throttle`` hardens it with a red team's runs of the named families only: families whose every window is
training work (a throttled trainer), not those that serve inference between training steps (online
learning in a server, white-box gating), whose serving windows would be fitted as training. Its rates on configurations it never saw come from
`trainsentry eval-transfer` (docs/one-gpu.md), which scores the same trees as the variant
`fused+single-device`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from trainsentry.detect.pipeline import default_cache_dir, train_final  # noqa: E402
from trainsentry.detect.single_device import SingleDeviceCheck  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", action="append", required=True, help="dataset root (repeatable)")
    ap.add_argument("--adversarial", action="append", default=[],
                    help="a red team's dataset root (repeatable): its runs of --adversarial-family join the fit")
    ap.add_argument("--adversarial-family", action="append", default=[],
                    help="a red-team family whose runs are training work in every window (repeatable)")
    ap.add_argument("--save", default="models/single-device.joblib")
    args = ap.parse_args(argv)
    os.chdir(REPO)   # the artifact's JSON names the roots as given, relative to the repository
    save = Path(args.save)
    command = "python scripts/single_device.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    if bool(args.adversarial) != bool(args.adversarial_family):
        ap.error("--adversarial and --adversarial-family go together")
    path = train_final(args.data, save.stem, save.parent, default_cache_dir(), 0, command, factory=SingleDeviceCheck,
                       adversarial=args.adversarial, adversarial_families=args.adversarial_family)
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
