"""``atlas report``: one self-contained HTML page about a run (or two, side by side).

The page holds the runs' metadata; every catalogue entry that has an answer for the run, as a table with its
figure (entries whose prerequisites have not run, or that have no rows, are listed with the reason); and an
attention explorer over the stored edges of the run's first few inputs. Everything is inline (CSS,
JavaScript, PNG figures, the explorer's data), so the file opens offline and can be mailed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from atlas import checks
from atlas.catalogue import Entry, entries
from atlas.errors import AtlasError, arg, note_cli_text
from atlas.files import check_writable, replacing
from atlas.plot import figure
from atlas.report.explorer import chosen_examples, run_payload
from atlas.report.page import Block, Section, esc, fields, page, png, table
from atlas.version import __version__

if TYPE_CHECKING:
    from atlas.api import Atlas

SUFFIXES = (".html", ".htm")


@dataclass(frozen=True)
class Report:
    """What ``write_report`` wrote."""

    path: Path
    size: int  # bytes
    n_entries: int  # catalogue entries with a table
    n_skipped: int  # entries left out, each with its reason in the page
    n_examples: int  # inputs in the explorer


def check_out(out: Path) -> None:
    """Refuse a report file atlas cannot write, before any work."""
    given = arg("out", repr(str(out)))
    if out.suffix.lower() not in SUFFIXES:
        raise AtlasError(f"{given}: the report is an HTML file; name it .html")
    check_writable(out, given)


def write_report(
    st: Atlas,
    out: str | os.PathLike[str],
    run: str | None = None,
    examples: int = 20,
    compare: str | None = None,
    progress: bool = True,
) -> Report:
    """Write the report of ``run`` (default: the latest run) to ``out``: ``examples`` inputs in the explorer;
    ``compare``: a second run shown beside it (e.g. a fine-tuned model over the same corpus); ``progress``: a
    progress bar over the catalogue's entries (on a large run each takes seconds)."""
    checks.named("out", out)
    out = Path(out)
    check_out(out)
    checks.at_least("examples", examples, 0)
    run_id = st.run_id(run)
    compare_id = st.run_id(compare, "compare") if compare is not None else None
    if compare_id == run_id:
        raise AtlasError(f"{arg('compare', repr(compare))}: is the run reported on; name another run")
    runs = [run_id] + ([compare_id] if compare_id else [])
    con = st.connection
    meta = [con.execute("SELECT * FROM runs WHERE run_id = ?", [r]).pl() for r in runs]
    ordered = sorted(entries(), key=lambda e: (e.paper, e.name))
    bar = tqdm(ordered, desc="report", unit="entry", disable=not progress, leave=False)
    sections = [_section(st, entry, run_id, compare_id) for entry in bar]
    ids = chosen_examples(con, run_id, examples)
    explorer = {"runs": [run_payload(con, r, ids) for r in runs]} if ids else None
    title = f"Attention Atlas report: {run_id}" + (f" beside {compare_id}" if compare_id else "")
    written = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    subtitle = f"store {st.store.root.resolve()}; written {written} by atlas {__version__}"
    if run is None and (others := len(st.runs()) - len(runs)) > 0:
        subtitle += f"; the store's latest run, beside {others} other{'s' if others > 1 else ''}: name one for another"
    text = page(title, subtitle, fields(meta), explorer, sections)
    with replacing(out, arg("out", repr(str(out)))) as tmp:
        tmp.write_text(text, encoding="utf-8")
    shown = sum(s.shown for s in sections)
    return Report(out, out.stat().st_size, shown, len(sections) - shown, len(ids))


def _section(st: Atlas, entry: Entry, run_id: str, compare_id: str | None) -> Section:
    """The entry's answer for the report's run (and its --compare run, beside it); an entry that takes no run but
    compares two (two required run parameters, as its header declares them) gets the two, in the header's order."""
    pair = [p.name for p in entry.parameters if p.run is not None and p.default is None]
    if entry.takes_run(None):
        blocks = [_block(st, entry, {"run": r}) for r in (run_id, compare_id) if r]
    elif len(pair) == 2:
        if compare_id is None:
            blocks = [Block(entry.name, "", "compares two runs: give --compare RUN")]
        else:
            blocks = [_block(st, entry, dict(zip(pair, (run_id, compare_id), strict=True)))]
    else:
        blocks = [_block(st, entry, {})]
    anchor = re.sub(r"[^a-z0-9]+", "-", entry.name.lower()).strip("-")
    return Section(anchor, entry.name, entry.paper, entry.description, tuple(blocks))


def _block(st: Atlas, entry: Entry, params: dict[str, str]) -> Block:
    asked = "; ".join(f"{k} {v}" for k, v in params.items()) or "every run in the store"
    try:
        answer = st.answer(entry.name, **params)
    except AtlasError as exc:
        return Block(asked, "", exc.cli_text())  # the report says what to run in the command line's words
    if answer.frame.is_empty():
        return Block(answer.title, "", "no rows")
    notes = "".join(f'<p class="note">{esc(note_cli_text(note))}</p>' for note in answer.notes)
    picture = ""
    if entry.plot:
        try:
            picture = png(figure(entry, answer.frame, answer.title))
        except AtlasError as exc:
            picture = f'<p class="note">no figure: {esc(exc.cli_text())}</p>'
    return Block(answer.title, notes + picture + table(answer.frame))
