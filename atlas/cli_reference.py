"""The command line's reference, docs/cli.md, generated from each command's ``--help``.

``python -m atlas.cli_reference --write`` rewrites docs/cli.md in a checkout; tests/test_docs.py fails when
the file differs from what the commands say of themselves.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from atlas.cli import cli

WIDTH = 100  # columns of the help text, whatever the terminal


def _help(args: list[str]) -> str:
    settings = {**cli.context_settings, "terminal_width": WIDTH, "max_content_width": WIDTH}  # -h as well as --help
    with click.Context(cli, info_name="atlas", **settings) as ctx:
        command: click.Command = cli
        for name in args:
            sub = command.get_command(ctx, name)  # type: ignore[attr-defined]
            ctx = click.Context(sub, info_name=name, parent=ctx, terminal_width=WIDTH, max_content_width=WIDTH)
            command = sub
        return command.get_help(ctx)


def render() -> str:
    """docs/cli.md: ``atlas --help``, then each command's help, in the order ``atlas --help`` lists them."""
    lines = [
        "# The `atlas` command line",
        "",
        "Generated from each command's `--help` by `python -m atlas.cli_reference --write`; do not edit by hand.",
        "Every command is one call of the Python API ([python-api.md](python-api.md)).",
        "",
        "```text",
        _help([]).rstrip(),
        "```",
    ]
    for name in cli.list_commands(click.Context(cli)):
        lines += ["", f"## atlas {name}", "", "```text", _help([name]).rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main() -> None:
    text = render()
    if "--write" in sys.argv[1:]:
        target = Path("docs") / "cli.md"
        target.write_text(text)
        print(f"wrote {target}", file=sys.stderr)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
