"""A page per head (``/head/<layer>-<head>``): its scores in the catalogue's cheap per-head entries, each with its
rank among the run's heads, and its most typical inputs.

Typical: the run's heads each spread an input's attention over its tokens in their own way; an input's profile in
a head is the mean share of attention its tokens give to [CLS] (or the BOS), to [SEP] (or the EOS), to the previous
token, to themselves, to the next token and to '.' and ',' (``attn_rows``, from the dense rows). The typical inputs
are those whose profile lies nearest (Euclidean distance) to the head's mean profile, among the inputs of ``TOKENS``
tokens (short enough to read in a head view); both read from the run's first ``INPUTS`` inputs, which bounds the
Parquet files read.
"""

from __future__ import annotations

import duckdb
import polars as pl
from starlette.requests import Request
from starlette.responses import HTMLResponse

from atlas.catalogue import entries
from atlas.errors import AtlasError
from atlas.report.page import esc
from atlas.serve.layout import check_head, html_table, link, page, run_bar, run_param, url
from atlas.serve.search import sentences
from atlas.serve.state import Served, Shown

# per-head entries cheap enough to answer for a page (each under a second on UD EWT train), each kept per run
HEAD_ENTRIES = ("entropy", "special tokens", "relative position")
PROFILE = {  # a profile's measures: attn_rows column -> what it is
    "to_cls": "[CLS]",
    "to_sep": "[SEP]",
    "to_prev": "previous",
    "to_self": "itself",
    "to_next": "next",
    "to_dot_comma": "'.' ','",
}
TOKENS = (10, 40)  # the typical inputs' length in tokens, at least and at most
TYPICAL = 10  # typical inputs shown
INPUTS = 2000  # the run's first inputs the profiles are read from (their ids bound the Parquet files read)


def head_page(request: Request) -> HTMLResponse:
    served: Served = request.app.state.served
    layer, head = int(request.path_params["layer"]), int(request.path_params["head"])
    shown = served.shown(request.query_params.get("run") or None)
    check_head(shown, layer, head, 404)
    scores = _scores(served, shown, layer, head)
    with served.cursor() as cur:
        typical = _typical(cur, shown.run_id, layer, head)
        words = sentences(cur, shown.run_id, typical[0]["example_id"].to_list() if typical is not None else [])
    search = url("/examples", {"layer": layer, "head": head, **run_param(shown)})
    body = (
        f"{_grid(shown, layer, head)}<h2>Scores</h2>{scores}<h2>Typical inputs</h2>"
        f"{_typical_table(shown, layer, head, typical, words)}"
        f"<p>{link(search, f'words from which head {layer}-{head} attends to their syntactic head')}</p>"
    )
    bar = run_bar(shown, f"/head/{layer}-{head}")
    return HTMLResponse(page(f"Head {layer}-{head}", body, shown, bar))


def _grid(shown: Shown, layer: int, head: int) -> str:
    """Every head of the run as a link, this one marked."""
    keep = run_param(shown)
    rows = []
    for lay in range(1, shown.n_layers + 1):
        cells = [
            link(url(f"/head/{lay}-{hd}", keep), f"{lay}-{hd}", "chosen" if (lay, hd) == (layer, head) else "")
            for hd in range(1, shown.n_heads + 1)
        ]
        rows.append(f'<div class="heads">{" ".join(cells)}</div>')
    return f'<details class="grid"><summary>every head</summary>{"".join(rows)}</details>'


def _scores(served: Served, shown: Shown, layer: int, head: int) -> str:
    """The head's row of each of ``HEAD_ENTRIES``: the values its figure draws, and their rank among the heads."""
    rows, refused = [], []
    for entry in (e for e in entries() if e.name in HEAD_ENTRIES):
        try:
            frame = served.answer(entry, shown, {}).frame
        except AtlasError as exc:
            refused.append(f'<p class="note">{esc(entry.name)}: {esc(exc.cli_text())}</p>')
            continue
        heads = frame.filter(pl.col("head").is_not_null())
        mine = heads.filter((pl.col("layer") == layer) & (pl.col("head") == head))
        if mine.is_empty():
            continue
        for column in entry.plot[1:]:
            value = mine[column][0]
            if value is None:
                continue
            rank = 1 + heads.filter(pl.col(column) > value).height
            rows.append(
                (
                    link(url(f"/entry/{entry.name}", run_param(shown)), entry.name),
                    esc(entry.label(column)),
                    f"{value:.4f}",
                    f"{rank} of {heads.height}",
                    f"{heads[column].median():.4f}",
                )
            )
    table = html_table(("entry", "measure", "this head", "rank (highest 1)", "median of the heads"), rows, (2, 3, 4))
    return table + "".join(refused)


def _typical(
    cur: duckdb.DuckDBPyConnection, run_id: str, layer: int, head: int
) -> tuple[pl.DataFrame, tuple[float, ...]] | None:
    """The inputs of ``TOKENS`` tokens nearest the head's mean profile, nearest first, and that mean profile (None:
    the run has no input)."""
    measures = ", ".join(f"avg({c}) AS {c}" for c in PROFILE)
    profiles = cur.execute(
        f"SELECT example_id, count(*) AS n_tokens, {measures} FROM attn_rows WHERE run_id = ? AND layer = ? "
        "AND head = ? AND example_id < ? GROUP BY example_id",
        [run_id, layer - 1, head - 1, INPUTS],
    ).pl()
    if profiles.is_empty():
        return None
    mean = profiles.select(pl.col(c).mean() for c in PROFILE).row(0)
    distance = sum((pl.col(c) - m) ** 2 for c, m in zip(PROFILE, mean, strict=True)).sqrt()
    low, high = TOKENS
    nearest = (
        profiles.filter(pl.col("n_tokens").is_between(low, high))
        .with_columns(distance.alias("distance"))
        .sort("distance", "example_id")
        .head(TYPICAL)
    )
    return nearest, mean


def _typical_table(
    shown: Shown,
    layer: int,
    head: int,
    typical: tuple[pl.DataFrame, tuple[float, ...]] | None,
    words: dict[int, list[str]],
) -> str:
    what = (
        "An input's profile: the mean share of attention its tokens give, in this head, to "
        f"{', '.join(PROFILE.values())}. Typical: the inputs of {TOKENS[0]} to {TOKENS[1]} tokens whose profile lies "
        f"nearest the head's mean profile (Euclidean distance), among the run's first {INPUTS:,} inputs."
    )
    if typical is None or typical[0].is_empty():
        return f'<p class="note">{esc(what)}</p><p class="note">no input of that length</p>'
    nearest, mean = typical
    rows = [("", "<i>the head's mean profile</i>", "", "", *(f"{m:.2f}" for m in mean))]
    for row in nearest.iter_rows(named=True):
        target = url(f"/example/{shown.run_id}/{row['example_id']}", {"layer": layer, "head": head})
        rows.append(
            (
                link(target, str(row["example_id"])),
                esc(" ".join(words.get(row["example_id"], []))),
                str(row["n_tokens"]),
                f"{row['distance']:.3f}",
                *(f"{row[c]:.2f}" for c in PROFILE),
            )
        )
    columns = ("input", "words", "tokens", "distance", *PROFILE.values())
    return f'<p class="note">{esc(what)}</p>' + html_table(columns, rows, tuple(range(2, 4 + len(PROFILE))), (1,))
