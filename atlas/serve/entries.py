"""The catalogue's pages: every entry (``/entries``), and one entry (``/entry/<name>``): a form of its parameters
(defaults filled), its answer as a table paged ``PER_PAGE`` rows at a time, its notes and its figure, a PNG of its
own (``/entry/<name>/figure.png``, with the page's query), so that the table comes without waiting for the drawing.

An entry is named by its name or an alias; another name is refused (404), with the entry close words would choose.
A parameter that is unknown, of the wrong kind, or a run the store does not hold is refused before the entry runs
(400); an entry that cannot answer (what it needs first is not in the store, a value its SQL refuses) is said on
its page (422), the form kept to change the request.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from matplotlib.figure import Figure
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from atlas.catalogue import Entry, choose, entries
from atlas.engine import Answer
from atlas.errors import AtlasError, note_cli_text
from atlas.plot import figure
from atlas.report.page import FIGURE_DPI, esc, table
from atlas.serve.layout import (
    Refused,
    hidden_fields,
    html_table,
    link,
    page,
    pager,
    run_bar,
    run_param,
    text_field,
    url,
    whole_number,
)
from atlas.serve.state import Served, Shown

PER_PAGE = 200  # rows of an answer on one page
PAGED = ("run", "page")  # the query's fields that are not the entry's parameters


def entries_page(request: Request) -> HTMLResponse:
    served: Served = request.app.state.served
    run = request.query_params.get("run") or None
    shown = served.shown(run) if run or not served.runs().is_empty() else None
    keep = run_param(shown)
    rows = [
        (
            link(url(f"/entry/{e.name}", keep), e.name),
            esc(e.paper),
            esc(", ".join(f"{p.name}={p.default if p.default is not None else 'REQUIRED'}" for p in e.parameters)),
            esc(e.plot[0] if e.plot else ""),
            f"<details><summary>what it answers</summary>{esc(e.description)}</details>",
        )
        for e in entries()
    ]
    body = (
        '<p class="note">Every analysis of the catalogue (queries/*.sql); each page answers it for a run, as '
        "'atlas query' does.</p>"
        + html_table(("entry", "paper", "parameters", "figure", "description"), rows, text=(1, 2, 4))
    )
    bar = run_bar(shown, "/entries", said="; an entry's page answers for it") if shown else ""
    return HTMLResponse(page("Catalogue", body, shown, bar))


def named_entry(name: str) -> Entry:
    """The entry ``name`` names (its name or an alias); else refused, naming the entry close words choose."""
    for entry in entries():
        if name in (entry.name, *entry.aliases):
            return entry
    try:
        near = f"; the nearest: '{choose(name)[0].name}'"
    except AtlasError:
        near = ""
    raise Refused(404, f"no catalogue entry named '{name}'{near} (see the catalogue)")


@dataclass(frozen=True)
class Asked:
    """An entry as a request asks for it: the run shown (None: the entry takes none, and none was named) and the
    entry's other parameters as given, checked; ``missing``: the required ones not given."""

    entry: Entry
    shown: Shown | None
    given: dict[str, str]
    missing: tuple[str, ...]

    @property
    def takes_run(self) -> bool:
        return "run" in {p.name for p in self.entry.parameters}

    def answer(self, served: Served) -> Answer:
        return served.answer(self.entry, self.shown if self.takes_run else None, self.given)


def asked(served: Served, request: Request) -> Asked:
    """The entry and parameters ``request`` asks for; an unknown entry is refused (404), a parameter it does not
    take, a value of the wrong kind or a run the store does not hold too (400)."""
    entry = named_entry(request.path_params["name"])
    query = request.query_params
    given = {k: v for k, v in query.items() if k not in PAGED}
    takes_run = "run" in {p.name for p in entry.parameters}
    shown = served.shown(query.get("run") or None) if takes_run or query.get("run") else None
    missing = tuple(p.name for p in entry.parameters if p.default is None and not given.get(p.name))
    if not missing:
        try:
            entry.bind({**given, **({"run": shown.run_id} if takes_run and shown else {})})
            for name, kind in entry.run_parameters.items():
                if name != "run" and given.get(name):
                    with served.lock:
                        served.st.run_id(given[name], name, kind, query=True)
        except AtlasError as exc:
            raise Refused(400, exc.cli_text(), shown) from None
    return Asked(entry, shown, given, missing)


def entry_page(request: Request) -> HTMLResponse:
    served: Served = request.app.state.served
    number = whole_number(request.query_params.get("page"), "page", 1)
    ask = asked(served, request)
    entry, shown, given = ask.entry, ask.shown, ask.given
    form = _form(served, entry, given, shown)
    if ask.missing:
        wanted = f'<p class="note">give {esc(" and ".join(ask.missing))} to answer</p>'
        return _entry_response(entry, shown, given, form + wanted)
    try:
        answer = ask.answer(served)
    except AtlasError as exc:
        body = form + f'<p class="error">{esc(exc.cli_text())}</p>'
        return _entry_response(entry, shown, given, body, 422)
    return _entry_response(entry, shown, given, form + _answered(entry, answer, given, shown, number))


def figure_png(request: Request) -> Response:
    """The entry's figure of the answer the page shows, as PNG; one that cannot be drawn says why in the image."""
    served: Served = request.app.state.served
    ask = asked(served, request)
    if ask.missing or not ask.entry.plot:
        raise Refused(404, f"'{ask.entry.name}' has no figure{' until it has an answer' if ask.missing else ''}")
    try:
        answer = ask.answer(served)
    except AtlasError as exc:
        raise Refused(422, exc.cli_text(), ask.shown) from None
    key = (ask.entry.name, answer.title, tuple(sorted(ask.given.items())))
    return Response(served.figures.get(key, lambda: _drawn(served, ask.entry, answer)), media_type="image/png")


def _entry_response(
    entry: Entry, shown: Shown | None, given: dict[str, str], body: str, status: int = 200
) -> HTMLResponse:
    head = (
        f'<p class="paper">{esc(entry.paper)}</p>'
        f"<details><summary>what the numbers mean</summary><p>{esc(entry.description)}</p></details>"
    )
    if shown is not None and "run" in {p.name for p in entry.parameters}:
        bar = run_bar(shown, url(f"/entry/{entry.name}"), given)
    else:  # the runs it reads are its own parameters (a base and a tuned run, a task model's), or every run
        named = [p.name for p in entry.parameters if p.run is not None]
        said = f"the runs it reads are its parameters {', '.join(named)}" if named else "it answers over every run"
        bar = f'<div class="runbar"><span class="run">{esc(said)}</span></div>'
    return HTMLResponse(page(entry.name, head + body, shown, bar), status)


def _form(served: Served, entry: Entry, given: dict[str, str], shown: Shown | None) -> str:
    """The entry's parameters but its run (the run bar's), each filled as given, else with its default; a parameter
    naming a run suggests the store's."""
    fields = []
    for p in entry.parameters:
        if p.name == "run":
            continue
        listed = {"runs": "runs-list", "any": "results-list"}.get(p.run or "", "")
        value = given.get(p.name, p.default or "")
        fields.append(
            f'<label><span class="name">{esc(p.name)}</span> {text_field(p.name, value, 24, listed)}</label>'
            f'<span class="help">{esc(p.description)}</span>'
        )
    kinds = {p.run for p in entry.parameters if p.run is not None and p.name != "run"}
    ids = served.runs()["run_id"].to_list() if "runs" in kinds else []
    results = served.st.store.run_ids() if "any" in kinds else []
    lists = "".join(
        f'<datalist id="{name}">{"".join(map(_option, values))}</datalist>'
        for name, values in (("runs-list", ids), ("results-list", results))
        if values
    )
    action = url(f"/entry/{entry.name}")
    return (
        f'<form class="params" method="get" action="{esc(action)}">{"".join(fields)}'
        f'{hidden_fields(run_param(shown))}<button type="submit">answer</button></form>{lists}'
    )


def _option(value: str) -> str:
    return f'<option value="{esc(value)}">'


def _answered(entry: Entry, answer: Answer, given: dict[str, str], shown: Shown | None, number: int) -> str:
    """The answer's title, notes, figure and its page ``number`` of rows."""
    frame = answer.frame
    n_pages = max(1, -(-len(frame) // PER_PAGE))
    if number > n_pages:
        raise Refused(400, f"page {number}: the answer has {n_pages} page{'s' if n_pages > 1 else ''}", shown)
    notes = "".join(f'<p class="note">{esc(note_cli_text(note))}</p>' for note in answer.notes)
    where = {**given, **run_param(shown)}
    picture = ""
    if entry.plot and not frame.is_empty():
        drawn = url(f"/entry/{entry.name}/figure.png", where)
        picture = f'<img class="figure" alt="the figure of {esc(entry.name)}" src="{esc(drawn)}">'
    paging = pager(f"/entry/{entry.name}", where, number, PER_PAGE, len(frame), "rows")
    rows = table(frame.slice((number - 1) * PER_PAGE, PER_PAGE), PER_PAGE) if len(frame) else ""
    return f'<section class="answer"><p class="source">{esc(answer.title)}</p>{notes}{picture}{paging}{rows}</section>'


def _drawn(served: Served, entry: Entry, answer: Answer) -> bytes:
    """The answer's figure as PNG (one drawing at a time); where it cannot be drawn, a line saying why."""
    with served.drawing:
        try:
            drawn = figure(entry, answer.frame, answer.title)
        except AtlasError as exc:
            drawn = Figure(figsize=(8, 0.5))
            drawn.text(0.01, 0.5, f"no figure: {exc.cli_text()}", va="center")
        buffer = io.BytesIO()
        drawn.savefig(buffer, format="png", dpi=FIGURE_DPI)
    return buffer.getvalue()
