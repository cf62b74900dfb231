"""Every catalogue entry's answer on stores of the shipped samples, one CSV file per store and entry, to compare
two versions of the atlas: the answers of one are the answers of the other when ``diff -r`` finds nothing.

    python scripts/catalogue_answers.py OUT [--stores FOLDER]
    python scripts/catalogue_answers.py --compare BEFORE AFTER

``--compare`` reads two such folders and lists every answer that differs: text cell for cell, numbers within
1e-12 of the larger (DuckDB sums a column's values in parallel, in an order that may change from one run to the
next, so the last digits of a mean may too).

Each store is ingested once into FOLDER (default: OUT/stores) with the embedded all-MiniLM-L6-v2, or the shipped
sample decoder for the repeated-token probe; an entry that refuses a store writes its one-line refusal instead of
a table. The stores are kept, so that a later run over the same FOLDER answers without ingesting again.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import atlas  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
DECODER = SAMPLES / "models" / "induction-2l"

# store name -> the ingest's arguments
STORES: dict[str, dict[str, object]] = {
    "ewt": {"corpus": SAMPLES / "ud" / "en_ewt-ud-dev-sample.conllu"},
    "ewt-dense-words": {"corpus": SAMPLES / "ud" / "en_ewt-ud-dev-sample.conllu", "dense": True, "text": "words"},
    "gum-window": {"corpus": SAMPLES / "ud" / "en_gum-ud-dev-sample.conllu", "pack": "window", "max_length": 128},
    "mrpc": {"corpus": SAMPLES / "glue" / "MRPC" / "dev.tsv", "format": "glue", "task": "MRPC"},
    "framenet": {"corpus": SAMPLES / "framenet" / "lu", "format": "framenet"},
    "wikitext": {"corpus": SAMPLES / "wikitext" / "wiki.test-sample.raw", "format": "text", "max_length": 128},
    "repeated": {"format": "repeated", "model": DECODER, "length": 20, "count": 4},
}


def answers(store: Path, out: Path) -> int:
    """Write each entry's answer on ``store`` into ``out``; the number of entries that answered."""
    out.mkdir(parents=True, exist_ok=True)
    answered = 0
    with atlas.open(store) as st, warnings.catch_warnings():
        warnings.simplefilter("ignore", atlas.AtlasNote)
        for name in atlas.queries()["name"]:
            target = out / f"{name.replace(' ', '_')}.csv"
            try:
                answer = st.answer(name)
            except atlas.AtlasError as exc:
                target.write_text(f"refused: {exc}\n")
                continue
            target.write_text(answer.title.split(";")[0] + "\n" + "\n".join(answer.notes) + "\n")
            with target.open("a") as handle:
                answer.frame.write_csv(handle)
            answered += 1
    return answered


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=1e-12, abs_tol=1e-15)


def differences(before: Path, after: Path) -> list[str]:
    """The answers that differ between two folders of ``answers``, and those only one of them holds."""
    found = []
    names = {p.relative_to(folder) for folder in (before, after) for p in folder.rglob("*.csv")}
    for name in sorted(names):
        if not (before / name).is_file() or not (after / name).is_file():
            found.append(f"{name}: in one folder only")
            continue
        a, b = ((folder / name).read_text().splitlines() for folder in (before, after))
        rows = list(zip(a, b, strict=False))
        bad = [i for i, (x, y) in enumerate(rows) if not all(map(_same, x.split(","), y.split(",")))]
        if len(a) != len(b) or bad:
            found.append(f"{name}: {len(a)} and {len(b)} lines; first difference at line {(bad or [len(rows)])[0] + 1}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--stores", type=Path, default=None)
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.compare:
        found = differences(*args.compare)
        print("\n".join(found) or "the same answers", file=sys.stderr)
        sys.exit(1 if found else 0)
    stores = args.stores or args.out / "stores"
    for name, options in STORES.items():
        store = stores / name
        atlas.ingest(store=store, progress=False, **options)
        n = answers(store, args.out / name)
        print(f"{name}: {n} entries answered", file=sys.stderr)


if __name__ == "__main__":
    main()
