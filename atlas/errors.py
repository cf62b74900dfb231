"""The one exception type for user-facing errors, and how a message names the parameter at fault.

A message names a parameter with ``arg``: ``str(error)`` says it as the Python API's parameter
(``kept_mass=2: ...``), ``error.cli_text()`` as the command line's option (``--kept-mass 2: ...``), so that
each surface speaks its own words. The CLI prints the latter on one line and exits 1. A message written in the
command line's words (a catalogue entry's refusal or need: ``run 'atlas distances --run R' first``, ``ingest with
--dense``) is said by the API as its calls and arguments (``run Atlas.distances(run='R') first``, ``dense=True``):
``api_phrases``.
"""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Mapping, Sequence

_OPEN, _MID, _CLOSE = "\ue000", "\ue001", "\ue002"  # private-use characters around a parameter's name and value
_ARG = re.compile(f"{_OPEN}([^{_MID}]*){_MID}([^{_CLOSE}]*){_CLOSE}")
_QUERY = "?"  # marks a catalogue entry's parameter: --param NAME=VALUE on the command line
_LITERAL, _QUOTED = "=", "=r"  # mark a value said as it is (``literal``), and one a call of the API quotes
_HELD = re.compile("([\ue003\ue005])([0-9]+)\ue004")  # a marked text held out of ``api_phrases`` (\ue005: quoted)


def arg(name: str, value: object = None, *, query: bool = False) -> str:
    """A parameter (and the value given, as text) in a message: ``name=value`` in the API's words, ``--name
    value`` in the CLI's; ``query``: a catalogue entry's parameter (the CLI's ``--param name=value``)."""
    return f"{_OPEN}{_QUERY if query else ''}{name}{_MID}{'' if value is None else value}{_CLOSE}"


# the command line's words in a message, said by the API as its own: a command quoted whole, or an ingest's option
_PHRASE = re.compile(
    r"'atlas ([a-z]+)((?: .*?)?)'(?!\w)"  # 'atlas distances --run R' (a value may hold a quote or a space)
    r"|(?<![\w-])--(?:(dense)|(format) ([a-z][a-z0-9_]*)|(pack) (none|pair|window))\b"
)
_OPTION = re.compile(r"(?:^|\s+)--(?=[a-z])")  # where an option starts in a command
_COMMANDS = {  # command -> the API's call
    "ingest": "atlas.ingest", "queries": "atlas.queries", "finetune": "atlas.finetune", "ablate": "atlas.ablate",
    "importance": "atlas.importance", "grads": "atlas.grads", "runs": "Atlas.runs", "rm": "Atlas.remove",
    "query": "Atlas.query", "distances": "Atlas.distances", "patterns": "Atlas.patterns", "probe": "Atlas.probe",
}  # fmt: skip
_OPTIONS = {"train": "train_run", "eval": "eval_run", "compare": "runs"}  # option -> the API's argument, if not alike
_PLACEHOLDERS = {"RUN"}  # a value to be given
_WITHOUT_VALUE = {"compare": "[...]"}  # an option named without its value: the API's argument, if not a flag (True)
_FORMATS: set[str] = set()  # the corpus formats an ingest's --format takes (``said_as_format``)


def said_as_format(name: str) -> None:
    """Say ``--format name`` as the API's ``format='name'`` (the corpus readers' registry names each of its formats
    here; another ``--format X``, an output's, stays as written)."""
    _FORMATS.add(name)


def literal(value: object) -> str:
    """A value (a run id) put into a message written in the command line's words: said as it is by both surfaces,
    and one value of a command whatever it holds (a quote, a space, ' --'): in the API's words quoted as Python
    quotes it (``Atlas.distances(run="students' essays__m__h")``)."""
    return f"{_OPEN}{_LITERAL}{_MID}{value}{_CLOSE}"


def _value(text: str) -> str:
    if held := _HELD.fullmatch(text):  # a marked value: quoted when it is said
        return f"\ue005{held.group(2)}\ue004"
    return text if text in _PLACEHOLDERS else repr(text)  # a placeholder as it is, a value quoted


def _option(name: str, value: str | None) -> str:
    key = _OPTIONS.get(name, name.replace("-", "_"))
    return f"{key}={_value(value) if value is not None else _WITHOUT_VALUE.get(name, 'True')}"


def _api_phrase(match: re.Match[str]) -> str:
    """A phrase of ``_PHRASE`` in the API's words (a command the API has no call for, or its help: as it is). A
    command's words before its first option are one positional value (a run id may hold a space), an option's up
    to the next option its value."""
    if match.group(3):
        return _option("dense", None)
    if match.group(4) and match.group(5) not in _FORMATS:  # --format csv: an output's, said as it is
        return match.group(0)
    if match.group(4) or match.group(6):  # --format X, --pack X
        return _option(match.group(4), match.group(5)) if match.group(4) else _option(match.group(6), match.group(7))
    head, *options = _OPTION.split(match.group(2).strip())
    named = [option.partition(" ") for option in options]
    if match.group(1) not in _COMMANDS:
        return match.group(0)
    if any(name == "help" for name, _, _ in named):  # the command's help: the call's
        return f"help({_COMMANDS[match.group(1)]})"
    args = ([_value(head)] if head else []) + [_option(name, value or None) for name, _, value in named]
    return f"{_COMMANDS[match.group(1)]}({', '.join(args)})"


def api_phrases(text: str) -> str:
    """``text``, written in the command line's words, with each command quoted whole (``'atlas runs'``) and each
    option of an ingest (``--dense``, ``--format X``, ``--pack X``) as the API's call or argument; a marked
    parameter or value (``arg``, ``literal``) is held out whole, and a value in a call is quoted."""
    marks: list[str] = []

    def hold(match: re.Match[str]) -> str:
        marks.append(match.group(0))
        return f"\ue003{len(marks) - 1}\ue004"

    def restore(match: re.Match[str]) -> str:
        mark = marks[int(match.group(2))]
        quoted = match.group(1) == "\ue005" and mark.startswith(_OPEN + _LITERAL + _MID)
        return mark.replace(_OPEN + _LITERAL, _OPEN + _QUOTED, 1) if quoted else mark

    return _HELD.sub(restore, _PHRASE.sub(_api_phrase, _ARG.sub(hold, text)))


def _api_words(match: re.Match[str]) -> str:
    if match.group(1) in (_LITERAL, _QUOTED):
        return repr(match.group(2)) if match.group(1) == _QUOTED else match.group(2)
    name, value = match.group(1).removeprefix(_QUERY), match.group(2)
    return f"{name}={value}" if value else name


def api_text(text: str) -> str:
    """A message (parameters marked with ``arg``, commands in the command line's words) in the API's words."""
    return _ARG.sub(_api_words, api_phrases(text))


def cli_words(text: str, flags: Mapping[str, str] | None = None) -> str:
    """A message (parameters marked with ``arg``) in the command line's words (``flags``: API name -> option, where
    the option is not ``--`` and the name with dashes)."""
    flags = flags or {}

    def option(match: re.Match[str]) -> str:
        name, value = match.group(1), match.group(2)
        if name in (_LITERAL, _QUOTED):
            return value
        if name.startswith(_QUERY):
            return f"--param {name.removeprefix(_QUERY)}" + (f"={value}" if value else "")
        flag = flags.get(name, "--" + name.replace("_", "-"))
        return f"{flag} {value}" if value else flag

    return _ARG.sub(option, text)


class Note(str):
    """A note beside an answer: the text (``str``) in the API's words, ``cli_text()`` in the command line's."""

    _marked: str

    def __new__(cls, text: str) -> Note:
        note = super().__new__(cls, api_text(text))
        note._marked = text
        return note

    def cli_text(self) -> str:
        return cli_words(self._marked)


def note_cli_text(note: str) -> str:
    """A note (``Note`` or text) in the command line's words."""
    return note.cli_text() if isinstance(note, Note) else note


class AtlasError(Exception):
    """An error caused by the user's input (file, argument, store), not by a bug."""

    def __str__(self) -> str:
        return api_text(super().__str__())

    def cli_text(self, flags: Mapping[str, str] | None = None) -> str:
        """The message with each parameter named as the CLI's option (``flags``: API name -> option, where the
        option is not ``--`` and the name with dashes)."""
        return cli_words(super().__str__(), flags)


class AtlasNote(UserWarning):
    """Said beside an answer that is computed but differs from the paper's setting (the CLI prints it on
    stderr); ``note``: the note as its API gives it (``errors.Note``: with the command line's words too)."""

    def __init__(self, text: str, note: str | None = None) -> None:
        super().__init__(text)
        self.note = text if note is None else note


def caller_level() -> int:
    """The ``stacklevel`` that points a warning issued by the function calling this at the first frame outside atlas
    (the user's line, however many of atlas's own calls and checks lie between)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").partition(".")[0] == "atlas":
        frame, level = frame.f_back, level + 1
    return level


def warn_notes(notes: Sequence[str]) -> None:
    """Each note as an ``AtlasNote`` warning pointing at the caller's line."""
    for note in notes:
        warnings.warn(AtlasNote(note.removeprefix("note: "), note), stacklevel=caller_level())
