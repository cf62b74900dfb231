"""Packaging beside pyproject.toml: the top-level module cli.py installed as atlas.cli.

setuptools maps packages to folders (pyproject.toml's package-dir: ingest/ is atlas.ingestion), not a module to a
file. atlas.cli is listed there as a package mapped to ``cli``, which an editable install's finder resolves to
``cli.py``; the build below writes that file as the module ``atlas/cli.py`` of the wheel.
"""

from setuptools import setup
from setuptools.command.build_py import build_py

MODULES = {"atlas.cli": "cli.py"}  # a module of the package -> its file at the repository's top level


class BuildPy(build_py):
    """build_py with each of ``MODULES`` a module of its parent package, not a folder."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.py_modules = [*(self.py_modules or []), *MODULES]

    def check_package(self, package: str, package_dir: str) -> str | None:
        return None if package in MODULES else super().check_package(package, package_dir)

    def find_package_modules(self, package: str, package_dir: str) -> list[tuple[str, str, str]]:
        return [] if package in MODULES else super().find_package_modules(package, package_dir)

    def find_modules(self) -> list[tuple[str, str, str]]:
        found = [m for m in super().find_modules() if f"{m[0]}.{m[1]}" not in MODULES]
        return found + [(*name.rsplit(".", 1), path) for name, path in MODULES.items()]


setup(cmdclass={"build_py": BuildPy})
