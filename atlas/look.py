"""``atlas.look``: one text's heads, without a corpus.

The text is ingested as a one-line ``--format lines`` corpus (``atlas.ingestion.readers.lines``: one input of one
text, words, POS and dependencies by spaCy) into a store of its own in a temporary folder, by the ingest itself:
its row statistics, edges and word-level rows are those an ingest of the same text computes, with the same model
and settings, because they are computed by the same code. The folder is deleted when the look is closed (or
collected). Dense by default: a look keeps every weight (float32) of an input this short.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import polars as pl

from atlas import checks
from atlas.api import ingest
from atlas.api import open as open_store
from atlas.errors import AtlasError, arg
from atlas.files import check_writable, replacing
from atlas.ingestion.readers.lines import Lines
from atlas.views import AttentionMap, Heads, document, head_view, model_view


class Look:
    """One text run through a model (``atlas.look``): its heads as views (``heads``, ``attention``), its row
    statistics (``rows``), edges, tokens and words as tables, and the catalogue's entries over it (``answer``,
    ``query``, ``sql``: ``atlas``). Shown in a notebook as its model view."""

    def __init__(self, folder: tempfile.TemporaryDirectory[str], run_id: str) -> None:
        self._folder = folder
        self.run_id = run_id
        self.atlas = open_store(Path(folder.name) / "store")

    def __enter__(self) -> Look:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the look's store."""
        try:
            self.atlas.close()
        finally:
            self._folder.cleanup()

    def __repr__(self) -> str:
        return f"Look(run_id={self.run_id!r}, tokens={self.tokens['piece'].to_list()!r})"

    def heads(self, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None) -> Heads:
        """The text's maps in ``layers`` and ``heads`` (1-based; default: all), as ``Atlas.heads``."""
        return self.atlas.heads(example=0, layers=layers, heads=heads, run=self.run_id)

    def attention(self, layer: int, head: int) -> AttentionMap:
        """The text's map in one head (1-based), shown as a head view."""
        return self.atlas.attention(example=0, layer=layer, head=head, run=self.run_id)

    def _table(self, name: str, order: str) -> pl.DataFrame:
        sql = f"SELECT * EXCLUDE (run_id) FROM {name} WHERE run_id = ? ORDER BY {order}"  # a table's name, not a value
        return self.atlas.connection.execute(sql, [self.run_id]).pl()

    @property
    def shape(self) -> tuple[int, int, int]:
        """The model's layers and heads, and the text's tokens."""
        sql = "SELECT n_layers, n_heads, n_tokens FROM runs WHERE run_id = ?"
        layers, heads, tokens = self.atlas.connection.execute(sql, [self.run_id]).fetchone()
        return int(layers), int(heads), int(tokens)

    @property
    def rows(self) -> pl.DataFrame:
        """Every attention row's statistics (``attn_rows``: entropy, argmax, masses to itself, its neighbours,
        [CLS], [SEP], punctuation, attention received), layer and head 0-based as stored."""
        return self._table("attn_rows", "layer, head, src_tok")

    @property
    def edges(self) -> pl.DataFrame:
        """The edges kept (``attn_edges``; every weight on a dense look)."""
        return self._table("attn_edges", "layer, head, src_tok, dst_tok")

    @property
    def tokens(self) -> pl.DataFrame:
        """The input's pieces (``tokens``)."""
        return self._table("tokens", "tok_idx")

    @property
    def words(self) -> pl.DataFrame:
        """The text's words with spaCy's POS and dependencies (``words``)."""
        return self._table("words", "word_idx")

    def query(self, name: str, /, **params: object) -> pl.DataFrame:
        """A catalogue entry's answer over the text (see ``Atlas.query``)."""
        return self.atlas.query(name, run=self.run_id, **params)

    def _repr_html_(self) -> str:
        return model_view(self.heads())

    def write(self, out: str | os.PathLike[str], layer: int | None = None, head: int | None = None) -> int:
        """Write ``html(layer, head)`` to ``out`` (an .html file, atomically); returns its size in bytes."""
        path = check_page(out, layer, head)
        page = self.html(layer, head)
        with replacing(path, arg("out", repr(str(path)))) as tmp:
            tmp.write_text(page, encoding="utf-8")
        return len(page.encode("utf-8"))

    def html(self, layer: int | None = None, head: int | None = None) -> str:
        """A standalone page: the model view, each thumbnail linking to its head view below (or only the head
        view of ``layer`` and ``head``)."""
        _together(layer, head)
        if layer is not None and head is not None:
            return document(f"layer {layer}, head {head}", head_view(self.attention(layer, head)))
        every = self.heads()
        linked = replace(every, link=lambda lay, hd: f"#layer-{lay}-head-{hd}")
        views = "".join(
            f'<section id="layer-{lay}-head-{hd}">{head_view(every.head(lay, hd))}</section>'
            for lay in every.layers
            for hd in every.heads
        )
        return document("attention heads", model_view(linked) + views)


def _together(layer: int | None, head: int | None) -> None:
    """A head view is of a layer and a head: both given, or neither (every head)."""
    if (layer is None) != (head is None):
        given = arg("layer") if head is None else arg("head")
        raise AtlasError(f"{given}: give {arg('layer')} and {arg('head')} together")


def check_page(out: str | os.PathLike[str], layer: int | None = None, head: int | None = None) -> Path:
    """``out`` as ``Look.write`` writes it, refused before any work where it cannot be: not an .html file, not
    writable, or only one of ``layer`` and ``head`` given."""
    _together(layer, head)
    checks.named("out", out)
    path = Path(out)
    given = arg("out", repr(str(path)))
    if path.suffix.lower() not in (".html", ".htm"):
        raise AtlasError(f"{given}: the page is an HTML file; name it .html")
    check_writable(path, given)
    return path


@checks.typed
def look(
    text: str,
    model: str | os.PathLike[str] | None = None,
    *,
    dense: bool = True,
    kept_mass: float | None = None,
    max_edges: int | None = None,
    max_length: int | None = None,
    word_rows: str = "mean",
    random_init: bool = False,
    seed: int | None = None,
    config: Mapping[str, object] | Sequence[str] | str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    progress: bool = False,
) -> Look:
    """Run ``model`` (default: the embedded all-MiniLM-L6-v2) once over ``text`` (one input; its lines joined by
    spaces) and return its heads and every row statistic the ingest computes (see ``Look``). The settings are the
    ingest's (``atlas.ingest``), dense by default (``dense=False``: kept edges only, as a default ingest keeps
    them; ``kept_mass`` and ``max_edges`` imply it)."""
    one = " ".join(text.split())
    if not one:
        raise AtlasError(f"{arg('text', repr(text))}: empty; give the text to look at")
    sparse = kept_mass is not None or max_edges is not None
    folder = tempfile.TemporaryDirectory(prefix="atlas-look-")
    try:
        corpus = Path(folder.name) / "look.txt"
        corpus.write_text(one + "\n", encoding="utf-8")
        done = ingest(
            corpus, model, Path(folder.name) / "store", format=Lines.name, dense=dense and not sparse,
            kept_mass=kept_mass, max_edges=max_edges, max_length=max_length, word_rows=word_rows,
            random_init=random_init, seed=seed, config=config, device=device, dtype=dtype, progress=progress,
        )  # fmt: skip
        return Look(folder, done.run_id)
    except AtlasError as exc:  # said of the text, not of the file it was written to
        folder.cleanup()
        raise AtlasError(exc.args[0].replace(str(corpus), arg("text"))) from None
    except BaseException:
        folder.cleanup()
        raise
