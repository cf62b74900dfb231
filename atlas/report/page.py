"""HTML of the report: one self-contained page (inline CSS, JavaScript and PNG figures; no URL to fetch).

Text is escaped, and every '://' in it written as '&#58;//' (in the embedded JSON as '\\u003a//'), so the
file holds no http(s) URL at all: a browser has nothing to load, and a check for URLs has nothing to find.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import polars as pl
from matplotlib.figure import Figure
from PIL import Image

ASSETS = Path(__file__).resolve().parent
MAX_ROWS = 200  # rows of an answer shown in its table (the rest counted)
FIGURE_DPI = 80


def esc(value: object) -> str:
    return html.escape(str(value)).replace("://", "&#58;//")


def script_json(value: object) -> str:
    """JSON to embed in a <script> element: no '</' that would close it, no URL."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/").replace("://", "\\u003a//")


def png(fig: Figure) -> str:
    """A figure as an <img> with the PNG inline, in 256 colours (a third of the bytes of matplotlib's
    true-colour PNG, and no software tag naming a web address)."""
    drawn = io.BytesIO()
    fig.savefig(drawn, format="png", dpi=FIGURE_DPI)
    drawn.seek(0)
    buffer = io.BytesIO()
    Image.open(drawn).convert("RGB").quantize(256).save(buffer, "PNG", optimize=True)
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img class="figure" alt="figure" src="data:image/png;base64,{data}">'


def _cell(value: object) -> tuple[str, bool]:
    """A value as table text, and whether it is a number (right-aligned)."""
    if value is None:
        return "", False
    if isinstance(value, bool):
        return str(value).lower(), False
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value), True
        return (f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e12 else f"{value:.3e}"), True
    if isinstance(value, int):
        return str(value), True
    if isinstance(value, datetime | date):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat(), False
    if isinstance(value, list | dict):
        return json.dumps(value, default=str), False
    return str(value), False


def table(frame: pl.DataFrame, max_rows: int = MAX_ROWS) -> str:
    """An answer as an HTML table of its first ``max_rows`` rows, with the rows left out counted."""
    head = "".join(f"<th>{esc(c)}</th>" for c in frame.columns)
    rows = []
    for row in frame.head(max_rows).iter_rows():
        cells = [_cell(v) for v in row]
        rows.append("<tr>" + "".join(f"<td{' class=num' if n else ''}>{esc(t)}</td>" for t, n in cells) + "</tr>")
    more = len(frame) - max_rows
    note = f'<p class="note">{more:,} more rows not shown (atlas query shows them all)</p>' if more > 0 else ""
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>{note}'


def fields(frames: list[pl.DataFrame]) -> str:
    """Rows of one record per run (the runs table) as a field x run table."""
    columns = frames[0].columns
    head = "<tr><th>field</th>" + "".join(f"<th>{esc(f['run_id'][0])}</th>" for f in frames) + "</tr>"
    body = "".join(
        f"<tr><th>{esc(c)}</th>" + "".join(f"<td>{esc(_cell(f[c][0])[0])}</td>" for f in frames) + "</tr>"
        for c in columns
        if c != "run_id"
    )
    return f'<div class="table"><table class="fields"><thead>{head}</thead><tbody>{body}</tbody></table></div>'


@dataclass(frozen=True)
class Block:
    """One run's part of an entry's section: a title line, and a table and figure or a note."""

    title: str
    body: str  # HTML: the table and figure
    note: str | None = None  # why there is no table (then body is empty)


@dataclass(frozen=True)
class Section:
    anchor: str
    name: str
    paper: str
    description: str
    blocks: tuple[Block, ...]

    @property
    def shown(self) -> bool:
        """False when no block has a table (the entry had nothing for the runs)."""
        return any(b.note is None for b in self.blocks)


def section_html(section: Section) -> str:
    blocks = "".join(
        f'<div class="block"><p class="source">{esc(b.title)}</p>'
        + (f'<p class="note">{esc(b.note)}</p>' if b.note else b.body)
        + "</div>"
        for b in section.blocks
    )
    return (
        f'<section class="entry" id="{esc(section.anchor)}"><h3>{esc(section.name)}</h3>'
        f'<p class="paper">{esc(section.paper)}</p>'
        f"<details><summary>what the numbers mean</summary><p>{esc(section.description)}</p></details>"
        f'<div class="blocks n{len(section.blocks)}">{blocks}</div></section>'
    )


def page(title: str, subtitle: str, runs_table: str, explorer: dict | None, sections: list[Section]) -> str:
    """The whole document."""
    css = (ASSETS / "report.css").read_text()
    js = (ASSETS / "explorer.js").read_text()
    shown = [s for s in sections if s.shown]
    skipped = [s for s in sections if not s.shown]
    toc = "".join(f'<li><a href="#{esc(s.anchor)}">{esc(s.name)}</a></li>' for s in shown)
    skipped_html = "".join(
        f"<li><b>{esc(s.name)}</b>: {esc('; '.join(dict.fromkeys(b.note or '' for b in s.blocks)))}</li>"
        for s in skipped
    )
    explorer_html = explorer_link = ""
    if explorer is not None:
        explorer_link = '<a href="#explorer">attention explorer</a> · '
        explorer_html = (
            '<section id="explorer"><h2>Attention explorer</h2>'
            '<p class="note">Lines go from each token on the left (attending) to the tokens on the right it attends '
            "to; their opacity is the weight. Hover a token to see its row (left) or who attends to it (right); "
            "click a thumbnail to pick a head. Maps are the run's stored edges: every weight of a dense run, the "
            "largest weights up to the kept mass of a sparse one.</p>"
            '<div class="controls"><label>example <select id="ex-example"></select></label>'
            '<label>layer <select id="ex-layer"></select></label>'
            '<label>head <select id="ex-head"></select></label>'
            '<span id="ex-status" class="note">loading...</span></div>'
            '<div id="ex-panels"></div>'
            f'<script type="application/json" id="atlas-explorer-data">{script_json(explorer)}</script></section>'
        )
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{css}</style></head>'
        f'<body><header><h1>{esc(title)}</h1><p class="note">{esc(subtitle)}</p></header>'
        f'<nav><a href="#runs">runs</a> · {explorer_link}<a href="#catalogue">catalogue</a></nav>'
        f'<section id="runs"><h2>Runs</h2>{runs_table}</section>{explorer_html}'
        f'<section id="catalogue"><h2>Catalogue</h2><ol class="toc">{toc}</ol>'
        f"{''.join(section_html(s) for s in shown)}"
        f'<h2 id="skipped">Not in this report</h2><ul class="skipped">{skipped_html}</ul></section>'
        f"<script>{js}</script></body></html>\n"
    )
