"""The SQL box (``/sql``): one read-only SELECT over the store's tables (``Atlas.relation``: a statement that
writes is refused in its one line), its first ``SQL_ROWS`` rows shown."""

from __future__ import annotations

import threading
import time

import duckdb
from starlette.requests import Request
from starlette.responses import HTMLResponse

from atlas.errors import AtlasError
from atlas.report.page import esc, table
from atlas.serve.layout import link, page, run_bar, url
from atlas.serve.state import Served

SQL_ROWS = 200  # rows of a result shown
SQL_SECONDS = 30  # a statement running longer is stopped: the other pages wait for it


def sql_page(request: Request) -> HTMLResponse:
    served: Served = request.app.state.served
    text = request.query_params.get("q") or ""
    shown = served.shown(request.query_params.get("run") or None) if not served.runs().is_empty() else None
    quoted = shown.run_id.replace("'", "''") if shown else "RUN"
    example = (
        "SELECT layer + 1 AS layer, head + 1 AS head, avg(entropy) AS entropy FROM attn_rows "
        f"WHERE run_id = '{quoted}' GROUP BY ALL ORDER BY ALL"
    )
    form = (
        '<form class="sql" method="get" action="/sql">'
        f'<textarea name="q" rows="8" cols="110" spellcheck="false">{esc(text)}</textarea>'
        f'<button type="submit">run</button></form><p class="note">One SELECT over every run of the store (its '
        "tables: schema.sql; layers and heads 0-based, tok_idx and word_idx too); the first "
        f"{SQL_ROWS} rows are shown. For instance: {link(url('/sql', {'q': example}), example)}</p>"
    )
    bar = run_bar(shown, "/sql", {"q": text}, "; the example below asks about it") if shown else ""
    if not text.strip():
        return HTMLResponse(page("SQL", form, shown, bar))
    start = time.perf_counter()
    try:
        with served.lock:  # every page waits for it: stopped after SQL_SECONDS
            stop = threading.Timer(SQL_SECONDS, served.st.interrupt)
            stop.start()
            try:
                frame = served.st.relation(text).limit(SQL_ROWS + 1).pl()
            finally:
                stop.cancel()
    except AtlasError as exc:
        return HTMLResponse(page("SQL", form + f'<p class="error">{esc(exc.cli_text())}</p>', shown, bar), 400)
    except duckdb.InterruptException:
        said = f"sql: stopped after {SQL_SECONDS} s, the SQL box's limit (the DuckDB shell has none)"
        return HTMLResponse(page("SQL", form + f'<p class="error">{esc(said)}</p>', shown, bar), 400)
    except duckdb.Error as exc:
        said = f"sql: {str(exc).strip().splitlines()[0]}"
        return HTMLResponse(page("SQL", form + f'<p class="error">{esc(said)}</p>', shown, bar), 400)
    seconds = time.perf_counter() - start
    more = len(frame) > SQL_ROWS
    said = f"{'the first ' if more else ''}{min(len(frame), SQL_ROWS):,} rows{', more not shown' if more else ''}"
    result = f'<p class="note">{esc(said)}, in {seconds:.2f} s</p>{table(frame.head(SQL_ROWS), SQL_ROWS)}'
    return HTMLResponse(page("SQL", form + result, shown, bar))
