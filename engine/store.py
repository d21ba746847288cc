"""SQLite storage of runs and episodes; with ``store_schema`` and ``store_browse``, all the SQL there is.

One file, WAL mode. Every turn is committed as it completes, so a crash
loses at most the turn in flight. Episodes left ``running`` by a process
that is gone become ``interrupted`` when the database is opened.

Tables: ``meta`` (schema version), ``runs``, ``episodes`` (one row per
episode: filterable columns plus the rest of the record as JSON), ``turns``
(one JSON row per turn), ``tokens`` (token arrays as little-endian binary
blobs), ``findings`` (an index of every finding, for filtering) and
``tags``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import sqlite_utils

from . import textsafe
from .errors import ConfigError, FormatError, StoreError

# Bins, BrowseStats, RewardStats and search_texts are re-exported for callers of the store.
from .queries import SORTABLE as SORTABLE  # re-exported: the public home is here
from .queries import EpisodeFilter as EpisodeFilter
from .queries import EpisodeSummary as EpisodeSummary
from .records import Episode, Finding, Status, TokenArrays, Turn
from .store_browse import Bins as Bins
from .store_browse import BrowseQueries, connect_read_only
from .store_browse import BrowseStats as BrowseStats
from .store_browse import RewardStats as RewardStats
from .store_schema import DB_SCHEMA as DB_SCHEMA  # re-exported: callers read the version here
from .store_schema import backfill_diagnosis, create_tables, diagnosis_columns

# Episode fields that live in their own columns rather than in the JSON blob.
_COLUMN_FIELDS = {
    "id", "run_id", "env", "task_id", "group_id", "sample_index", "preset", "status", "reason", "reward",
    "parent_id", "fork_turn", "starred", "note", "created_at", "schema_version", "tags", "turns", "tokens",
}


class _Writing:
    """``with self._lock, self.db.conn`` as one context manager."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store._lock.acquire()
        try:
            self.store.db.conn.__enter__()
        except BaseException:
            self.store._lock.release()
            raise

    def __exit__(self, *exc: Any) -> None:
        try:
            self.store.db.conn.__exit__(*exc)
        finally:
            self.store._lock.release()


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


class Store(BrowseQueries):
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
        self._lock = threading.RLock()
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
            self.db = sqlite_utils.Database(conn)
            self._migrate()
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {self.path} as a Rollscope database: {e}") from e
        self.recover_interrupted()

    def _open_read_only(self) -> None:
        try:
            conn = connect_read_only(self.path)
            self.db = sqlite_utils.Database(conn)
            names = set(self.db.table_names())
            row = self.db.execute("SELECT value FROM meta WHERE key = 'db_schema'").fetchone() \
                if "meta" in names else None
        except sqlite3.DatabaseError as e:
            raise StoreError(f"cannot open {self.path} as a Rollscope database: {e}") from e
        if row is None:
            raise StoreError(f"{self.path} is not a Rollscope database")
        if int(row[0]) != DB_SCHEMA:
            raise StoreError(
                f"{self.path} has database schema {row[0]} and this Rollscope reads {DB_SCHEMA}; it cannot be "
                "upgraded because it is read-only: copy it somewhere writable, or open it once with write access"
            )

    def _writing(self, what: str) -> Any:
        """The lock and a transaction for a change; a StoreError when the store is read-only."""
        if self.read_only:
            raise StoreError(f"{self.path} is open read-only (no write permission): cannot {what}")
        return _Writing(self)

    # -- schema ----------------------------------------------------------

    def _migrate(self) -> None:
        db = self.db
        with self._lock:
            names = set(db.table_names())
            if "meta" in names:
                row = db.execute("SELECT value FROM meta WHERE key = 'db_schema'").fetchone()
                version = int(row[0]) if row else 0
                if version > DB_SCHEMA:
                    raise StoreError(
                        f"{self.path} was written by a newer Rollscope (database schema {version}, this one reads {DB_SCHEMA}); upgrade"
                    )
            elif names:
                raise StoreError(f"{self.path} is a SQLite file but not a Rollscope database (tables: {', '.join(sorted(names))})")
            with db.conn:
                create_tables(db)
                created = self._migrate_search()
                self._migrate_index()
            # Outside that transaction (the index's statistics commit inside it): a flag written with the
            # last update, so an interrupted fill is done again on the next open.
            filled = db.execute("SELECT value FROM meta WHERE key = 'diagnosis_filled'").fetchone()
            if filled is None:
                with db.conn:
                    backfill_diagnosis(db)
                    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('diagnosis_filled', '1')")
            if created and db.execute("SELECT 1 FROM episodes LIMIT 1").fetchone():
                self._reindex_search()

    def recover_interrupted(self) -> int:
        """Mark episodes and runs whose writing process is gone (killed, crashed) as ``interrupted``."""
        with self._lock:
            rows = self.db.execute("SELECT id, pid FROM episodes WHERE status = 'running'").fetchall()
            dead = [r[0] for r in rows if _gone(r[1])]
            runs = self.db.execute("SELECT id, pid FROM runs WHERE status = 'running'").fetchall()
            # A run row from before runs had a pid is over once none of its episodes runs.
            dead_runs = [r[0] for r in runs if _gone(r[1]) and (r[1] is not None or not self.db.execute(
                "SELECT 1 FROM episodes WHERE run_id = ? AND status = 'running' AND id NOT IN "
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
            self.close_reader()
            self.db.conn.close()

    # -- writing ---------------------------------------------------------

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
        d = ep.to_dict(include_tokens=False)
        data = {k: v for k, v in d.items() if k not in _COLUMN_FIELDS}
        all_findings = ep.all_findings()
        diag, root_kinds = diagnosis_columns(all_findings)
        return {
            "id": ep.id,
            "run_id": ep.run_id,
            "env": ep.env,
            "task_id": ep.task_id,
            "group_id": ep.group_id,
            "sample_index": ep.sample_index,
            "preset": ep.preset,
            "model": ep.backend.label if ep.backend is not None else "",
            "status": ep.status.value,
            "reason": ep.reason,
            "reward": ep.reward,
            "n_turns": ep.n_turns,
            "n_tokens": ep.n_tokens,
            "n_trainable": ep.tokens.n_trainable,
            "prompt_len": ep.prompt_len,
            "created_at": ep.created_at,
            "updated_at": time.time(),
            "parent_id": ep.parent_id,
            "fork_turn": ep.fork_turn,
            "starred": int(ep.starred),
            "note": ep.note,
            "source": ep.source.kind,
            "n_findings": len(all_findings),
            "n_errors": sum(1 for f in all_findings if f.severity.value == "error"),
            "diagnosis": diag,
            "root_kinds": root_kinds,
            "pid": os.getpid() if ep.status is Status.RUNNING else None,
            "schema_version": ep.schema_version,
            "data": json.dumps(data, separators=(",", ":")),
        }

    def _write_findings(self, ep: Episode, turn: int | None = None) -> None:
        """Rewrite the finding index of an episode (or of one of its turns)."""
        if turn is None:
            self.db.execute("DELETE FROM findings WHERE episode_id = ?", [ep.id])
            found = [(f, f.turn) for f in ep.findings] + [(f, t.index) for t in ep.turns for f in t.findings]
        else:
            self.db.execute("DELETE FROM findings WHERE episode_id = ? AND turn = ?", [ep.id, turn])
            found = [(f, turn) for f in ep.turns[turn].findings]
        rows = [
            {
                "episode_id": ep.id, "turn": t, "kind": f.kind, "severity": f.severity.value,
                "token_start": f.token_start, "token_end": f.token_end, "message": f.message,
                "evidence": json.dumps(f.evidence, default=str),
            }
            for f, t in found
        ]
        if rows:
            cols = list(rows[0])
            self.db.conn.executemany(
                f"INSERT INTO findings ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [[r[c] for c in cols] for r in rows],
            )

    def _upsert(self, table: str, row: dict[str, Any], key: tuple[str, ...], keep: tuple[str, ...] = ()) -> None:
        # Plain prepared SQL on the per-turn path: sqlite-utils' upsert
        # introspects the table on every call, which dominated turn commits.
        cols = list(row)
        update = [c for c in cols if c not in key and c not in keep]
        sql = (
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
            f"ON CONFLICT({', '.join(key)}) DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in update)}"
        )
        self.db.conn.execute(sql, [row[c] for c in cols])

    def _write_turn(self, episode_id: str, turn: Turn) -> None:
        self._upsert(
            "turns",
            {
                "episode_id": episode_id, "idx": turn.index, "reward": turn.reward, "done": int(turn.done),
                "data": json.dumps(turn.to_dict(), separators=(",", ":")),
            },
            ("episode_id", "idx"),
        )

    def _write_tokens(self, ep: Episode) -> None:
        self._upsert("tokens", {"episode_id": ep.id, **ep.tokens.to_blobs()}, ("episode_id",))

    def save_turn(self, ep: Episode, turn: Turn) -> None:
        """Commit one finished turn and the episode as it stands (one transaction).

        Tags, star and note are left as they are: a person may set them
        while the episode runs.
        """
        with self._writing("save a turn"):
            self._upsert("episodes", self._episode_row(ep), ("id",), keep=("starred", "note"))
            self._write_turn(ep.id, turn)
            self._write_tokens(ep)
            self._write_findings(ep, turn.index)
            self._write_search(ep, turn.index)

    def finish_episode(self, ep: Episode) -> None:
        """Commit an episode's final state after its turns were saved one by one."""
        with self._writing("save an episode"):
            self._upsert("episodes", self._episode_row(ep), ("id",), keep=("starred", "note"))
            self._write_tokens(ep)
            self._write_findings(ep)
            self._write_search(ep)

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

    def _save_chunk(self, chunk: list[Episode]) -> int:
        with self._writing("save episodes"):
            for ep in chunk:
                self._save_whole(ep)
        return len(chunk)

    def _save_whole(self, ep: Episode) -> None:
        self._upsert("episodes", self._episode_row(ep), ("id",))
        self.db.execute("DELETE FROM turns WHERE episode_id = ?", [ep.id])
        for t in ep.turns:
            self._write_turn(ep.id, t)
        self._write_tokens(ep)
        self._write_findings(ep)
        self._write_search(ep)
        self.db.execute("DELETE FROM tags WHERE episode_id = ?", [ep.id])
        if ep.tags:
            self.db.conn.executemany(
                "INSERT OR IGNORE INTO tags (episode_id, tag) VALUES (?, ?)", [(ep.id, t) for t in ep.tags]
            )

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

    # -- reading ---------------------------------------------------------

    def _require(self, episode_id: str) -> dict[str, Any]:
        with self._lock:
            rows = list(self.db.query("SELECT * FROM episodes WHERE id = ?", [episode_id]))
        if not rows:
            raise StoreError(f"no episode {episode_id!r} in {self.path}")
        return rows[0]

    def resolve_id(self, prefix: str) -> str:
        """Accept a unique prefix of an episode id, as git does for commits."""
        with self._lock:
            rows = [r[0] for r in self.db.execute(
                "SELECT id FROM episodes WHERE substr(id, 1, ?) = ? LIMIT 2", [len(prefix), prefix]
            )]
        if len(rows) == 1:
            return str(rows[0])
        if not rows:
            raise StoreError(f"no episode {prefix!r} in {self.path}")
        raise StoreError(f"episode id {prefix!r} is ambiguous in {self.path}; give more characters")

    def has_episode(self, episode_id: str) -> bool:
        with self._lock:
            return self.db.execute("SELECT 1 FROM episodes WHERE id = ?", [episode_id]).fetchone() is not None

    def get_episode(self, episode_id: str) -> Episode:
        row = self._require(episode_id)
        with self._lock:
            turns = [json.loads(r[0]) for r in self.db.execute("SELECT data FROM turns WHERE episode_id = ? ORDER BY idx", [episode_id])]
            tok = self.db.execute(
                "SELECT ids, loss_mask, logprobs, versions FROM tokens WHERE episode_id = ?", [episode_id]
            ).fetchone()
            tags = [r[0] for r in self.db.execute("SELECT tag FROM tags WHERE episode_id = ? ORDER BY tag", [episode_id])]
        d = json.loads(row["data"])
        for k in ("id", "run_id", "env", "task_id", "group_id", "sample_index", "preset", "status", "reason",
                  "reward", "parent_id", "fork_turn", "note", "created_at", "schema_version"):
            d[k] = row[k]
        d["starred"] = bool(row["starred"])
        d["tags"] = tags
        d["turns"] = turns
        try:
            return Episode.from_dict(d, tokens=TokenArrays() if tok is None else TokenArrays.from_blobs(*tok))
        except FormatError as e:
            raise StoreError(f"episode {episode_id} in {self.path} cannot be read: {e}") from None

    def iter_episodes(self, flt: EpisodeFilter | None = None, batch: int = 200) -> Iterator[Episode]:
        for chunk in self._id_chunks(flt or EpisodeFilter(), batch):
            for eid in chunk:
                yield self.get_episode(eid)

    def _id_chunks(self, flt: EpisodeFilter, batch: int) -> Iterator[list[str]]:
        where, args = flt.sql()
        with self._lock:
            ids = [r[0] for r in self.db.execute(f"SELECT id FROM episodes WHERE {where} ORDER BY created_at, id", args)]
        for i in range(0, len(ids), batch):
            yield ids[i : i + batch]

    def list_episodes(
        self,
        flt: EpisodeFilter | None = None,
        order_by: str = "created_at",
        descending: bool = True,
        limit: int = 100,
        offset: int = 0,
    ) -> list[EpisodeSummary]:
        if order_by not in SORTABLE:
            raise ConfigError(f"cannot sort by {order_by!r}; one of {', '.join(SORTABLE)}")
        where, args = (flt or EpisodeFilter()).sql()
        direction = "DESC" if descending else "ASC"
        # Page first, then look up the tags of that page only.
        sql = (
            f"SELECT {', '.join(f.name for f in fields(EpisodeSummary) if f.name != 'tags')} FROM episode_index "
            f"WHERE {where} ORDER BY {order_by} {direction}, rid {direction} LIMIT ? OFFSET ?"
        )
        names = [f.name for f in fields(EpisodeSummary)][:-1]  # the SELECT's columns; tags come next
        rows = [dict(zip(names, r, strict=True)) for r in self.browse_query(sql, [*args, limit, offset])]
        tags: dict[str, list[str]] = {}
        if rows:
            ids = [r["id"] for r in rows]
            for eid, tag in self.browse_query(
                f"SELECT episode_id, tag FROM tags WHERE episode_id IN ({','.join('?' * len(ids))}) ORDER BY tag", ids
            ):
                tags.setdefault(eid, []).append(tag)
        return [
            EpisodeSummary.from_row({**r, "starred": bool(r["starred"]), "n_errors": r["n_errors"] or 0,
                                     "tags": tuple(tags.get(r["id"], ()))})
            for r in rows
        ]

    def count(self, flt: EpisodeFilter | None = None) -> int:
        where, args = (flt or EpisodeFilter()).sql()
        return int(self.browse_query(f"SELECT COUNT(*) FROM episode_index WHERE {where}", args)[0][0])

    def findings(self, episode_id: str) -> list[Finding]:
        return list(self.get_episode(episode_id).all_findings())

    def distinct(self, column: str) -> list[str]:
        if column not in ("env", "status", "preset", "run_id", "source", "task_id"):
            raise ConfigError(f"no filter on {column!r}")
        with self._lock:
            return [r[0] for r in self.db.execute(f"SELECT DISTINCT {column} FROM episodes WHERE {column} IS NOT NULL ORDER BY 1")]

    # -- replays -----------------------------------------------------------

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

    def replays(self, episode_id: str) -> list[dict[str, Any]]:
        """Stored re-executions of an episode, newest first, as ``ReplayResult.to_dict()`` plus ``id``."""
        with self._lock:
            rows = self.db.execute(
                "SELECT id, data FROM replays WHERE episode_id = ? ORDER BY created_at DESC", [episode_id]
            ).fetchall()
        return [{"id": r[0], **json.loads(r[1])} for r in rows]
