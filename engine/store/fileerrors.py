"""The errors of a database file, apart from a record's own: they stop a batch write, and each has advice."""

from __future__ import annotations

import sqlite3

# SQLite's errors of the file rather than of the record written (``sqlite_errorname`` prefixes): the writing stops.
_FILE_ERRORS = ("SQLITE_FULL", "SQLITE_IOERR", "SQLITE_BUSY", "SQLITE_LOCKED", "SQLITE_READONLY", "SQLITE_NOMEM",
                "SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CANTOPEN", "SQLITE_PROTOCOL", "SQLITE_INTERRUPT")


def file_error(e: BaseException) -> bool:
    """Whether ``e`` is an error of the database file (full, unwritable, locked, damaged, out of memory): one that
    the next episode would meet too, where a bad record's error is its own."""
    if isinstance(e, MemoryError):
        return True
    name = getattr(e, "sqlite_errorname", "") or ""
    return isinstance(e, sqlite3.Error) and name.startswith(_FILE_ERRORS)


def full(e: BaseException | None) -> bool:
    """Whether ``e`` says the database file cannot grow."""
    return isinstance(e, sqlite3.Error) and (getattr(e, "sqlite_errorname", "") or "").startswith("SQLITE_FULL")


def file_advice(e: BaseException) -> str:
    """What to do about an error of the file, as the start of a sentence."""
    name = getattr(e, "sqlite_errorname", "") or ""
    if name.startswith("SQLITE_FULL"):
        return "Make room on its disk"
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return "Another process is writing to it: wait until it is done"
    if name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")):
        return "Give this process write access to the file and its folder"
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")):
        return "Recover what it holds (`sqlite3 FILE .recover | sqlite3 recovered.db`) and use the recovered file"
    return "Fix the cause"
