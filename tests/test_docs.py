"""The generated references are up to date with what they describe."""

from __future__ import annotations

from tests.conftest import ROOT


def test_cli_reference_is_current() -> None:
    from atlas.cli_reference import render

    current = (ROOT / "docs" / "cli.md").read_text()
    assert current == render(), "docs/cli.md is stale: run 'python -m atlas.cli_reference --write'"
