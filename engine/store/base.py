"""What the ``Store``'s parts share: the connection, the lock, and the guard around every change."""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import sqlite_utils

from ..errors import StoreError
from ..records.episode import Episode

DAMAGED = frozenset({"SQLITE_CORRUPT", "SQLITE_CORRUPT_INDEX", "SQLITE_CORRUPT_SEQUENCE", "SQLITE_CORRUPT_VTAB",
                     "SQLITE_NOTADB"})


def damaged(error: BaseException, path: str | Path) -> StoreError | None:
    """The sentence for a database file whose pages are damaged (SQLite's ``SQLITE_CORRUPT``, ``SQLITE_NOTADB``),
    naming the file and how to recover what it holds; None for any other error."""
    if not isinstance(error, sqlite3.DatabaseError):
        return None
    name = getattr(error, "sqlite_errorname", "") or ""
    text = str(error)
    if name not in DAMAGED and "malformed" not in text and "not a database" not in text:
        return None
    return StoreError(f"the database {path} is damaged ({text}): recover what it still holds with "
                      f"`sqlite3 {path} .recover | sqlite3 recovered.db`, then use --db recovered.db")


BATCH_CACHE_KB = 262_144
"""The writing connection's page cache while ``save_batches`` runs, in KiB (set back after): what a batch dirties."""

BUSY_TIMEOUT_S = 30
"""How long a Browse connection waits for SQLite's locks (another process's write)."""


class _Writing:
    """``with self._lock, self.db.conn`` as one context manager."""

    def __init__(self, store: StoreBase) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store._lock.acquire()
        conn = self.store.db.conn
        began = False
        try:
            conn.__enter__()
            if not conn.in_transaction:
                # The write lock first, waiting (the busy timeout) for another process's write to end. A transaction
                # that read before it wrote could not wait: its first write fails at once, "database is locked",
                # while another process holds the lock or after it committed (SQLite's rule for WAL files).
                began = True
                conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            try:
                if began and conn.in_transaction:  # interrupted just after BEGIN: no later write commits it
                    conn.rollback()
            finally:
                self.store._lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.store.db.conn.__exit__(*exc)
        finally:
            self.store._lock.release()


class StoreBase:
    """The state every part of the ``Store`` works on."""

    db: sqlite_utils.Database
    path: Path
    _lock: threading.RLock
    _readers_lock: threading.Lock
    read_only: bool = False
    _closed: bool = False
    _read_conn: sqlite3.Connection | None = None
    _read_lock: threading.RLock
    _bg_conn: sqlite3.Connection | None = None
    _bg_lock: threading.RLock
    _charts_conn: sqlite3.Connection | None = None
    _charts_lock: threading.RLock
    _analyzed_rows: int = 0
    _fts_pending: list[tuple[int, str]] | None = None
    """The texts a batch write added, for the full-text index at its commit (``Writes._write_batch``); None outside
    one, where they go in with the episode."""
    _count_mark: int | None = None
    """The browse index row a batch write's aggregates start above, counted at its commit (``counts.fold_counts``);
    None outside one, where the triggers count each row."""
    _batching: tuple[int, int] = (0, 0)
    """How many ``save_batches`` are writing (watches of a dashboard share its store), and the writing connection's
    page cache before the first of them raised it."""

    def _read_only_file(self) -> Any:
        """How a read-only store reads its file (``readonly.ReadOnlyFile``); provided by ``core``."""
        raise NotImplementedError

    def _refuse_read_only(self, what: str) -> None:
        """A StoreError when the store is read-only, saying it cannot do ``what``."""
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only (no write permission): cannot {what}")

    def _writing(self, what: str) -> Any:
        """The lock and a transaction for a change; a StoreError when the store is read-only."""
        self._refuse_read_only(what)
        return _Writing(self)

    def _require(self, episode_id: str) -> dict[str, Any]:
        """The episode's row; a StoreError naming the file when there is none."""
        conn, lock = self._point_reader()
        with lock:
            cur = conn.execute("SELECT * FROM episodes WHERE id = ?", [episode_id])
            rows = cur.fetchall()
        if not rows:
            raise StoreError(f"no episode {episode_id!r} in {self.path}")
        return dict(zip([c[0] for c in cur.description], rows[0]))

    def _point_reader(self, background: bool = False) -> tuple[sqlite3.Connection, Any]:
        """The connection, and its lock, of a read of a few rows by key (an episode, its replays, a run's name).

        The store's own where this thread is writing (a batch compares an episode with the copy it may have written
        earlier in its transaction) or the file is read-only; else Browse's, which reads the last committed state
        and never waits for a write in progress: another thread's batch holds the store's lock for its whole
        transaction, and the dashboard opens episodes while a watch writes. ``background``: Browse's connection of what
        follows a page (a read of every match's id), so the pages do not wait for it."""
        if self.read_only or self._lock._is_owned():  # type: ignore[attr-defined]
            return self.db.conn, self._lock
        return self._reader(background)

    def _analyze(self, conn: sqlite3.Connection) -> None:
        """Refresh the planner's statistics of ``episode_index`` (a sample: milliseconds at 100,000 rows).

        Without them SQLite guesses that ``status = ?`` is selective and sorts
        every completed episode instead of walking the created_at index.
        """
        conn.execute("PRAGMA analysis_limit = 1000")
        conn.execute("ANALYZE episode_index")
        conn.commit()
        self._analyzed_rows = _rows_about(conn)

    def _maybe_analyze(self, conn: sqlite3.Connection) -> None:
        """New statistics for a database that grew a lot since the last (the dashboard was started on an empty one),
        on the charts' connection, when no write is under way: ANALYZE writes, so during an import batch it would
        wait for the batch's commit (failing after the busy timeout), and a batch that began meanwhile could not
        write. It waits for nothing: a write in this process, or in another, skips it until a later read. A file
        this process may not write keeps the statistics it has."""
        if self.read_only or _rows_about(conn) <= 2 * self._analyzed_rows + 1000:
            return
        if not self._lock.acquire(blocking=False):
            return
        try:
            conn.execute("PRAGMA busy_timeout = 0")
            self._analyze(conn)
        except sqlite3.OperationalError as e:  # another process writes: a later read takes them
            if "locked" not in str(e) and "busy" not in str(e):
                raise
        finally:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
            self._lock.release()

    # Provided by the parts (reads, browse); declared here for the others.
    def get_episode(self, episode_id: str) -> Episode:
        raise NotImplementedError

    def _record(self, episode_id: str) -> tuple[dict[str, Any], Any]:
        raise NotImplementedError

    def _write_search(self, ep: Episode, turn: int | None = None) -> None:
        raise NotImplementedError

    def _digest_ids(self, bodies: dict[bytes, str], context: Collection[bytes] = ()) -> dict[bytes, int]:
        raise NotImplementedError

    def browse_query(self, sql: str, args: Sequence[Any] = (), background: bool = False) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _reader(self, background: bool = False, charts: bool = False) -> tuple[sqlite3.Connection, threading.RLock]:
        raise NotImplementedError

    _table_names: frozenset[str] | None = None

    def _tables(self) -> frozenset[str]:
        """The tables the file holds, read once: only a migration adds one, and migrations run as the store opens
        (``forget_tables`` after them). A read on every call would wait on the Browse connection behind whatever
        it is reading."""
        if self._table_names is None:
            self._table_names = frozenset(r[0] for r in self.browse_query(
                "SELECT name FROM sqlite_master WHERE type = 'table'"))
        return self._table_names

    def forget_tables(self) -> None:
        """Read the tables again at the next ``_tables`` (after a migration)."""
        self._table_names = None
        self._stats_from = None
        self._checked_kept = None

    _checked_kept: bool | None = None

    def _has_checked(self) -> bool:
        """Whether the browse index says which episodes the checks ran on (``checked``; a read-only file lacking
        ``0025_checked`` does not: its episodes read as checked, as the version that wrote it showed them)."""
        if self._checked_kept is None:
            self._checked_kept = any(r[1] == "checked" for r in self.browse_query("PRAGMA table_info(episode_index)"))
        return self._checked_kept

    def _summary_columns(self, names: Sequence[str]) -> list[str]:
        """``names`` as the browse index gives them: ``checked`` a constant where it lacks the column."""
        return [n if n != "checked" or self._has_checked() else "'?' AS checked" for n in names]

    def _filter_sql(self, flt: Any) -> tuple[str, list[Any]]:
        """The SQL of an ``EpisodeFilter`` (None: every episode). Of a file that does not say which episodes the
        checks ran on, as its rows read: every episode checked."""
        if flt is None:
            return "1", []
        if flt.checked is not None and not self._has_checked():
            where, args = dataclasses.replace(flt, checked=None).sql()
            return (str(where) if flt.checked else f"({where}) AND 0"), list(args)
        where, args = flt.sql()
        return str(where), list(args)

    def _has_stats(self) -> bool:
        """Whether the file holds the maintained aggregates, ``episode_stats`` (a read-only file of schema 7 does not:
        its readers count from the browse index instead)."""
        return "episode_stats" in self._tables()

    def _has_chart_stats(self) -> bool:
        """Whether the file holds Browse's other maintained aggregates (``schema.CHART_TABLES``; a read-only file of
        schema 12 or before does not: its charts count from the browse index)."""
        return {"length_stats", "task_stats", "group_stats"} <= self._tables()

    def _has_table(self, name: str) -> bool:
        """Whether the file holds table ``name`` (a read-only file lacking a derived step does not)."""
        return name in self._tables()

    _stats_from: str | None = None

    def _stats_rows(self) -> str:
        """What to read ``episode_stats``' columns from: the table, or the browse index a row an episode. A read-only
        file from before the entropy figures (schema 12) reads 0 for them: none known."""
        if self._stats_from is None:
            self._stats_from = self._find_stats_rows()
        return self._stats_from

    def _find_stats_rows(self) -> str:
        # A column a read-only file lacks reads 0: no entropy known, every episode checked (as its version showed).
        later = ("n_entropy", "entropy_micronats", "n_low_entropy", "unchecked")
        if self._has_stats():
            have = {r[0] for r in self.browse_query("SELECT name FROM pragma_table_info('episode_stats')")}
            if set(later) <= have:
                return "episode_stats"
            return f"(SELECT *, {', '.join(f'0 AS {c}' for c in later if c not in have)} FROM episode_stats)"
        have = {r[0] for r in self.browse_query("SELECT name FROM pragma_table_info('episode_index')")}
        made = {c: c for c in later[:3]} | {"unchecked": "(checked IS NULL AND status != 'running' AND "
                                             "IFNULL(n_errors, 0) = 0)"}
        sums = ", ".join(f"{made[c]} AS {c}" if (c if c != "unchecked" else "checked") in have else f"0 AS {c}"
                         for c in later)
        return ("(SELECT run_id, rollout_step, env, preset, status, outcome, reward, n_turns, 1 AS n, "
                f"IFNULL(n_trainable, 0) AS trainable, IFNULL(n_errors, 0) > 0 AS with_errors, {sums} "
                "FROM episode_index)")

    @contextlib.contextmanager
    def _batch_cache(self) -> Iterator[None]:
        """The writing connection's page cache raised to ``BATCH_CACHE_KB`` (a larger one is kept) while any
        ``save_batches`` runs, and set back when the last one ends."""
        conn = self.db.conn
        with self._lock:
            n, before = self._batching
            if n == 0:
                before = int(conn.execute("PRAGMA cache_size").fetchone()[0])
                page_kb = int(conn.execute("PRAGMA page_size").fetchone()[0]) / 1024
                if (-before if before < 0 else before * page_kb) < BATCH_CACHE_KB:  # negative: KiB; else pages
                    conn.execute(f"PRAGMA cache_size = -{BATCH_CACHE_KB}")
            self._batching = (n + 1, before)
        try:
            yield
        finally:
            with self._lock:
                n, before = self._batching
                self._batching = (n - 1, before)
                if n == 1:
                    with contextlib.suppress(sqlite3.ProgrammingError):  # the store was closed meanwhile
                        conn.execute(f"PRAGMA cache_size = {before}")


def _rows_about(conn: sqlite3.Connection) -> int:
    """About how many rows the browse index holds, from its last row id (one step of its key, where a COUNT reads
    every row): an episode deleted still counts."""
    return int(conn.execute("SELECT IFNULL(MAX(rid), 0) FROM episode_index").fetchone()[0])
