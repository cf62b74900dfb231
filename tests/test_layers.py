"""The house as drawn: imports run one way, from the CLI down to the model and the corpus readers.

Every module of the package belongs to one layer, named by its folder where the folder is the layer
(``atlas/model/``, ``ingest/readers/``, ``ingest/``, ``atlas/spark/``, ``atlas/tasks/``, ``atlas/report/``); a module
imports only modules of its own layer or of the layers below, no import circle exists, and the CLI's commands each
make one call of the API. The package's modules are found where packaging puts them (pyproject.toml's package-dir:
the repository's ``ingest/`` is ``atlas.ingestion``, ``cli.py`` is ``atlas.cli``). Imports are read from the source
with ``ast`` (those inside functions included; those under ``if TYPE_CHECKING:``, which never run, left out).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# top to bottom; a module is in the layer of the most specific pattern it matches (a folder's modules: "folder.*")
LAYERS = {
    "CLI": ["atlas.cli", "atlas.cli_*", "atlas.output", "atlas.serve", "atlas.serve.*"],  # the front ends
    "API": ["atlas", "atlas.api", "atlas.api_tasks", "atlas.look"],
    "engines": ["atlas.engine", "atlas.ready", "atlas.spark", "atlas.spark.*"],
    "analyses": [
        "atlas.report",
        "atlas.report.*",
        "atlas.plot",
        "atlas.views",
        "atlas.distances",
        "atlas.probe*",
        "atlas.pattern*",
        "atlas.recompute",
        "atlas.tasks",
        "atlas.tasks.*",
    ],
    "ingest pipeline": ["atlas.ingestion", "atlas.ingestion.*"],
    "store and catalogue": [
        "atlas.store",
        "atlas.catalogue*",
        "atlas.needs",
        "atlas.macros",
        "atlas.compare",
        "atlas.prerequisites",
        "atlas.maps",
        "atlas.run_sql",
        "atlas.catalogue_sql",
    ],
    "model and corpus readers": [
        "atlas.model",
        "atlas.model.*",
        "atlas.ingestion.readers",
        "atlas.ingestion.readers.*",
        "atlas.ingestion.align",  # the words placed on the pieces: read by the text reader
        "atlas.ingestion.template",  # the tokenizer's template: read by the repeated-token reader
        "atlas.errors",
        "atlas.checks",
        "atlas.files",
        "atlas.version",
        "atlas.checkout",
    ],
}
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def package_sources(root: Path) -> dict[str, Path]:
    """Where each part of the package lies in the repository at ``root``: its pyproject.toml's package-dir, and
    the package's own folder."""
    mapped = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {"atlas": root / "atlas", **{name: root / folder for name, folder in mapped.items()}}


def find_modules(sources: Mapping[str, Path]) -> dict[str, Path]:
    """Every module of the package, by its import name, and its file (a part mapped to ``name`` that is no folder
    is the module ``name.py``)."""
    found: dict[str, Path] = {}
    for name, where in sources.items():
        if not where.is_dir():
            found[name] = where.with_suffix(".py")
            continue
        for path in where.rglob("*.py"):
            parts = path.relative_to(where).with_suffix("").parts
            found[".".join([name, *parts[:-1]] if parts[-1] == "__init__" else [name, *parts])] = path
    return dict(sorted(found.items()))


MODULES = find_modules(package_sources(ROOT))


def _layer(module: str) -> str:
    matched = [(len(p), layer) for layer, patterns in LAYERS.items() for p in patterns if fnmatch(module, p)]
    if not matched:
        raise AssertionError(f"{module}: in no layer of tests/test_layers.py; add it to the layer it belongs to")
    return max(matched)[1]


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in node.body:
                lines.update(n.lineno for n in ast.walk(inner) if isinstance(n, ast.Import | ast.ImportFrom))
    return lines


def imports_of(module: str, modules: Mapping[str, Path] = MODULES) -> dict[str, int]:
    """The first-party modules ``module`` imports (``from atlas import api``: atlas.api), with a line of each."""
    tree = ast.parse(modules[module].read_text())
    skipped = _type_checking_only(tree)
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skipped:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{module}: a relative import on line {node.lineno}"
            base = node.module or ""
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in {"atlas", "ingest", "cli", "queries"}:
                found.setdefault(name, node.lineno)
    return found


def upward_imports(modules: Mapping[str, Path], importers: Iterable[str] | None = None) -> list[str]:
    """Each import by ``importers`` (default: every module) of a module that is not the package's, or of a layer
    above the importer's."""
    found = []
    for module in modules if importers is None else importers:
        here = RANK[_layer(module)]
        for imported, line in imports_of(module, modules).items():
            if imported not in modules:
                found.append(
                    f"{modules[module]}:{line}: imports '{imported}', not a module of the atlas package "
                    "(the repository's ingest/ and cli.py are atlas.ingestion and atlas.cli)"
                )
            elif RANK[_layer(imported)] < here:
                found.append(
                    f"{modules[module]}:{line}: {module} ({_layer(module)}) imports {imported}, a layer above "
                    f"({_layer(imported)})"
                )
    return found


def import_circle(modules: Mapping[str, Path]) -> list[str] | None:
    """A circle of imports among ``modules`` (the first found, from the first module in name order), or None."""
    graph = {module: set(imports_of(module, modules)) & set(modules) for module in modules}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                return path[path.index(imported) :] + [imported]
            if imported not in state and (circle := visit(imported, [*path, imported])):
                return circle
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (circle := visit(module, [module])):
            return circle
    return None


def test_every_module_is_in_a_layer() -> None:
    assert {"atlas.cli", "atlas.ingestion.pipeline", "atlas.ingestion.readers.conllu"} <= set(MODULES)
    assert len(MODULES) > 60
    for module in MODULES:
        _layer(module)


def test_the_layers_are_the_folders() -> None:
    """A folder's modules share its layer: the readers, the model, the pipeline (but for the two modules the readers
    use), the engines, the analyses."""
    below = {"atlas.ingestion.align", "atlas.ingestion.template"}
    for folder, layer in [
        ("atlas.ingestion.readers", "model and corpus readers"),
        ("atlas.model", "model and corpus readers"),
        ("atlas.ingestion", "ingest pipeline"),
        ("atlas.spark", "engines"),
        ("atlas.tasks", "analyses"),
        ("atlas.report", "analyses"),
    ]:
        inside = [m for m in MODULES if m.startswith(f"{folder}.") and m not in below]
        if folder == "atlas.ingestion":  # its readers' folder is the layer below
            inside = [m for m in inside if not f"{m}.".startswith("atlas.ingestion.readers.")]
        assert inside and {_layer(m) for m in inside} == {layer}, folder


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_one_way(module: str) -> None:
    assert upward_imports(MODULES, [module]) == []


def test_no_import_circle() -> None:
    assert import_circle(MODULES) is None


def test_the_checks_find_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The checks above can fail: in a tree of the same shape, a circle through two folders and an import of a
    layer above are found."""
    (tmp_path / "atlas" / "model").mkdir(parents=True)
    (tmp_path / "ingest" / "readers").mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"atlas.ingestion" = "ingest"\n')
    files = {
        "atlas/__init__.py": "",
        "atlas/store.py": "from atlas.ingestion.readers.conllu import read_conllu\n",
        "atlas/model/__init__.py": "",
        "atlas/model/load.py": "import atlas.store\n",  # the lowest layer importing the store: upward
        "ingest/__init__.py": "",
        "ingest/readers/__init__.py": "",
        "ingest/readers/conllu.py": "def read_conllu():\n    from atlas.model import load\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    modules = find_modules(package_sources(tmp_path))
    assert set(modules) == {
        "atlas", "atlas.store", "atlas.model", "atlas.model.load", "atlas.ingestion", "atlas.ingestion.readers",
        "atlas.ingestion.readers.conllu",
    }  # fmt: skip
    assert import_circle(modules) == [
        "atlas.ingestion.readers.conllu", "atlas.model.load", "atlas.store", "atlas.ingestion.readers.conllu"
    ]  # fmt: skip
    (found,) = upward_imports(modules)
    assert "atlas.model.load (model and corpus readers) imports atlas.store, a layer above" in found
    (tmp_path / "atlas/model/load.py").write_text("")  # the circle broken, nothing upward is left
    assert import_circle(find_modules(package_sources(tmp_path))) is None
    assert upward_imports(find_modules(package_sources(tmp_path))) == []


def test_a_checkout_imports_the_modules_packaging_maps() -> None:
    """Without an install's finder (a plain checkout, or Python started in a clone beside an installed wheel), the
    package finds its top-level parts as pyproject.toml maps them: the same files an editable install imports."""
    code = (
        "import sys; sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '')"
        ".startswith('__editable__')]; import atlas, atlas.cli, atlas.ingestion.readers.conllu, atlas.catalogue_sql;"
        "from atlas.store import SCHEMA_FILE; print(atlas.__file__, atlas.cli.__file__, "
        "atlas.ingestion.readers.conllu.__file__, SCHEMA_FILE, callable(atlas.queries))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    files = done.stdout.split()
    assert files == [
        str(ROOT / "atlas" / "__init__.py"), str(ROOT / "cli.py"), str(ROOT / "ingest" / "readers" / "conllu.py"),
        str(ROOT / "schema.sql"), "True",
    ]  # fmt: skip


def test_no_symlink_in_the_repository() -> None:
    """The package's parts are mapped by packaging, not linked (a checkout without symlinks imports the same)."""
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert [line for line in listed.splitlines() if line.startswith("120000")] == []


def test_the_cli_makes_one_api_call_per_command() -> None:
    """cli.py and its commands' modules import the API and the printing only (``atlas serve``: its web application,
    a front end of its own over the API); no store lock, transaction or analysis runs in them."""
    allowed = {"atlas", "atlas.api", "atlas.api_tasks", "atlas.look", "atlas.errors", "atlas.cli_options"}
    allowed |= {"atlas.output", "atlas.cli_tasks", "atlas.cli_look", "atlas.cli_serve", "atlas.serve.app"}
    for module in ("atlas.cli", "atlas.cli_tasks", "atlas.cli_look", "atlas.cli_serve"):
        assert set(imports_of(module)) <= allowed, f"{module} imports {set(imports_of(module)) - allowed}"
        text = MODULES[module].read_text()
        for call in (".writing(", ".transaction(", "Store(", ".connection", ".store."):
            assert call not in text, f"{MODULES[module]}: '{call}' belongs in the API"


def test_import_atlas_imports_no_click() -> None:
    code = "import atlas, sys; print('click' in sys.modules, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
