"""The example browser's search: a run's words by form, lemma, UPOS and relation, and what a head does from them.

A word matches when each filter given holds: its form and lemma (either case), its UPOS and its relation (DEPREL
with its subtype, e.g. 'nmod:poss', as written). Given a layer and a head (1-based), it also matches only where that
head attends from the word to its syntactic head (``words.head_word_idx``; a root never matches):

- ``by='piece'``: the token the word's first piece attends to most (``attn_rows.argmax_tok``, from the dense row)
  is the head word's first piece;
- ``by='word'``: the word the word attends to most on the word-level map, itself, [CLS] and [SEP] aside
  (``word_rows.dst_word``: Clark et al.'s prediction, as 'best head per dependency relation' counts it).

Every filter is bound as a parameter; the run, layer and head are bound on each table read, so that DuckDB applies
them in its scan of the Parquet files (no table is loaded whole); the results come a page at a time (LIMIT,
OFFSET) in corpus order, with their count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

import duckdb

from atlas.serve.layout import Refused, check_head, whole_number
from atlas.serve.state import Shown

BY = {
    "piece": "its first piece's most attended token is its head's first piece (attn_rows)",
    "word": "the word it attends to most is its head (word_rows, Clark et al.)",
}
TEXT = ("form", "lemma", "upos", "deprel")  # the filters of a word's annotation


@dataclass(frozen=True)
class Search:
    """What the browser looks for (empty: any)."""

    form: str = ""
    lemma: str = ""
    upos: str = ""
    deprel: str = ""
    layer: int | None = None  # 1-based
    head: int | None = None  # 1-based
    by: str = "piece"

    @classmethod
    def asked(cls, query: Mapping[str, str], shown: Shown) -> Search:
        """The search a page's query asks for, its head checked against the run's; else refused (400)."""
        text = {name: (query.get(name) or "").strip() for name in TEXT}
        layer = whole_number(query.get("layer"), "layer", 0)
        head = whole_number(query.get("head"), "head", 0)
        if bool(layer) != bool(head):
            raise Refused(400, "layer and head: give both, or neither", shown)
        if layer:
            check_head(shown, layer, head)
        by = query.get("by") or "piece"
        if by not in BY:
            raise Refused(400, f"by {by!r}: expected one of {', '.join(BY)}", shown)
        return cls(**text, layer=layer or None, head=head or None, by=by)

    def fields(self) -> dict[str, str]:
        """The search as a page's query (what is given)."""
        given = {k: "" if v is None else str(v) for k, v in asdict(self).items()}
        return {k: v for k, v in given.items() if v and not (k == "by" and self.layer is None)}

    def _from(self, run_id: str) -> tuple[str, dict[str, object]]:
        """The FROM and WHERE of the matching words (``w``, with their head word ``h``), and their parameters."""
        params: dict[str, object] = {"run": run_id}
        where = ["w.run_id = $run"]
        for name in TEXT:
            value = getattr(self, name)
            if value:
                params[name] = value
                where.append(
                    f"lower(w.{name}) = lower(${name})" if name in ("form", "lemma") else f"w.{name} = ${name}"
                )
        joined = ""
        if self.layer is not None and self.head is not None:
            params |= {"layer": self.layer - 1, "head": self.head - 1}
            if self.by == "piece":
                joined = (
                    "JOIN attn_rows r ON r.run_id = $run AND r.layer = $layer AND r.head = $head "
                    "AND r.example_id = w.example_id AND r.src_tok = w.first_tok"
                )
                where.append("r.argmax_tok = h.first_tok")
            else:
                joined = (
                    "JOIN word_rows r ON r.run_id = $run AND r.layer = $layer AND r.head = $head "
                    "AND r.example_id = w.example_id AND r.src_word = w.word_idx"
                )
                where.append("r.dst_word = w.head_word_idx")
        sql = (
            "FROM words w LEFT JOIN words h ON h.run_id = $run AND h.example_id = w.example_id "
            f"AND h.word_idx = w.head_word_idx {joined} WHERE {' AND '.join(where)}"
        )
        return sql, params

    def count(self, cur: duckdb.DuckDBPyConnection, run_id: str) -> int:
        sql, params = self._from(run_id)
        return cur.execute(f"SELECT count(*) {sql}", params).fetchone()[0]

    def found(
        self, cur: duckdb.DuckDBPyConnection, run_id: str, limit: int, offset: int
    ) -> list[tuple[int, int, str, str, str, str, int | None, str | None]]:
        """The matching words from the ``offset``-th on, at most ``limit``, in corpus order: example id, word
        index, form, lemma, UPOS, relation, the head word's index and form."""
        sql, params = self._from(run_id)
        return cur.execute(
            "SELECT w.example_id, w.word_idx, w.form, w.lemma, w.upos, w.deprel, w.head_word_idx, h.form "
            f"{sql} ORDER BY w.example_id, w.word_idx LIMIT $limit OFFSET $offset",
            params | {"limit": limit, "offset": offset},
        ).fetchall()


def sentences(cur: duckdb.DuckDBPyConnection, run_id: str, example_ids: list[int]) -> dict[int, list[str]]:
    """The words (forms, in order) of each of the inputs (the id range bounds the files read)."""
    if not example_ids:
        return {}
    rows = cur.execute(
        "SELECT example_id, list(form ORDER BY word_idx) FROM words WHERE run_id = $run "
        "AND example_id BETWEEN $low AND $high AND list_contains($ids, example_id) GROUP BY example_id",
        {"run": run_id, "low": min(example_ids), "high": max(example_ids), "ids": example_ids},
    ).fetchall()
    return dict(rows)


def choices(cur: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, list[tuple[str, int]]]:
    """The run's UPOS tags and relations, each with its count of words, most frequent first."""
    found = {}
    for column in ("upos", "deprel"):
        found[column] = cur.execute(
            f"SELECT {column}, count(*) AS n FROM words WHERE run_id = $run AND {column} IS NOT NULL "
            f"GROUP BY {column} ORDER BY n DESC, {column}",
            {"run": run_id},
        ).fetchall()
    return found
