"""atlas serve benchmark: the seconds each kind of page takes over a large store, the application in-process
(Starlette's TestClient, no browser, nothing over the network).

    python bench/bench_serve.py STORE [--run RUN] [--layer 3 --head 9] [--relation nsubj]

On the application made afresh (no answer kept yet): the runs page; the first answer of each entry page in
``ENTRIES`` (its SQL and its first page of rows), then its figure (the PNG the page shows, drawn from the answer
kept); the example browser's search for the relation's
words from which the head attends to their syntactic head (by their first piece's most attended token, and on the
word-level map), its first page and a later one, and the run's inputs without a search; the input page of the
later page's first word found (its head view and the model view of every head); the SQL box. Then, on another
application made afresh, the head page of the head (its three entries answered) and of the next head (those answers
kept). A page is slow at ``LIMIT`` seconds or more. The seconds are wall time on this machine, other work and all.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from starlette.testclient import TestClient  # noqa: E402

from atlas.serve import app  # noqa: E402

LIMIT = 3.0  # seconds: a page this slow or slower is slow
ENTRIES = (  # (entry, its parameters besides the run)
    ("entropy", {}),
    ("special tokens", {}),
    ("relative position", {"threshold": "0.4"}),
    ("previous-token heads", {}),
    ("attention sink", {"threshold": "0.3"}),
    ("sep to sep", {}),
    ("best head per dependency relation", {"min_count": "50"}),
    ("induction heads", {}),
    ("duplicate-token heads", {}),
    ("feature attention", {}),
    ("head confidence", {}),
)


def timed(client: TestClient, path: str, params: dict[str, str]) -> tuple[float, int, str]:
    """Seconds of one page, its status and its text."""
    start = time.perf_counter()
    page = client.get(path, params=params)
    return time.perf_counter() - start, page.status_code, page.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--run", default=None, help="Run id or a start of it (default: the latest run).")
    parser.add_argument("--layer", type=int, default=3)
    parser.add_argument("--head", type=int, default=9)
    parser.add_argument("--relation", default="nsubj")
    args = parser.parse_args()
    rows: list[tuple[str, float, int]] = []

    def ask(client: TestClient, name: str, path: str, params: dict[str, str] | None = None) -> str:
        """``path`` with ``params`` and the run asked for (a path with its query as a page wrote it: as it is)."""
        run = {"run": args.run} if args.run and "?" not in path else {}
        seconds, status, text = timed(client, path, {**run, **(params or {})})
        rows.append((name, seconds, status))
        print(f"{seconds:7.2f}  {status}  {name}", file=sys.stderr, flush=True)
        return text

    start = time.perf_counter()
    client = TestClient(app(args.store))
    opened = time.perf_counter() - start
    ask(client, "runs (/)", "/")
    for name, params in ENTRIES:
        text = ask(client, f"entry: {name}", f"/entry/{name}", params)
        drawn = re.search(r'<img class="figure" [^>]*src="([^"]+)"', text)
        if drawn:
            ask(client, f"entry: {name}, its figure", html.unescape(drawn.group(1)))
    head = {"layer": str(args.layer), "head": str(args.head)}
    search = {"deprel": args.relation, **head}
    ask(client, f"examples: {args.relation}, head {args.layer}-{args.head} by piece, page 1", "/examples", search)
    later = ask(client, "examples: the same, page 40", "/examples", {**search, "page": "40"})
    ask(client, "examples: the same by word, page 1", "/examples", {**search, "by": "word"})
    ask(client, "examples: the run's inputs, page 1", "/examples")
    found = re.search(r'href="(/example/[^"?]+)\?word=(\d+)', later)
    if found:
        ask(client, "input page (head view and model view)", found.group(1), {"word": found.group(2), **head})
    ask(
        client,
        "SQL box: entropy per head",
        "/sql",
        {"q": "SELECT layer, head, avg(entropy) FROM attn_rows GROUP BY ALL"},
    )
    client = TestClient(app(args.store))
    following = args.head % client.app.state.served.shown(args.run).n_heads + 1
    ask(client, f"head {args.layer}-{args.head}, answers not kept yet", f"/head/{args.layer}-{args.head}")
    ask(client, f"head {args.layer}-{following}, answers kept", f"/head/{args.layer}-{following}")
    print(f"\n# {args.store}: the application made in {opened:.2f} s; a page is slow at {LIMIT:g} s or more\n")
    print("| page | s | status | under 3 s |\n|---|---|---|---|")
    for name, seconds, status in rows:
        print(f"| {name} | {seconds:.2f} | {status} | {'yes' if seconds < LIMIT else '**no**'} |")


if __name__ == "__main__":
    main()
