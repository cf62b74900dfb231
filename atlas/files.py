"""Writing a file the user named (``--out``): atomically where a file can be, and never in place of what is
not a file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from atlas.errors import AtlasError


@contextmanager
def replacing(out: Path) -> Iterator[Path]:
    """The path to write ``out``'s new content to: a temporary file beside it, renamed to ``out`` when the block
    ends without an error (and removed when it does not), so that ``out`` is whole or as it was. Through a
    symbolic link the file it names is replaced and the link stays; a device or a pipe (``/dev/stdout``, a FIFO)
    is written in place, as a rename would put a file where it was."""
    target = out.resolve() if out.is_symlink() else out
    if target.exists() and not target.is_file():
        yield target
        return
    tmp = target.with_name(f".{target.stem}.tmp{target.suffix}")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def check_writable(out: Path, given: str) -> None:
    """Refuse a file ``out`` that cannot be written, before any work, naming it as ``given`` (``--out 'x'``)."""
    if out.is_dir():
        raise AtlasError(f"{given}: is a folder; name a file")
    folder = out.parent
    if folder.exists() and not folder.is_dir():
        raise AtlasError(f"{given}: '{folder}' is a file, not a folder")
    if not folder.is_dir():
        raise AtlasError(f"{given}: the folder '{folder}' does not exist")
