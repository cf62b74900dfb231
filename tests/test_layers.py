"""The house as drawn: imports run one way, from the CLI down to the model and the corpus readers.

Every module of the package belongs to one layer; a module imports only modules of its own layer or of the
layers below, no import circle exists, and the CLI's commands each make one call of the API. Imports are
read from the source with ``ast`` (those inside functions included; those under ``if TYPE_CHECKING:``,
which never run, left out).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "atlas"

# top to bottom; a module matches the first layer with a pattern for it
LAYERS = {
    "CLI": ["atlas.cli", "atlas.cli_tasks", "atlas.cli_options", "atlas.cli_reference", "atlas.output"],
    "API": ["atlas", "atlas.api", "atlas.api_tasks"],
    "analyses": [
        "atlas.report",
        "atlas.report.*",
        "atlas.plot",
        "atlas.distances",
        "atlas.probe*",
        "atlas.pattern*",
        "atlas.recompute",
        "atlas.tasks",
        "atlas.tasks.*",
    ],
    "ingest pipeline": [
        "atlas.ingestion",
        "atlas.ingestion.pipeline",
        "atlas.ingestion.ray_engine",
        "atlas.ingestion.sparsify",
        "atlas.ingestion.cpu_rows",
        "atlas.ingestion.tensor_rows",
        "atlas.ingestion.host_copy",
        "atlas.ingestion.block_rows",
        "atlas.ingestion.row_batch",
        "atlas.ingestion.budget",
        "atlas.ingestion.stages",
        "atlas.ingestion.ahead",
        "atlas.ingestion.write",
        "atlas.ingestion.examples",
        "atlas.ingestion.device",
        "atlas.ingestion.run_id",
    ],
    "store and catalogue": [
        "atlas.store",
        "atlas.catalogue*",
        "atlas.needs",
        "atlas.macros",
        "atlas.compare",
        "atlas.prerequisites",
        "atlas.maps",
        "atlas.spark",
        "atlas.spark.*",
    ],
    "model and corpus readers": [
        "atlas.model",
        "atlas.model.*",
        "atlas.ingestion.conllu",
        "atlas.ingestion.corpus",
        "atlas.ingestion.corpus_info",
        "atlas.ingestion.framenet",
        "atlas.ingestion.glue_corpus",
        "atlas.ingestion.glue_tsv",
        "atlas.ingestion.text_corpus",
        "atlas.ingestion.repeated",
        "atlas.ingestion.align",
        "atlas.ingestion.template",
        "atlas.errors",
        "atlas.checks",
        "atlas.files",
        "atlas.version",
    ],
}
RANK = {name: rank for rank, name in enumerate(LAYERS)}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    found = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):  # atlas/ingest is a link to ingest/
        for name in files:
            if name.endswith(".py"):
                found[_module_name(Path(folder) / name)] = Path(folder) / name
    return dict(sorted(found.items()))


MODULES = _modules()


def _layer(module: str) -> str:
    for layer, patterns in LAYERS.items():
        if any(fnmatch(module, pattern) for pattern in patterns):
            return layer
    raise AssertionError(f"{module}: in no layer of tests/test_layers.py; add it to the layer it belongs to")


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Line numbers of the imports under ``if TYPE_CHECKING:``."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in node.body:
                lines.update(n.lineno for n in ast.walk(inner) if isinstance(n, ast.Import | ast.ImportFrom))
    return lines


def imports_of(module: str) -> dict[str, int]:
    """The first-party modules ``module`` imports (``from atlas import api``: atlas.api), with a line of each."""
    tree = ast.parse(MODULES[module].read_text())
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
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] in {"atlas", "ingest", "cli", "queries"}:
                found.setdefault(name, node.lineno)
    return found


def test_every_module_is_in_a_layer() -> None:
    assert len(MODULES) > 60  # the links atlas/ingest and atlas/cli.py are followed
    for module in MODULES:
        _layer(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_run_one_way(module: str) -> None:
    here = RANK[_layer(module)]
    for imported, line in imports_of(module).items():
        assert imported in MODULES, (
            f"{MODULES[module]}:{line}: imports '{imported}', not a module of the atlas package "
            "(the repository's ingest/ and cli.py are atlas.ingestion and atlas.cli)"
        )
        assert RANK[_layer(imported)] >= here, (
            f"{MODULES[module]}:{line}: {module} ({_layer(module)}) imports {imported}, a layer above "
            f"({_layer(imported)})"
        )


def test_no_import_circle() -> None:
    graph = {module: set(imports_of(module)) & set(MODULES) for module in MODULES}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for imported in sorted(graph[module]):
            if state.get(imported) == 1:
                circle = path[path.index(imported) :] + [imported]
                raise AssertionError("import circle: " + " -> ".join(circle))
            if imported not in state:
                visit(imported, [*path, imported])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])


def test_the_checker_finds_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    """The checks above can fail: an upward import is ranked so, and a circle is found."""
    assert RANK[_layer("atlas.store")] > RANK[_layer("atlas.api")]  # store importing api would be upward
    assert "atlas.api" in imports_of("atlas.api_tasks")
    assert "atlas.ingestion.run_id" in imports_of("atlas.api")


def test_the_cli_makes_one_api_call_per_command() -> None:
    """cli.py and its task commands import the API and the printing only; no store lock, transaction or
    analysis runs in them."""
    allowed = {"atlas", "atlas.api", "atlas.api_tasks", "atlas.errors", "atlas.cli_options", "atlas.cli_tasks"}
    allowed.add("atlas.output")
    for module in ("atlas.cli", "atlas.cli_tasks"):
        assert set(imports_of(module)) <= allowed, f"{module} imports {set(imports_of(module)) - allowed}"
        text = MODULES[module].read_text()
        for call in (".writing(", ".transaction(", "Store(", ".connection", ".store."):
            assert call not in text, f"{MODULES[module]}: '{call}' belongs in the API"


def test_import_atlas_imports_no_click() -> None:
    code = "import atlas, sys; print('click' in sys.modules, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]
