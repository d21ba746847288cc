"""Writing episodes, turns, runs, tags, stars, notes and replays: the ``Store``'s writing half."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..records import marks, textsafe
from ..records.episode import Episode, Status, Turn
from . import codec, packing
from .base import StoreBase
from .counts import fold_counts
from .fileerrors import file_advice, file_error, full
from .index import CONTEXT_PART
from .packing import PackedEpisode
from .schema import COUNTED, nonfinite_episodes

Stored = Episode | PackedEpisode
"""What ``save_batches`` writes: an episode, or its rows made elsewhere (``packing.pack_episode``)."""

_ANNOTATIONS = ("tags", "starred", "note")  # what a person adds to an episode, kept when it is imported again
_UPSERTS: dict[tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], str] = {}  # ``_upsert``'s SQL, made once
BATCH_EPISODES = 4096
"""Episodes ``save_batches`` writes a transaction: an index keyed by task takes new entries at random places, and a
commit writes a page for each one touched, so a larger batch shares them (``bench/write_scale.py``)."""
BATCH_BYTES = 256 << 20
"""About the characters of text a batch holds at most (``packing.held_bytes``)."""


def _content(ep: Episode) -> dict[str, Any]:
    """An episode as a record, without a person's annotations: what a re-import compares."""
    return {k: v for k, v in ep.to_dict().items() if k not in _ANNOTATIONS}


@dataclass
class _Written:
    """How many episodes a ``save_batches`` stored, and the last one's id: what it names when the writing stops
    (a count, so a million-episode import holds none of them). ``seen`` (with ``once``): the temporary table of
    the ids its committed batches met, each put in with its batch's commit (``Writes._commit``), so a batch rolled
    back met none; on disk, not in memory."""

    n: int = 0
    last: str = ""
    seen: str = ""
    same: Callable[[Episode, Episode], bool] | None = None  # whether a record and its id's first say the same

    def met(self, conn: sqlite3.Connection, episode_id: str) -> bool:
        return bool(self.seen) and conn.execute(f"SELECT 1 FROM temp.{self.seen} WHERE id = ?",
                                                 [episode_id]).fetchone() is not None


class Writes(StoreBase):
    """Every change to the database (``_writing`` refuses them on a read-only store)."""

    def save_run(self, run_id: str, config: dict[str, Any], status: str = "running", n_episodes: int = 0) -> None:
        with self._writing("save a run"):
            self.db.table("runs").upsert(
                {"id": run_id, "created_at": time.time(), "config": json.dumps(config), "status": status,
                 "n_episodes": n_episodes, "pid": os.getpid() if status == "running" else None},
                pk="id",
            )

    def finish_run(self, run_id: str, status: str) -> None:
        with self._writing("mark a run finished"):
            self.db.execute("UPDATE runs SET status = ?, pid = NULL WHERE id = ?", [status, run_id])

    def _episode_row(self, ep: Episode) -> dict[str, Any]:
        return packing.episode_row(ep, os.getpid())

    def _write_findings(self, ep: Episode, turn: int | None = None, fresh: bool = False) -> None:
        """Rewrite the finding index of an episode (or of one of its turns); ``fresh``: none is stored yet."""
        if turn is None:
            if not fresh:
                self.db.execute("DELETE FROM findings WHERE episode_id = ?", [ep.id])
        else:
            self.db.execute("DELETE FROM findings WHERE episode_id = ? AND turn = ?", [ep.id, turn])
        self._insert_findings(packing.finding_rows(ep, turn))

    def _insert_findings(self, rows: list[tuple[Any, ...]]) -> None:
        if rows:
            self.db.conn.executemany(f"INSERT INTO findings ({', '.join(packing.FINDING_COLUMNS)}) "
                                     f"VALUES ({', '.join('?' * len(packing.FINDING_COLUMNS))})", rows)

    def _upsert(self, table: str, row: dict[str, Any], key: tuple[str, ...], keep: tuple[str, ...] = ()) -> None:
        # Plain prepared SQL on the per-turn path: sqlite-utils' upsert
        # introspects the table on every call, which dominated turn commits.
        cols = tuple(row)
        sql = _UPSERTS.get((table, cols, key, keep))
        if sql is None:
            update = [c for c in cols if c not in key and c not in keep]
            sql = _UPSERTS[(table, cols, key, keep)] = (
                f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
                f"ON CONFLICT({', '.join(key)}) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in update)}")
        self.db.conn.execute(sql, list(row.values()))

    def _write_turn(self, ep: Episode, turn: Turn, spans: bool) -> None:
        """One turn row in the compact form (``packing.turn_row``)."""
        self._upsert_turns([packing.turn_row(ep, turn, spans)])

    def _upsert_turns(self, rows: list[tuple[str, int, float | None, int, str | bytes]]) -> None:
        self.db.conn.executemany(
            "INSERT INTO turns (episode_id, idx, reward, done, data) VALUES (?, ?, ?, ?, ?) ON CONFLICT(episode_id, idx) "
            "DO UPDATE SET reward = excluded.reward, done = excluded.done, data = excluded.data", rows)

    def _write_tokens(self, ep: Episode) -> None:
        self._upsert_tokens(ep.id, codec.pack_tokens(ep.tokens))

    def _upsert_tokens(self, episode_id: str, packed: bytes) -> None:
        self._upsert("tokens", {"episode_id": episode_id, "ids": None, "loss_mask": None, "logprobs": None,
                                "versions": None, "packed": packed}, ("episode_id",))

    def save_turn(self, ep: Episode, turn: Turn) -> None:
        """Commit one finished turn and the episode as it stands (one transaction).

        Tags, star and note are left as they are: a person may set them
        while the episode runs.
        """
        with self._writing("save a turn"):
            self._upsert("episodes", self._episode_row(ep), ("id",), keep=("starred", "note"))
            self._write_turn(ep, turn, spans=False)
            self._write_tokens(ep)
            self._write_findings(ep, turn.index)
            self._write_search(ep, turn.index)

    def finish_episode(self, ep: Episode) -> None:
        """Commit an episode's final state after its turns were saved one by one (its turns are written
        again, now in their final compact form; rows of turns it does not hold are left as they are)."""
        ep = marks.unknown_logprobs(ep)
        with self._writing("save an episode"):
            self._upsert("episodes", self._episode_row(ep), ("id",), keep=("starred", "note"))
            for t in ep.turns:
                self._write_turn(ep, t, spans=True)
            self._write_tokens(ep)
            self._write_findings(ep)
            self._write_search(ep)
            if ep.tags:  # its own (a named run's); tags a person gave it meanwhile stay
                self.db.conn.executemany(
                    "INSERT OR IGNORE INTO tags (episode_id, tag) VALUES (?, ?)", [(ep.id, t) for t in ep.tags])

    def save_episode(self, ep: Episode) -> None:
        """Write a whole episode (new, finished or imported), replacing any old copy."""
        with self._writing("save an episode"):
            self._save_whole(ep)

    def save_episodes(self, episodes: Iterable[Episode], batch: int = 500) -> int:
        """Write many whole episodes, ``batch`` per transaction (imports, benchmarks); returns how many."""
        n = 0
        chunk: list[Episode] = []
        for ep in episodes:
            chunk.append(ep)
            if len(chunk) >= batch:
                n += self._save_chunk(chunk)
                chunk = []
        return n + (self._save_chunk(chunk) if chunk else 0)

    def save_batches(self, episodes: Iterable[Stored], batch: int = BATCH_EPISODES, replace: bool = True,
                     batch_tokens: int = 2_000_000, batch_bytes: int = BATCH_BYTES, once: bool = False,
                     same: Callable[[Episode, Episode], bool] | None = None
                     ) -> Iterator[tuple[Stored, str, str | None]]:
        """Write whole episodes (or their rows, packed elsewhere: ``packing.pack_episode``), ``batch`` per transaction
        (fewer when they hold more than ``batch_tokens`` tokens or about ``batch_bytes`` of text together, so a batch
        of long episodes stays small in memory) and each in a savepoint: yields (episode,
        what was done: ``new``, ``replaced``, ``unchanged`` or ``kept``, why it could not be stored or None) once
        its batch is committed. An episode that fails on its own (a bad record) is rolled back alone, and listed;
        the others of its batch are kept.

        An error of the database file (full, unwritable, locked, damaged: ``file_error``) stops the writing: the
        episodes before the one it hit are committed (written again in a transaction of their own when SQLite
        rolled the whole batch back) and yielded, then a StoreError names the cause, how many episodes are stored
        and from which one on none is.

        An episode already stored keeps its star, note and tags (a person's work; tags the record carries
        are added to them): with ``replace`` its content is written again when it differs (``replaced``) and
        left when it does not (``unchanged``); without, it is left as it is (``kept``). With ``replace`` or ``once``
        (records whose ids are their own), an id this call met already is not written again: ``repeated`` when the
        record is the same (its content, or ``same(record, first)``), ``clashed`` when not (the first is stored). When
        ``episodes`` raises, those read before are written, then the error goes on. The writing connection's page
        cache is at least ``BATCH_CACHE_KB`` meanwhile."""
        self._refuse_read_only("save episodes")
        with self._batch_cache():
            yield from self._save_batches(episodes, batch, replace, batch_tokens, batch_bytes, _Written(same=same),
                                          replace or once)

    def _save_batches(self, episodes: Iterable[Stored], batch: int, replace: bool, batch_tokens: int,
                      batch_bytes: int, stored: _Written, once: bool) -> Iterator[tuple[Stored, str, str | None]]:
        chunk: list[Stored] = []
        tokens = held = 0
        if once:
            with self._lock:  # made outside any transaction: no rollback takes it away
                stored.seen = f"rs_seen_{id(stored)}"
                self.db.conn.execute(f"CREATE TEMP TABLE {stored.seen} (id TEXT PRIMARY KEY) WITHOUT ROWID")
        source = iter(episodes)
        end = object()
        try:
            while True:
                try:
                    item = next(source, end)
                except Exception:  # the reading failed (a damaged file): what was read before is kept, then the error
                    if chunk:
                        yield from self._store_batch(chunk, replace, stored)
                    raise
                if item is end:
                    break
                assert isinstance(item, (Episode, PackedEpisode))
                chunk.append(item)
                tokens += item.n_tokens
                held += packing.held_bytes(item)
                if len(chunk) >= batch or tokens >= batch_tokens or held >= batch_bytes:
                    yield from self._store_batch(chunk, replace, stored)
                    chunk, tokens, held = [], 0, 0
            if chunk:
                yield from self._store_batch(chunk, replace, stored)
        finally:
            if stored.seen:
                with self._lock, contextlib.suppress(sqlite3.Error):
                    self.db.conn.execute(f"DROP TABLE IF EXISTS temp.{stored.seen}")

    def _store_batch(self, chunk: list[Stored], replace: bool, stored: _Written
                     ) -> Iterator[tuple[Stored, str, str | None]]:
        """``_save_savepoints`` of one batch: yields what it committed (adding the stored ones to ``stored``), then
        raises the StoreError that says why it stopped, if it did."""
        done, stop = self._save_savepoints(chunk, replace, stored)
        for ep, state, error in done:
            if error is None:
                stored.n, stored.last = stored.n + 1, ep.id
            yield ep, state, error
        if stop is None:
            return
        failed, first_lost, cause = stop
        where = f" ({failed.source.file}:{failed.source.line})" if failed.source.file and \
            failed.source.line is not None else ""
        n = stored.n
        kept = (f"the {n} episode{'s' if n != 1 else ''} written before it {'are' if n != 1 else 'is'} stored "
                f"(the last {stored.last})") if n else "no episode is stored"
        lost = f"{failed.id}" if first_lost is failed else f"{first_lost.id} (the first of its batch)"
        raise StoreError(
            f"could not store episode {failed.id}{where} in {self.path}: {cause}. Of this write, {kept}; not stored: "
            f"{lost} and every episode after it. {file_advice(cause)}, then import again: the stored episodes are "
            "found and left as they are") from cause

    def _save_savepoints(self, chunk: list[Stored], replace: bool, call: _Written
                         ) -> tuple[list[tuple[Stored, str, str | None]], tuple[Stored, Stored, BaseException] | None]:
        """Write ``chunk`` in one transaction, each episode in a savepoint, and commit it: what is committed, and
        when an error of the file stopped it, (the episode it hit, the first episode not stored, the error)."""
        self._refuse_read_only("save episodes")
        with self._lock:
            try:
                done, stop = self._write_batch(chunk, replace, call, True)
                if stop is None or not full(stop[1]):
                    committed = self._commit(done, call.seen)
                    if stop is not None:
                        return self._settle(chunk, replace, call, done, stop, committed)
                    if committed is None or not full(committed):
                        return self._committed(chunk, done, committed)
                # The file is full: the batch again, each episode's texts indexed with it (not all at the commit),
                # so the writing stops at the episode that does not fit, and the episodes before it are kept.
                self._rollback()
                done, stop = self._write_batch(chunk, replace, call, False)
                committed = self._commit(done, call.seen)
                if stop is None:
                    return self._committed(chunk, done, committed)
                return self._settle(chunk, replace, call, done, stop, committed)
            except BaseException:  # interrupted (Ctrl-C; an episode's own error is listed, the file's returned)
                self._rollback()  # nothing of the batch is committed, and no later write commits part of it
                raise

    @staticmethod
    def _committed(chunk: list[Stored], done: list[tuple[Stored, str, str | None]], committed: BaseException | None
                   ) -> tuple[list[tuple[Stored, str, str | None]], tuple[Stored, Stored, BaseException] | None]:
        """What ``_save_savepoints`` says of a batch written whole, whose commit failed with ``committed`` (None: it
        did not)."""
        if committed is None:
            return done, None
        return [r for r in done if r[1] == "kept"], (chunk[0], chunk[0], committed)  # nothing of the batch is stored

    def _settle(self, chunk: list[Stored], replace: bool, call: _Written, done: list[tuple[Stored, str, str | None]],
                stop: tuple[Stored, BaseException], committed: BaseException | None
                ) -> tuple[list[tuple[Stored, str, str | None]], tuple[Stored, Stored, BaseException] | None]:
        """What ``_save_savepoints`` keeps of a batch an error of the file stopped at ``stop`` (its commit of the
        episodes before that failed with ``committed``, or None)."""
        failed, cause = stop
        if committed is None and not self._lost:
            return done, (failed, failed, cause)
        # SQLite rolled the whole transaction back (a full disk or an I/O error may): the episodes before the one
        # that failed are written again, once, in a transaction of their own.
        before = chunk[: chunk.index(failed)]
        again, stop_again = self._write_batch(before, replace, call, False) if before else ([], None)
        if before and stop_again is None and self._commit(again, call.seen) is None:
            return again, (failed, failed, cause)
        self._rollback()
        return [r for r in done if r[1] == "kept"], (failed, chunk[0], cause)

    _lost = False  # set by ``_write_batch``: the error that stopped it also ended its transaction

    def _write_batch(self, chunk: list[Stored], replace: bool, call: _Written, index_at_commit: bool = True
                     ) -> tuple[list[tuple[Stored, str, str | None]], tuple[Stored, BaseException] | None]:
        """Write ``chunk`` in a transaction left open (each episode in a savepoint: one that fails on its own is rolled
        back and listed): what was written, and the episode and error of the file that stopped it (``file_error``),
        with ``_lost`` saying whether SQLite ended the transaction with it. ``index_at_commit``: the texts added go
        into the full-text index at the commit (``_commit``), else with each episode."""
        conn = self.db.conn
        out: list[tuple[Stored, str, str | None]] = []
        here: set[str] = set()  # the ids this batch met; the call's before it are in ``call.seen``
        self._lost = False
        # One transaction for the batch: a SAVEPOINT outside a transaction opens one of its own and its RELEASE
        # commits it, which would make each episode a transaction. It reads until its first write, then takes the
        # write lock (``_lock_for_writing``).
        conn.execute("BEGIN")
        locked = False
        # The texts added go into the full-text index at the commit (``_commit``), in one statement: FTS5 writes
        # what it holds as a new segment, and merges, at every savepoint, which at a million episodes cost more
        # than the rest of the episode's SQL.
        pending: list[tuple[int, str]] = []
        self._fts_pending = pending if index_at_commit else None
        # So are the aggregates: the triggers leave the browse index rows above the mark, set before the batch's first
        # write, to ``_commit``, which counts them two statements an aggregate (``counts.fold_counts``), not an episode.
        self._count_mark = None
        for ep in chunk:
            held = len(pending)
            try:
                if call.seen and (ep.id in here or call.met(conn, ep.id)):  # its id again in this call
                    out.append((ep, "repeated" if self._same(ep, call.same) else "clashed", None))
                    continue
                present = conn.execute("SELECT 1 FROM episodes WHERE id = ?", [ep.id]).fetchone() is not None
                if not locked and (replace if present else not (isinstance(ep, PackedEpisode) and ep.failed)):
                    try:
                        present, locked = self._lock_for_writing(ep.id), True
                    except sqlite3.Error as e:  # not had in time: nothing was written, nothing is lost
                        return out, (ep, e)
                if present and not replace:
                    out.append((ep, "kept", None))
                    continue
                if not present and isinstance(ep, PackedEpisode) and ep.failed:
                    out.append((ep, "new", ep.failed))
                    continue
                if index_at_commit and self._count_mark is None:
                    self._count_mark = self._mark_counts()
                conn.execute("SAVEPOINT episode")
            except sqlite3.Error as e:
                self._lost = not conn.in_transaction
                return out, (ep, e)
            try:
                if present:
                    state = self._save_again(ep.episode() if isinstance(ep, PackedEpisode) else ep)
                elif isinstance(ep, PackedEpisode):
                    self._write_packed(ep, fresh=True)
                    state = "new"
                else:
                    self._save_whole(ep, fresh=True)
                    state = "new"
                # Where each episode's texts are indexed with it, FTS5 writes them here: a full disk may stop it.
                conn.execute("RELEASE episode")
            except Exception as e:  # noqa: BLE001 - a bad record is reported alone, the batch goes on
                if file_error(e) or not conn.in_transaction:
                    try:  # the episodes before it stay in the transaction, to be committed
                        conn.execute("ROLLBACK TO episode")
                        conn.execute("RELEASE episode")
                        del pending[held:]
                    except sqlite3.Error:
                        self._rollback()
                    self._lost = not conn.in_transaction
                    return out, (ep, e)
                conn.execute("ROLLBACK TO episode")
                conn.execute("RELEASE episode")
                del pending[held:]  # its texts are gone with it
                out.append((ep, "replaced" if present else "new", f"{type(e).__name__}: {e}"))
            else:
                out.append((ep, state, None))
                here.add(ep.id)
        return out, None

    def _lock_for_writing(self, episode_id: str) -> bool:
        """End the batch's transaction (it only read) and begin one holding the write lock, waiting for another
        process's write (the busy timeout): whether ``episode_id`` is stored, read again under it. A transaction that
        read cannot wait: its first write fails at once, "database is locked", while another process holds the lock
        or after it committed (SQLite's rule for WAL files). A batch whose episodes are all kept or refused never
        takes it."""
        self.db.conn.execute("COMMIT")
        self.db.conn.execute("BEGIN IMMEDIATE")
        return self.db.conn.execute("SELECT 1 FROM episodes WHERE id = ?", [episode_id]).fetchone() is not None

    def _commit(self, done: Sequence[tuple[Stored, str, str | None]] = (), seen: str = "") -> BaseException | None:
        """Commit the open transaction (none open: nothing to do), the texts a batch added put in the full-text index
        first, and the ids it met (``done``'s, but those refused on their own) in the temporary table ``seen``; the
        error when that or the commit failed (rolled back)."""
        pending, self._fts_pending = self._fts_pending, None
        mark, self._count_mark = self._count_mark, None
        try:
            if self.db.conn.in_transaction:
                if mark is not None:
                    self._count_marked(mark)
                if pending:
                    self.db.conn.executemany("INSERT INTO search_fts (rowid, body) VALUES (?, ?)", pending)
                if seen:
                    self.db.conn.executemany(f"INSERT OR IGNORE INTO temp.{seen} (id) VALUES (?)",
                                             [(ep.id,) for ep, _, error in done if error is None])
                self.db.conn.commit()
        except sqlite3.Error as e:
            self._rollback()
            return e
        return None

    def _mark_counts(self) -> int:
        """Leave the browse index rows written from now on in this transaction to ``_count_marked`` (the triggers of
        the aggregates stop at the mark); the mark. A mark a commit left without its count (none should) is kept,
        so its rows are counted too."""
        conn = self.db.conn
        conn.execute("INSERT OR IGNORE INTO count_mark (one, rid) SELECT 0, IFNULL(MAX(rid), 0) FROM episode_index")
        return int(conn.execute("SELECT rid FROM count_mark").fetchone()[0])

    def _count_marked(self, mark: int) -> None:
        """Count the rows above ``mark`` in the aggregates (``counts.fold_counts``) and take the mark away."""
        fold_counts(self.db.conn, mark, COUNTED)
        self.db.conn.execute("DELETE FROM count_mark")

    def _rollback(self) -> None:
        self._fts_pending = self._count_mark = None
        try:
            if self.db.conn.in_transaction:
                self.db.conn.rollback()
        except sqlite3.Error:
            pass  # the rollback of a file that failed: SQLite undoes the transaction when the file opens again

    def _same(self, ep: Stored, by: Callable[[Episode, Episode], bool] | None = None) -> bool:
        """Whether ``ep``'s content is its stored copy's (``by(ep, copy)``; one that cannot be read is not)."""
        try:
            whole, copy = ep.episode() if isinstance(ep, PackedEpisode) else ep, self.get_episode(ep.id)
            return by(whole, copy) if by else _content(copy) == _content(whole)
        except Exception:  # noqa: BLE001
            return False

    def _save_again(self, ep: Episode) -> str:
        """Store ``ep`` over its stored copy, keeping the copy's star, note and tags (with ``ep``'s tags added):
        ``replaced`` when its content differs, else ``unchanged`` (only annotations the record adds are written)."""
        row = self.db.execute("SELECT starred, note FROM episodes WHERE id = ?", [ep.id]).fetchone()
        tags = [r[0] for r in self.db.execute("SELECT tag FROM tags WHERE episode_id = ?", [ep.id])]
        merged = ep.evolve(tags=tuple(sorted({*tags, *ep.tags})), starred=bool(row[0]) or ep.starred,
                           note=row[1] or ep.note)
        if not self._same(ep):  # a stored copy that cannot be read is replaced; its replays were of other content
            self._save_whole(merged)
            self.db.execute("DELETE FROM replays WHERE episode_id = ?", [ep.id])
            return "replaced"
        if merged.starred != bool(row[0]) or merged.note != row[1]:
            self.db.execute("UPDATE episodes SET starred = ?, note = ? WHERE id = ?",
                            [int(merged.starred), merged.note, ep.id])
        self.db.conn.executemany("INSERT OR IGNORE INTO tags (episode_id, tag) VALUES (?, ?)",
                                 [(ep.id, t) for t in merged.tags if t not in tags])
        return "unchanged"

    def _save_chunk(self, chunk: list[Episode]) -> int:
        with self._writing("save episodes"):
            mark = self._mark_counts()
            for ep in chunk:
                self._save_whole(ep)
            self._count_marked(mark)
        return len(chunk)

    def _save_whole(self, ep: Episode, fresh: bool = False) -> None:
        """Write every row of ``ep``; ``fresh``: it is not stored yet, so there are no old rows to delete."""
        self._write_packed(packing.pack_episode(ep, os.getpid()), fresh)

    def _write_packed(self, p: PackedEpisode, fresh: bool = False) -> None:
        """Write every row of a packed episode (``packing.pack_episode``); ``fresh``: as ``_save_whole``."""
        conn = self.db.conn
        self._upsert("episodes", p.row, ("id",))
        if not fresh:
            for table in ("turns", "findings", "search_refs", "tags"):
                conn.execute(f"DELETE FROM {table} WHERE episode_id = ?", [p.id])
        self._upsert_turns(p.turns)
        self._upsert_tokens(p.id, p.tokens)
        self._insert_findings(p.findings)
        ids = self._digest_ids(p.bodies, {d for part, digests in p.search if part == CONTEXT_PART for d in digests})
        conn.executemany("INSERT OR IGNORE INTO search_refs (episode_id, part, text_id) VALUES (?, ?, ?)",
                         [(p.id, part, i) for part, digests in p.search for i in sorted({ids[d] for d in digests})])
        if p.tags:
            conn.executemany("INSERT OR IGNORE INTO tags (episode_id, tag) VALUES (?, ?)", [(p.id, t) for t in p.tags])

    def _fill_outcomes(self) -> int:
        """Give each finished episode stored before outcomes existed (record version 4 or earlier) the outcome its
        env computes (``read_episode`` does, ``envs.outcomes``), and each math episode of a record version before 9
        whose reward sums every turn's (``upgrade.sums_turns``) its outcome computed again, one transaction each;
        returns how many. An episode that cannot be read is left as it is (its readers say why, and compute its
        outcome as they read)."""
        from ..records.upgrade import sums_turns

        ids = [r[0] for r in self.db.execute(
            "SELECT id FROM episodes WHERE outcome IS NULL AND status != 'running' AND schema_version < 5")]
        for eid, data in self.db.execute(
                "SELECT id, data FROM episodes WHERE env = 'math' AND status != 'running' "
                "AND schema_version < 9").fetchall():
            try:
                d = codec.unpack_json(data) or {}
            except (StoreError, ValueError):  # a damaged row: its readers say why
                continue
            if sums_turns(d, "math") and isinstance(d.get("outcome"), dict) and "every_turn" not in d["outcome"]:
                ids.append(eid)
        n = 0
        for eid in ids:
            try:
                ep = self.get_episode(eid)
            except StoreError:
                continue
            if ep.outcome is None:
                continue
            # Only the outcome is written: the row keeps its record version (its turns rows are read as that
            # version), and the upgrades to 5 and 9 keep an outcome that says ``every_turn``.
            with self._writing("fill an episode's outcome"):
                row = self.db.execute("SELECT data FROM episodes WHERE id = ?", [eid]).fetchone()
                data = {**(codec.unpack_json(row[0]) or {}), "outcome": ep.outcome.to_dict()}
                self.db.execute("UPDATE episodes SET data = ?, outcome = ? WHERE id = ?",
                                [codec.pack_json(data), ep.outcome.kind, eid])
            n += 1
        return n

    def _repair_numbers(self) -> list[str]:
        """Rewrite each episode that holds a number an earlier Rollscope let in (``schema.nonfinite_episodes``)
        as this version reads it (``marks.repair_record``, then unknown logprobs marked), one transaction
        each; its tags, star and note are kept. An episode that still cannot be read is left as it is."""
        from ..checks.diagnosis import read_episode
        from ..errors import FormatError

        done = []
        for eid in nonfinite_episodes(self.db):
            try:
                d, tokens = self._record(eid)
                fixed_d, fixed = marks.repair_record(d)
                ep = read_episode(fixed_d, tokens=tokens)
            except (FormatError, StoreError):
                continue
            if not fixed and len(ep.findings) == len(d.get("findings") or ()):
                continue  # nothing marked: a text that only says "NaN"
            with self._writing("repair an episode's numbers"):
                self._save_whole(ep)
            done.append(eid)
        return done

    def set_status(self, ids: Sequence[str], status: Status, reason: str) -> None:
        with self._writing("change episode statuses"):
            for eid in ids:
                self.db.execute("UPDATE episodes SET status = ?, reason = ?, pid = NULL WHERE id = ?", [status.value, reason, eid])

    def set_tags(self, episode_id: str, tags: Sequence[str]) -> None:
        self._require(episode_id)
        clean = sorted({t.strip() for t in tags if t.strip()})
        with self._writing("change tags"):
            self.db.execute("DELETE FROM tags WHERE episode_id = ?", [episode_id])
            if clean:
                self.db.table("tags").insert_all([{"episode_id": episode_id, "tag": t} for t in clean], ignore=True)

    def set_starred(self, episode_id: str, starred: bool) -> None:
        self._require(episode_id)
        with self._writing("star an episode"):
            self.db.execute("UPDATE episodes SET starred = ? WHERE id = ?", [int(starred), episode_id])

    def set_note(self, episode_id: str, note: str) -> None:
        note = textsafe.clean_text(note)  # a person's text, pasted from anywhere
        self._require(episode_id)
        with self._writing("save a note"):
            self.db.execute("UPDATE episodes SET note = ? WHERE id = ?", [note, episode_id])

    def curate(self, ids: Sequence[str], *, add_tags: Sequence[str] = (), remove_tags: Sequence[str] = (),
               starred: bool | None = None, note: str | None = None) -> int:
        """Tag, untag, star or unstar, and note several episodes in one transaction (all or none); how many."""
        add = sorted({t.strip() for t in add_tags if t.strip()})
        remove = sorted({t.strip() for t in remove_tags if t.strip()})
        for eid in ids:
            self._require(eid)
        clean = textsafe.clean_text(note) if note is not None else None
        with self._writing("curate episodes"):
            for eid in ids:
                if add:
                    self.db.table("tags").insert_all([{"episode_id": eid, "tag": t} for t in add], ignore=True)
                for t in remove:
                    self.db.execute("DELETE FROM tags WHERE episode_id = ? AND tag = ?", [eid, t])
                if starred is not None:
                    self.db.execute("UPDATE episodes SET starred = ? WHERE id = ?", [int(starred), eid])
                if clean is not None:
                    self.db.execute("UPDATE episodes SET note = ? WHERE id = ?", [clean, eid])
        return len(ids)

    def save_replay(self, result: Any) -> str:
        """Store a ``ReplayResult``; the replayed episode itself is not touched."""
        import uuid

        self._require(result.episode_id)
        rid = uuid.uuid4().hex[:16]
        with self._writing("save a replay"):
            self.db.conn.execute(
                "INSERT INTO replays (id, episode_id, created_at, kind, reproduced, data) VALUES (?, ?, ?, ?, ?, ?)",
                [rid, result.episode_id, result.created_at, result.kind, int(result.reproduced),
                 json.dumps(result.to_dict(), default=str)],
            )
        return rid
