"""The catalogue as DuckDB table macros in ``atlas.duckdb``, generated from ``queries/*.sql``.

One table macro per entry, named after it (``best head per dependency relation`` ->
``best_head_per_dependency_relation``), with the entry's parameters as named macro parameters and the
same defaults; a run parameter left out (NULL) is the latest run, as in the CLI::

    FROM best_head_per_dependency_relation(min_count := 50)
    FROM entropy(run := 'en_ewt...') WHERE layer = 3

A macro runs the entry's SQL text through DuckDB's ``query()`` with each ``$name`` replaced by the
argument as a typed literal (``'50'::INTEGER``). Plain substitution of the parameter names into the SQL
is not safe: a macro parameter shadows every column of the same name (``task``, ``method``, ``seed``,
``direction`` are columns too), and a macro calling another one leaks its parameters into it. The SQL
file stays the single source: the macros are rewritten with the views, and when the catalogue changes.
Nothing in them names a path, so they survive moving or copying the store.
"""

from __future__ import annotations

import hashlib
import re

import duckdb

from atlas.catalogue import Entry, Parameter, entries

LATEST = "the latest run"
LATEST_SQL = "(SELECT run_id FROM runs ORDER BY created_at DESC, run_id LIMIT 1)"  # as Store.latest_run
LITERAL = "atlas_literal"  # scalar macro: a value as SQL text ('x'::VARCHAR, '50'::INTEGER, NULL)
_NAME_TOKENS = (duckdb.token_type.identifier, duckdb.token_type.keyword)  # $method: 'method' is a keyword
VERSION = "1"  # of the generated text; part of the state recorded in atlas_meta


def macro_name(entry: Entry) -> str:
    return re.sub(r"[^a-z0-9]+", "_", entry.name.lower()).strip("_")


def _default_sql(p: Parameter) -> str:
    """The macro parameter's default: the catalogue's value with the type the CLI binds it with."""
    if p.default is None or p.default == LATEST:
        return "NULL"
    if re.fullmatch(r"-?\d+", p.default):
        return p.default
    if re.fullmatch(r"-?\d*\.\d+", p.default):
        return f"{p.default}::DOUBLE"
    return _quote(p.default)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def macro_call(entry: Entry) -> str:
    """How the shell calls the entry: every parameter with its default (run: NULL, the latest run)."""
    args = []
    for p in entry.parameters:
        args.append(f"{p.name} := {'REQUIRED' if p.default is None else _default_sql(p)}")
    return f"FROM {macro_name(entry)}({', '.join(args)})"


def _argument_sql(entry: Entry, p: Parameter) -> str:
    """SQL building the text that replaces ``$name``: the argument as a literal; NULL: the latest run for a
    run parameter, an error for a required one."""
    if p.default == LATEST:
        missing = _quote(LATEST_SQL)
    elif p.default is None:
        missing = _quote(f"error({_quote(f'{macro_name(entry)}: {p.name} := ... is required')})")
    else:
        missing = "'NULL'"
    return f"CASE WHEN {p.name} IS NULL THEN {missing} ELSE {LITERAL}({p.name}) END"


def macro_sql(entry: Entry) -> str:
    """CREATE MACRO statement of an entry."""
    sql = entry.sql
    known = {p.name: p for p in entry.parameters}
    pieces: list[str] = []
    start = 0
    tokens = duckdb.tokenize(sql)
    for (pos, kind), (next_pos, next_kind) in zip(tokens, tokens[1:], strict=False):
        if kind == duckdb.token_type.operator and sql[pos] == "$" and next_kind in _NAME_TOKENS:
            name = re.match(r"\w+", sql[next_pos:]).group(0)
            if next_pos == pos + 1 and name in known:
                pieces += [_quote(sql[start:pos]), _argument_sql(entry, known[name])]
                start = next_pos + len(name)
    pieces.append(_quote(sql[start:]))
    params = ", ".join(f"{p.name} := {_default_sql(p)}" for p in entry.parameters)
    text = " || ".join(pieces)
    return f"CREATE OR REPLACE MACRO {macro_name(entry)}({params}) AS TABLE FROM query({text})"


def macros_state() -> str:
    """What the macros depend on: the catalogue's SQL files and this generator."""
    digest = hashlib.sha256(VERSION.encode())
    for entry in entries():
        digest.update(entry.path.name.encode() + b"\0" + entry.sql.encode() + b"\0")
    return digest.hexdigest()[:16]


def write_macros(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)write every entry's macro and record the catalogue's state in atlas_meta."""
    con.execute(
        f"CREATE OR REPLACE MACRO {LITERAL}(v) AS CASE WHEN v IS NULL THEN 'NULL' "
        "ELSE '''' || replace(v::VARCHAR, '''', '''''') || '''::' || typeof(v) END"
    )
    names = [macro_name(entry) for entry in entries()]
    written = con.execute("SELECT value FROM atlas_meta WHERE key = 'macros'").fetchone()
    for name in set(written[0].split(",") if written else []) - set(names):  # entries no longer in the catalogue
        con.execute(f'DROP MACRO TABLE IF EXISTS "{name}"')  # (macros a user added to the file stay)
    for entry in entries():
        con.execute(macro_sql(entry))
    con.execute("INSERT OR REPLACE INTO atlas_meta VALUES ('macros', ?)", [",".join(names)])
    con.execute("INSERT OR REPLACE INTO atlas_meta VALUES ('macros_state', ?)", [macros_state()])
