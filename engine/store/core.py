"""The ``Store``: opening a database file (read-only too), bringing it up to date, recovering what a
dead process left running, closing.

One file, WAL mode. Every turn is committed as it completes, so a crash
loses at most the turn in flight. Episodes left ``running`` by a process
that is gone become ``interrupted`` when the database is opened. The
writing and reading halves are ``writes`` and ``reads``, Browse's queries
``browse``, the tables and migrations ``schema`` and ``migrations``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import sqlite_utils

from ..errors import StoreError
from . import migrations
from .index import IndexQueries
from .readonly import ReadOnlyFile
from .reads import Reads
from .runs import RunQueries
from .schema import DB_SCHEMA, backfill_diagnosis
from .writes import Writes

WRITE_CACHE_KB = 65_536
"""The writing connection's page cache, in KiB (SQLite's default is 2,000): 10% off the writes into a database of
100,000 episodes (``bench/import_jsonl.py``)."""


def _gone(pid: int | None) -> bool:
    """Whether the process that wrote a ``running`` row is gone (None: unknown, so gone)."""
    return pid is None or (pid != os.getpid() and not _pid_alive(int(pid)))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _can_write(path: Path) -> bool:
    """Whether this process may change the file and create its WAL companions next to it."""
    return os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)

class Store(Writes, Reads, IndexQueries, RunQueries):
    """A Rollscope database file. Safe to share between threads.

    ``read_only``: None (the default) opens the file for writing when this process may, and read-only
    when it may not (a file or folder without write permission); True never writes. A read-only store
    reads everything and refuses every change with a StoreError that says why. It cannot upgrade an
    older database, so it refuses one.
    """

    def __init__(self, path: str | Path, *, create: bool = True, read_only: bool | None = None) -> None:
        self.path = Path(path)
        if not create and not self.path.exists():
            raise StoreError(f"database {self.path} does not exist")
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a database file")
        if read_only is None:
            read_only = self.path.exists() and not _can_write(self.path)
        self.read_only = read_only
        self._ro: ReadOnlyFile | None = None
        self.applied: list[str] = []
        """The migrations this open applied, in order."""
        self.repaired: list[str] = []
        """The episodes whose numbers this open repaired (``0010_finite_numbers``)."""
        self.filled = 0
        """How many stored episodes this open gave an outcome (``0011_outcomes``)."""
        self._lock = threading.RLock()
        self._readers_lock = threading.Lock()
        """Held only to open or close the Browse connections (``_reader``), never while waiting on another lock."""
        if read_only:
            if not self.path.exists():
                raise StoreError(f"database {self.path} does not exist")
            self._open_read_only()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the folder for {self.path}: {e.strerror or e}") from None
        try:
            conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            # The writer's page cache: a write touches a page of each of the browse index's indexes and of the
            # search index, which outgrow SQLite's default 2 MB within the first ten thousand episodes.
            conn.execute(f"PRAGMA cache_size = -{WRITE_CACHE_KB}")
            self.db = sqlite_utils.Database(conn)
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {self.path} as a Rollscope database: {e}") from e
        self.recover_interrupted()

    @property
    def notice(self) -> str:
        """What a reader of this store should be told that it cannot show ("" when it shows everything): the
        committed changes a read-only folder's WAL holds that could not be read."""
        return self._ro.notice if self._ro is not None else ""

    def _read_only_file(self) -> ReadOnlyFile:
        assert self._ro is not None
        return self._ro

    def _open_read_only(self) -> None:
        try:
            self._ro = ReadOnlyFile(self.path)
            conn = self._ro.connect()
            self.db = sqlite_utils.Database(conn)
            names = set(self.db.table_names())
            row = self.db.execute("SELECT value FROM meta WHERE key = 'db_schema'").fetchone() \
                if "meta" in names else None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {self.path} as a Rollscope database: {e}") from e
        if row is None:
            raise StoreError(f"{self.path} is not a Rollscope database")
        todo = [m for m in migrations.pending(self.db) if not m.repair and not m.derived]
        if int(row[0]) > DB_SCHEMA:
            raise StoreError(f"{self.path} was written by a newer Rollscope (database schema {row[0]}, this one "
                             f"reads {DB_SCHEMA}); upgrade")
        if todo:
            raise StoreError(
                f"{self.path} has database schema {row[0]} and this Rollscope reads {DB_SCHEMA} (it lacks "
                f"{', '.join(m.name for m in todo)}); it cannot be upgraded because it is read-only: copy it "
                "somewhere writable, or open it once with write access"
            )

    # -- schema ----------------------------------------------------------

    def _migrate(self) -> None:
        """Bring the file to this version's schema (``migrations``), then finish what a step left to do."""
        db = self.db
        with self._lock:
            names = set(db.table_names())
            if names and "meta" not in names:
                raise StoreError(f"{self.path} is a SQLite file but not a Rollscope database (tables: {', '.join(sorted(names))})")
            self.applied = migrations.migrate(db, self.path)
            self.forget_tables()
            # A file written by the version before the migrations table whose diagnosis fill was cut off.
            if db.execute("SELECT value FROM meta WHERE key = 'diagnosis_filled'").fetchone() is None:
                with db.conn:
                    backfill_diagnosis(db)
                    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('diagnosis_filled', '1')")
            if db.execute("SELECT value FROM meta WHERE key = 'search_fill'").fetchone() is not None:
                self._reindex_search()
                with db.conn:
                    db.execute("DELETE FROM meta WHERE key = 'search_fill'")
            if db.execute("SELECT value FROM meta WHERE key = 'numbers_repair'").fetchone() is not None:
                self.repaired = self._repair_numbers()
                with db.conn:
                    db.execute("DELETE FROM meta WHERE key = 'numbers_repair'")
            if db.execute("SELECT value FROM meta WHERE key = 'outcomes_fill'").fetchone() is not None:
                self.filled = self._fill_outcomes()
                with db.conn:
                    db.execute("DELETE FROM meta WHERE key = 'outcomes_fill'")
            # A batch's mark committed without its count (none should be): the rows above it are counted now.
            left = db.execute("SELECT rid FROM count_mark").fetchone()
            if left is not None:
                with db.conn:
                    self._count_marked(left[0])
            self._analyze(db.conn)

    def recover_interrupted(self) -> int:
        """Mark episodes and runs whose writing process is gone (killed, crashed) as ``interrupted``."""
        with self._lock:
            rows = self.db.execute("SELECT e.id, e.pid FROM episode_index AS i JOIN episodes AS e ON e.rowid = i.rid "
                                  "WHERE i.status = 'running'").fetchall()
            dead = [r[0] for r in rows if _gone(r[1])]
            runs = self.db.execute("SELECT id, pid FROM runs WHERE status = 'running'").fetchall()
            # A run row from before runs had a pid is over once none of its episodes runs.
            dead_runs = [r[0] for r in runs if _gone(r[1]) and (r[1] is not None or not self.db.execute(
                "SELECT 1 FROM episode_index WHERE run_id = ? AND status = 'running' AND id NOT IN "
                f"({', '.join('?' * len(dead))}) LIMIT 1", [r[0], *dead]).fetchone())]
            if dead or dead_runs:
                with self.db.conn:
                    for eid in dead:
                        self.db.execute(
                            "UPDATE episodes SET status = 'interrupted', reason = 'the process running it ended' WHERE id = ?",
                            [eid],
                        )
                    for rid in dead_runs:
                        self.db.execute("UPDATE runs SET status = 'interrupted', pid = NULL WHERE id = ?", [rid])
            return len(dead)

    def close(self) -> None:
        with self._lock:
            with self._readers_lock:  # no Browse connection opens after this
                self._closed = True
            self.close_reader()
            self.db.conn.close()
            if self._ro is not None:
                self._ro.close()
