"""The first page (``/``): the store's runs, each with links to its pages."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import HTMLResponse

from atlas.report.page import esc, table
from atlas.serve.layout import html_table, link, page, url
from atlas.serve.state import Served


def runs_page(request: Request) -> HTMLResponse:
    served: Served = request.app.state.served
    runs = served.runs()
    where = f'<p class="note">store {esc(served.st.store.root.resolve())}, read-only</p>'
    if runs.is_empty():
        body = where + "<p>The store holds no run yet (run 'atlas ingest' first).</p>"
        return HTMLResponse(page("Runs", body))
    with served.lock:
        latest = served.st.latest_run()  # as the answers take it (ties by run id)
    pages = [
        (
            esc(run_id) + (" (latest)" if run_id == latest else ""),
            " · ".join(
                link(url(path, {"run": run_id}), text)
                for path, text in (("/entries", "catalogue"), ("/examples", "examples"), ("/head/1-1", "heads"))
            ),
        )
        for run_id in runs["run_id"]
    ]
    said = f"{len(runs)} run{'s' if len(runs) > 1 else ''}, oldest first; a page with no run named shows the latest"
    body = (
        f'{where}<p class="note">{esc(said)}</p>{html_table(("run", "pages"), pages)}'
        f"<h2>What each run ran</h2>{table(runs)}"
    )
    return HTMLResponse(page("Runs", body))
