"""The catalogue as DuckDB table macros in ``atlas.duckdb``, generated from ``queries/*.sql``.

One table macro per entry, named after it (``best head per dependency relation`` ->
``best_head_per_dependency_relation``), with the entry's parameters as named macro parameters and the
same defaults; a run parameter left out (NULL) is the latest run, as in the CLI (where the store holds other runs
the CLI and the API say which one answered; a macro cannot, and ``FROM runs`` lists them; a macro takes a whole run
id, not the unique start of one the CLI and the API take)::

    FROM best_head_per_dependency_relation(min_count := 50)
    FROM entropy(run := 'en_ewt...') WHERE layer = 3

A macro runs the entry's SQL text through DuckDB's ``query()`` with each ``$name`` replaced by the
argument as a typed literal (``'50'::INTEGER``). Before the entry answers, what atlas checks is checked in the
same SQL: a run not in the store, and the needs of the entry's header (``atlas.needs``), each refused with
atlas's message as DuckDB's error, after the macro's name; so is the entry's own refusal (``error('atlas: ...')``
in its SQL), its parameters named as ``name := 'value'``. Plain substitution of the parameter names into the SQL
is not safe: a macro parameter shadows every column of the same name (``task``, ``method``, ``seed``,
``direction`` are columns too), and a macro calling another one leaks its parameters into it. The SQL
file stays the single source: the macros are rewritten with the views, and when the catalogue changes.
Nothing in them names a path, so they survive moving or copying the store.

Each entry that takes a run and has rows to align (see ``atlas.compare``) has a comparison macro too, the
shell's ``atlas query NAME --run A --compare B``::

    FROM compare_entropy(a := 'RUN_A', b := 'RUN_B') ORDER BY abs(entropy_diff) DESC

with the entry's other parameters as in its own macro (a left out: the latest run). Its rows: the entry's
answer for each run, aligned on the entry's key columns (layer and head, a NULL head being a layer's row;
relation; ...) as ``atlas query --compare`` aligns them, in a's order (rows only in b after them); per value
column ``col_a``, ``col_b`` and, for numbers, ``col_diff`` (b - a). Runs of models of another shape are
refused for entries per head or layer, as in atlas. The value columns are read from the entry's answer
(DESCRIBE, binding it without running it) when the macros are written.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

import duckdb

from atlas.catalogue import REFUSAL, Entry, Parameter, entries
from atlas.compare import DIFF_DIGITS, aligns_heads, key_columns, shapes_differ
from atlas.errors import AtlasError
from atlas.run_sql import LATEST_RUN

LATEST = "the latest run"
LITERAL = "atlas_literal"  # scalar macro: a value as SQL text ('x'::VARCHAR, '50'::INTEGER, NULL)
_NAME_TOKENS = (duckdb.token_type.identifier, duckdb.token_type.keyword)  # $method: 'method' is a keyword
# the DuckDB types of the columns polars calls numeric: a value column of one of them gets a difference
_NUMERIC = re.compile(r"U?(TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT)|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\)")
RUN_A = Parameter("a", "the reference run", LATEST)
RUN_B = Parameter("b", "the run compared with a", None)
VERSION = "6"  # of the generated text; part of the state recorded in atlas_meta


def macro_name(entry: Entry) -> str:
    return re.sub(r"[^a-z0-9]+", "_", entry.name.lower()).strip("_")


def compare_macro_name(entry: Entry) -> str:
    return f"compare_{macro_name(entry)}"


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


def compare_macro_call(entry: Entry) -> str:
    """How the shell calls the entry's comparison of two runs (a: NULL, the latest run; b: required), its other
    parameters with their defaults."""
    parameters = (RUN_A, RUN_B, *(p for p in entry.parameters if p.name != "run"))
    args = [f"{p.name} := {'REQUIRED' if p.default is None else _default_sql(p)}" for p in parameters]
    return f"FROM {compare_macro_name(entry)}({', '.join(args)})"


def _argument_sql(macro: str, p: Parameter) -> str:
    """SQL building the text that replaces ``$name``: the argument (macro parameter ``p.name``) as a literal;
    NULL: the latest run for a run parameter, an error for a required one."""
    if p.default == LATEST:
        missing = _quote(f"({LATEST_RUN})")
    elif p.default is None:
        missing = _quote(f"error({_quote(f'{macro}: {p.name} := ... is required')})")
    else:
        missing = "'NULL'"
    return f"CASE WHEN {p.name} IS NULL THEN {missing} ELSE {LITERAL}({p.name}) END"


def _pieces(sql: str, arguments: dict[str, str], macro: str = "") -> list[str]:
    """SQL expressions whose concatenation is the text ``sql`` with each ``$name`` of ``arguments`` replaced by
    the text its expression builds; with ``macro``, the entry's own refusals too (a literal ``'atlas: ...'``)
    say the macro's name instead of atlas and each ``$name`` in them as ``name := 'value'``, as atlas names them."""
    pieces: list[str] = []
    start = 0
    encoded = sql.encode()  # duckdb.tokenize gives byte offsets: as character offsets (non-ASCII SQL text)
    tokens = [(len(encoded[:pos].decode()), kind) for pos, kind in duckdb.tokenize(sql)]
    for (pos, kind), (next_pos, next_kind) in zip(tokens, tokens[1:] + [(len(sql), None)], strict=True):
        if kind == duckdb.token_type.operator and sql[pos] == "$" and next_kind in _NAME_TOKENS:
            name = re.match(r"\w+", sql[next_pos:]).group(0)
            if next_pos == pos + 1 and name in arguments:
                pieces += [_quote(sql[start:pos]), arguments[name]]
                start = next_pos + len(name)
        elif macro and kind == duckdb.token_type.string_const and sql.startswith(f"'{REFUSAL}", pos):
            literal = re.match(r"'(?:[^']|'')*'", sql[pos:]).group(0)
            text = literal[1:-1].replace("''", "'").removeprefix(REFUSAL)
            pieces += [_quote(sql[start:pos] + "("), *_message(f"{macro}: {text}", arguments), _quote(")")]
            start = pos + len(literal)
    pieces.append(_quote(sql[start:]))
    return pieces


def _macro(name: str, parameters: Sequence[Parameter], pieces: list[str]) -> str:
    params = ", ".join(f"{p.name} := {_default_sql(p)}" for p in parameters)
    return f"CREATE OR REPLACE MACRO {name}({params}) AS TABLE FROM query({' || '.join(pieces)})"


def macro_sql(entry: Entry) -> str:
    """CREATE MACRO statement of an entry. An entry that takes a run, or needs something of the store (its header's
    ``needs:``), answers only once they are checked, as atlas checks them: a run that is not in the store and a need
    not met are refused with the message atlas gives (its parameters as ``name := value``); the answer keeps its
    order."""
    name = macro_name(entry)
    arguments = {p.name: _argument_sql(name, p) for p in entry.parameters}
    checks = _checks(entry, name, arguments)
    if not checks:
        return _macro(name, entry.parameters, _pieces(entry.sql, arguments, name))
    sql = entry.sql.rstrip().removesuffix(";")
    pieces = [_quote("WITH atlas_check AS (SELECT CASE "), *checks, _quote("ELSE true END AS ok) ")]
    pieces.append(_quote("SELECT * EXCLUDE (atlas_order) FROM (SELECT *, row_number() OVER () AS atlas_order FROM (\n"))
    pieces += _pieces(sql, arguments, name)
    pieces.append(_quote("\n)) WHERE (SELECT ok FROM atlas_check) ORDER BY atlas_order"))
    return _macro(name, entry.parameters, pieces)


def _checks(entry: Entry, macro: str, arguments: dict[str, str]) -> list[str]:
    """SQL expressions whose concatenation is the ``WHEN ... THEN error(...)`` clauses refusing what atlas refuses
    before the entry answers: its run not in the store (a run parameter left out: the store without runs), then its
    needs not met, in its header's order (notes are atlas's alone)."""
    pieces: list[str] = []
    if "run" in arguments:
        no_run = _quote(f"{macro}: run := NULL is the latest run, and the store has no run")
        pieces += [_quote("WHEN "), arguments["run"], _quote(f" IS NULL THEN error({no_run}) ")]
    return pieces + _run_checks(entry, macro, arguments) + _need_checks(entry, macro, arguments)


def _run_checks(entry: Entry, macro: str, arguments: dict[str, str]) -> list[str]:
    """The ``WHEN`` clauses refusing each argument naming an ingested run (a ``[run]`` parameter of the header) that
    is not in the store (but run, an empty one names none: select_run's default)."""
    pieces: list[str] = []
    for name in (name for name, kind in entry.run_parameters.items() if kind == "runs" and name in arguments):
        value = arguments[name]
        given = [] if name == "run" else [_quote("coalesce("), value, _quote(", '') <> '' AND ")]
        pieces += [_quote("WHEN "), *given, _quote("NOT EXISTS (SELECT 1 FROM runs WHERE run_id = "), value]
        pieces += [_quote(") THEN error(")]
        pieces += [*_message(f"{macro}: ${name}: no such run (see FROM runs)", arguments), _quote(") ")]
    return pieces


def _need_checks(entry: Entry, macro: str, arguments: dict[str, str]) -> list[str]:
    """The ``WHEN`` clauses refusing the entry's needs not met, in its header's order (notes are atlas's alone)."""
    pieces: list[str] = []
    for need in entry.needs:
        if need.fatal:
            pieces += [_quote("WHEN coalesce(("), *_pieces(need.sql, arguments), _quote("), 0) = 0 THEN error(")]
            pieces += [*_message(f"{macro}: {need.message}", arguments), _quote(") ")]
    return pieces


def _message(text: str, arguments: dict[str, str]) -> list[str]:
    """SQL expressions whose concatenation is an SQL expression giving ``text`` (a need's message) with each
    ``{name}`` as the argument's value and each ``$name`` as ``name := 'value'``."""
    pieces: list[str] = []
    literal, start = "", 0
    for match in re.finditer(r"\{(\w+)\}|\$(\w+)", text):
        name, quoted = match.group(1) or match.group(2), match.group(2) is not None
        if name not in arguments:
            continue
        literal += text[start : match.start()] + (f"{name} := '" if quoted else "")
        pieces += [_quote(_quote(literal) + " || coalesce(CAST("), arguments[name], _quote(" AS VARCHAR), 'NULL') || ")]
        literal, start = "'" if quoted else "", match.end()
    pieces.append(_quote(_quote(literal + text[start:])))
    return pieces


def answer_columns(con: duckdb.DuckDBPyConnection, entry: Entry) -> list[tuple[str, str]]:
    """The columns of an entry's answer and their DuckDB types (its macro bound, not run)."""
    args = ", ".join(f"{p.name} := ''" for p in entry.parameters if p.name == "run" or p.default is None)
    return [(row[0], row[1]) for row in con.execute(f"DESCRIBE FROM {macro_name(entry)}({args})").fetchall()]


def compare_macro_sql(entry: Entry, columns: Sequence[tuple[str, str]]) -> str:
    """CREATE MACRO statement of an entry's comparison of runs a and b, its answer having ``columns`` (name,
    DuckDB type). Raises AtlasError for an answer without key columns (nothing to align)."""
    name = compare_macro_name(entry)
    keys = key_columns(entry, [column for column, _ in columns])
    arguments = {p.name: _argument_sql(name, p) for p in entry.parameters if p.name != "run"}
    sql = entry.sql.rstrip().removesuffix(";")
    pieces = [_quote("WITH ")]
    for alias, run in (("atlas_a", RUN_A), ("atlas_b", RUN_B)):  # each run's answer, its rows numbered in order
        pieces.append(_quote(f"{alias} AS (SELECT *, row_number() OVER () AS atlas_order FROM (\n"))
        pieces += _pieces(sql, {**arguments, "run": _argument_sql(name, run)}, name)
        pieces.append(_quote("\n)), "))
    pieces += [_quote("atlas_ids AS (SELECT "), _argument_sql(name, RUN_A), _quote(" AS a, ")]
    pieces += [_argument_sql(name, RUN_B), _quote(" AS b), atlas_check AS (")]
    pieces += [*_compare_checks(entry, name, keys, arguments), _quote(") ")]
    pieces.append(_quote(_select_sql(keys, columns)))
    return _macro(name, (RUN_A, RUN_B, *(p for p in entry.parameters if p.name != "run")), pieces)


def _compare_checks(entry: Entry, macro: str, keys: Sequence[str], arguments: dict[str, str]) -> list[str]:
    """SQL expressions whose concatenation is a query of one row, true, when runs a and b (atlas_ids) can be
    compared; else the error saying why, as atlas: a run not in the store, the same run twice, models of other
    shapes, the entry's other run parameters (``arguments``: all but run), then its needs, for a, then for b."""
    shapes = ""
    if aligns_heads(keys):
        message = f"{macro}: " + shapes_differ(entry, "b := '{}'", ("{}", "{}"), "a := '{}'", ("{}", "{}"))
        shapes = (
            "WHEN ra.n_layers <> rb.n_layers OR ra.n_heads <> rb.n_heads THEN error(format("
            f"{_quote(message)}, i.b, rb.n_layers, rb.n_heads, i.a, ra.n_layers, ra.n_heads)) "
        )
    no_run = _quote(f"{macro}: a := NULL is the latest run, and the store has no run")
    missing = _quote(f"{macro}: {{}} := '{{}}': no such run (see FROM runs)")
    same = _quote(f"{macro}: a and b are the same run; name two different runs")
    runs = (
        f"SELECT CASE WHEN i.a IS NULL THEN error({no_run}) "
        f"WHEN ra.run_id IS NULL THEN error(format({missing}, 'a', i.a)) "
        f"WHEN rb.run_id IS NULL THEN error(format({missing}, 'b', i.b)) "
        f"WHEN i.a = i.b THEN error({same}) {shapes}"
    )
    clauses = _run_checks(entry, macro, arguments)
    for run in (RUN_A, RUN_B):
        clauses += _need_checks(entry, macro, {**arguments, "run": _argument_sql(macro, run)})
    rows = "ELSE true END AS ok FROM atlas_ids i LEFT JOIN runs ra ON ra.run_id = i.a LEFT JOIN runs rb "
    rows += "ON rb.run_id = i.b"
    return [_quote(runs), *clauses, _quote(rows)]


def _rounded_difference(a: str, b: str) -> str:
    """SQL for ``b - a`` of doubles as ``atlas.compare.rounded_difference`` gives it (printf rounds as Python's
    format does)."""
    digits = f"({DIFF_DIGITS} + floor(log10(abs({b} - {a}))) - floor(log10(greatest(abs({a}), abs({b})))))"
    return (
        f"CASE WHEN {b} - {a} = 0 OR NOT isfinite({b} - {a}) THEN {b} - {a} WHEN {digits} < 1 THEN 0.0 "
        f"ELSE printf('%.' || {digits}::INTEGER || 'g', {b} - {a})::DOUBLE END"
    )


def _select_sql(keys: Sequence[str], columns: Sequence[tuple[str, str]]) -> str:
    """The two answers aligned on ``keys`` (NULL matching NULL) as ``atlas.compare.compare`` aligns them: the
    keys, then per value column a's, b's and for numbers the difference b - a."""
    selected = [f'coalesce(atlas_a."{k}", atlas_b."{k}") AS "{k}"' for k in keys]
    for column, kind in columns:
        if column not in keys:
            selected += [f'atlas_a."{column}" AS "{column}_a"', f'atlas_b."{column}" AS "{column}_b"']
            if _NUMERIC.fullmatch(kind):
                a, b = f'atlas_a."{column}"', f'atlas_b."{column}"'
                difference = _rounded_difference(a, b) if kind == "DOUBLE" else f"{b} - {a}"
                selected.append(f'{difference} AS "{column}_diff"')
    aligned = " AND ".join(f'atlas_a."{k}" IS NOT DISTINCT FROM atlas_b."{k}"' for k in keys)
    return (
        f"SELECT {', '.join(selected)} FROM atlas_a FULL JOIN atlas_b ON {aligned} "
        "WHERE (SELECT ok FROM atlas_check) ORDER BY atlas_a.atlas_order NULLS LAST, atlas_b.atlas_order"
    )


def macros_state() -> str:
    """What the macros depend on: the catalogue's SQL files, their needs and this generator."""
    digest = hashlib.sha256(VERSION.encode())
    for entry in entries():  # the SQL and the needs, whose text a shared one's header only names
        digest.update(entry.path.name.encode() + b"\0" + entry.sql.encode() + b"\0" + repr(entry.needs).encode())
    return digest.hexdigest()[:16]


def write_macros(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)write every entry's macro and comparison macro, and record the catalogue's state in atlas_meta."""
    con.execute(
        f"CREATE OR REPLACE MACRO {LITERAL}(v) AS CASE WHEN v IS NULL THEN 'NULL' "
        "ELSE '''' || replace(v::VARCHAR, '''', '''''') || '''::' || typeof(v) END"
    )
    names: list[str] = []
    for entry in entries():
        con.execute(macro_sql(entry))
        names.append(macro_name(entry))
        if not entry.takes_run(None):
            continue
        try:
            con.execute(compare_macro_sql(entry, answer_columns(con, entry)))
        except (duckdb.Error, AtlasError):  # an answer DuckDB cannot bind (its own macro says why when called),
            continue  # or one without key columns (atlas refuses to compare it too): no comparison macro
        names.append(compare_macro_name(entry))
    written = con.execute("SELECT value FROM atlas_meta WHERE key = 'macros'").fetchone()
    for name in set(written[0].split(",") if written else []) - set(names):  # entries no longer in the catalogue
        con.execute(f'DROP MACRO TABLE IF EXISTS "{name}"')  # (macros a user added to the file stay)
    con.execute("INSERT OR REPLACE INTO atlas_meta VALUES ('macros', ?)", [",".join(names)])
    con.execute("INSERT OR REPLACE INTO atlas_meta VALUES ('macros_state', ?)", [macros_state()])
