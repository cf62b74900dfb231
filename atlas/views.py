"""One input's attention as it is looked at: one head as a head view, several as a model view, drawn as SVG.

A head view draws the input's tokens in two columns, a line from each attending token (left) to each token it
attends to (right), its opacity the weight, as bertviz's head view does; pointing at a token on the left shows its
lines alone, and every token says its word, POS, relation and special role on hover. A model view draws a
thumbnail of lines per layer and head. Both are plain SVG with CSS, no script and nothing loaded from elsewhere:
they show the same in Jupyter, in a notebook rendered as a static page, in ``atlas look``'s HTML file and in
``atlas serve``'s pages. A line under 1/255 (a head view) or 1/50 (a thumbnail) is left out: nobody sees it.

Not bertviz's or CircuitsVis's views, which take the same weights and tokens: bertviz 1.4's head and model views
load require.js, d3 and jQuery from cdnjs; CircuitsVis 1.43 probes the network to choose between its bundle
from a CDN and an inline one, and saves the CDN's; neither draws without a script, as a notebook rendered as a
static page (or one not yet trusted) shows it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from html import escape

import numpy as np

from atlas.errors import AtlasError, arg

HEAD_FLOOR = 1 / 255  # weights drawn in a head view
THUMB_FLOOR = 1 / 50  # weights drawn in a model view's thumbnails
ROW = 18  # px per token
CHAR = 7.2  # px per character of a token (12 px sans-serif)
GAP = 150  # px between the two columns of a head view
THUMB = 72  # px: a thumbnail's width
STYLE = """<style>
.aa-view{font:12px sans-serif;color:#222}
.aa-view .aa-caption{margin:2px 0 6px;color:#555;font-size:11px}
.aa-head text{dominant-baseline:middle;stroke:none;fill:#222}
.aa-head:hover .aa-src{opacity:.12}
.aa-head .aa-src:hover{opacity:1}
.aa-head .aa-src:hover text{font-weight:bold}
.aa-grid{display:inline-grid;gap:4px;align-items:center}
.aa-grid .aa-label{font-size:10px;color:#555;text-align:center}
.aa-grid svg{border:1px solid #ddd;background:#fff}
</style>"""


def colour(head: int, heads: int) -> str:
    """A head's colour (0-based ``head`` of ``heads``), as the report's explorer colours it."""
    return f"hsl({round(360 * head / max(heads, 1))}, 70%, 42%)"


@dataclass(frozen=True, eq=False)
class AttentionMap:
    """One input's attention in one head: ``weights[src, dst]``, the attention token ``src`` pays to token
    ``dst``, over the input's word pieces ``tokens`` (special tokens included). Shown in a notebook as a head view.

    From a sparse run, a row holds its kept edges only (its largest weights up to the run's kept mass, in steps
    of 1/256) and zeros where edges were dropped: ``note`` says so, with the mass the rows hold."""

    weights: np.ndarray  # float32 (n, n)
    tokens: list[str]
    layer: int = 1  # 1-based, as the catalogue shows it
    head: int = 1  # 1-based
    labels: tuple[str, ...] = ()  # per token: what hovering it says (its word, POS, relation, special role)
    source: str = ""  # where the map comes from: the run and the input
    note: str = ""  # what the map leaves out (a sparse run's dropped edges)
    heads: int = 1  # heads in its layer (its colour)

    def __iter__(self) -> Iterator[object]:  # weights, tokens = st.attention(...), as before it drew itself
        return iter((self.weights, self.tokens))

    def _repr_html_(self) -> str:
        return head_view(self)

    def html(self) -> str:
        """The head view as a standalone HTML page."""
        return document(f"layer {self.layer}, head {self.head}", head_view(self))


@dataclass(frozen=True, eq=False)
class Heads:
    """One input's attention in several heads: ``weights[l, h, src, dst]`` for the layers ``layers`` and heads
    ``heads`` (1-based). Shown in a notebook as a model view; ``head(layer, head)`` is one head's map."""

    weights: np.ndarray  # float32 (len(layers), len(heads), n, n)
    tokens: list[str]
    layers: tuple[int, ...]
    heads: tuple[int, ...]
    labels: tuple[str, ...] = ()
    source: str = ""
    note: str = ""
    n_heads: int = 0  # heads per layer in the model (the colours)
    link: Callable[[int, int], str] | None = field(default=None, compare=False)  # a thumbnail's link, if any

    def head(self, layer: int, head: int) -> AttentionMap:
        """The map of ``layer`` and ``head`` (1-based), which must be among these."""
        for name, value, among in (("layer", layer, self.layers), ("head", head, self.heads)):
            if value not in among:
                raise AtlasError(f"{arg(name, value)}: not among the {name}s read, {', '.join(map(str, among))}")
        at = self.weights[self.layers.index(layer), self.heads.index(head)]
        return AttentionMap(
            at, self.tokens, layer, head, self.labels, self.source, self.note, self.n_heads or max(self.heads)
        )

    def _repr_html_(self) -> str:
        return model_view(self)

    def html(self) -> str:
        """The model view as a standalone HTML page."""
        return document("attention heads", model_view(self))


def document(title: str, body: str) -> str:
    """A standalone HTML page holding ``body``."""
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title></head>'
        f"<body>{body}</body></html>\n"
    )


def kept_note(weights: np.ndarray, kept_mass: float | None, max_edges: int | None) -> str:
    """What a map read from a run leaves out: nothing on a dense run; on a sparse run, the dropped edges and the
    mass its rows hold (rows of zeros, a decoder's padding, aside)."""
    if kept_mass is None:
        return ""
    sums = weights.sum(axis=-1).ravel()
    sums = sums[sums > 0]
    held = f"; its rows hold {100 * sums.min():.0f} to {100 * sums.max():.0f} % of their mass" if sums.size else ""
    cap = f" (at most {max_edges} per row)" if max_edges is not None else ""
    return (
        f"sparse run: each row keeps its largest weights up to {kept_mass:g} of its mass{cap}, in steps of 1/256; "
        f"the edges dropped are drawn as nothing{held}"
    )


def _caption(*parts: str) -> str:
    text = "; ".join(p for p in parts if p)
    return f'<p class="aa-caption">{escape(text)}</p>' if text else ""


def _title(label: str) -> str:
    return f"<title>{escape(label)}</title>" if label else ""


def head_view(m: AttentionMap) -> str:
    """``m`` as a head view: SVG lines between the tokens' two columns."""
    n = len(m.tokens)
    width = max((len(t) for t in m.tokens), default=1) * CHAR + 8
    left, right = width, width + GAP
    y = [ROW * i + ROW / 2 + 2 for i in range(n)]
    labels = m.labels or tuple(m.tokens)
    rows = []
    for i in range(n):
        targets = np.flatnonzero(m.weights[i] >= HEAD_FLOOR)
        lines = "".join(
            f'<line x1="{left:.0f}" y1="{y[i]:.0f}" x2="{right:.0f}" y2="{y[j]:.0f}" '
            f'stroke-opacity="{m.weights[i, j]:.3f}" data-dst="{j}"/>'
            for j in targets
        )
        rows.append(
            f'<g class="aa-src" data-src="{i}"><text x="{left - 4:.0f}" y="{y[i]:.0f}" text-anchor="end">'
            f"{_title(labels[i])}{escape(m.tokens[i])}</text>{lines}</g>"
        )
    targets = "".join(
        f'<text x="{right + 4:.0f}" y="{y[j]:.0f}">{_title(labels[j])}{escape(m.tokens[j])}</text>' for j in range(n)
    )
    svg = (
        f'<svg class="aa-head" xmlns="http://www.w3.org/2000/svg" width="{2 * width + GAP:.0f}" '
        f'height="{ROW * n + 4}" data-layer="{m.layer}" data-head="{m.head}">'
        f'<g stroke="{colour(m.head - 1, m.heads)}" stroke-width="2">{"".join(rows)}</g>{targets}</svg>'
    )
    caption = _caption(f"layer {m.layer}, head {m.head}", m.source, m.note)
    return f'{STYLE}<div class="aa-view">{caption}{svg}</div>'


def _thumbnail(weights: np.ndarray, colour_of: str, title: str) -> str:
    n = weights.shape[0]
    step = THUMB / max(n, 1)
    y = [(i + 0.5) * step for i in range(n)]
    src, dst = np.nonzero(weights >= THUMB_FLOOR)
    lines = "".join(
        f'<line x1="4" y1="{y[i]:.1f}" x2="{THUMB - 4}" y2="{y[j]:.1f}" stroke-opacity="{weights[i, j]:.2f}"/>'
        for i, j in zip(src.tolist(), dst.tolist(), strict=True)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{THUMB}" height="{THUMB}">{_title(title)}'
        f'<g stroke="{colour_of}" stroke-width="1">{lines}</g></svg>'
    )


def model_view(h: Heads) -> str:
    """``h`` as a model view: a thumbnail of lines per layer (rows) and head (columns)."""
    n_heads = h.n_heads or max(h.heads)
    cells = ['<div class="aa-label"></div>'] + [f'<div class="aa-label">head {k}</div>' for k in h.heads]
    for a, layer in enumerate(h.layers):
        cells.append(f'<div class="aa-label">layer {layer}</div>')
        for b, head in enumerate(h.heads):
            thumb = _thumbnail(h.weights[a, b], colour(head - 1, n_heads), f"layer {layer}, head {head}")
            href = h.link(layer, head) if h.link else None
            cells.append(f'<a href="{escape(href)}">{thumb}</a>' if href else thumb)
    grid = (
        f'<div class="aa-grid" style="grid-template-columns:auto repeat({len(h.heads)}, {THUMB + 2}px)">'
        f"{''.join(cells)}</div>"
    )
    shown = f"{len(h.layers)} layers x {len(h.heads)} heads over {len(h.tokens)} tokens; lines of 1/50 and more"
    return f'{STYLE}<div class="aa-view">{_caption(shown, h.source, h.note)}{grid}</div>'
