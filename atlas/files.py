"""Writing a file the user named (``--out``): atomically where a file can be, and never in place of what is
not a file."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from atlas.errors import AtlasError


@contextmanager
def writing_to(given: str) -> Iterator[None]:
    """An operating system's refusal to write the user's file or folder (permissions, a full disk, a read-only
    file system), said in one line naming it as ``given`` (``--out 'x'``)."""
    try:
        yield
    except BrokenPipeError:  # the reader of a pipe stopped early: the command line's to say (exit 0)
        raise
    except OSError as exc:
        if exc.errno is None:  # not the system's refusal: an error of the query read, raised by its reader
            raise
        raise AtlasError(f"{given}: cannot write it ({exc.strerror or os.strerror(exc.errno)})") from None


@contextmanager
def replacing(out: Path, given: str) -> Iterator[Path]:
    """The path to write ``out``'s new content to: a temporary file beside it, renamed to ``out`` when the block
    ends without an error (and removed when it does not), so that ``out`` is whole or as it was. Through a
    symbolic link the file it names is replaced and the link stays; a device or a pipe (``/dev/stdout``, a FIFO)
    is written in place, as a rename would put a file where it was. An error of the operating system's while
    writing is said naming ``out`` as ``given`` (``writing_to``)."""
    with writing_to(given):
        if out.exists() and not out.is_file():  # /dev/stdout, a FIFO (the link of /dev/stdout names a pipe: no path)
            yield out
            return
        target = out.resolve() if out.is_symlink() else out
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
    check_folders_above(out, given)
    if not out.parent.is_dir():
        raise AtlasError(f"{given}: the folder '{out.parent}' does not exist")


def check_folders_above(path: Path, given: str) -> None:
    """Refuse ``path`` where what exists nearest above it is a file, not a folder (said so, not as a folder
    that does not exist)."""
    above = next((folder for folder in path.absolute().parents if folder.exists()), None)
    if above is not None and not above.is_dir():
        raise AtlasError(f"{given}: '{above}' is a file, not a folder")
