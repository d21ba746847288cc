"""How big a record may be, and reading no more than that: the one record limit every reader applies
(``--max-record-mb``), lines read bounded, zip entries inflated no further than their header allows."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError, FormatError

BLOCK = 1 << 20
MAX_RECORD_MB = 64.0
"""The largest record any reader takes (``--max-record-mb``): a JSONL line, a slime sample's pickle, a Parquet
row. One over it is skipped and named, read no further than the format allows."""
MAX_INFLATION = 100
"""How many times its compressed size a zip entry of a ``.pt`` file may inflate to, beyond one record's size:
``torch.save`` stores its entries uncompressed, a deflated pickle of tokens shrinks a few times, a zip bomb a
thousand."""


def record_limit(mb: float) -> int:
    """``--max-record-mb`` in bytes; a ConfigError when it is not a positive number."""
    if not mb > 0 or mb != mb or mb == float("inf"):
        raise ConfigError(f"the record limit must be a positive number of MB, not {mb}")
    return int(mb * 2**20)


def mb(n: int) -> str:
    """Bytes as MB (KB under one MB), for messages."""
    return f"{n / 2**20:,.0f} MB" if n >= 2**20 else f"{n / 2**10:,.0f} KB"


def bounded_lines(f: IO[bytes], limit: int) -> Iterator[bytes | int]:
    """Each line of ``f`` with its newline, or, for a line longer than ``limit`` bytes, its length. A line past a
    block is measured first, a block at a time, and read only when it fits: a long one is never held."""
    pos = f.tell()
    while True:
        raw = f.readline(BLOCK)
        if not raw:
            return
        n = len(raw)
        if n == BLOCK and not raw.endswith(b"\n"):
            del raw
            while True:
                block = f.readline(BLOCK)
                n += len(block)
                if not block or block.endswith(b"\n"):
                    break
            if n <= limit:
                f.seek(pos)
                raw = f.read(n)
        pos += n
        yield n if n > limit else raw


_OVER = "record limit: skipped without being read"


def over_limit(n: int, limit: int, what: str, where: str) -> FormatError:
    """The error a record over the limit is skipped with."""
    return FormatError(f"{what} is {mb(n)}, over the {mb(limit)} {_OVER} (--max-record-mb raises the limit)", where)


def is_over_limit(e: FormatError) -> bool:
    """Whether ``e`` is ``over_limit``'s (it may have crossed from a worker process as its text)."""
    return _OVER in e.detail


def check_inflation(z: zipfile.ZipFile, path: Path, limit: int) -> None:
    """A FormatError before anything is inflated when an entry of ``z`` says it would inflate past
    ``MAX_INFLATION`` times its compressed size and past ``limit`` bytes (a zip bomb)."""
    for info in z.infolist():
        if info.compress_type == zipfile.ZIP_STORED or info.file_size <= limit:
            continue
        if info.file_size > MAX_INFLATION * max(1, info.compress_size):
            raise FormatError(
                f"refusing to inflate {info.filename}: {mb(info.compress_size)} compressed would become "
                f"{mb(info.file_size)}, more than {MAX_INFLATION} times its size and over the {mb(limit)} "
                "record limit (a zip bomb?); torch.save writes its entries uncompressed", str(path))


class Inflating(io.RawIOBase):
    """A zip entry read as it inflates, refused (``FormatError``) past the size its header declares: the
    header was checked, so this is all it can become."""

    def __init__(self, f: IO[bytes], size: int, name: str, path: Path) -> None:
        self._f, self._left, self._name, self._path = f, size, name, path

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self._f.read(len(b))
        if len(data) > self._left:
            raise FormatError(f"{self._name} inflates past the size its zip header declares: refused", str(self._path))
        self._left -= len(data)
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._f.close()
        super().close()


def open_entry(z: zipfile.ZipFile, name: str, path: Path, *, buffered: bool = True) -> IO[bytes]:
    """Entry ``name`` of ``z``, read with its inflated size bounded by its header (``buffered``: read ahead a
    block at a time, for an unpickler that reads per opcode)."""
    info = z.getinfo(name)
    raw = Inflating(z.open(info), info.file_size, name, path)
    return io.BufferedReader(raw, buffer_size=BLOCK) if buffered else raw  # type: ignore[return-value]
