"""The package's version: the project's, set in one place,
``project(taskbox VERSION X.Y.Z)`` in the repository's CMakeLists.txt,
which `taskbox --version` reports too. An installed package carries it in
``_build_version.py``, written by the build (build_backend/); run from
the checkout, it is read from CMakeLists.txt itself.
"""
from __future__ import annotations

import importlib
import pathlib
import re


def _from_cmake(path: pathlib.Path) -> str:
    m = re.search(r"^project\(taskbox VERSION ([0-9][0-9.]*)", path.read_text(), re.M)
    if not m:
        raise RuntimeError(f"{path}: no project(taskbox VERSION X.Y.Z)")
    return m.group(1)


def version() -> str:
    try:
        built = importlib.import_module(f"{__package__}._build_version")
        return str(built.VERSION)
    except ImportError:
        return _from_cmake(pathlib.Path(__file__).resolve().parents[3] / "CMakeLists.txt")
