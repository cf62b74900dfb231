"""Options shared by the ``atlas`` commands."""

from __future__ import annotations

import re
from pathlib import Path

import click

from atlas.checks import EMPTY_PATH
from atlas.errors import AtlasError, arg
from atlas.output import FILE_TABLE_ROWS, FORMATS, TABLE_ROWS


def _expected(kind: click.ParamType) -> str:
    """What an option of this type takes, in words ('1 or more', 'above 0', 'an integer')."""
    if isinstance(kind, click.IntRange | click.FloatRange):
        low = None if kind.min is None else f"above {kind.min}" if kind.min_open else f"{kind.min} or more"
        high = None if kind.max is None else f"below {kind.max}" if kind.max_open else f"{kind.max} or less"
        return " and ".join(part for part in (low, high) if part)
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(map(str, kind.choices))
    return {"integer": "an integer", "float": "a number"}.get(kind.name, f"a {kind.name}")


class FilePath(click.Path):
    """A file or folder the user names, as a ``Path``; an empty one is refused (click reads '' as '.', the
    working folder, and a refusal would name '.')."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(path_type=Path, **kwargs)

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> object:
        if value == "":
            self.fail(EMPTY_PATH, param, ctx)
        return super().convert(value, param, ctx)


def bad_value(exc: click.BadParameter) -> str:
    """A value click refused, in the one-line style of every other error: '--limit 0: expected 1 or more'."""
    param = exc.param
    if isinstance(exc, click.MissingParameter):  # click leaves its message empty and words it as it prints
        see = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return exc.format_message().rstrip(".") + see
    flag = param.opts[0] if param is not None and param.opts else (exc.param_hint or "a value")
    if exc.message == EMPTY_PATH:
        return f"{flag} '': {EMPTY_PATH}"
    if param is None or not isinstance(param, click.Option):
        return f"{flag}: {exc.message}"
    given = re.match(r"'?(.*?)'? is not ", exc.message)  # click's own words for a value of the wrong kind
    if given is None:  # a check of the option's own (e.g. a run given twice)
        return f"{flag}: {exc.message}"
    return f"{flag} {given.group(1)}: expected {_expected(param.type)}"


STORE_HELP = "Store folder (default: $ATLAS_STORE or ./atlas-store)."


def single_value(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> str | None:
    if len(values) > 1:
        raise click.BadParameter(f"given {len(values)} times ({', '.join(values)}); name one run", ctx, param)
    return values[0] if values else None


store_option = click.option("--store", "store_path", type=click.Path(file_okay=False), help=STORE_HELP)
# printed results: a table (the default), CSV or JSON; Parquet only where the command writes a file (--out)
format_option = click.option(
    "--format", "fmt", type=click.Choice([f for f in FORMATS if f != "parquet"]), default=None, help="[default: table]"
)
file_format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="[default: the --out file's suffix (.csv, .json, .parquet, .txt: table; another is refused), else table]",
)
out_option = click.option("--out", type=FilePath(dir_okay=False), help="Write to this file (atomically).")
limit_option = click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    help=f"At most N rows (unless given, a table shows {TABLE_ROWS} in the terminal and {FILE_TABLE_ROWS:,} in a file; "
    "csv, json and parquet write every row).",
)
run_option = click.option(
    "--run", "run_id", multiple=True, callback=single_value, help="Run id (default: the latest run; see 'atlas runs')."
)
quiet_option = click.option("--quiet", is_flag=True, help="No progress bar.")


def numbers(option: str, text: str) -> tuple[int, ...]:
    """A list option's whole numbers, separated by commas ('64,128'); refused in one line where one is not."""
    parts = [p.strip() for p in text.split(",")]
    if not all(re.fullmatch(r"-?[0-9]+", p) for p in parts):
        raise AtlasError(f"{arg(option, repr(text))}: expected whole numbers separated by commas, e.g. 64,128")
    return tuple(int(p) for p in parts)
