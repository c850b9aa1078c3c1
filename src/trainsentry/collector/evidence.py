"""Evidence an inspector can read: quantities that could not be measured are said in words.

A detector's ``explain`` formats its numbers as they are; a quantity the window could not measure
(a node without GPUs has no NVLink bytes, a GPU without an energy counter no bytes per joule, an
idle window too little traffic for a symmetry) is NaN there and would read "nan" on the dashboard.
The live path passes every evidence line through :func:`worded`, which replaces such a line (or
the NaN inside it) by what was missing on *this* node, found from the node's own samples. Lines
without NaN pass through unchanged, so the numbers the detector reports are never altered.
"""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.compute as pc

NAN = re.compile(r"\bnan\b")
SCORE = re.compile(r"(: score [-0-9.]+)$")
# explain() lines of comm-rules (detect/rules.py), by how they start: what the line measures
RULE_LINES = (("volume ", "volume per GPU", "chan"), ("TX/RX symmetry", "TX/RX symmetry", "chan"),
              ("regularity:", "regularity (busy fraction, autocorrelation)", "chan"),
              ("bytes per joule", "bytes per joule", "energy"),
              ("bursts on all GPUs", "bursts on all GPUs at once", "nvlink"))
# a learned detector's line: "<feature> = nan raises P(training) by ..."
FEATURE_LINE = re.compile(r"^(?P<feat>\S+) = nan (?P<rest>.*)$")


def _measured(table: pa.Table | None, column: str) -> bool:
    """Whether any sample of the window's buffer carries ``column``."""
    return table is not None and column in table.column_names and pc.count(table.column(column)).as_py() > 0


def reasons(table: pa.Table | None) -> dict[str, str]:
    """Why each kind of quantity may be missing on this node: 'nvlink', 'net', 'energy'."""
    kinds = set(table.column("kind").to_pylist()) if table is not None and table.num_rows else set()
    if "gpu" not in kinds:
        nvlink = "no NVLink data on this node (it reports no GPUs)"
        energy = "no energy counter on this node (it reports no GPUs)"
    else:
        nvlink = ("too little NVLink traffic in this window to measure it" if _measured(table, "nvlink_tx_Bps")
                  else "no NVLink data on this node (its GPUs report no NVLink counters)")
        energy = ("no energy counted in this window" if _measured(table, "energy_W")
                  else "no energy counter on this node's GPUs")
    net = ("too little network traffic in this window to measure it" if "net" in kinds
           else "no network interface data on this node")
    return {"nvlink": nvlink, "net": net, "energy": energy}


def _feature_reason(feature: str, why: dict[str, str]) -> str:
    if "bytes_per_J" in feature or "energy" in feature:
        return why["energy"]
    for ch in ("nvlink", "net"):
        if feature.startswith(f"comm.{ch}."):
            return why[ch]
    return "not measurable in this window"


def worded(lines: list[str], table: pa.Table | None) -> list[str]:
    """``lines`` with every NaN replaced by the reason it could not be measured on this node."""
    if not any(NAN.search(line) for line in lines):
        return list(lines)
    why = reasons(table)
    chan = "nvlink"  # comm-rules names its channel on the line before the scores
    out = []
    for line in lines:
        if "from the network channel" in line:
            chan = "net"
        elif "from the NVLink channel" in line:
            chan = "nvlink"
        if not NAN.search(line):
            out.append(line)
            continue
        m = FEATURE_LINE.match(line)
        if m:
            out.append(f"{m['feat']} not measurable ({_feature_reason(m['feat'], why)}): {m['rest']}")
            continue
        rule = next((r for r in RULE_LINES if line.startswith(r[0])), None)
        reason = why["energy"] if rule and rule[2] == "energy" else why["nvlink"] if rule and rule[2] == "nvlink" \
            else why[chan]
        score = SCORE.search(line)
        head = line[:score.start()] if score else line
        if rule and not re.search(r"\d", NAN.sub("", head.split(" vs ")[0])):
            # every measured number on the line is missing: say what was measured and why not
            out.append(f"{rule[1]}: not measurable, {reason}{score.group(1) if score else ''}")
        else:  # some numbers are there: keep them, word the missing ones
            out.append(NAN.sub("not measurable", line) + f" ({reason})")
    return out
