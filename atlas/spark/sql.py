"""The catalogue's SQL for Apache Spark, generated from ``queries/*.sql`` with sqlglot (DuckDB -> Spark SQL).

There is one SQL text per entry, its file; nothing here is written per entry. sqlglot translates DuckDB's
functions and syntax (``arg_max`` -> ``max_by``, ``QUALIFY`` -> a filtered subquery, ``unnest`` ->
``explode``, ``concat``'s NULLs as '', DuckDB's default NULLS LAST written out, ...); ``_portable`` adds
what it leaves to be done: DuckDB's ``error()`` is Spark's ``raise_error()``, ``quantile_cont(x, q)``
Spark's ``percentile(x, q)``, ``unnest(list)::T`` casts the list's elements (Spark's ``explode`` cannot
sit inside a cast), ``concat``'s arguments are cast to text first (under Spark's ANSI mode
``coalesce(1, '')`` casts '' to a number), and ``IGNORE NULLS`` follows an aggregate's ``FILTER``. A parameter
``$name`` (a DuckDB prepared parameter: a placeholder node in sqlglot's tree) becomes Spark's named
parameter marker ``:name``, bound by ``spark.sql(text, args={...})``: values are never pasted into the
text, on either engine.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

import sqlglot
from sqlglot import exp

from atlas.catalogue import Entry, resolve
from atlas.errors import AtlasError

# DuckDB functions sqlglot passes through by name, and Spark's function of the same meaning
_FUNCTIONS = {"error": "RAISE_ERROR"}


@dataclass(frozen=True)
class SparkSQL:
    """A statement in Spark SQL and the parameters it binds (``:name``), each once."""

    text: str
    parameters: tuple[str, ...]

    def args(self, values: Mapping[str, object]) -> dict[str, object]:
        """The values of the parameters the statement binds."""
        return {name: values[name] for name in self.parameters}


def _portable(node: exp.Expression) -> exp.Expression:
    """One node of the DuckDB tree as Spark needs it (its children already are)."""
    if isinstance(node, exp.Placeholder) and node.this:  # $name: a named marker, whatever the dialect wrote
        return exp.Placeholder(this=node.name)
    if isinstance(node, exp.Anonymous) and node.name.lower() in _FUNCTIONS:
        return exp.Anonymous(this=_FUNCTIONS[node.name.lower()], expressions=node.expressions)
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        # quantile_cont(x, q): Spark's exact percentile(x, q), the same linear interpolation between the values
        return exp.Anonymous(this="PERCENTILE", expressions=[node.this, node.expression])
    if isinstance(node, exp.Concat):
        # concat reads any value as text, and DuckDB's reads NULL as '' (sqlglot writes coalesce(x, '')): cast
        # first, as Spark's ANSI mode casts the '' to the number's type instead (concat_ws: the same, but NULLs
        # are left out on both engines)
        texts = [x if isinstance(x, exp.Literal) and x.is_string else exp.cast(x, "STRING") for x in node.expressions]
        return node.__class__(**{**node.args, "expressions": texts})
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Explode):
        # unnest(list)::T (read as explode): Spark's explode cannot sit inside a cast; cast the list's elements
        element = exp.DataType.build("ARRAY", expressions=[node.to], nested=True)
        return node.this.__class__(**{**node.this.args, "this": exp.cast(node.this.this, element)})
    if isinstance(node, exp.Filter) and isinstance(node.this, exp.IgnoreNulls):
        # DuckDB's any_value skips NULLs: any_value(x) IGNORE NULLS, whose FILTER Spark reads before IGNORE NULLS
        return exp.IgnoreNulls(this=exp.Filter(this=node.this.this, expression=node.expression))
    return node


@cache
def translate(text: str, where: str = "SQL") -> SparkSQL:
    """One DuckDB statement as Spark SQL (``where``: what to name in an error)."""
    try:
        trees = sqlglot.parse(text, read="duckdb")
    except sqlglot.errors.SqlglotError as exc:
        raise AtlasError(f"{where}: not read as DuckDB SQL ({str(exc).splitlines()[0]})") from None
    if len(trees) != 1 or trees[0] is None:
        raise AtlasError(f"{where}: expected one statement, found {len(trees)}")
    tree = trees[0]
    for node in reversed(list(tree.walk(bfs=False))):  # every node after the nodes below it, once
        new = _portable(node)
        if new is not node:
            tree = new if node is tree else tree
            node.replace(new)
    names = tuple(dict.fromkeys(node.name for node in tree.find_all(exp.Placeholder) if node.this))
    try:
        sql = tree.sql(dialect="spark", pretty=True, comments=False, unsupported_level=sqlglot.ErrorLevel.RAISE)
    except sqlglot.errors.SqlglotError as exc:
        raise AtlasError(f"{where}: not translated to Spark SQL ({str(exc).splitlines()[0]})") from None
    return SparkSQL(sql, names)


def entry_sql(entry: Entry | str) -> SparkSQL:
    """The Spark SQL of a catalogue entry (an ``Entry``, or its name or alias, as ``atlas.catalogue.resolve`` takes
    it), from its SQL file."""
    return _translated(resolve(entry) if isinstance(entry, str) else entry)


@cache
def _translated(entry: Entry) -> SparkSQL:
    return translate(entry.sql, entry.path.name)


@cache
def expression_sql(text: str) -> str:
    """One DuckDB expression (with ``AS name``) as Spark SQL (the store's derived columns)."""
    return sqlglot.transpile(text, read="duckdb", write="spark", unsupported_level=sqlglot.ErrorLevel.RAISE)[0]
