"""What a file given as JSON lines is, from its first bytes: JSON text in UTF-8 (past a byte order mark), or a
known binary format, UTF-16 or UTF-32, or binary data, each refused whole with a sentence saying what it is."""

from __future__ import annotations

import codecs
from pathlib import Path
from typing import IO

from ..errors import FormatError

_MAGIC = ((b"PAR1", "a Parquet file: one Rollscope wrote imports with --format parquet"),
          (b"SQLite format 3\x00", "a SQLite database: a Rollscope database is opened with --db, not imported"),
          (b"PK\x03\x04", "a zip archive (as a torch .pt file is: a slime dump imports with --format slime)"),
          (b"\x1f\x8b", "gzip-compressed: gunzip it first"))


def start_of_text(f: IO[bytes], path: Path, end: int | None = None) -> int:
    """Where the JSON text of ``f`` (open at its start) begins: past a UTF-8 byte order mark, which ``f`` is left at
    (0 or 3). A FormatError when its first bytes (no further than ``end``) say it is not text (``not_text``)."""
    head = f.read(4096 if end is None else min(4096, end))
    not_text(head, path)
    skip = 3 if head.startswith(b"\xef\xbb\xbf") else 0
    f.seek(skip)
    return skip


_WIDE_BOMS = ((b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe\x00\x00", "UTF-32"), (b"\xff\xfe", "UTF-16"),
              (b"\xfe\xff", "UTF-16"))
# Without a byte order mark, where the zero bytes fall among the first eight (JSON text opens with ASCII) says the
# encoding: x000 x000 is UTF-32LE, 000x 000x UTF-32BE, x0x0 x0x0 UTF-16LE, 0x0x 0x0x UTF-16BE.
_WIDE_ZEROS: dict[tuple[int, ...], str] = {(0, 1, 1, 1) * 2: "UTF-32LE", (1, 1, 1, 0) * 2: "UTF-32BE",
                                           (0, 1) * 4: "UTF-16LE", (1, 0) * 4: "UTF-16BE"}


def wide_encoding(head: bytes) -> str | None:
    """The UTF-16 or UTF-32 encoding the first bytes of a JSON text are in, as iconv names it; None when they are in
    neither (UTF-8, or not text). A byte order mark counts when nothing follows it or a NUL does: JSON's ASCII
    in these encodings holds NULs, so without any the bytes are UTF-8 that is wrong at its start."""
    for bom, name in _WIDE_BOMS:
        if head.startswith(bom) and (len(head) == len(bom) or b"\x00" in head[len(bom):]):
            return name
    return _WIDE_ZEROS.get(tuple(int(b == 0) for b in head[:8]))


def not_text(head: bytes, path: Path) -> None:
    """A FormatError when the first bytes of ``path`` (``head``) say it is not JSON text in UTF-8: a known binary
    format; UTF-16 or UTF-32; a NUL byte in the first line, which no JSON text holds; or a NUL byte further on with
    a first line that is not UTF-8 (a binary format whose first bytes hold a newline). A NUL after a first line of
    UTF-8 is that line's error alone: a text file whose end was zeroed in a crash still reads up to it."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raise FormatError(f"not JSONL but {what}", str(path))
    wide = wide_encoding(head)
    if wide is not None:
        raise FormatError(f"not UTF-8 but {wide} text: convert it to UTF-8 (iconv -f {wide} -t UTF-8 FILE > "
                          "out.jsonl)", str(path))
    nul = head.find(b"\x00")
    if nul < 0:
        return
    first, newline, _ = head.partition(b"\n")
    if nul < len(first) or not _utf8(first, whole=bool(newline)):
        raise FormatError(f"not JSONL text: binary data (a NUL byte at byte {nul})", str(path))


def _utf8(data: bytes, whole: bool) -> bool:
    """Whether ``data`` is UTF-8; when not ``whole``, a character cut at its end is no error."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=whole)
    except UnicodeDecodeError:
        return False
    return True
