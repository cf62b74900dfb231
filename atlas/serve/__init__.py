"""``atlas serve``: a local, read-only web application over a store (Starlette, served by uvicorn).

Pages: the runs (``/``); the catalogue (``/entries``) and each entry's answer with its form, notes and figure
(``/entry/<name>``); a SQL box (``/sql``); an example browser searching the corpus by form, lemma, UPOS, relation
and what a head does from a word (``/examples``); an input's head view and model view (``/example/<run>/<id>``);
and a page per head, its scores and typical inputs (``/head/<layer>-<head>``). Every page says the run it shows.
The pages are plain HTML and inline SVG with a stylesheet of their own: they load nothing from elsewhere.

``app(store)`` makes the application; ``atlas.cli_serve`` runs it.
"""

from atlas.serve.app import app

__all__ = ["app"]
