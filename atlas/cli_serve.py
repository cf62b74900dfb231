"""``atlas serve``: the store's runs, catalogue, SQL and attention as local web pages (``atlas.serve``), read-only,
until Ctrl-C."""

from __future__ import annotations

import socket

import click

from atlas.cli_options import store_option
from atlas.errors import AtlasError


def _bound(host: str, port: int) -> socket.socket:
    """A listening socket on ``host`` and ``port``; one that cannot be had (the port in use, an unknown host) is
    refused in one line."""
    where = f"--host {host} --port {port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise AtlasError(f"{where}: {exc.strerror}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise AtlasError(f"{where}: {exc.strerror or exc}") from None
    return sock


@click.command()
@store_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (the default: this machine only).",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True, help="Port (0: any free).")
def serve(store_path: str | None, host: str, port: int) -> None:
    """Serve the store as web pages, read-only: its runs, the catalogue's answers with their figures, a SQL box,
    an example browser (by form, lemma, UPOS, relation and what a head does from a word) with each input's head
    and model views, and a page per head. Prints the address and serves until Ctrl-C. The pages load nothing but
    from this server (docs/serve.md)."""
    try:
        import uvicorn

        from atlas.serve import app
    except ImportError as exc:
        raise AtlasError(
            f"atlas serve needs starlette and uvicorn ({exc.name} is missing): pip install 'attention-atlas[serve]'"
        ) from None
    application = app(store_path)  # a store that is not there is refused before the port is taken
    sock = _bound(host, port)
    shown_host, shown_port = sock.getsockname()[:2]
    address = f"[{shown_host}]" if ":" in shown_host else shown_host
    click.echo(f"serving {application.state.root} at http://{address}:{shown_port}/ (Ctrl-C to stop)")
    server = uvicorn.Server(uvicorn.Config(application, log_level="warning"))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn stops on Ctrl-C, then raises it again
        click.echo("stopped", err=True)
    finally:
        sock.close()
