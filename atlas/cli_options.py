"""Options shared by the ``atlas`` commands."""

from __future__ import annotations

import os
from pathlib import Path

import click

from atlas.output import FORMATS
from atlas.store import Store

STORE_HELP = "Store folder (default: $ATLAS_STORE or ./atlas-store)."


def store_at(path: str | None) -> Store:
    return Store(Path(path or os.environ.get("ATLAS_STORE") or "atlas-store"))


store_option = click.option("--store", "store_path", type=click.Path(file_okay=False), help=STORE_HELP)
format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
out_option = click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write to this file.")
quiet_option = click.option("--quiet", is_flag=True, help="No progress bar.")
