"""What a section renders with: loaded inputs, and helpers that put numbers into text.

Every number in the report's prose goes through ``num`` (a value read from a results file, with
the key path it came from), ``derived`` (a value computed here from such values, naming them: a
results key, the recorded runs' manifests, or a campaign file) or ``pub`` (a published figure from
``published.py``). Each call records what it injected, and wraps the text in a span, so a test can
check that no digit reaches the page any other way.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .inputs import INPUTS, Input, input_path, is_present, where
from .published import PUBLISHED
from ..targets import TARGETS

# Names that contain digits but are not measurements (hardware, methods, file names). A test checks
# that every ``term`` span holds one of these, so a number cannot hide as a "term".
TERMS = frozenset({
    "H200", "H100", "V100", "A100", "GH200", "NV18", "ZeRO-3", "FSDP", "INT8", "FP8", "FP16",
    "HMAC-SHA256", "SHA-256", "PowerSGD", "DiLoCo", "Streaming DiLoCo", "INTELLECT-1", "Covenant-72B",
    "DeMo", "NVML", "DCGM", "gpu0", "gpu1", "1 Hz", "comm-ml", "rt-baseline", "fused", "comm-rules",
    "FP32", "bf16", "2:4-sparse",
})


@dataclass
class Injected:
    text: str
    kind: str            # "result" | "derived" | "published" | "target"
    value: float | str | None
    sources: list[str]   # "detector.json#detectors/fused/run_accuracy", or "published:key"


@dataclass
class Ctx:
    results: Path
    data: Path
    allow_missing: bool
    configs: Path = Path("configs")
    injected: list[Injected] = field(default_factory=list)
    missing_log: list[Input] = field(default_factory=list)  # every missing block, in page order
    _cache: dict = field(default_factory=dict)

    # ----- inputs
    def has(self, key: str) -> bool:
        return is_present(INPUTS[key], self.results, self.data)

    def load(self, key: str) -> dict | None:
        if key not in self._cache:
            inp = INPUTS[key]
            self._cache[key] = json.loads(input_path(inp, self.results, self.data).read_text()) \
                if inp.root == "results" and self.has(key) else None
        return self._cache[key]

    def runs(self, key: str) -> list[tuple[Path, dict]]:
        """(run directory, manifest) of every recorded run under a data input, sorted by directory."""
        if key not in self._cache:
            from ..traces.io import iter_runs, read_manifest
            root = input_path(INPUTS[key], self.results, self.data)
            self._cache[key] = [(d, read_manifest(d)) for d in iter_runs(root)] if self.has(key) else []
        return self._cache[key]

    def missing(self, key: str, what: str = "") -> str:
        """The block that stands where numbers would be: names the command, never a placeholder value."""
        inp = INPUTS[key]
        self.missing_log.append(inp)
        lead = f"{html.escape(what)}: " if what else ""
        return f'<div class="missing">{lead}not yet measured: {missing_html(inp, self.results, self.data)}.</div>'

    # ----- numbers
    def num(self, key: str, path: str, fmt: str = "g3", unit: str = "") -> str:
        """A value read from input ``key`` at slash-separated ``path`` (e.g. ``detectors/fused/run_accuracy``)."""
        value = lookup(self.load(key), path)
        return self._span(value, fmt, unit, "result", [source(key, path)])

    def value(self, key: str, path: str):
        return lookup(self.load(key), path)

    def derived(self, value, fmt: str, sources: list, unit: str = "") -> str:
        """A value computed here. Each source is (input key, path): a key path in a results file, or for
        a data input what was read from every run's manifest (``"end-start"``); or a string already
        formatted, such as ``config:campaigns/h200.yaml#runs`` (under the configs root)."""
        return self._span(value, fmt, unit, "derived", [s if isinstance(s, str) else source(*s) for s in sources])

    def spread(self, values: list, fmt: str, sources: list, unit: str = "") -> str:
        """One value, or "lowest to highest" when they differ once formatted; each traced like ``derived``."""
        lo, hi = min(values), max(values)
        if fmt_value(lo, fmt) == fmt_value(hi, fmt):
            return self.derived(lo, fmt, sources, unit)
        return f"{self.derived(lo, fmt, sources)} to {self.derived(hi, fmt, sources, unit)}"

    def pub(self, key: str, fmt: str = "g3", unit: str = "") -> str:
        return self._span(PUBLISHED[key].value, fmt, unit, "published", [f"published:{key}"])

    def target(self, key: str, fmt: str = "g3", unit: str = "") -> str:
        """A project target (``trainsentry/targets.py``: what an issue asks for), never a measurement."""
        return self._span(TARGETS[key].value, fmt, unit, "target", [f"target:{key}"])

    def _span(self, value, fmt: str, unit: str, kind: str, sources: list[str]) -> str:
        text = fmt_value(value, fmt) + (f"\u202f{unit}" if unit and value is not None else "")
        self.injected.append(Injected(text, kind, value, sources))
        title = html.escape("; ".join(sources))
        return f'<span class="n" data-kind="{kind}" title="{title}">{html.escape(text)}</span>'

    # ----- names, citations, numbering (digits that are not measurements)
    @staticmethod
    def term(name: str) -> str:
        if name not in TERMS:
            raise KeyError(f"{name!r} is not in report.context.TERMS")
        return f'<span class="term">{html.escape(name)}</span>'

    @staticmethod
    def cite(key: str) -> str:
        from .published import CITATIONS
        c = CITATIONS[key]
        return f'<span class="cite">[{html.escape(c.short)}]</span>'


def source(key: str, path: str) -> str:
    """How a number's origin is written: ``detector.json#detectors/fused/run_accuracy`` for a results
    file, ``data:h200/*/manifest.json#end-start`` for the recorded runs' manifests."""
    inp = INPUTS[key]
    return f"data:{inp.rel_path}/*/manifest.json#{path}" if inp.root == "data" else f"{inp.rel_path}#{path}"


def missing_html(inp: Input, results: Path, data: Path) -> str:
    """"<file> is missing; run <command>": the one wording of a missing input, wherever it shows."""
    path = where(inp, input_path(inp, results, data))
    return (f"<code>{html.escape(path)}</code> is missing ({html.escape(inp.what)}); "
            f"run <code>{html.escape(inp.command)}</code>")


def lookup(doc, path: str):
    cur = doc
    for part in path.split("/"):
        if isinstance(cur, list):
            cur = cur[int(part)]
        elif isinstance(cur, dict):
            if part not in cur:
                raise KeyError(f"no {part!r} in results path {path!r}")
            cur = cur[part]
        else:
            raise KeyError(f"results path {path!r} runs past a value")
    return cur


FRACTION_WORDS = ((0.0, "none"), (0.25, "a quarter"), (1 / 3, "a third"), (0.5, "half"), (2 / 3, "two thirds"),
                  (0.75, "three quarters"), (1.0, "all"))
SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def fmt_value(value, fmt: str) -> str:
    """Formats: pct (fraction → percent), pct1, frac (fraction → "a third" or percent), int, g2/g3 (significant figures), f1/f2, sci, x (multiplier)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if isinstance(value, str):
        return value
    v = float(value)
    if fmt == "pct":
        return f"{100 * v:.1f}\u202f%"
    if fmt == "pct2":
        return f"{100 * v:.2f}\u202f%"
    if fmt == "pctg":  # small fractions: two significant figures, never rounded to zero
        return f"{100 * v:.2g}\u202f%"
    if fmt == "pctv":  # already a percentage
        return f"{v:.1f}\u202f%"
    if fmt == "int":
        return f"{round(v):,}"
    if fmt == "frac":  # a share in words when it is near a simple fraction ("a third"), else a percentage
        share, word = min(FRACTION_WORDS, key=lambda sw: abs(sw[0] - v))
        return word if abs(share - v) <= 0.02 else f"{100 * v:.0f}\u202f%"
    if fmt in ("g2", "g3", "g4"):
        return f"{v:.{fmt[1]}g}"
    if fmt in ("f0", "f1", "f2", "f3"):
        return f"{v:.{fmt[1]}f}"
    if fmt == "sci":
        m, e = f"{v:.2e}".split("e")
        return f"{m}\u00d710" + str(int(e)).translate(SUPERSCRIPT)
    if fmt == "x":  # a multiplier: two decimals below ten (0.90×, 2.65×), whole above (19×)
        return (f"{v:.2f}" if abs(v) < 10 else f"{v:.0f}") + "\u00d7"
    if fmt in ("s1", "s2", "s3"):  # signed, never "-0.000"
        t = f"{v:+.{fmt[1]}f}"
        return t[1:] if float(t) == 0 else t.replace("-", "\u2212")
    if fmt == "usd":
        for div, suf in ((1e9, " billion"), (1e6, " million")):
            if abs(v) >= div:
                return f"${v / div:.3g}{suf}"
        return f"${v:,.0f}"
    if fmt == "bytes":
        for div, suf in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
            if abs(v) >= div:
                return f"{v / div:.3g}\u202f{suf}"
        return f"{v:.0f}\u202fB"
    raise ValueError(f"unknown number format {fmt!r}")


@dataclass
class Figures:
    """Numbered figures, embedded as base64 PNG so the HTML needs no other file."""
    items: list[tuple[str, str]] = field(default_factory=list)  # (name, caption)

    def embed(self, png: bytes | None, name: str, caption_html: str) -> str:
        import base64
        if png is None:
            return ""
        self.items.append((name, caption_html))
        n = len(self.items)
        b64 = base64.b64encode(png).decode("ascii")
        return (f'<figure data-name="{html.escape(name)}"><img alt="{html.escape(name)}" '
                f'src="data:image/png;base64,{b64}"><figcaption><span class="figno">Figure {n}.</span> '
                f'{caption_html}</figcaption></figure>')
