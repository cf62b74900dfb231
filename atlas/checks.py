"""Checks of the values a user gives the API (and so the CLI): their types (``typed``), counts, seeds and step sizes.
Each refuses a value with an ``AtlasError`` that names the parameter (``atlas.errors.arg``)."""

from __future__ import annotations

import collections.abc
import functools
import inspect
import numbers
import os
import reprlib
import sys
import types
import typing
from collections.abc import Callable
from pathlib import PurePath

import numpy as np

from atlas.errors import AtlasError, arg

SEED_MAX = 2**32 - 1  # every generator a seed goes to (torch's, numpy's) takes 0 to this; runs.seed holds it


COUNT_MAX = 2**63 - 1  # a count or limit beyond DuckDB's BIGINT is none a store could hold


def at_least(name: str, value: float | None, least: float) -> None:
    """``value`` (None: not given) is ``least`` or more (NaN is not), and at most ``COUNT_MAX``."""
    if value is not None and not value >= least:
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


_WORDS = {int: "a whole number", float: "a number", bool: "True or False", str: "text", os.PathLike: "a path"}


def _fits(value: object, kind: object) -> bool | None:
    """Whether ``value`` is of the annotated type ``kind`` (None: a type not checked here)."""
    origin, inner = typing.get_origin(kind), typing.get_args(kind)
    if kind in (typing.Any, object):
        return True
    if kind is None or kind is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        fits = [_fits(value, k) for k in inner]
        return True if any(fits) else (None if None in fits else False)
    if origin is typing.Literal:
        return value in inner
    if kind is bool:
        return isinstance(value, bool | np.bool_)
    if kind is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)
    if kind is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)
    if kind is str:
        return isinstance(value, str)
    if (origin or kind) is os.PathLike:
        return isinstance(value, os.PathLike)
    if origin in (collections.abc.Sequence, list, tuple):  # or any sized iterable of them (an array, a Series)
        if isinstance(value, str | bytes | collections.abc.Mapping | collections.abc.Set):  # a set has no order
            return False
        sized = isinstance(value, collections.abc.Iterable) and isinstance(value, collections.abc.Sized)
        if not sized or getattr(value, "ndim", 1) == 0:  # a generator (read once), a 0-d array (not iterable)
            return False
        item = inner[0] if inner else object
        return all(_fits(v, item) is not False for v in value)
    if origin in (collections.abc.Mapping, dict):
        return isinstance(value, collections.abc.Mapping)
    return None


def _words(kind: object) -> str:
    """The annotated type ``kind`` in a message's words."""
    origin, inner = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        said = list(dict.fromkeys(_words(k) for k in inner if k is not type(None)))
        if "text" in said and "a path" in said:  # str | os.PathLike
            said.remove("text")
        return " or ".join(said) + (" (or None)" if type(None) in inner else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(map(repr, inner))
    if origin in (collections.abc.Sequence, list, tuple):
        item = [k for k in typing.get_args(inner[0]) if k is not type(None)] if inner else []
        return f"a list of {_words(item[0] if len(item) == 1 else inner[0]) if inner else 'values'}"
    if origin in (collections.abc.Mapping, dict):
        return "a mapping"
    return _WORDS.get(origin or kind, getattr(kind, "__name__", str(kind)))


def _hints(fn: Callable) -> dict[str, object]:
    """The annotations of ``fn``'s parameters, each evaluated alone (one naming a type imported only for type
    checkers is left out)."""
    module = sys.modules[fn.__module__].__dict__
    hints = {}
    for name, parameter in inspect.signature(fn).parameters.items():
        annotation = parameter.annotation
        if annotation is inspect.Parameter.empty or parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        try:
            hints[name] = eval(annotation, module) if isinstance(annotation, str) else annotation
        except NameError:
            continue
    return hints


_REPR = reprlib.Repr()  # a run id whole, a long list cut
_REPR.maxstring = _REPR.maxother = 300
_REPR.maxlist = _REPR.maxtuple = 4


def _shown(value: object) -> str:
    """A value as a message shows it: its repr on one line, cut (a Series, a long list)."""
    return " ".join(_REPR.repr(value).split())


def _path_text(path: PurePath) -> str:
    """A path as text that reads as a path: a relative ``models/bert`` as ``./models/bert`` (else a hub id)."""
    text = os.fspath(path)
    return text if path.is_absolute() or text.startswith((".", "~")) else os.path.join(".", text)


def typed(fn: Callable) -> Callable:
    """Refuse, before ``fn`` does anything, an argument whose type is not its parameter's annotation (a whole number:
    an int, not a bool nor 1.5; a number: an int or a float, not its text; a list: not a str), naming the parameter.
    Types this does not know (a class imported only for type checkers) are left to ``fn``."""
    signature = inspect.signature(fn)
    hints: dict[str, object] | None = None

    @functools.wraps(fn)
    def checked(*args: object, **kwargs: object) -> object:
        nonlocal hints
        if hints is None:
            hints = _hints(fn)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return fn(*args, **kwargs)  # Python's own error: an argument missing or unknown
        for name, value in bound.arguments.items():
            kind = hints.get(name)
            if name in hints and signature.parameters[name].kind is inspect.Parameter.VAR_POSITIONAL:
                bad = next((v for v in value if _fits(v, kind) is False), None)
                if bad is not None:
                    raise AtlasError(f"{arg(name, _shown(bad))}: expected {_words(kind)}")
            elif name in hints and _fits(value, kind) is False:
                raise AtlasError(f"{arg(name, _shown(value))}: expected {_words(kind)}")
            elif isinstance(value, PurePath):  # a file or folder as the CLI gives it: its text, a path in it
                bound.arguments[name] = _path_text(value)
            elif isinstance(value, np.generic):  # NumPy's scalars as Python's (a run id's JSON takes no int64)
                narrow = isinstance(value, np.floating) and value.itemsize < 8  # float32(0.9) as 0.9, its digits
                bound.arguments[name] = float(str(value)) if narrow else value.item()
        return fn(*bound.args, **bound.kwargs)

    return checked
