"""The store's Browse support: the full-text search index and aggregate queries.

Part of the store (``Store`` inherits ``BrowseQueries``), kept in its own
module for size; like ``store.py`` it is the only other place that writes
SQL, and only against the store's own connection.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from .records import Episode, Turn


@dataclass(frozen=True)
class Bins:
    """A distribution as bars: centers, counts and the bars' width (discrete values get one bar each)."""

    centers: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()
    width: float = 1.0


@dataclass(frozen=True)
class RewardStats:
    """Reward count, mean, standard deviation and range of a set of episodes (a task, a group)."""

    key: str
    task_id: str
    n: int
    mean: float
    std: float
    min: float
    max: float


@dataclass(frozen=True)
class BrowseStats:
    """Aggregates of a filtered set of episodes, for Browse's charts."""

    total: int = 0
    reward: Bins = Bins()
    status: tuple[tuple[str, int], ...] = ()
    turns: tuple[tuple[int, int], ...] = ()
    tokens: Bins = Bins()
    trainable: Bins = Bins()  # same bars as ``tokens``
    tasks: tuple[RewardStats, ...] = ()  # the most frequent tasks first
    n_tasks: int = 0
    groups: tuple[RewardStats, ...] = ()  # groups of two or more samples, by id
    n_groups: int = 0
    n_flat_groups: int = 0  # groups whose samples all got the same reward: no GRPO advantage


# The search index holds what a person reads in an episode (message
# contents, raw generations, tool calls, parse errors, the verdict, finding
# messages). Each distinct text is stored and indexed once (a tau-bench
# policy prompt is the same 10 KB in every episode) and episodes refer to
# their texts by part: 0 for the opening and verdict, t+1 for turn t, so a
# turn commit touches only its own part. The trigram tokenizer makes a
# quoted MATCH a case-insensitive substring search: the meaning the filter
# had as a LIKE over the JSON, at index speed.
_MIN_TRIGRAM = 3


def text_clause(text: str) -> tuple[str, str]:
    """The SQL (and its one argument) of a full-text filter on message contents."""
    if len(text) >= _MIN_TRIGRAM:
        return (
            "id IN (SELECT episode_id FROM search_refs WHERE text_id IN "
            "(SELECT rowid FROM search_fts WHERE search_fts MATCH ?))",
            '"' + text.replace('"', '""') + '"',
        )
    # Too short for a trigram: a scan of the distinct texts, same meaning.
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return (
        "id IN (SELECT episode_id FROM search_refs WHERE text_id IN "
        "(SELECT id FROM search_texts WHERE body LIKE ? ESCAPE '\\'))",
        f"%{escaped}%",
    )


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _turn_texts(t: Turn) -> list[str]:
    out: list[str] = []
    if t.generation is not None:
        out.append(t.generation.text)
    if t.action is not None:
        out.append(t.action.text)
    out += [f"{c.name} {_json_text(c.arguments)}" for c in t.tool_calls]
    out += [t.parse_error or ""]
    out += [m.content for m in t.observation]
    out += [f.message for f in t.findings]
    return out


def search_texts(ep: Episode, turn: int | None = None) -> list[tuple[int, list[str]]]:
    """(part, texts) of the search index for an episode, or its opening and one turn."""
    opening: list[str] = []
    for m in ep.messages:
        # Later messages are in the turns' parts; an episode without turns
        # (an import of bare messages) keeps all of them here.
        if m.role == "assistant" and ep.turns:
            break
        opening += [m.content, *(f"{c.name} {_json_text(c.arguments)}" for c in m.tool_calls)]
    opening += [ep.reason, *(f.message for f in ep.findings)]
    turns = ep.turns if turn is None else [ep.turns[turn]]
    return [(0, opening), *((t.index + 1, _turn_texts(t)) for t in turns)]


class BrowseQueries:
    """Search-index upkeep and Browse's aggregate queries, mixed into ``Store``."""

    db: sqlite_utils.Database
    _lock: threading.RLock

    def get_episode(self, episode_id: str) -> Episode:  # provided by Store
        raise NotImplementedError

    def _migrate_search(self) -> bool:
        """Create the full-text index if missing; True when it is new."""
        db = self.db
        created = "search_texts" not in db.table_names()
        for sql in (
            "CREATE TABLE IF NOT EXISTS search_texts (id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, body TEXT NOT NULL)",
            "CREATE TABLE IF NOT EXISTS search_refs (episode_id TEXT NOT NULL, part INTEGER NOT NULL, "
            "text_id INTEGER NOT NULL, PRIMARY KEY (episode_id, part, text_id)) WITHOUT ROWID",
            "CREATE INDEX IF NOT EXISTS search_refs_text ON search_refs (text_id)",
            "CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5(body, content='search_texts', "
            "content_rowid='id', tokenize='trigram')",
            # SQLite's documented pattern for an external-content index; texts
            # are never updated, only added.
            "CREATE TRIGGER IF NOT EXISTS search_texts_ai AFTER INSERT ON search_texts BEGIN "
            "INSERT INTO search_fts(rowid, body) VALUES (new.id, new.body); END",
            "CREATE TRIGGER IF NOT EXISTS search_texts_ad AFTER DELETE ON search_texts BEGIN "
            "INSERT INTO search_fts(search_fts, rowid, body) VALUES ('delete', old.id, old.body); END",
        ):
            db.execute(sql)
        return created

    def _reindex_search(self) -> None:
        """Fill the search index from the stored episodes (a database from before it existed)."""
        ids = [r[0] for r in self.db.execute("SELECT id FROM episodes")]
        for eid in ids:
            ep = self.get_episode(eid)
            with self.db.conn:
                self._write_search(ep)

    def _text_id(self, text: str) -> int:
        digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
        row = self.db.conn.execute("SELECT id FROM search_texts WHERE hash = ?", [digest]).fetchone()
        if row is not None:
            return int(row[0])
        cur = self.db.conn.execute("INSERT INTO search_texts (hash, body) VALUES (?, ?)", [digest, text])
        return int(cur.lastrowid or 0)

    def _write_search(self, ep: Episode, turn: int | None = None) -> None:
        """Point the search index at an episode's texts (or at its opening's and one turn's)."""
        conn = self.db.conn
        if turn is None:
            conn.execute("DELETE FROM search_refs WHERE episode_id = ?", [ep.id])
        for part, texts in search_texts(ep, turn):
            if turn is not None:
                conn.execute("DELETE FROM search_refs WHERE episode_id = ? AND part = ?", [ep.id, part])
            ids = {self._text_id(x) for x in texts if x and x.strip()}
            conn.executemany(
                "INSERT OR IGNORE INTO search_refs (episode_id, part, text_id) VALUES (?, ?, ?)",
                [(ep.id, part, i) for i in ids],
            )

    def finding_kinds(self) -> list[tuple[str, int]]:
        """Every finding kind in the database with the number of episodes that have it."""
        with self._lock:
            return [(r[0], int(r[1])) for r in self.db.execute(
                "SELECT kind, COUNT(DISTINCT episode_id) FROM findings GROUP BY kind ORDER BY kind"
            )]

    def tag_counts(self) -> list[tuple[str, int]]:
        """Every tag in use with the number of episodes carrying it."""
        with self._lock:
            return [(r[0], int(r[1])) for r in self.db.execute("SELECT tag, COUNT(*) FROM tags GROUP BY tag ORDER BY tag")]

    def _bins(self, where: str, args: list[Any], column: str, edges_of: str | None = None,
              max_bars: int = 30) -> Bins:
        """Bars of ``column`` over the filtered set; ``edges_of`` takes the range from another column."""
        span = edges_of or column
        lo, hi, distinct = self.db.execute(
            f"SELECT MIN({span}), MAX({span}), COUNT(DISTINCT {column}) FROM episodes WHERE {where}", args
        ).fetchone()
        if lo is None:
            return Bins()
        if distinct <= max_bars and edges_of is None:
            rows = self.db.execute(
                f"SELECT {column}, COUNT(*) FROM episodes WHERE {where} GROUP BY {column} ORDER BY 1", args
            ).fetchall()
            values = [float(r[0]) for r in rows]
            gaps = [b - a for a, b in zip(values, values[1:], strict=False)]
            return Bins(tuple(values), tuple(int(r[1]) for r in rows), 0.8 * min(gaps) if gaps else 1.0)
        width = (hi - lo) / max_bars if hi > lo else 1.0
        rows = self.db.execute(
            f"SELECT MIN(CAST(({column} - ?) / ? AS INTEGER), {max_bars - 1}) AS b, COUNT(*) FROM episodes "
            f"WHERE {where} GROUP BY b ORDER BY b",
            [lo, width, *args],
        ).fetchall()
        counts = [0] * max_bars
        for b, c in rows:
            counts[max(0, int(b))] += int(c)
        return Bins(tuple(lo + (k + 0.5) * width for k in range(max_bars)), tuple(counts), width)

    def _reward_stats(self, where: str, args: list[Any], key: str, order: str, limit: int) -> list[RewardStats]:
        rows = self.db.execute(
            f"SELECT {key}, MIN(task_id), COUNT(*), AVG(reward), AVG(reward * reward), MIN(reward), MAX(reward) "
            f"FROM episodes WHERE ({where}) AND {key} IS NOT NULL GROUP BY {key} "
            f"{'HAVING COUNT(*) > 1' if key == 'group_id' else ''} ORDER BY {order} LIMIT ?",
            [*args, limit],
        ).fetchall()
        # Population standard deviation, as GRPO normalizes advantages within a group.
        return [
            RewardStats(str(k), str(task), int(n), float(m), max(0.0, float(m2) - float(m) ** 2) ** 0.5, float(lo), float(hi))
            for k, task, n, m, m2, lo, hi in rows
        ]

    def stats(self, flt: Any = None, *, task_limit: int = 40, group_limit: int = 2000) -> BrowseStats:
        """Aggregates of the episodes ``flt`` selects: distributions, breakdowns, per-task and per-group rewards."""
        where, args = _where(flt)
        with self._lock:
            total = int(self.db.execute(f"SELECT COUNT(*) FROM episodes WHERE {where}", args).fetchone()[0])
            if not total:
                return BrowseStats()
            status = self.db.execute(
                f"SELECT status, COUNT(*) FROM episodes WHERE {where} GROUP BY status ORDER BY 2 DESC", args
            ).fetchall()
            turns = self.db.execute(
                f"SELECT n_turns, COUNT(*) FROM episodes WHERE {where} GROUP BY n_turns ORDER BY 1", args
            ).fetchall()
            n_tasks = self.db.execute(f"SELECT COUNT(DISTINCT task_id) FROM episodes WHERE {where}", args).fetchone()[0]
            n_groups, n_flat = self.db.execute(
                "SELECT COUNT(*), COALESCE(SUM(lo = hi), 0) FROM (SELECT MIN(reward) AS lo, MAX(reward) AS hi "
                f"FROM episodes WHERE ({where}) AND group_id IS NOT NULL GROUP BY group_id HAVING COUNT(*) > 1)",
                args,
            ).fetchone()
            return BrowseStats(
                total=total,
                reward=self._bins(where, args, "reward"),
                status=tuple((str(s), int(c)) for s, c in status),
                turns=tuple((int(t or 0), int(c)) for t, c in turns),
                tokens=self._bins(where, args, "n_tokens"),
                trainable=self._bins(where, args, "n_trainable", edges_of="n_tokens"),
                tasks=tuple(self._reward_stats(where, args, "task_id", "COUNT(*) DESC, task_id", task_limit)),
                n_tasks=int(n_tasks),
                groups=tuple(self._reward_stats(where, args, "group_id", "group_id", group_limit)),
                n_groups=int(n_groups),
                n_flat_groups=int(n_flat),
            )


def _where(flt: Any) -> tuple[str, list[Any]]:
    # An EpisodeFilter; duck-typed because store.py imports this module.
    return flt.sql() if flt is not None else ("1", [])
