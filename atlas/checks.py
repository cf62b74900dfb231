"""Checks of the numbers a user gives the API (and so the CLI): counts, seeds and step sizes. Each refuses a
value with an ``AtlasError`` that names the parameter (``atlas.errors.arg``)."""

from __future__ import annotations

import os

from atlas.errors import AtlasError, arg

SEED_MAX = 2**32 - 1  # every generator a seed goes to (torch's, numpy's) takes 0 to this; runs.seed holds it


COUNT_MAX = 2**63 - 1  # a count or limit beyond DuckDB's BIGINT is none a store could hold


def at_least(name: str, value: float | None, least: float) -> None:
    """``value`` (None: not given) is ``least`` or more, and at most ``COUNT_MAX``."""
    if value is not None and value < least:
        raise AtlasError(f"{arg(name, value)}: expected {least} or more")
    if value is not None and value > COUNT_MAX:
        raise AtlasError(f"{arg(name, value)}: expected {COUNT_MAX:,} or less")


EMPTY_PATH = "empty; name the file or folder"  # a path given as '' (read as '.', the working folder, it misled)


def named(name: str, value: str | os.PathLike[str] | None, then: str = EMPTY_PATH) -> None:
    """``value`` (None: not given) is not empty or blank; else refused naming ``name``, saying ``then``."""
    if value is not None and not os.fspath(value).strip():
        raise AtlasError(f"{arg(name, repr(os.fspath(value)))}: {then}")


def seed(name: str, value: int | None) -> None:
    """``value`` (None: not given) is a seed, 0 to ``SEED_MAX``."""
    if value is not None and not 0 <= value <= SEED_MAX:
        raise AtlasError(f"{arg(name, value)}: expected a seed from 0 to {SEED_MAX}")


def step_size(name: str, value: float) -> None:
    """``value`` is an optimiser's step size: above 0 and at most 1 (Adam moves each weight by about that much
    a step; beyond, the weights overflow); nan is refused."""
    if not 0 < value <= 1:  # nan fails too
        raise AtlasError(f"{arg(name, value)}: expected a step size above 0 and at most 1")
