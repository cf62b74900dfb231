"""The atlas's version (recorded in every run and report; the package's version in pyproject.toml)."""

__version__ = "0.1.0"
