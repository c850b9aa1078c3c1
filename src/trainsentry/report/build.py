"""Build report/report.html (self-contained) and report/report.pdf (Chromium prints the same HTML)."""

from __future__ import annotations

import html
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .context import Ctx, Figures, missing_html
from .inputs import INPUTS, MissingInputs, input_path, is_present
from .location import DRAFT_MARK
from .page import Part, page
from .published import CITATIONS
from .sections import SECTIONS
from .summary import render as render_summary

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
TITLE = "Telling training from inference by outside telemetry"


@dataclass
class Built:
    html_path: Path
    pdf_path: Path | None
    ctx: Ctx
    figures: Figures
    missing: list


def required_inputs() -> list[str]:
    keys: list[str] = []
    for s in SECTIONS:
        keys += [k for k in s.INPUTS if k not in keys]
    return keys


def check_inputs(results: Path, data: Path) -> list:
    assert not any(INPUTS[k].optional for k in required_inputs()), "a section lists an optional input"
    return [(INPUTS[k], input_path(INPUTS[k], results, data)) for k in required_inputs()
            if not is_present(INPUTS[k], results, data)]


def render_html(results: Path, data: Path, allow_missing: bool,
                configs: Path = Path("configs")) -> tuple[str, Ctx, Figures, list]:
    missing = check_inputs(results, data)
    if missing and not allow_missing:
        raise MissingInputs(missing)
    ctx, figs = Ctx(results, data, allow_missing, configs), Figures()
    summary = render_summary(ctx)
    parts = []
    for s in SECTIONS:
        start = len(ctx.missing_log)
        body = s.render(ctx, figs)
        waits = list(dict.fromkeys(ctx.missing_log[start:]))  # the inputs this section shows as missing
        parts.append(Part(s.__name__.rsplit(".", 1)[-1], s.TITLE, body, waits))
    status = ("<b>Draft</b>: the sections marked below wait for inputs that are not measured yet."
              if missing else "Built from the committed results and data, all inputs present.")
    sub = (f"Built by <code>trainsentry report</code> from <code>{html.escape(str(results))}</code> and "
           f"<code>{html.escape(str(data))}</code>. {status} Every number in the text is read from a results "
           f"file or a recorded run at build time; hover over a number to see where it comes from.")
    refs = "".join(f"<li><span class='cite'>{html.escape(c.short)}: {html.escape(c.full)}</span></li>"
                   for c in CITATIONS.values())
    return page(TITLE, sub, parts, refs, draft_banner(parts, results, data), summary), ctx, figs, missing


def draft_banner(parts: list[Part], results: Path, data: Path) -> str:
    """At the top of a draft: every incomplete section, each input it waits for and the command."""
    items = ""
    for i, p in enumerate(parts, 1):
        if p.waits:
            needs = "; ".join(missing_html(inp, results, data) for inp in p.waits)
            items += (f'<li><a href="#{p.anchor}"><span class="secno">{i}.</span> {html.escape(p.title)}</a>: '
                      f"{needs}.</li>")
    if not items:
        return ""
    return (f"{DRAFT_MARK}<b>This is a draft.</b> These sections are incomplete: where a number would "
            f"be, they say what is missing and which command produces it.<ul>{items}</ul></div>")


def find_chromium() -> str | None:
    for name in CHROMIUM_CANDIDATES:
        p = shutil.which(name)
        if p:
            return p
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


def print_pdf(html_path: Path, pdf_path: Path, timeout_s: float = 120) -> Path:
    exe = find_chromium()
    if exe is None:
        raise RuntimeError("cannot make the PDF: no Chromium found (install the `chromium` package; "
                           "`make browser` does it on Debian)")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
               "--no-pdf-header-footer", f"--print-to-pdf={pdf_path}", html_path.resolve().as_uri()]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if r.returncode != 0 or not pdf_path.is_file() or pdf_path.stat().st_size == 0:
        raise RuntimeError(f"Chromium failed to print {html_path} (exit {r.returncode}): {r.stderr[-800:]}")
    return pdf_path


def build(results: Path = Path("results"), data: Path = Path("data"), out: Path = Path("report"),
          allow_missing: bool = False, pdf: bool = True, configs: Path = Path("configs")) -> Built:
    text, ctx, figs, missing = render_html(Path(results), Path(data), allow_missing, Path(configs))
    out.mkdir(parents=True, exist_ok=True)
    html_path = out / "report.html"
    tmp = html_path.with_suffix(".html.tmp")  # write then rename: a failed build keeps the old report
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(html_path)
    (out / "report_numbers.json").write_text(json.dumps(
        [{"text": i.text, "kind": i.kind, "value": i.value, "sources": i.sources} for i in ctx.injected],
        indent=1, default=str) + "\n")
    pdf_path = print_pdf(html_path, out / "report.pdf") if pdf else None
    return Built(html_path, pdf_path, ctx, figs, missing)
