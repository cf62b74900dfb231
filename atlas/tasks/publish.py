"""Putting a finished folder in the place of another so that a kill at any point leaves the old folder or the
new one, whole, under the folder's name (or, where the system cannot swap two folders, a state the next
``recover`` turns into one of them).

The new folder is written beside the target as ``.<name>.tmp``. On Linux the two are exchanged in one step
(``renameat2`` with ``RENAME_EXCHANGE``), then the old one, now under the temporary name, is removed. Elsewhere
(or on a file system that cannot exchange) the target is first renamed ``.<name>.old``, then the new folder
renamed into place, then the old one removed; a kill between the two renames leaves no folder under the name,
and ``recover`` puts the old one back.
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def staging(out: Path) -> Path:
    """Where the new folder is written before it is put in place."""
    return out.with_name(f".{out.name}.tmp")


def _old(out: Path) -> Path:
    return out.with_name(f".{out.name}.old")


def _remove(path: Path) -> None:
    """Remove a folder, or only the link where it is a symbolic link (never what the link points to)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one step; False where the system or the file system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:  # a C library without it (glibc before 2.28)
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def recover(out: Path) -> None:
    """Undo or finish a publish that was killed: the old folder back under its name if the new one was not
    yet there, and the left-over folders removed."""
    old = _old(out)
    if old.exists():
        if out.exists():
            _remove(old)  # the new folder was in place: only the removal of the old one was left
        else:
            old.rename(out)
    _remove(staging(out))


def publish(out: Path) -> None:
    """Put the finished folder ``staging(out)`` in the place of ``out`` (which may not exist yet)."""
    new = staging(out)
    if out.exists() and _exchange(new, out):
        _remove(new)  # the old folder, now under the temporary name
        return
    old = _old(out)
    if out.exists():
        out.rename(old)
    new.rename(out)
    _remove(old)
