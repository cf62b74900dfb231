"""The example browser (``/examples``): a run's inputs, or its words found by their annotation and what a head
does from them (``atlas.serve.search``), a page at a time; and one input (``/example/<run>/<id>``): its words, the
head view of a layer and head (``?layer=&head=``, default 1 and 1) and the model view of every head, each
thumbnail leading to its head view.

The views are ``Atlas.heads``'s, drawn by ``atlas.views`` as they are in a notebook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import duckdb
from starlette.requests import Request
from starlette.responses import HTMLResponse

from atlas.errors import AtlasError
from atlas.report.page import esc
from atlas.serve.layout import (
    Refused,
    check_head,
    hidden_fields,
    html_table,
    link,
    page,
    pager,
    run_bar,
    run_param,
    select,
    text_field,
    url,
    whole_number,
)
from atlas.serve.search import BY, Search, choices, sentences
from atlas.serve.state import Served, Shown

PER_PAGE = 50  # inputs or words found, on one page
CONTEXT = 12  # words shown on either side of a word found


def examples_page(request: Request) -> HTMLResponse:
    served: Served = request.app.state.served
    query = request.query_params
    shown = served.shown(query.get("run") or None)
    search = Search.asked(query, shown)
    number = whole_number(query.get("page"), "page", 1)
    asked = search.fields()
    with served.cursor() as cur:
        listed = served.choices.get(shown.run_id, lambda: choices(cur, shown.run_id))
        if asked:
            total = search.count(cur, shown.run_id)
            found = search.found(cur, shown.run_id, PER_PAGE, (number - 1) * PER_PAGE)
            words = sentences(cur, shown.run_id, sorted({row[0] for row in found}))
        else:
            total, found, words = _inputs(cur, shown.run_id, number)
    if number > 1 and not found:
        n_pages = max(1, -(-total // PER_PAGE))
        raise Refused(400, f"page {number}: the search has {n_pages} page{'s' if n_pages > 1 else ''}", shown)
    where = {**asked, **run_param(shown)}
    paging = pager("/examples", where, number, PER_PAGE, total, "words found" if asked else "inputs")
    results = _words_found(shown, search, found, words) if asked else _inputs_listed(shown, found, words)
    body = _form(shown, search, listed) + paging + results + (paging if found else "")
    return HTMLResponse(page("Examples", body, shown, run_bar(shown, "/examples", asked)))


def _inputs(cur: duckdb.DuckDBPyConnection, run_id: str, number: int) -> tuple[int, list, dict[int, list[str]]]:
    """With nothing asked: the run's inputs (those run through the model), a page of them, and their words."""
    total = cur.execute("SELECT count(*) FROM examples WHERE run_id = ? AND NOT skipped", [run_id]).fetchone()[0]
    ids = cur.execute(
        "SELECT example_id FROM examples WHERE run_id = ? AND NOT skipped ORDER BY example_id LIMIT ? OFFSET ?",
        [run_id, PER_PAGE, (number - 1) * PER_PAGE],
    ).fetchall()
    return total, ids, sentences(cur, run_id, [i for (i,) in ids])


def _form(shown: Shown, search: Search, listed: dict[str, list[tuple[str, int]]]) -> str:
    def options(name: str) -> list[tuple[str, str]]:
        known = [(value, f"{value} ({n:,})") for value, n in listed[name]]
        given = getattr(search, name)
        return [("", "any"), *known, *([(given, given)] if given and given not in dict(known) else [])]

    layers = [("", "any"), *((str(i), str(i)) for i in range(1, shown.n_layers + 1))]
    heads = [("", "any"), *((str(i), str(i)) for i in range(1, shown.n_heads + 1))]
    layer, head = str(search.layer or ""), str(search.head or "")
    return (
        '<form class="search" method="get" action="/examples">'
        f"<label>form {text_field('form', search.form)}</label>"
        f"<label>lemma {text_field('lemma', search.lemma)}</label>"
        f"<label>UPOS {select('upos', options('upos'), search.upos)}</label>"
        f"<label>relation {select('deprel', options('deprel'), search.deprel)}</label>"
        "<fieldset><legend>and what a head does from the word</legend>"
        f"<label>layer {select('layer', layers, layer)}</label> <label>head {select('head', heads, head)}</label>"
        f"<label>attends to its syntactic head: {select('by', list(BY.items()), search.by)}</label></fieldset>"
        f'{hidden_fields(run_param(shown))}<button type="submit">search</button></form>'
        '<p class="note">Form and lemma match in either case; UPOS and relation as written (a relation with its '
        "subtype, e.g. nmod:poss). Nothing asked: the run's inputs.</p>"
    )


def _example_url(shown: Shown, example_id: int, **params: object) -> str:
    return url(f"/example/{shown.run_id}/{example_id}", params)


def _words_found(shown: Shown, search: Search, found: Sequence[tuple], words: dict[int, list[str]]) -> str:
    rows = []
    for example_id, word_idx, form, lemma, upos, deprel, head_idx, head_form in found:
        target = _example_url(shown, example_id, word=word_idx, layer=search.layer, head=search.head)
        rows.append(
            (
                link(target, str(example_id)),
                _context(words.get(example_id, []), word_idx, head_idx),
                esc(form),
                esc(lemma or ""),
                esc(upos or ""),
                esc(deprel or ""),
                esc(head_form if head_idx is not None else "(root)"),
            )
        )
    return html_table(("input", "words", "form", "lemma", "UPOS", "relation", "head word"), rows, (0,), (1,))


def _inputs_listed(shown: Shown, found: Sequence[tuple], words: dict[int, list[str]]) -> str:
    rows = [(link(_example_url(shown, i), str(i)), esc(" ".join(words.get(i, [])))) for (i,) in found]
    return html_table(("input", "words"), rows, (0,), (1,))


def _context(forms: list[str], word: int, head: int | None) -> str:
    """The words around ``word`` (marked), its head marked too where it lies among them."""
    start, end = max(0, word - CONTEXT), min(len(forms), word + CONTEXT + 1)
    shown = []
    for i in range(start, end):
        text = esc(forms[i])
        shown.append(f"<mark>{text}</mark>" if i == word else f'<u class="head">{text}</u>' if i == head else text)
    return ("… " if start else "") + " ".join(shown) + (" …" if end < len(forms) else "")


def example_page(request: Request) -> HTMLResponse:
    served: Served = request.app.state.served
    shown = served.shown(request.path_params["run"])
    example = int(request.path_params["example"])
    query = request.query_params
    layer = whole_number(query.get("layer"), "layer", 1)
    head = whole_number(query.get("head"), "head", 1)
    check_head(shown, layer, head)
    word = whole_number(query.get("word"), "word", -1, low=0)
    try:
        with served.lock:
            heads = served.st.heads(example=example, run=shown.run_id)
    except AtlasError as exc:
        raise Refused(404, exc.cli_text(), shown) from None
    here = f"/example/{shown.run_id}/{example}"
    chosen = {"word": word if word >= 0 else None}
    linked = dataclasses.replace(heads, link=lambda lay, hd: url(here, {"layer": lay, "head": hd, **chosen}) + "#head")
    with served.cursor() as cur:
        words = cur.execute(
            "SELECT word_idx, form, lemma, upos, deprel, head_word_idx, first_tok FROM words "
            "WHERE run_id = ? AND example_id = ? ORDER BY word_idx",
            [shown.run_id, example],
        ).fetchall()
        if word >= len(words):
            raise Refused(400, f"word {word}: input {example} has words 0 to {len(words) - 1} (0-based)", shown)
        about, last = _about(cur, shown.run_id, example)
        attended = _attended(cur, shown.run_id, example, layer, head, words, word)
    sentence = " ".join(
        link(url(here, {"word": i, "layer": layer, "head": head}), form, _word_class(i, word, words))
        for i, form, *_ in words
    )
    layers = [(str(i), str(i)) for i in range(1, shown.n_layers + 1)]
    head_ids = [(str(i), str(i)) for i in range(1, shown.n_heads + 1)]
    chooser = (
        f'<form class="controls" method="get" action="{esc(url(here))}#head">'
        f"<label>layer {select('layer', layers, str(layer), submit=True)}</label>"
        f"<label>head {select('head', head_ids, str(head), submit=True)}</label>"
        f'{hidden_fields(chosen)}<button type="submit">show</button> '
        f"{link(url(f'/head/{layer}-{head}', {'run': shown.run_id}), f'about head {layer}-{head}')}</form>"
    )
    steps = " · ".join(
        link(url(f"/example/{shown.run_id}/{example + step}", {"layer": layer, "head": head}), text)
        for step, text in ((-1, "previous input"), (1, "next input"))
        if 0 <= example + step <= last
    )
    body = (
        f'<p class="note">{esc(about)} · {steps}</p><p class="sentence">{sentence}</p>{attended}'
        f'<section id="head"><h2>Layer {layer}, head {head}</h2>{chooser}'
        f'<div class="view">{heads.head(layer, head)._repr_html_()}</div></section>'
        f'<section><h2>Every head</h2><div class="view">{linked._repr_html_()}</div></section>'
    )
    bar = run_bar(shown, "/examples", said=f"; input {example}")
    return HTMLResponse(page(f"Input {example}", body, shown, bar))


def _word_class(i: int, word: int, words: Sequence[tuple]) -> str:
    if i == word:
        return "word chosen"
    return "word head" if 0 <= word < len(words) and words[word][5] == i else "word"


def _about(cur: duckdb.DuckDBPyConnection, run_id: str, example: int) -> tuple[str, int]:
    """Where the input comes from and its length, in words; and the run's last input id."""
    doc_id, sent_ids, n_tokens, n_words = cur.execute(
        "SELECT doc_id, sent_ids, n_tokens, n_words FROM examples WHERE run_id = ? AND example_id = ?",
        [run_id, example],
    ).fetchone()
    last = cur.execute("SELECT max(example_id) FROM examples WHERE run_id = ?", [run_id]).fetchone()[0]
    document = f"document {doc_id}, " if doc_id else ""
    return f"{document}sentence {', '.join(sent_ids or [])}: {n_words} words, {n_tokens} tokens", last


def _attended(
    cur: duckdb.DuckDBPyConnection, run_id: str, example: int, layer: int, head: int, words: list[tuple], word: int
) -> str:
    """What the chosen word (``word``: its index, -1 for none) attends to most in the layer and head: from its first
    piece (the token), and on the word-level map (the word)."""
    if word < 0:
        return '<p class="note">choose a word to see what it attends to most</p>'
    word_idx, form, lemma, upos, deprel, head_idx, first_tok = words[word]
    token = cur.execute(
        "SELECT t.tok_idx, t.piece FROM attn_rows r JOIN tokens t ON t.run_id = ? AND t.example_id = ? "
        "AND t.tok_idx = r.argmax_tok WHERE r.run_id = ? AND r.example_id = ? AND r.layer = ? AND r.head = ? "
        "AND r.src_tok = ?",
        [run_id, example, run_id, example, layer - 1, head - 1, first_tok],
    ).fetchone()
    attended = cur.execute(
        "SELECT w.form FROM word_rows r JOIN words w ON w.run_id = ? AND w.example_id = ? AND w.word_idx = r.dst_word "
        "WHERE r.run_id = ? AND r.example_id = ? AND r.layer = ? AND r.head = ? AND r.src_word = ?",
        [run_id, example, run_id, example, layer - 1, head - 1, word_idx],
    ).fetchone()
    of = f" of '{words[head_idx][1]}'" if head_idx is not None else ""
    said = f"word {word_idx + 1} '{form}' ({lemma}, {upos}, {deprel}{of})"
    parts = [f"its first piece attends most to token {token[0]} '{token[1]}'" if token else "it has no piece"]
    if attended:
        parts.append(f"on the word-level map it attends most to '{attended[0]}'")
    return f'<p class="attended">{esc(said)}: in layer {layer}, head {head}, {esc("; ".join(parts))}</p>'
