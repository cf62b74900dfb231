"""docs/catalogue.md, generated from the catalogue's SQL headers: every entry's name, aliases, paper,
description, parameters with their defaults, what it needs first, its comparison keys, its figure (and how it
names its columns) and its DuckDB table macro call.

    python -m atlas.catalogue_doc            # the text, on stdout
    python -m atlas.catalogue_doc --write    # into docs/catalogue.md

The headers are the only source: edit ``queries/*.sql`` and write the file again (a test fails while it
differs from this text).
"""

from __future__ import annotations

import re
import sys
import textwrap
from functools import cache
from pathlib import Path

import duckdb

from atlas.catalogue import Entry, entries
from atlas.compare import key_columns
from atlas.errors import AtlasError
from atlas.macros import compare_macro_call, macro_call
from atlas.store import SCHEMA_FILE

DOC = Path(__file__).resolve().parent.parent / "docs" / "catalogue.md"  # in the repository's checkout
COMMAND = "python -m atlas.catalogue_doc --write"
_DEFAULT = re.compile(r"\s*\(default: [^)]*\)\s*$")
_MARKDOWN = re.compile(r"([\\`*<|])")  # characters Markdown would read as markup: written escaped
_LINE_START = re.compile(r"^(\d*)([-+#=.)>])")  # at a line's start, maybe a list, heading or quote: escaped
_ESCAPED = r"\1\\\2"
WIDTH = 110


def _text(text: str) -> str:
    return _MARKDOWN.sub(r"\\\1", text)


def _paragraph(text: str, first: str = "", rest: str = "") -> list[str]:
    """``text`` in lines of at most WIDTH characters (``first``, ``rest``: the first line's and the others'
    indent), none of them read by Markdown as the start of a list, heading or quote, no code span cut."""
    kept = re.sub(r"`[^`]*`", lambda code: code.group(0).replace(" ", "\0"), text)  # a code span stays whole
    wrapped = textwrap.wrap(kept, WIDTH, break_long_words=False, break_on_hyphens=False) or [""]
    lines = [line.replace("\0", " ") for line in wrapped]
    return [(first if i == 0 else rest) + _LINE_START.sub(_ESCAPED, line) for i, line in enumerate(lines)]


def _code(text: str) -> str:
    return f"`{text}`"


def _anchor(entry: Entry) -> str:
    """The heading's anchor, as GitHub writes it."""
    return re.sub(r"[^a-z0-9 _-]", "", entry.name.lower()).replace(" ", "-")


@cache
def _schema() -> duckdb.DuckDBPyConnection:
    """An empty store's tables (schema.sql), on which an entry's answer is bound, not run, for its columns."""
    con = duckdb.connect()
    con.execute(SCHEMA_FILE.read_text())
    return con


def _columns(entry: Entry) -> list[str] | None:
    """The columns of the entry's answer; None where DuckDB cannot bind it without a store."""
    values = {p.name: "" for p in entry.parameters if p.default is None}
    try:
        sql = entry.sql.rstrip().removesuffix(";")
        return [row[0] for row in _schema().execute(f"DESCRIBE {sql}", entry.bind(values)).fetchall()]
    except duckdb.Error:
        return None


def _comparison(entry: Entry) -> str:
    """How runs are compared: the key columns and the comparison macro, or why they are not."""
    if not entry.takes_run(None):
        return "none: the entry takes no run."
    columns = _columns(entry)
    if columns is None:
        keys = ", ".join(_code(k) for k in entry.keys) or "layer and head, those of them the answer has"
    else:
        try:
            keys = ", ".join(_code(k) for k in key_columns(entry, columns))
        except AtlasError as exc:
            return f"none: {_text(str(exc))}."
    how = f'`atlas query "{entry.name}" --run A --compare B`'
    return f"aligned on {keys} ({how}; in DuckDB `{compare_macro_call(entry)}`)."


def _figure(entry: Entry) -> str:
    if not entry.plot:
        return "none."
    named = "; ".join(f"{_code(column)} as '{_text(words)}'" for column, words in entry.labels)
    return f"{_code(entry.plot[0])}: {entry.figure} (`atlas plot`)" + (f"; it names {named}." if named else ".")


def _parameters(entry: Entry) -> list[str]:
    if not entry.parameters:
        return ["**Parameters:** none.", ""]
    lines = ["**Parameters:**", "", "| parameter | default | what it is |", "|---|---|---|"]
    for p in entry.parameters:
        default = "required" if p.default is None else (_text(p.default) or "empty")
        lines.append(f"| {_code(p.name)} | {default} | {_text(_DEFAULT.sub('', p.description))} |")
    return [*lines, ""]


def _needs(entry: Entry) -> list[str]:
    lines = []
    for fatal, title in ((True, "Needs first"), (False, "Notes")):
        messages = [_text(n.message) for n in entry.needs if n.fatal == fatal]
        if messages:
            said = "refused with this line until it holds" if fatal else "answered, with this note, when"
            lines += [f"**{title}** ({said}):", ""]
            for message in messages:
                lines += _paragraph(message, "- ", "  ")
            lines.append("")
    return lines


def _section(entry: Entry) -> list[str]:
    lines = [f"## {entry.name}", "", *_paragraph(f"{_text(entry.paper)}. SQL: `queries/{entry.path.name}`."), ""]
    if entry.aliases:
        lines += [*_paragraph(f"**Aliases:** {_text(', '.join(entry.aliases))}."), ""]
    lines += [*_paragraph(_text(entry.description)), "", *_parameters(entry), *_needs(entry)]
    lines += [*_paragraph(f"**Compared across runs:** {_comparison(entry)}"), ""]
    lines += [*_paragraph(f"**Figure:** {_figure(entry)}"), ""]
    return [*lines, f"**DuckDB:** `{macro_call(entry)}`", ""]


def render() -> str:
    """docs/catalogue.md: a list of the entries, then a section per entry."""
    lines = [
        "# The catalogue",
        "",
        f"<!-- generated from the headers of queries/*.sql by '{COMMAND}': edit those, not this file -->",
        "",
        "Every entry is one SQL file in `queries/`, whose header holds all that is written here. `atlas query",
        "NAME` answers it (a name, an alias or close words); `atlas queries` lists the entries. In a message,",
        "`{name}` stands for the value of the parameter `name`.",
        "",
        "| entry | paper |",
        "|---|---|",
        *(f"| [{e.name}](#{_anchor(e)}) | {_text(e.paper)} |" for e in entries()),
        "",
    ]
    for entry in entries():
        lines += _section(entry)
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv not in ([], ["--write"]):
        print(f"usage: python -m atlas.catalogue_doc [--write]   (--write: into {DOC})", file=sys.stderr)
        return 2
    text = render()
    if argv:
        DOC.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
