"""Every ``atlas`` command line that README.md and docs/ tell a user to type is one the CLI takes.

Each line of a code block that starts with ``atlas`` (or ``$ atlas``, ``.venv/bin/atlas``) is parsed by
the command it names, with every option and value as written: an optional part ``[...]`` is taken as if
given, the first of alternatives ``a|b`` and ``(A | B)``; a placeholder in capitals (RUN, FILE, N) stands for
a value of the user's and is not judged. An unknown command or option, or a value the option refuses,
fails the test with the document and line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from atlas.cli import cli
from tests.conftest import ROOT

GENERATED = {"cli.md", "catalogue.md"}  # written from --help and the SQL headers, tested elsewhere
PROMPT = re.compile(r"^\s*(?:\$\s+)?(?:\.venv/bin/)?atlas\s")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_./-]*$")


def _documents() -> list[Path]:
    docs = sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in GENERATED)
    return [ROOT / "README.md", *docs]


def command_lines() -> list[tuple[str, str]]:
    """(document:line, the command line) of every atlas command in a code block."""
    found = []
    for doc in _documents():
        fenced = False
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            if fenced and PROMPT.match(line):
                found.append((f"{doc.relative_to(ROOT)}:{number}", line))
    return found


def commands_of(line: str) -> list[list[str]]:
    """The argument lists of a documented line (after 'atlas'), one per command joined by ';'."""
    line = re.sub(r"\(([^()|]*)\|[^()]*\)", r"\1", line)  # (A | B): A
    line = line.replace("[", " ").replace("]", " ")
    tokens = shlex.split(line, comments=True)
    commands, current = [], []
    for token in [*tokens, ";"]:
        if token == ";":
            if current:
                commands.append(current[current.index("atlas") + 1 :] if "atlas" in current else current)
            current = []
        else:
            current.append(token.split("|")[0] if token.startswith("-") or "|" in token and " " not in token else token)
    return commands


def check(args: list[str]) -> None:
    """Parse ``args`` with the command they name, as ``atlas`` would, without running it."""
    name, rest = args[0], args[1:]
    command = cli.get_command(click.Context(cli), name)
    assert command is not None, f"no command 'atlas {name}'"
    try:
        parent = click.Context(cli, info_name="atlas", **cli.context_settings)
        command.make_context(name, list(rest), parent=parent)  # a copy: click consumes the list
    except click.BadParameter as exc:
        given = [a for a in rest if PLACEHOLDER.match(a)]
        if not any(a in exc.message or a in (exc.format_message() or "") for a in given):
            raise AssertionError(f"atlas {' '.join(args)}: {exc.format_message()}") from None
    except click.UsageError as exc:
        raise AssertionError(f"atlas {' '.join(args)}: {exc.format_message()}") from None


LINES = command_lines()


def test_the_documents_hold_commands() -> None:
    assert len(LINES) > 30
    assert any("best head per dependency relation" in line for _, line in LINES)


@pytest.mark.parametrize(("where", "line"), LINES, ids=[where for where, _ in LINES])
def test_a_documented_command_parses(where: str, line: str) -> None:
    for args in commands_of(line):
        try:
            check(args)
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None


def test_the_check_refuses_an_unknown_option() -> None:
    with pytest.raises(AssertionError, match="No such option"):
        check(["query", "entropy", "--no-such-option"])
    with pytest.raises(AssertionError, match="--limit"):
        check(["query", "entropy", "--limit", "zero"])
    with pytest.raises(AssertionError, match="no command"):
        check(["nosuchcommand"])
