"""Files from this machine into the store under keys named by their
content (schemas/keys.md, "Uploads"), exactly as `taskbox artifacts put`
and `taskbox submit --input NAME=@PATH` put them (worker/client/uploads.c;
keep the two in step): the same keys (``uploads/<sha256>``), the same
checksums as metadata, the same block list at ``blocks/<sha256>``, the
same names, and nothing sent for content that is there already.

A file is read once to name it (its SHA-256 and block list) and, when
its content is not there yet, again to checksum it (with its CRC-32C)
and a last time to send it; memory stays bounded whatever the size.
"""
from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass
from typing import BinaryIO, Callable, Dict, List, Optional

from . import checksums
from .errors import NotFound, TaskboxError, UploadError
from .store import Store

UPLOADS_PREFIX = "uploads/"
BLOCKS_PREFIX = "blocks/"
MAX_DEPTH = 64
MAX_FILES = 100000  # `taskbox artifacts put`'s PUT_MAX

log = logging.getLogger("taskbox")


@dataclass(frozen=True)
class Upload:
    """One file uploaded, or found there already: an input reference.
    ``name`` is where a task sees it (``/inputs/<name>``): the file's
    name, or for a directory its name and the path below it, as `taskbox
    artifacts put` prints it, or the name given to ``Client.upload``;
    ``rel`` its path below the directory uploaded (a file: its name)."""

    name: str
    rel: str
    path: str  # the file here
    key: str  # uploads/<sha256>
    sha256: str
    blocks: str  # the SHA-256 of its block list (keys.md, "Block digests")
    size: int
    uploaded: bool  # False: its content was there already

    def input(self, name: Optional[str] = None) -> Dict[str, str]:
        """The task input naming it (schemas/task.md), as `taskbox submit
        --input NAME=@PATH` writes it: name, artifact, sha256 and blocks."""
        return {"name": name if name is not None else self.name, "artifact": self.key,
                "sha256": self.sha256, "blocks": self.blocks}


def _named(e: TaskboxError, what: str) -> TaskboxError:
    """``e``, its message saying which file it was about."""
    e.args = (f"{what}: {e.args[0] if e.args else e}",) + tuple(e.args[1:])
    return e


class _Walk:
    def __init__(self, store: Store, limit: int,
                 on_file: Optional[Callable[[Upload], None]]) -> None:
        self.store, self.limit, self.on_file = store, limit, on_file
        self.root_len = 0
        self.done: List[Upload] = []

    def put_blocks(self, sums: checksums.Sums, check: bool, name: str) -> None:
        """The block list at blocks/<sha256>, unless it is there (``check``:
        look first; a fresh upload's list is new)."""
        assert sums.blocks is not None
        key = BLOCKS_PREFIX + sums.sha256
        if check:
            try:
                info = self.store.head(key)
                if info.size == len(sums.blocks) and info.sha256 == sums.blocks_digest:
                    return
            except NotFound:
                pass
        try:
            self.store.put_bytes(key, sums.blocks)  # create-only: the same list is fine
        except TaskboxError as e:
            raise _named(e, f"{name}: its block list")

    def put_one(self, f: BinaryIO, name: str, path: str) -> None:
        if len(self.done) >= self.limit:
            raise UploadError(f"{name}: more than {self.limit} files")
        rel = name[self.root_len:] if len(name) > self.root_len else name
        # one pass names it and digests its blocks (and, when that is
        # cheap, gives its CRC-32C)
        try:
            first = checksums.of_file(f, crc=bool(checksums.FAST), blocks=True)
        except OSError as e:
            raise UploadError(f"{name}: {e.strerror or e}") from None
        key = UPLOADS_PREFIX + first.sha256
        try:
            info = self.store.head(key)
            there = info.size == first.size and (not info.sha256 or info.sha256 == first.sha256)
        except NotFound:
            there = False
        except TaskboxError as e:
            raise _named(e, name)
        if not there:
            sums = first
            if not first.crc32c:  # the CRC-32C now, for the metadata; the name again
                try:
                    have: checksums.Sums = checksums.of_file(f, crc=True)
                except OSError as e:
                    raise UploadError(f"{name}: {e.strerror or e}") from None
                if have.sha256 != first.sha256 or have.size != first.size:
                    raise UploadError(f"{name} changed while it was uploaded: upload it again "
                                      "when it is still")
                sums = checksums.Sums(have.size, have.sha256, have.crc32c)
            try:
                self.store.put_file(key, f, sums)
            except TaskboxError as e:
                raise _named(e, name)
        u = Upload(name, rel, path, key, first.sha256, first.blocks_digest, first.size,
                   not there)
        self.put_blocks(first, there, name)
        self.done.append(u)
        if self.on_file is not None:
            self.on_file(u)

    def entry(self, path: str, name: str, depth: int) -> None:
        try:
            st = os.lstat(path)
        except OSError as e:
            raise UploadError(f"{name}: {e.strerror or e}") from None
        if stat.S_ISDIR(st.st_mode):
            self.dir(path, name, depth + 1)
        elif stat.S_ISREG(st.st_mode):
            self.file(path, name)
        else:
            log.warning("%s skipped: not a regular file or a directory", name)

    def file(self, path: str, name: str) -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError as e:
            raise UploadError(f"{name}: {e.strerror or e}") from None
        with os.fdopen(fd, "rb") as f:
            self.put_one(f, name, path)

    def dir(self, path: str, name: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise UploadError(f"{name}: more than {MAX_DEPTH} directories deep")
        try:
            entries = sorted(os.listdir(os.fsencode(path)))  # byte order, as alphasort in C
        except OSError as e:
            raise UploadError(f"{name or path}: {e.strerror or e}") from None
        for entry in entries:
            child = os.fsdecode(entry)
            self.entry(os.path.join(path, child), f"{name}/{child}" if name else child, depth)


def put(store: Store, path: "str | os.PathLike[str]", limit: int = MAX_FILES,
        on_file: Optional[Callable[[Upload], None]] = None) -> List[Upload]:
    """Uploads ``path``: a regular file, named by its base name, or a
    directory, as each regular file under it (symbolic links and other
    kinds skipped, with a warning on the ``taskbox`` logger), named by
    the directory's base name and the path below it, in name order; at
    most ``limit`` files. ``on_file`` is called after each file."""
    path = os.fspath(path)
    w = _Walk(store, limit, on_file)
    copy = path
    while len(copy) > 1 and copy.endswith("/"):
        copy = copy[:-1]
    base = copy.rsplit("/", 1)[-1]
    if base in (".", ".."):
        base = ""  # its files by their own paths
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UploadError(f"{path}: no such file or directory") from None
    except OSError as e:
        raise UploadError(f"{path}: {e.strerror or e}") from None
    if stat.S_ISREG(st.st_mode):
        w.file(path, base or path)
    elif stat.S_ISDIR(st.st_mode):
        w.root_len = len(base) + 1 if base else 0
        w.dir(path, base, 0)
    else:
        raise UploadError(f"{path}: not a regular file or a directory")
    return w.done
