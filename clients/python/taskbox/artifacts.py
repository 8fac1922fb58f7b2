"""A done task's saved files, as its manifest records them (the attempt
its done-marker names), as `taskbox artifacts list/get/share` have them
(worker/cli/cmd_artifacts.c): each downloaded or read with its SHA-256
checked against the manifest's, or shared as a signed URL that expires.
"""
from __future__ import annotations

import io
import os
import pathlib
from dataclasses import dataclass, field
from typing import BinaryIO, Optional

from .errors import ChecksumMismatch
from .store import Store

DEFAULT_SHARE_S = 3600
SPECIAL = {"conversation": "conversation.msgpack", "manifest": "manifest.msgpack"}


@dataclass(frozen=True)
class Artifact:
    """One file of a task's record: ``path`` under /outputs as the
    manifest lists it (or ``conversation``, ``manifest``: the record's
    own objects), its store ``key``, and for an output its ``size`` and
    ``sha256`` as the manifest records them."""

    store: Store = field(repr=False, compare=False)
    task_id: str
    attempt: int
    path: str
    key: str
    size: Optional[int] = None
    sha256: Optional[str] = None

    def open(self) -> BinaryIO:
        """Its bytes as a stream (a binary file object: ``read``,
        iteration, ``with``). The SHA-256 of what arrived is checked at
        its end against the manifest's (and the store's checksums): a
        read that reaches the end of other bytes raises
        ChecksumMismatch."""
        return io.BufferedReader(self.store.open(self.key, self.sha256), 1 << 20)

    def read(self) -> bytes:
        """Its bytes, whole, checked as ``open`` checks them."""
        with self.open() as f:
            return f.read()

    def download(self, path: "str | os.PathLike[str] | None" = None) -> pathlib.Path:
        """Saves it at ``path`` (default: the last part of its own path,
        here; a directory, or a path ending in "/", made if need be: that
        name in it), replacing what is there in
        one step, and only when its SHA-256 is the manifest's: else
        ChecksumMismatch and nothing is written. Returns where it is."""
        name = SPECIAL.get(self.path, self.path.rsplit("/", 1)[-1])
        out = pathlib.Path(path) if path is not None else pathlib.Path(name)
        if path is not None and os.fspath(path).endswith(os.sep):
            out.mkdir(parents=True, exist_ok=True)  # "out/": a directory, made
        if out.is_dir():
            out = out / name
        try:
            self.store.download(self.key, str(out), self.sha256)
        except ChecksumMismatch as e:
            e.args = (f"{e.args[0]}: {out} not saved",)
            raise
        return out

    def share(self, expires: int = DEFAULT_SHARE_S) -> str:
        """A URL anyone can GET it with for ``expires`` seconds (1 to
        604800), as `taskbox artifacts share` makes it (schemas/keys.md,
        "Signed share URLs"): S3 stores only. It carries the access key's
        id, never its secret."""
        return self.store.share(self.key, expires)
