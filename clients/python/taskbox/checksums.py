"""The checksums every stored object carries (schemas/keys.md,
docs/inputs-and-artifacts.md), as the C store computes them: the SHA-256 that
names the content, the CRC-32C (Castagnoli, reflected; 8 lowercase hex
digits) that checks a transfer, and the block list of 1 MiB blocks'
SHA-256s that lets a range be checked (keys.md, "Block digests").

The CRC-32C comes from a C implementation when one is installed (the
``crc32c`` package, Debian's python3-crc32c; or ``google-crc32c``; or
``crcmod`` with its extension), else from the pure-Python table here,
which gives the same value at some 5-10 MB/s. ``FAST`` says which.
"""
from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable, List, Optional

BLOCK_SIZE = 1 << 20  # tb/blocks.h: TB_BLOCK_SIZE
CHUNK = 1 << 20

_POLY = 0x82F63B78  # Castagnoli, reflected


def _table() -> List[int]:
    t = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        t.append(c)
    return t


_T = _table()


def _crc32c_python(data: bytes, crc: int = 0) -> int:
    crc ^= 0xFFFFFFFF
    t = _T
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _fast() -> "tuple[Optional[Callable[[bytes, int], int]], str]":
    # imported by name: none of them need be installed, nor typed
    try:
        c: Any = importlib.import_module("crc32c")

        def with_crc32c(data: bytes, crc: int = 0) -> int:
            return int(c.crc32c(data, crc))
        return with_crc32c, "crc32c"
    except ImportError:
        pass
    try:
        g: Any = importlib.import_module("google_crc32c")
        if getattr(g, "implementation", "c") == "c":  # its own fallback is Python's

            def with_google(data: bytes, crc: int = 0) -> int:
                return int(g.extend(crc, data))
            return with_google, "google-crc32c"
    except ImportError:
        pass
    try:
        m: Any = importlib.import_module("crcmod")
        importlib.import_module("crcmod._crcfunext")  # the C one, not crcmod's Python
        fn = m.mkCrcFun(0x11EDC6F41, initCrc=0, rev=True, xorOut=0xFFFFFFFF)

        def with_crcmod(data: bytes, crc: int = 0) -> int:
            return int(fn(data, crc))
        return with_crcmod, "crcmod"
    except ImportError:
        pass
    return None, ""


_FAST_FN, FAST = _fast()  # FAST: the C implementation's package, or ""


def crc32c(data: bytes, crc: int = 0) -> int:
    """The CRC-32C of ``data``, continuing ``crc`` (that of what came
    before it; 0 to start)."""
    if _FAST_FN is not None:
        return _FAST_FN(data, crc)
    return _crc32c_python(data, crc)


@dataclass
class Sums:
    """What one pass over some content gives: its size, SHA-256, and,
    as asked, its CRC-32C and block list."""

    size: int = 0
    sha256: str = ""
    crc32c: str = ""  # 8 lowercase hex digits, "" when not computed
    blocks: Optional[bytes] = None  # the block list (32 bytes a block)
    blocks_digest: str = ""  # its SHA-256 in hex
    _sha: "hashlib._Hash" = field(default_factory=hashlib.sha256, repr=False)
    _crc: Optional[int] = field(default=None, repr=False)
    _blocks: Optional[List[bytes]] = field(default=None, repr=False)
    _block: Optional["hashlib._Hash"] = field(default=None, repr=False)
    _in_block: int = field(default=0, repr=False)

    @classmethod
    def start(cls, crc: bool = True, blocks: bool = False) -> "Sums":
        s = cls()
        s._crc = 0 if crc else None
        s._blocks = [] if blocks else None
        return s

    def update(self, data: bytes) -> None:
        self.size += len(data)
        self._sha.update(data)
        if self._crc is not None:
            self._crc = crc32c(data, self._crc)
        if self._blocks is not None:
            mv = memoryview(data)
            while len(mv):
                if self._block is None:
                    self._block, self._in_block = hashlib.sha256(), 0
                n = min(len(mv), BLOCK_SIZE - self._in_block)
                self._block.update(mv[:n])
                self._in_block += n
                mv = mv[n:]
                if self._in_block == BLOCK_SIZE:
                    self._blocks.append(self._block.digest())
                    self._block = None

    def finish(self) -> "Sums":
        self.sha256 = self._sha.hexdigest()
        if self._crc is not None:
            self.crc32c = f"{self._crc:08x}"
        if self._blocks is not None:
            if self._block is not None:  # the last, shorter block
                self._blocks.append(self._block.digest())
                self._block = None
            self.blocks = b"".join(self._blocks)
            self.blocks_digest = hashlib.sha256(self.blocks).hexdigest()
        return self


def of_file(f: BinaryIO, crc: bool = True, blocks: bool = False) -> Sums:
    """The sums of an open file, read from its start to its end."""
    f.seek(0)
    s = Sums.start(crc, blocks)
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            break
        s.update(chunk)
    return s.finish()


def of_bytes(data: bytes, blocks: bool = False) -> Sums:
    s = Sums.start(True, blocks)
    s.update(data)
    return s.finish()
