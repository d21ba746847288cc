"""Opening a database this process may not write, committed WAL frames included.

SQLite reads a WAL database through its ``-shm`` index. In a folder this
process may not write, where that file is missing (a writer killed before
it closed, a copy without it), ``mode=ro`` cannot open the file and only
``immutable=1`` can, which reads the main file alone and silently skips
every transaction still in the ``-wal`` file. So such a database is read
from a private copy of the file and its WAL, which SQLite replays; where no
copy can be made (no room, no temporary folder) it opens immutable and says
how many committed changes it cannot show.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import tempfile
import weakref
from pathlib import Path
from urllib.parse import quote

COPY_PREFIX = "rollscope-ro-"
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER = 32
_FRAME_HEADER = 24


def wal_commits(path: Path) -> int:
    """Committed transactions in ``path``'s ``-wal`` file: whole commit frames of its current generation
    (salts equal to the header's). 0 when there is no WAL or it is empty or not one."""
    wal = Path(f"{path}-wal")
    try:
        with wal.open("rb") as f:
            header = f.read(_WAL_HEADER)
            if len(header) < _WAL_HEADER:
                return 0
            magic, _, page_size, _, salt1, salt2 = struct.unpack(">6I", header[:24])
            if magic not in _WAL_MAGIC or not 512 <= page_size <= 65536:
                return 0
            commits = 0
            while True:
                frame = f.read(_FRAME_HEADER)
                if len(frame) < _FRAME_HEADER:
                    return commits
                _, size_after, s1, s2 = struct.unpack(">4I", frame[:16])
                if (s1, s2) != (salt1, salt2):
                    return commits  # frames of an earlier generation: not part of the database
                if len(f.read(page_size)) < page_size:
                    return commits  # a frame cut short: not committed
                commits += size_after != 0
    except OSError:
        return 0


def _uri(path: Path, immutable: bool) -> str:
    return f"file:{quote(str(path.resolve()))}?mode=ro" + ("&immutable=1" if immutable else "")


def _connect(path: Path, immutable: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(_uri(path, immutable), uri=True, check_same_thread=False, timeout=30)
    try:
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.Error:
        conn.close()
        raise
    return conn


class ReadOnlyFile:
    """How a database this process may not write is read: in place, through a private copy that replays its
    WAL, or immutable with ``hidden`` committed transactions it cannot show. ``connect()`` gives a new
    connection that never writes; ``close()`` removes the copy."""

    def __init__(self, path: Path) -> None:
        self.source = path
        self.path = path
        self.immutable = False
        self.hidden = 0
        """Committed transactions in the WAL that these connections cannot see (0: they see everything)."""
        self._copy: Path | None = None
        self._first: sqlite3.Connection | None = None
        try:
            self._first = _connect(path)
            return
        except sqlite3.OperationalError:
            pass  # the WAL index cannot be read or made here
        pending = wal_commits(path)
        if pending:
            try:
                self._copy = _private_copy(path)
                self._cleanup = weakref.finalize(self, shutil.rmtree, self._copy, True)
                self.path = self._copy / path.name
                self._first = _connect(self.path)
                return
            except (OSError, sqlite3.Error):
                self.close()
                self.path = path
        self.immutable = True
        self.hidden = pending
        self._first = _connect(path, immutable=True)

    @property
    def notice(self) -> str:
        """What a reader should be told: the committed changes it cannot see, and why ("" when none)."""
        if not self.hidden:
            return ""
        return (f"{self.hidden} committed change{'s' if self.hidden != 1 else ''} not visible: the folder is read-only "
                f"(a writer left them in {self.source.name}-wal); open it once with write access to see them")

    def connect(self) -> sqlite3.Connection:
        """A connection that never writes (the first call returns the one opened to decide how)."""
        if self._first is not None:
            conn, self._first = self._first, None
            return conn
        return _connect(self.path, self.immutable)

    def close(self) -> None:
        if self._first is not None:
            self._first.close()
            self._first = None
        if self._copy is not None:
            self._cleanup()
            self._copy = None


def _private_copy(path: Path) -> Path:
    """``path`` and its ``-wal`` copied into a new folder only this user can enter."""
    _remove_stale()
    folder = Path(tempfile.mkdtemp(prefix=f"{COPY_PREFIX}{os.getpid()}-"))
    try:
        shutil.copyfile(path, folder / path.name)
        shutil.copyfile(f"{path}-wal", folder / f"{path.name}-wal")
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder


def _remove_stale() -> None:
    """Remove the copies of processes killed before they could."""
    for old in Path(tempfile.gettempdir()).glob(f"{COPY_PREFIX}*-*"):
        pid = old.name[len(COPY_PREFIX):].split("-", 1)[0]
        try:
            if not pid.isdigit() or old.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
