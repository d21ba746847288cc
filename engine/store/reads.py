"""Reading episodes back, listing and counting them: the ``Store``'s reading half."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import fields
from typing import Any

from ..checks.diagnosis import read_episode
from ..errors import ConfigError, FormatError, StoreError
from ..records.episode import Episode, Finding, TokenArrays
from . import codec
from .base import StoreBase
from .filter import NEEDS_SQL, SORTABLE, EpisodeFilter, EpisodeSummary
from .paging import Cursor, EpisodePage, MatchCount, filter_mark, ranges

# An offset of at least this many rows, past the middle of its selection, is read from the selection's other end
# (when its count is cheap to read: ``Reads._count_at_hand``).
FROM_END_AFTER = 1_000
# The most rows of ``episode_stats`` a page sums for its count (a few milliseconds).
SMALL_STATS = 50_000

# The indexes of the browse index that hold one value of a filter's column in the order of a sorted column.
_PAIRED = {("run_id", "created_at"): "episode_index_run_created", ("run_id", "rollout_step"): "episode_index_run_step",
           ("status", "created_at"): "episode_index_status_created", ("status", "reward"): "episode_index_status_reward",
           ("status", "n_turns"): "episode_index_status_turns", ("status", "n_tokens"): "episode_index_status_tokens",
           ("task_id", "reward"): "episode_index_task_reward", ("group_id", "reward"): "episode_index_group_reward"}


def _token_row(conn: sqlite3.Connection, episode_id: str) -> Any:
    return conn.execute("SELECT ids, loss_mask, logprobs, versions, packed FROM tokens WHERE episode_id = ?",
                        [episode_id]).fetchone()


def _token_arrays(row: Any) -> TokenArrays:
    """An episode's token arrays from its ``tokens`` row (``_token_row``): packed, as raw blobs, or none."""
    if row is None:
        return TokenArrays()
    return codec.unpack_tokens(row[4]) if row[4] is not None else TokenArrays.from_blobs(*row[:4])


@contextlib.contextmanager
def _one_state(conn: sqlite3.Connection, lock: Any) -> Iterator[None]:
    """Reads on ``conn`` inside the block (under ``lock``) see one state of the file: one read transaction, or the
    transaction already open on it (a write's, which sees its own rows)."""
    with lock:
        if conn.in_transaction:
            yield
            return
        conn.execute("BEGIN")
        try:
            yield
        finally:
            if conn.in_transaction:  # SQLite may have ended it after an error: that error is the one to see
                conn.execute("COMMIT")


class Reads(StoreBase):
    """Episodes as records, the episode table's pages and counts, and stored replays."""

    def resolve_id(self, prefix: str) -> str:
        """Accept a unique prefix of an episode id, as git does for commits."""
        conn, lock = self._point_reader()
        with lock:
            # The ids from the prefix up to the largest character after it: a range of the id index, not a scan.
            rows = [r[0] for r in conn.execute(
                "SELECT id FROM episodes WHERE id >= ? AND id < ? LIMIT 2", [prefix, prefix + "\U0010ffff"]
            ).fetchall()]
        if len(rows) == 1:
            return str(rows[0])
        if not rows:
            raise StoreError(f"no episode {prefix!r} in {self.path}")
        raise StoreError(f"episode id {prefix!r} is ambiguous in {self.path}; give more characters")

    def has_episode(self, episode_id: str) -> bool:
        conn, lock = self._point_reader()
        with lock:
            return conn.execute("SELECT 1 FROM episodes WHERE id = ?", [episode_id]).fetchone() is not None

    def get_episode(self, episode_id: str) -> Episode:
        d, tokens = self._record(episode_id)
        try:
            return read_episode(d, tokens=tokens)
        except FormatError as e:
            raise StoreError(f"episode {episode_id} in {self.path} cannot be read: {e}") from None

    def _record(self, episode_id: str) -> tuple[dict[str, Any], TokenArrays]:
        """An episode's record dict (its columns, JSON, turns, tags) and token arrays, as stored: not yet read."""
        conn, lock = self._point_reader()
        with _one_state(conn, lock):  # the row, turns, tokens and tags of one committed state
            row = self._require(episode_id)
            rows = conn.execute("SELECT idx, data FROM turns WHERE episode_id = ? ORDER BY idx", [episode_id]).fetchall()
            tok = _token_row(conn, episode_id)
            tags = [r[0] for r in conn.execute("SELECT tag FROM tags WHERE episode_id = ? ORDER BY tag",
                                               [episode_id]).fetchall()]
        try:
            tokens = _token_arrays(tok)
            turns: list[dict[str, Any]] = []
            previous: dict[str, Any] | None = None
            for idx, data in rows:
                t = codec.unpack_turn(data, tokens, previous if previous is not None and previous.get("index") == idx - 1
                                      else None)
                turns.append(t)
                previous = t
            d = codec.unpack_json(row["data"])
        except StoreError as e:
            raise StoreError(f"episode {episode_id} in {self.path} cannot be read: {e}") from None
        for k in ("id", "run_id", "env", "task_id", "group_id", "sample_index", "preset", "status", "reason",
                  "reward", "parent_id", "fork_turn", "note", "created_at", "schema_version"):
            d[k] = row[k]
        d["starred"] = bool(row["starred"])
        d["tags"] = tags
        d["turns"] = turns
        return d, tokens

    def write_mark(self) -> int:
        """A mark of what is stored now: ``stored_before(id, mark)`` tells an episode stored before it from one
        written after (the rowid of ``episodes``, which a write over a stored episode keeps)."""
        conn, lock = self._point_reader()
        with lock:
            return int(conn.execute("SELECT coalesce(max(rowid), 0) FROM episodes").fetchone()[0])

    def stored_before(self, episode_id: str, mark: int) -> bool:
        """Whether ``episode_id`` is stored, and was before ``mark`` (``write_mark``) was taken."""
        conn, lock = self._point_reader()
        with lock:
            row = conn.execute("SELECT rowid FROM episodes WHERE id = ?", [episode_id]).fetchone()
        return row is not None and row[0] <= mark

    def ending_and_tokens(self, episode_id: str) -> tuple[dict[str, Any], TokenArrays]:
        """Of a stored episode, its ``status``, ``reward``, ``turn_rewards``, ``n_turns`` and ``tokenizer``, and its
        token arrays: what a trainer's dump says of it (``formats.reimport``), read without its turns."""
        conn, lock = self._point_reader()
        with _one_state(conn, lock):
            row = self._require(episode_id)
            tok = _token_row(conn, episode_id)
        try:
            tokens = _token_arrays(tok)
            data = codec.unpack_json(row["data"]) or {}
        except (StoreError, ValueError) as e:  # a damaged row: blobs of the wrong length, JSON that is not
            raise StoreError(f"episode {episode_id} in {self.path} cannot be read: {e}") from None
        return {"status": row["status"], "reward": row["reward"], "turn_rewards": tuple(data.get("turn_rewards", ())),
                "n_turns": row["n_turns"], "tokenizer": data.get("tokenizer", "")}, tokens

    def iter_episodes(self, flt: EpisodeFilter | None = None, batch: int = 200) -> Iterator[Episode]:
        for chunk in self._id_chunks(flt or EpisodeFilter(), batch):
            for eid in chunk:
                yield self.get_episode(eid)

    def episode_ids(self, flt: EpisodeFilter | None = None) -> list[str]:
        """The ids of the episodes ``flt`` selects, oldest first."""
        return [eid for chunk in self._id_chunks(flt or EpisodeFilter(), 1_000_000) for eid in chunk]

    def _id_chunks(self, flt: EpisodeFilter, batch: int) -> Iterator[list[str]]:
        where, args = self._filter_sql(flt)
        conn, lock = self._point_reader(background=True)  # every match's id: not on the pages' connection
        with lock:
            ids = [r[0] for r in conn.execute(f"SELECT id FROM episode_index WHERE {where} ORDER BY created_at, id",
                                              args).fetchall()]
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
        return list(self.page_episodes(flt, order_by, descending, limit, offset=offset).rows)

    def page_episodes(
        self,
        flt: EpisodeFilter | None = None,
        order_by: str = "created_at",
        descending: bool = True,
        limit: int = 50,
        *,
        after: str | None = None,
        before: str | None = None,
        offset: int = 0,
        matches: MatchCount | None = None,
    ) -> EpisodePage:
        """A page of the filtered episodes sorted by ``order_by`` (ties by row, in the same direction), with the
        tokens of the pages either side. ``after`` (a page's ``after``) gives the page that follows it and
        ``before`` (a page's ``before``) the one that precedes it, each a walk of the sorted column's index from
        that row, whatever the depth (keyset pagination); without either, the page ``offset`` rows in. The pages
        are the ones ``offset`` gives, for as long as the episodes do not change.

        ``matches`` (the filter's ``count_upto``): when the filter selects more than its bound, the page is first
        looked for along the sorted column's index, checking the filter row by row, which finds a page after about
        ``limit`` * (episodes / matches) rows when the matches are spread through the sort (SQLite's planner would
        rather sort every match when the filter has an index of its own, a status or a reward range, and that sort
        grows with the database). The walk reads no more than four times that many rows: when the matches lie
        together elsewhere in the sort (an older run, newest first: step and time move together), the page is read
        as the planner would, from the filter's own index, and costs a sort of the matches.

        An offset past the middle of the selection, and past ``FROM_END_AFTER`` rows, is read from the other end
        (the sort reversed, the rows turned back) when the selection's exact count is cheap to read
        (``_count_at_hand``), in one read transaction with that count. So the last page of every episode costs
        what the first does, at any size."""
        if order_by not in SORTABLE:
            raise ConfigError(f"cannot sort by {order_by!r}; one of {', '.join(SORTABLE)}")
        if after is not None and before is not None:
            raise ConfigError("a page follows one page or precedes another: give after or before, not both")
        if offset and (after is not None or before is not None):
            raise ConfigError("a page is read from a token (after, before) or an offset, not both: the offset would be "
                              "ignored")
        where, args = self._filter_sql(flt)
        token = after if after is not None else before
        scope = filter_mark(where, args)
        cursor = Cursor.parse(token, order_by, descending, scope) if token is not None else None
        walk_desc = descending if before is None else not descending
        direction = "DESC" if walk_desc else "ASC"
        # Page first, then look up the tags and the reasons of that page only (a reason is read from
        # ``episodes`` by primary key: the browse index does not hold it).
        names = [f.name for f in fields(EpisodeSummary) if f.name not in EpisodeSummary.PAGE_LOOKUPS]
        columns = ", ".join(self._summary_columns(names))
        walk = matches is not None and not matches.exact and order_by != "id" and not self._ordered_by_index(flt, order_by)
        order = f"ORDER BY {order_by} {direction}, rid {direction}"

        def read(cond: str, more: list[Any], want: int, skip: int = 0) -> list[tuple[Any, ...]]:
            """The first ``want`` matches after ``skip`` in the index range ``cond``."""
            if walk:
                assert matches is not None
                total = int(self.browse_query("SELECT IFNULL(MAX(rid), 0) FROM episode_index")[0][0])
                budget = 4 * (want + skip) * max(1, -(-total // max(1, matches.n)))
                # A subquery with a LIMIT is not merged into its query: SQLite runs it as a co-routine that hands
                # over its rows in its order, and the query stops taking them at its own LIMIT.
                ranged = (f"SELECT rid, {columns} FROM episode_index INDEXED BY episode_index_{order_by} "
                          f"WHERE {cond} {order} LIMIT ?")
                rows = self.browse_query(f"SELECT * FROM ({ranged}) WHERE ({where}) LIMIT ? OFFSET ?",
                                         [*more, budget, *args, want, skip])
                if len(rows) >= want or int(self.browse_query(
                        f"SELECT COUNT(*) FROM (SELECT 1 FROM episode_index INDEXED BY episode_index_{order_by} "
                        f"WHERE {cond} LIMIT ?)", [*more, budget])[0][0]) < budget:
                    return rows  # a page, or the whole range walked
                # The matches lie elsewhere: sorted by their sorted column and row alone, then the page's rows read.
                return self.browse_query(
                    f"SELECT rid, {columns} FROM episode_index WHERE rid IN (SELECT rid FROM episode_index "
                    f"WHERE ({where}) AND {cond} {order} LIMIT ? OFFSET ?) {order}", [*args, *more, want, skip])
            return self.browse_query(f"SELECT rid, {columns} FROM episode_index WHERE ({where}) AND {cond} "
                                     f"{order} LIMIT ? OFFSET ?", [*args, *more, want, skip])

        found: list[tuple[Any, ...]] = []
        deep = cursor is None and offset >= FROM_END_AFTER
        with self._browse_snapshot() if deep else contextlib.nullcontext():  # the count and the page agree
            known = self._count_at_hand(flt or EpisodeFilter(), matches) if deep else None
            if known is not None and offset > known // 2:  # read from the other end, turned back
                want = max(0, min(limit, known - offset))
                back = "ASC" if descending else "DESC"
                order = f"ORDER BY {order_by} {back}, rid {back}"
                found = read("1", [], want, known - offset - want)[::-1] if want else []
                further = offset + want < known
            else:
                if cursor is None:
                    found = read("1", [], limit + 1, max(0, offset))
                else:
                    for cond, more in ranges(order_by, walk_desc, cursor.value, cursor.rid):
                        if len(found) > limit:
                            break
                        found += read(cond, more, limit + 1 - len(found))
                further = len(found) > limit
                found = found[:limit]
        if before is not None:
            found.reverse()
        rows = [dict(zip(["rid", *names], r, strict=True)) for r in found]

        def mark(r: dict[str, Any]) -> str:
            return Cursor(order_by, descending, r[order_by], int(r["rid"]), scope).token()

        if before is None:
            nxt = mark(rows[-1]) if rows and further else None
            prev = mark(rows[0]) if rows and (cursor is not None or offset > 0) else None
        else:
            nxt = mark(rows[-1]) if rows else None
            prev = mark(rows[0]) if rows and further else None
        return EpisodePage(tuple(self._summaries(rows)), nxt, prev)

    def _ordered_by_index(self, flt: EpisodeFilter | None, order_by: str) -> bool:
        """Whether an index holds the filter's one run, status, task or group in ``order_by``'s order: its page is
        one range of that index, which SQLite's planner picks."""
        if flt is None:
            return False
        one = {"run_id": flt.run_id, "status": flt.status[0] if len(flt.status) == 1 else None,
               "task_id": flt.task_id, "group_id": flt.group_id}
        wanted = {_PAIRED[col, order_by] for col, value in one.items() if value and (col, order_by) in _PAIRED}
        return bool(wanted) and bool(self.browse_query(
            f"SELECT 1 FROM sqlite_master WHERE type = 'index' AND name IN ({','.join('?' * len(wanted))})",
            sorted(wanted)))

    def _summaries(self, rows: list[dict[str, Any]]) -> list[EpisodeSummary]:
        """Index rows as summaries, with the tags and the reasons of these rows looked up."""
        tags: dict[str, list[str]] = {}
        reasons: dict[str, str] = {}
        if rows:
            ids = [r["id"] for r in rows]
            marks = ",".join("?" * len(ids))
            for eid, tag in self.browse_query(
                f"SELECT episode_id, tag FROM tags WHERE episode_id IN ({marks}) ORDER BY tag", ids
            ):
                tags.setdefault(eid, []).append(tag)
            reasons = {eid: reason or "" for eid, reason in self.browse_query(
                f"SELECT id, reason FROM episodes WHERE id IN ({marks})", ids)}
        return [
            EpisodeSummary.from_row({**r, "starred": bool(r["starred"]), "n_errors": r["n_errors"] or 0,
                                     "tags": tuple(tags.get(r["id"], ())), "reason": reasons.get(r["id"], "")})
            for r in rows
        ]

    def count(self, flt: EpisodeFilter | None = None) -> int:
        """How many episodes ``flt`` selects: exact, from the maintained aggregates when they answer the filter (every
        episode, or a filter on their columns alone: a few thousand rows at any size), else from the browse index;
        on the connection of what follows a page, so a page read meanwhile does not wait for it."""
        flt = flt or EpisodeFilter()
        n = self._stats_count(flt, background=True)
        if n is not None:
            return n
        where, args = self._filter_sql(flt)
        return int(self.browse_query(f"SELECT COUNT(*) FROM episode_index WHERE {where}", args, background=True)[0][0])

    def _stats_count(self, flt: EpisodeFilter, background: bool) -> int | None:
        """``count`` from the maintained aggregates, when they answer ``flt``; else None."""
        where, args = self._filter_sql(flt)
        if where == "1" and self._has_table("episode_total"):  # every episode: one row
            return int(self.browse_query("SELECT IFNULL(SUM(n), 0) FROM episode_total", background=background)[0][0])
        if flt.on_stats and self._has_stats():
            return int(self.browse_query(f"SELECT IFNULL(SUM(n), 0) FROM episode_stats WHERE {where}", args,
                                         background=background)[0][0])
        return None

    def _count_at_hand(self, flt: EpisodeFilter, matches: MatchCount | None) -> int | None:
        """The selection's exact count where it is cheap to read, else None: every episode's (one row of
        ``episode_total``); the maintained aggregates', for a filter on their columns when ``episode_stats`` holds
        at most ``SMALL_STATS`` rows (a reward that takes a new value in every episode makes a row an episode, and
        their sum would scan them); else the caller's, when exact, counted again (no further than twice it)."""
        where, args = self._filter_sql(flt)
        if where == "1" and self._has_table("episode_total"):
            return self._stats_count(flt, background=False)
        if flt.on_stats and where != "1" and self._has_stats() and int(self.browse_query(
                "SELECT COUNT(*) FROM (SELECT 1 FROM episode_stats LIMIT ?)", [SMALL_STATS + 1])[0][0]) <= SMALL_STATS:
            return self._stats_count(flt, background=False)
        if matches is not None and matches.exact:
            cap = 2 * matches.n + 1_000
            n = int(self.browse_query(f"SELECT COUNT(*) FROM (SELECT 1 FROM episode_index WHERE {where} LIMIT ?)",
                                      [*args, cap + 1])[0][0])
            return n if n <= cap else None
        return None

    def _browse_snapshot(self) -> contextlib.AbstractContextManager[None]:
        """Browse's reads inside the block see one state of the file (one read transaction on the pages'
        connection), so a count and the page it places agree while episodes are being written."""
        return _one_state(*self._reader())

    def count_upto(self, flt: EpisodeFilter | None = None, bound: int = 10_000) -> MatchCount:
        """How many episodes ``flt`` selects, counted no further than ``bound``: the exact number when there are
        at most ``bound``, else "at least ``bound``" (``MatchCount.exact`` False; ``count`` gives the exact one).
        Stops after ``bound`` + 1 matches: a filter an index answers reads that many index entries at most, but one
        that selects fewer than ``bound`` episodes, or that no index answers (a tag, a text, has findings), checks
        every row it does not match, up to the whole index."""
        where, args = self._filter_sql(flt)
        n = int(self.browse_query(f"SELECT COUNT(*) FROM (SELECT 1 FROM episode_index WHERE {where} LIMIT ?)",
                                  [*args, bound + 1])[0][0])
        return MatchCount(min(n, bound), n <= bound)

    def outcome_counts(self, flt: EpisodeFilter | None = None, by: str | None = None) -> dict[Any, dict[str, int]]:
        """Episodes per outcome kind of the filter's selection (episodes without one are left out), grouped by
        ``by`` (None: one group, keyed None; or ``rollout_step``, ``run_id``, ``env``, ``task_id``, ``preset``,
        ``group_id``): {group: {kind: n}}, kinds most first."""
        if by not in (None, "rollout_step", "run_id", "env", "task_id", "preset", "group_id"):
            raise ConfigError(f"no grouping of outcomes by {by!r}")
        flt = flt or EpisodeFilter()
        where, args = self._filter_sql(flt)
        key = by or "NULL"
        # From the maintained aggregates when their columns answer the question.
        table, n = ("episode_stats", "SUM(n)") if flt.on_stats and by not in ("task_id", "group_id") and \
            self._has_stats() else \
            ("episode_index", "COUNT(*)")
        rows = self.browse_query(f"SELECT {key}, outcome, {n} FROM {table} WHERE ({where}) AND outcome "
                                 f"IS NOT NULL GROUP BY {key}, outcome ORDER BY {key}, {n} DESC, outcome", args)
        out: dict[Any, dict[str, int]] = {}
        for group, kind, n in rows:
            out.setdefault(group, {})[str(kind)] = int(n)
        return out

    def findings(self, episode_id: str) -> list[Finding]:
        return list(self.get_episode(episode_id).all_findings())

    def checks_not_run(self, episode_ids: Sequence[str]) -> dict[str, list[str]]:
        """For each of these episodes that a check could not run on for want of what a person can give (a
        ``not_checked`` note that ``needs`` a tokenizer or a model: ``checks.base.skip``), the notes, each "CHECK:
        not checked: WHY"; a page's rows, from the findings' index by kind. Their findings are those of the checks
        that ran: the views say so beside the count (as ``Episode.checks_not_run``)."""
        out: dict[str, list[str]] = {}
        ids = list(dict.fromkeys(episode_ids))
        for k in range(0, len(ids), 500):
            chunk = ids[k:k + 500]
            for eid, message in self.browse_query(
                    f"SELECT episode_id, message FROM findings WHERE kind = 'not_checked' AND episode_id IN "
                    f"({','.join('?' * len(chunk))}) AND {NEEDS_SQL} ORDER BY episode_id, rowid", chunk):
                out.setdefault(eid, []).append(message)
        return out

    def distinct(self, column: str) -> list[str]:
        if column not in ("env", "status", "preset", "run_id", "source", "task_id", "outcome"):
            raise ConfigError(f"no filter on {column!r}")
        # From the browse index's index on the column, a step a value (each the next larger one): a few lookups
        # for the few envs, presets or sources of a million episodes, where SELECT DISTINCT reads every row. On the
        # connection of what follows a page, as the other choices are: a write in progress does not hold it up.
        return [r[0] for r in self.browse_query(
            f"WITH RECURSIVE d(v) AS (SELECT MIN({column}) FROM episode_index UNION ALL "
            f"SELECT (SELECT MIN({column}) FROM episode_index WHERE {column} > d.v) FROM d WHERE d.v IS NOT NULL) "
            "SELECT v FROM d WHERE v IS NOT NULL ORDER BY 1", background=True)]

    def replays(self, episode_id: str) -> list[dict[str, Any]]:
        """Stored re-executions of an episode, newest first, as ``ReplayResult.to_dict()`` plus ``id``."""
        conn, lock = self._point_reader()
        with lock:
            rows = conn.execute(
                "SELECT id, data FROM replays WHERE episode_id = ? ORDER BY created_at DESC", [episode_id]
            ).fetchall()
        return [{"id": r[0], **json.loads(r[1])} for r in rows]
