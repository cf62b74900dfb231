"""The one exception type for user-facing errors, and how a message names the parameter at fault.

A message names a parameter with ``arg``: ``str(error)`` says it as the Python API's parameter
(``kept_mass=2: ...``), ``error.cli_text()`` as the command line's option (``--kept-mass 2: ...``), so that
each surface speaks its own words. The CLI prints the latter on one line and exits 1.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_OPEN, _MID, _CLOSE = "\ue000", "\ue001", "\ue002"  # private-use characters around a parameter's name and value
_ARG = re.compile(f"{_OPEN}([^{_MID}]*){_MID}([^{_CLOSE}]*){_CLOSE}")
_QUERY = "?"  # marks a catalogue entry's parameter: --param NAME=VALUE on the command line


def arg(name: str, value: object = None, *, query: bool = False) -> str:
    """A parameter (and the value given, as text) in a message: ``name=value`` in the API's words, ``--name
    value`` in the CLI's; ``query``: a catalogue entry's parameter (the CLI's ``--param name=value``)."""
    return f"{_OPEN}{_QUERY if query else ''}{name}{_MID}{'' if value is None else value}{_CLOSE}"


def _api_words(match: re.Match[str]) -> str:
    name, value = match.group(1).removeprefix(_QUERY), match.group(2)
    return f"{name}={value}" if value else name


class AtlasError(Exception):
    """An error caused by the user's input (file, argument, store), not by a bug."""

    def __str__(self) -> str:
        return _ARG.sub(_api_words, super().__str__())

    def cli_text(self, flags: Mapping[str, str] | None = None) -> str:
        """The message with each parameter named as the CLI's option (``flags``: API name -> option, where the
        option is not ``--`` and the name with dashes)."""
        flags = flags or {}

        def cli_words(match: re.Match[str]) -> str:
            name, value = match.group(1), match.group(2)
            if name.startswith(_QUERY):
                return f"--param {name.removeprefix(_QUERY)}" + (f"={value}" if value else "")
            flag = flags.get(name, "--" + name.replace("_", "-"))
            return f"{flag} {value}" if value else flag

        return _ARG.sub(cli_words, super().__str__())
