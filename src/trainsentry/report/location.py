"""Where the built report is, for other commands to tell (``trainsentry demo`` ends with it).

Kept free of the builder's imports so that telling costs nothing."""

from __future__ import annotations

from pathlib import Path

BUILD = "trainsentry report"
DRAFT = "trainsentry report --allow-missing"
DRAFT_MARK = "<div class='draft'>"  # the banner build.draft_banner puts at the top of a draft


def report_location(out: Path) -> str:
    """One line: the report's files under ``out`` and whether they are a draft, or how to build them."""
    html_path, pdf_path = out / "report.html", out / "report.pdf"
    if not html_path.is_file():
        return (f"the report is not built yet: `{BUILD}` writes {html_path} and {pdf_path} from the committed "
                f"results (`{DRAFT}` builds a draft while some are missing)")
    files = " and ".join(str(p) for p in (html_path, pdf_path) if p.is_file())
    draft = DRAFT_MARK in html_path.read_text(encoding="utf-8", errors="replace")
    state = ("a draft: some inputs were missing, it names the commands that produce them" if draft
             else "built from the committed results")
    return f"the report: {files} ({state}; rebuild with `{BUILD}`)"
