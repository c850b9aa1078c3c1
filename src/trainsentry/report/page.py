"""The HTML page around the sections: inline CSS only, so the file stands alone and prints to PDF."""

import html
from dataclasses import dataclass, field

CSS = """
body{font-family:Georgia,'DejaVu Serif',serif;max-width:52rem;margin:2rem auto;padding:0 1rem;color:#222;line-height:1.5}
h1{font-size:1.8rem;margin-bottom:.2rem} h2{margin-top:2.2rem;border-bottom:1px solid #ccc;page-break-after:avoid}
h3{page-break-after:avoid} .sub{color:#555}
table{border-collapse:collapse;margin:1rem 0;font-size:.85rem;page-break-inside:avoid}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top} th{background:#f2f2f2}
tr.pub td{background:#fbf7ea;font-style:italic}
figure{margin:1.2rem 0;page-break-inside:avoid} .keep{break-inside:avoid;page-break-inside:avoid} figure img{max-width:100%} figcaption{font-size:.85rem;color:#444}
.missing{border-left:4px solid #c33;background:#fdf0f0;padding:.5rem .8rem;margin:.8rem 0;font-size:.9rem}
.draft{border:2px solid #c33;background:#fdf0f0;padding:.6rem 1rem;margin:1rem 0;font-size:.9rem}
.draft ul{margin:.4rem 0 0;padding-left:1.2rem} .draft li{margin:.2rem 0}
.summary{border:1px solid #9ab;background:#f3f7fa;padding:.6rem 1rem;margin:1rem 0;font-size:.92rem}
.summary ul{margin:.4rem 0 0;padding-left:1.2rem} .summary li{margin:.3rem 0}
.met{color:#262} .missed{color:#a22;font-weight:bold}
.pair{display:flex;gap:1rem;align-items:flex-start;break-inside:avoid;page-break-inside:avoid}
.pair figure{flex:1;min-width:0;margin:.6rem 0}
table.wide{font-size:.78rem} table.wide td,table.wide th{padding:.2rem .35rem}
.drafttag{font-size:.8rem;font-weight:normal;color:#fff;background:#c33;border-radius:3px;padding:.05rem .4rem;
vertical-align:middle;margin-left:.5rem} nav .drafttag{font-size:.7rem;margin-left:.3rem}
.note{font-size:.85rem;color:#555} .cite{color:#335;font-size:.9em} code{font-size:.85em;background:#f4f4f4}
.n{font-variant-numeric:tabular-nums} nav ol{columns:2;font-size:.9rem}
.refs li{font-size:.85rem}
@media print{body{margin:0;max-width:none}}
"""


@dataclass
class Part:
    anchor: str
    title: str
    body: str
    waits: list = field(default_factory=list)  # inputs the section shows as missing (a draft)


DRAFT_TAG = "<span class='drafttag'>draft: inputs missing</span>"
NAV_TAG = "<span class='drafttag'>draft</span>"


def page(title: str, subtitle_html: str, sections: list[Part], refs_html: str, banner_html: str = "",
         summary_html: str = "") -> str:
    """``sections`` in order; section numbers come from the order. A section waiting for inputs is
    tagged in the contents and at its heading."""
    nav = "".join(f'<li><a href="#{p.anchor}">{html.escape(p.title)}</a>{NAV_TAG if p.waits else ""}</li>'
                  for p in sections)
    body = "".join(f'<section id="{p.anchor}"><h2><span class="secno">{i}.</span> {html.escape(p.title)}'
                   f'{DRAFT_TAG if p.waits else ""}</h2>{p.body}</section>' for i, p in enumerate(sections, 1))
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1><p class='sub'>{subtitle_html}</p>"
            f"{banner_html}{summary_html}<nav><ol>{nav}</ol></nav>{body}<section id='references'><h2>References</h2>"
            f"<ol class='refs'>{refs_html}</ol></section></body></html>")
