"""The pages a SQLite write-ahead log holds, by the table or index they belong to: what the writes since its last
checkpoint cost in pages (``bench/write_scale.py``, ``tests/test_search_windows.py``)."""

from __future__ import annotations

import os
import sqlite3
import struct
from collections import Counter
from pathlib import Path

_HEADER = struct.Struct(">IIIIII8x")  # magic, version, page size, checkpoint, salt 1, salt 2 (+ checksums)
_FRAME = 24  # page number, database size after a commit, salt 1, salt 2, checksums


def wal_pages(wal: Path) -> Counter[int]:
    """How many times each page is in a write-ahead log (its frames of the log's current salts)."""
    frames: Counter[int] = Counter()
    with open(wal, "rb") as f:
        head = f.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return frames
        _, _, page_size, _, salt1, salt2 = _HEADER.unpack(head)
        while len(frame := f.read(_FRAME)) == _FRAME:
            page, _, s1, s2 = struct.unpack_from(">IIII", frame)
            if (s1, s2) != (salt1, salt2):
                break  # a frame of an earlier log, past this one's end
            frames[page] += 1
            f.seek(page_size, os.SEEK_CUR)
    return frames


def by_owner(db: Path, frames: Counter[int]) -> tuple[Counter[str], Counter[str]]:
    """The frames and the distinct pages of ``frames`` by the table or index each page belongs to (``dbstat``; a
    page it does not list, such as one on the free list, is ``(free or new)``)."""
    conn = sqlite3.connect(db)
    try:
        owner = dict(conn.execute("SELECT pageno, name FROM dbstat"))
    finally:
        conn.close()
    logged: Counter[str] = Counter()
    distinct: Counter[str] = Counter()
    for page, k in frames.items():
        name = owner.get(page, "(free or new)")
        logged[name] += k
        distinct[name] += 1
    return logged, distinct
