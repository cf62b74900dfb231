"""The HTML every page of ``atlas serve`` shares: the page around a body, the run it shows with a selector of the
others, links, forms' fields, tables and the links that page through long ones.

Text is escaped as the report escapes it (``atlas.report.page.esc``: '://' written '&#58;//'), so a value of the
store never reads as a URL; the pages link to their own server only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import quote, urlencode

from atlas.report.page import esc
from atlas.serve.state import Shown

CSS = "/serve.css"
NAV = (("/", "runs"), ("/entries", "catalogue"), ("/examples", "examples"), ("/sql", "SQL"))


def url(path: str, params: Mapping[str, object] | None = None) -> str:
    """``path`` (its parts quoted) with the query of ``params`` that are given (not None, not empty)."""
    given = {k: v for k, v in (params or {}).items() if v is not None and v != ""}
    return quote(path) + (f"?{urlencode(given)}" if given else "")


def link(href: str, text: str, cls: str = "") -> str:
    classed = f' class="{cls}"' if cls else ""
    return f'<a href="{esc(href)}"{classed}>{esc(text)}</a>'


def run_param(shown: Shown | None) -> dict[str, str]:
    """The query naming the run shown, where the request named it (a link keeps it)."""
    return {"run": shown.run_id} if shown is not None and shown.named else {}


def run_bar(shown: Shown, action: str, keep: Mapping[str, str] | None = None, said: str = "") -> str:
    """Which run the page shows (the latest, where none was named and the store holds others: said so), and a
    selector of the others (``action``: the page it leads to; ``keep``: the query it keeps); ``said``: what the
    page shows of the run, after its id."""
    others = len(shown.run_ids) - 1
    if shown.named:
        which = ""
    elif others:
        which = f" (no run named: the store's latest; it holds {others} other{'s' if others > 1 else ''})"
    else:
        which = " (the store's only run)"
    text = f'<span class="run">run <b>{esc(shown.run_id)}</b>{esc(which)}{esc(said)}</span>'
    if not others:
        return f'<div class="runbar">{text}</div>'
    options = "".join(
        f'<option value="{esc(r)}"{" selected" if r == shown.run_id else ""}>{esc(r)}</option>' for r in shown.run_ids
    )
    hidden = hidden_fields({k: v for k, v in (keep or {}).items() if k != "run"})
    return (
        f'<form class="runbar" method="get" action="{esc(action)}">{text} '
        f'<label>show run <select name="run" onchange="this.form.submit()">{options}</select></label>{hidden}'
        '<button type="submit">show</button></form>'
    )


def hidden_fields(values: Mapping[str, object]) -> str:
    return "".join(
        f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">' for k, v in values.items() if v not in (None, "")
    )


def select(name: str, options: Iterable[tuple[str, str]], chosen: str, submit: bool = False) -> str:
    """A select of (value, text) options, ``chosen`` selected; ``submit``: choosing one submits its form."""
    shown = "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(t)}</option>' for v, t in options
    )
    submitted = ' onchange="this.form.submit()"' if submit else ""
    return f'<select name="{esc(name)}"{submitted}>{shown}</select>'


def text_field(name: str, value: str, size: int = 12, listed: str = "") -> str:
    """A text input (``listed``: the id of a datalist of suggestions)."""
    with_list = f' list="{esc(listed)}"' if listed else ""
    return f'<input type="text" name="{esc(name)}" value="{esc(value)}" size="{size}"{with_list}>'


def html_table(
    columns: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = (), text: Sequence[int] = ()
) -> str:
    """A table of cells already written as HTML (``numeric``: the columns aligned right; ``text``: the columns of
    running text, wrapped; the others are not)."""
    kinds = [" class=num" if i in numeric else " class=text" if i in text else "" for i in range(len(columns))]
    head = "".join(f"<th{kind}>{esc(c)}</th>" for kind, c in zip(kinds, columns, strict=True))
    body = "".join(
        "<tr>" + "".join(f"<td{kind}>{cell}</td>" for kind, cell in zip(kinds, row, strict=True)) + "</tr>"
        for row in rows
    )
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def pager(path: str, params: Mapping[str, object], page: int, per_page: int, total: int, what: str) -> str:
    """Where this page lies among ``total`` rows (``what``: their name), with links to the previous and next."""
    if total == 0:
        return f'<p class="pager">no {esc(what)}</p>'
    first, last = (page - 1) * per_page + 1, min(page * per_page, total)
    n_pages = -(-total // per_page)
    links = []
    if page > 1:
        links.append(link(url(path, {**params, "page": page - 1}), "previous", "prev"))
    if page < n_pages:
        links.append(link(url(path, {**params, "page": page + 1}), "next", "next"))
    said = f"{what} {first:,} to {last:,} of {total:,} (page {page} of {n_pages})"
    return f'<p class="pager">{esc(said)} {" · ".join(links)}</p>'


def page(title: str, body: str, shown: Shown | None = None, bar: str = "") -> str:
    """The whole document: the navigation (keeping the run named), ``bar`` (the run shown) and ``body``."""
    keep = run_param(shown)
    nav = " · ".join(link(url(path, keep), text) for path, text in NAV)
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)} · Attention Atlas</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="stylesheet" href="{CSS}">'
        '<link rel="icon" href="data:,">'  # no request for /favicon.ico
        f"</head><body><header><nav><b>Attention Atlas</b> · {nav}</nav>{bar}</header>"
        f"<main><h1>{esc(title)}</h1>{body}</main></body></html>\n"
    )


def error_page(status: int, message: str, shown: Shown | None = None) -> str:
    """A page saying the one line a request was refused with."""
    bar = run_bar(shown, "/entries") if shown is not None else ""  # the run the refused page would have shown
    return page(f"{status}: not shown", f'<p class="error">{esc(message)}</p>', shown, bar)


class Refused(Exception):
    """A request a page refuses: the HTTP status and the one line said on the error page."""

    def __init__(self, status: int, message: str, shown: Shown | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.shown = shown


def whole_number(given: str | None, name: str, default: int, low: int = 1) -> int:
    """A whole number of the query (``name``: as the page says it), ``default`` when not given; else refused."""
    if given is None or given == "":
        return default
    if not re.fullmatch(r"[0-9]{1,9}", given.strip()) or int(given) < low:
        raise Refused(400, f"{name} {given!r}: expected a whole number, {low} or more")
    return int(given)


def check_head(shown: Shown, layer: int, head: int, status: int = 400) -> None:
    """Refuse a layer and head the run's model has not (1-based), saying the ones it has."""
    if not (1 <= layer <= shown.n_layers and 1 <= head <= shown.n_heads):
        said = f"run {shown.run_id} has layers 1 to {shown.n_layers} and heads 1 to {shown.n_heads}"
        raise Refused(status, f"layer {layer}, head {head}: {said}", shown)
