"""The generated references are up to date with what they describe."""

from __future__ import annotations

from tests.conftest import ROOT


def test_cli_reference_is_current() -> None:
    from atlas.cli_reference import render

    current = (ROOT / "docs" / "cli.md").read_text()
    assert current == render(), "docs/cli.md is stale: run 'python -m atlas.cli_reference --write'"


def test_the_readme_names_every_entry_and_no_other() -> None:
    """The README's catalogue table lists entry names only; it cannot drift from the SQL headers."""
    from atlas.catalogue import entries

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The catalogue", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[2] for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    listed = {name.strip() for row in rows for name in row.split(",")}
    assert listed == {entry.name for entry in entries()}
