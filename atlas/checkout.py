"""A checkout that is not installed (or Python started in a clone beside an installed wheel): the package's parts
that lie at the repository's top level found as packaging maps them for an install (pyproject.toml's package-dir:
``ingest/`` is ``atlas.ingestion``, ``queries/`` ``atlas.catalogue_sql``, ``cli.py`` ``atlas.cli``), so that a plain
checkout, an editable install and the wheel import the same modules."""

from __future__ import annotations

import sys
import tomllib
from collections.abc import Mapping, Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

PROJECT = "attention-atlas"


class TopLevel(MetaPathFinder):
    """Finds each part mapped to a folder (a package) or to a file's stem (a module: ``cli`` is ``cli.py``)."""

    def __init__(self, parts: Mapping[str, Path]) -> None:
        self.parts = dict(parts)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        where = self.parts.get(fullname)
        if where is None:
            return None
        if (where / "__init__.py").is_file():
            return spec_from_file_location(fullname, where / "__init__.py", submodule_search_locations=[str(where)])
        module = where.with_suffix(".py")
        return spec_from_file_location(fullname, module) if module.is_file() else None


def map_top_level(package: Path) -> None:
    """Where ``package`` (the atlas package's folder) lies in a checkout, beside the project's pyproject.toml, find
    the parts its package-dir maps (once; an installed package has no pyproject.toml beside it)."""
    project = package.parent / "pyproject.toml"
    if not project.is_file() or any(isinstance(finder, TopLevel) for finder in sys.meta_path):
        return
    try:
        config = tomllib.loads(project.read_text(encoding="utf-8"))
        if config["project"]["name"] != PROJECT:
            return
        mapped = config["tool"]["setuptools"]["package-dir"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return
    sys.meta_path.append(TopLevel({name: package.parent / folder for name, folder in mapped.items()}))
