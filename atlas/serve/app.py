"""The application: its routes, its stylesheet, and the pages saying why a request was refused.

A refusal is a page with one line and a 4xx status: a path that names nothing (404), a value the store does not
hold or a parameter of the wrong kind (400, the API's ``AtlasError`` in the command line's words), an entry that
cannot answer (422). An error of the application itself is a page of one line too (500); its traceback goes to the
server's log, never to the page.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from importlib import resources

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from atlas.errors import AtlasError
from atlas.serve.entries import entries_page, entry_page, figure_png
from atlas.serve.examples import example_page, examples_page
from atlas.serve.heads import head_page
from atlas.serve.layout import CSS, Refused, error_page
from atlas.serve.runs import runs_page
from atlas.serve.sql import sql_page
from atlas.serve.state import Served

STYLE = resources.files("atlas.serve").joinpath("serve.css").read_text(encoding="utf-8")


def _style(request: Request) -> Response:
    return Response(STYLE, media_type="text/css", headers={"Cache-Control": "max-age=3600"})


def _refused(request: Request, exc: Refused) -> HTMLResponse:
    return HTMLResponse(error_page(exc.status, str(exc), exc.shown), exc.status)


def _atlas_error(request: Request, exc: AtlasError) -> HTMLResponse:
    return HTMLResponse(error_page(400, exc.cli_text()), 400)


def _http_error(request: Request, exc: HTTPException) -> HTMLResponse:
    said = f"no page at {request.url.path}" if exc.status_code == 404 else exc.detail
    return HTMLResponse(error_page(exc.status_code, said), exc.status_code)


def _server_error(request: Request, exc: Exception) -> HTMLResponse:
    line = (str(exc).strip().splitlines() or [""])[0]
    return HTMLResponse(error_page(500, f"{type(exc).__name__}: {line}" if line else type(exc).__name__), 500)


def app(store_path: str | os.PathLike[str] | None = None) -> Starlette:
    """The web application over the store at ``store_path`` (default as ``atlas.open``), opened read-only; a
    store that is not there is refused with ``AtlasError`` at once."""
    routes = [
        Route("/", runs_page),
        Route("/entries", entries_page),
        Route("/entry/{name}", entry_page),
        Route("/entry/{name}/figure.png", figure_png),
        Route("/sql", sql_page),
        Route("/examples", examples_page),
        Route("/example/{run}/{example:int}", example_page),
        Route("/head/{layer:int}-{head:int}", head_page),
        Route(CSS, _style),
    ]
    handlers = {Refused: _refused, AtlasError: _atlas_error, HTTPException: _http_error, Exception: _server_error}
    served = Served(store_path)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:  # the store is closed when the server stops
        try:
            yield
        finally:
            served.st.close()

    application = Starlette(routes=routes, exception_handlers=handlers, lifespan=lifespan)
    application.state.served = served
    application.state.root = application.state.served.st.store.root  # the store's folder, as the CLI says it
    return application
