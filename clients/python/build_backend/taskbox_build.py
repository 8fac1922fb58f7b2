"""The package's build backend (PEP 517, in the tree: pyproject.toml's
``backend-path``), so that ``pip install clients/python`` needs nothing
from the network: pip's isolated build environment needs no setuptools
to be fetched, only this file and the standard library.

It makes a pure-Python wheel of ``taskbox/`` (and an sdist, and an
editable wheel), with the version read from the one place the project
sets it, ``project(taskbox VERSION X.Y.Z)`` in the repository's
CMakeLists.txt, written into the wheel as ``taskbox/_build_version.py``
(an sdist carries that file, for builds away from the repository).
The metadata is below, in METADATA.
"""
from __future__ import annotations

import base64
import hashlib
import io
import os
import pathlib
import re
import tarfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent.parent  # clients/python
NAME = "taskbox"
SUMMARY = "taskbox for producers: submit tasks, follow events, await results"
REQUIRES_PYTHON = ">=3.9"
REQUIRES = ["confluent-kafka>=1.7", "msgpack>=1.0", "botocore>=1.29"]
TAG = "py3-none-any"


def version() -> str:
    cmake = HERE.parent.parent / "CMakeLists.txt"
    if cmake.exists():
        m = re.search(r"^project\(taskbox VERSION ([0-9][0-9.]*)", cmake.read_text(), re.M)
        if m:
            return m.group(1)
    built = HERE / NAME / "_build_version.py"
    if built.exists():
        m = re.search(r'VERSION = "([^"]+)"', built.read_text())
        if m:
            return m.group(1)
    raise RuntimeError(f"no version: neither {cmake} nor {built} names one")


def _metadata() -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version()}",
             f"Summary: {SUMMARY}", "License: Apache-2.0", f"Requires-Python: {REQUIRES_PYTHON}"]
    lines += [f"Requires-Dist: {r}" for r in REQUIRES]
    readme = HERE / "README.md"
    if readme.exists():
        lines += ["Description-Content-Type: text/markdown", "", readme.read_text()]
    return "\n".join(lines) + "\n"


def _sources() -> list[pathlib.Path]:
    pkg = HERE / NAME
    return sorted(p for p in pkg.rglob("*")
                  if p.is_file() and (p.suffix == ".py" or p.name == "py.typed")
                  and "__pycache__" not in p.parts and p.name != "_build_version.py")


def _version_file() -> bytes:
    return (f'"""Written by the build (build_backend/taskbox_build.py)."""\n'
            f'VERSION = "{version()}"\n').encode()


def _wheel(directory: str, files: dict[str, bytes]) -> str:
    v = version()
    dist = f"{NAME}-{v}.dist-info"
    files = dict(files)
    files[f"{dist}/METADATA"] = _metadata().encode()
    files[f"{dist}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: taskbox_build\n"
                              f"Root-Is-Purelib: true\nTag: {TAG}\n").encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    name = f"{NAME}-{v}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


def get_requires_for_build_wheel(config_settings: object = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: object = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: object = None) -> list[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: object = None,
                metadata_directory: object = None) -> str:
    files = {p.relative_to(HERE).as_posix(): p.read_bytes() for p in _sources()}
    files[f"{NAME}/_build_version.py"] = _version_file()
    return _wheel(wheel_directory, files)


def build_editable(wheel_directory: str, config_settings: object = None,
                   metadata_directory: object = None) -> str:
    # the checkout itself on sys.path: taskbox/_version.py reads CMakeLists.txt
    return _wheel(wheel_directory, {f"__editable__.{NAME}.pth": (str(HERE) + "\n").encode()})


def build_sdist(sdist_directory: str, config_settings: object = None) -> str:
    base = f"{NAME}-{version()}"
    name = f"{base}.tar.gz"
    extra = {"PKG-INFO": _metadata().encode(), f"{NAME}/_build_version.py": _version_file()}
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        def add(rel: str, data: bytes) -> None:
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1577836800
            tar.addfile(info, io.BytesIO(data))
        for p in _sources() + [HERE / "pyproject.toml", HERE / "README.md",
                               HERE / "build_backend" / "taskbox_build.py"]:
            if p.exists():
                add(p.relative_to(HERE).as_posix(), p.read_bytes())
        for rel, data in extra.items():
            add(rel, data)
    return name
