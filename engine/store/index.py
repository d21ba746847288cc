"""The episode index: full-text search over what people read, and aggregate queries over the slim index table.

Part of the store (``Store`` inherits ``IndexQueries``); it writes SQL only against the store's own
connections. The front ends' tables, charts and run-level kinds read from here.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..records import textsafe
from ..records.episode import Episode, ToolCall, Turn
from .base import BUSY_TIMEOUT_S, StoreBase
from .schema import TOTAL_TABLES, bucket_width, length_bucket_sql


@dataclass(frozen=True)
class Bins:
    """A distribution as bars: centers, counts and the bars' width (discrete values get one bar each)."""

    centers: tuple[float, ...] = ()
    counts: tuple[int, ...] = ()
    width: float = 1.0
    widths: tuple[float, ...] = ()  # each bar's own width, where bars differ (lengths: ``schema.length_bucket``)

    def bar_widths(self) -> tuple[float, ...]:
        return self.widths or (self.width,) * len(self.counts)


@dataclass(frozen=True)
class RewardStats:
    """Reward count, mean, standard deviation and range of a set of episodes (a task under one env and preset, a
    group: its env and preset are left empty)."""

    key: str
    task_id: str
    n: int
    mean: float
    std: float
    min: float
    max: float
    env: str = ""
    preset: str = ""

    @property
    def zero_spread(self) -> bool:
        """Two or more samples that all earned the same reward: a GRPO group with no advantage to learn from."""
        return self.n > 1 and self.max == self.min


@dataclass(frozen=True)
class RewardBins:
    """The reward distribution of the episodes of one env and preset: rewards on one scale (a preset's shaped
    returns and another's 0/1 rewards are not comparable, so they are never binned together)."""

    env: str
    preset: str
    n: int
    bins: Bins = Bins()

    @property
    def label(self) -> str:
        return f"{self.env} · {self.preset}" if self.preset else self.env


@dataclass(frozen=True)
class BrowseStats:
    """Aggregates of a filtered set of episodes, for Browse's charts."""

    total: int = 0
    rewards: tuple[RewardBins, ...] = ()  # per (env, preset), the most frequent first
    n_reward_sets: int = 0  # (env, preset) pairs in the selection; ``rewards`` may hold fewer
    status: tuple[tuple[str, int], ...] = ()
    turns: tuple[tuple[int, int], ...] = ()
    tokens: Bins = Bins()
    trainable: Bins = Bins()  # same bars as ``tokens``
    tasks: tuple[RewardStats, ...] = ()  # the most frequent tasks, per (env, preset), the most frequent first
    n_tasks: int = 0  # tasks in the selection
    groups: tuple[RewardStats, ...] = ()  # groups of two or more samples, by id
    n_groups: int = 0
    n_flat_groups: int = 0  # groups whose samples all got the same reward: no GRPO advantage


# The search index holds what a person reads in an episode (message
# contents, raw generations, tool calls, parse errors, the verdict, finding
# messages). A text is stored and indexed once: a system prompt or tool
# schema once in the database (a tau-bench policy prompt is the same 10 KB in
# every episode), any other text once in a window of _WINDOW texts
# (``_digest_ids``). Episodes refer to their texts by part: 0 for the opening
# and verdict, t+1 for turn t, so a turn commit touches only its own part. System prompts and tool schemas are
# part -1 (CONTEXT_PART): the same policy text in every episode of an env
# would match every search, so a search leaves them out unless asked. The trigram tokenizer makes a
# quoted MATCH a case-insensitive substring search: the meaning the filter
# had as a LIKE over the JSON, at index speed.
_MIN_TRIGRAM = 3
CONTEXT_PART = -1  # system prompts and tool schemas
_LOOKUP = 500  # texts looked up in one query (SQLite takes up to 32,766 parameters)
_WINDOW = 1 << 16  # the texts a window of the digest index spans (``_digest_ids``)


def text_clause(text: str, context: bool = False) -> tuple[str, str]:
    """The SQL (and its one argument) of a full-text filter on what a person reads in an episode (messages,
    tool calls, errors, findings); ``context``: system prompts and tool schemas too."""
    part = "" if context else f"part != {CONTEXT_PART} AND "
    if len(text) >= _MIN_TRIGRAM:
        return (
            f"id IN (SELECT episode_id FROM search_refs WHERE {part}text_id IN "
            "(SELECT rowid FROM search_fts WHERE search_fts MATCH ?))",
            '"' + text.replace('"', '""') + '"',
        )
    # Too short for a trigram: a scan of the stored texts, same meaning.
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return (
        f"id IN (SELECT episode_id FROM search_refs WHERE {part}text_id IN "
        "(SELECT id FROM search_texts WHERE body LIKE ? ESCAPE '\\'))",
        f"%{escaped}%",
    )


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _call_text(c: ToolCall) -> str:
    return c.raw_arguments if c.raw_arguments is not None else _json_text(c.arguments)


def _turn_texts(t: Turn) -> list[str]:
    out: list[str] = []
    if t.generation is not None:
        out.append(t.generation.text)
    if t.action is not None:
        out.append(t.action.text)
    out += [f"{c.name} {_call_text(c)}" for c in t.tool_calls]
    out += [t.parse_error or ""]
    out += [m.content for m in t.observation]
    out += [f.message for f in t.findings]
    return out


def search_texts(ep: Episode, turn: int | None = None) -> list[tuple[int, list[str]]]:
    """(part, texts) of the search index for an episode, or its opening and one turn: system prompts and tool
    schemas in ``CONTEXT_PART``, the rest of the opening in 0, turn t in t + 1."""
    opening: list[str] = []
    context: list[str] = [_json_text(t) for t in ep.tools]
    for m in ep.messages:
        # Later messages are in the turns' parts; an episode without turns
        # (an import of bare messages) keeps all of them here.
        if m.role == "assistant" and ep.turns:
            break
        if m.role == "system":
            context.append(m.content)
            continue
        opening += [m.content, *(f"{c.name} {_call_text(c)}" for c in m.tool_calls)]
    opening += [ep.reason, *(f.message for f in ep.findings)]
    turns = ep.turns if turn is None else [ep.turns[turn]]
    return [(CONTEXT_PART, context), (0, opening), *((t.index + 1, _turn_texts(t)) for t in turns)]


def text_digests(texts: Iterable[str]) -> tuple[dict[str, bytes], dict[bytes, str]]:
    """The digest of each text that is not blank, and each digest's text as stored: a text UTF-8 cannot hold (lone
    surrogates, from an import or an old record) is stored cleaned, and shares the digest of its cleaned form."""
    digest_of: dict[str, bytes] = {}
    bodies: dict[bytes, str] = {}
    for text in texts:
        if not text or text in digest_of or not text.strip():
            continue
        body = text
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError:
            body = textsafe.clean_text(text)
            raw = body.encode("utf-8")
        digest = hashlib.blake2b(raw, digest_size=16).digest()
        digest_of[text] = digest
        bodies.setdefault(digest, body)
    return digest_of, bodies


class IndexQueries(StoreBase):
    """Search-index upkeep and the aggregate queries of the episode index, mixed into ``Store``."""

    def _reindex_search(self) -> None:
        """Fill the search index from the stored episodes (a database from before it existed)."""
        ids = [r[0] for r in self.db.execute("SELECT id FROM episodes")]
        for eid in ids:
            ep = self.get_episode(eid)
            with self.db.conn:
                self._write_search(ep)

    def _text_ids(self, texts: Iterable[str], context: Iterable[str] = ()) -> dict[str, int]:
        """The search-index id of each text that is not blank (a text stored before keeps its id: see
        ``_digest_ids``; ``context``: those of them that are system prompts or tool schemas), looked up in one query
        for a few hundred texts."""
        digest_of, bodies = text_digests(texts)
        ids = self._digest_ids(bodies, {digest_of[t] for t in context if t in digest_of})
        return {text: ids[digest] for text, digest in digest_of.items()}

    def _digest_ids(self, bodies: dict[bytes, str], context: Collection[bytes] = ()) -> dict[bytes, int]:
        """The search-index id of each text, by its digest (``text_digests``), stored now when it is not yet.

        A system prompt's or tool schema's text (its digest in ``context``) is keyed by its digest: stored once.
        Any other text is keyed by its window (the texts stored before this call, by ``_WINDOW``) and its digest,
        and looked up in this window and the one before: a text repeated within about ``_WINDOW`` texts is stored
        once, one repeated further apart once more (the copy before stays, without the refs that moved, as the
        texts of a deleted episode do). The keys a batch adds then lie in one range of the digest index, its
        window's: the batch writes at most that range's pages (about 500 of 4 KB for a full window), where a
        digest alone puts each new key on a page of its own once the index has more pages than the batch has
        texts (the largest share of the pages a batch wrote into a large database: ``bench/write_scale.py``)."""
        conn = self.db.conn
        last = int(conn.execute("SELECT IFNULL(MAX(id), 0) FROM search_texts").fetchone()[0])
        window = last // _WINDOW
        here, before = struct.pack(">I", window), struct.pack(">I", max(window - 1, 0))
        key_of = {d: d if d in context else here + d for d in bodies}
        probe = {k: d for d in bodies for k in ((d,) if d in context else (here + d, before + d))}
        found: dict[bytes, int] = {}
        keys = list(probe)
        for i in range(0, len(keys), 2 * _LOOKUP):
            part = keys[i:i + 2 * _LOOKUP]
            for key, text_id in conn.execute(
                    f"SELECT hash, id FROM search_texts WHERE hash IN ({','.join('?' * len(part))})", part):
                found.setdefault(probe[key], text_id)
        # The ids SQLite would give them (the largest + 1 on), given here so they go in one statement: this
        # transaction holds the write lock, so no other writer takes one meanwhile.
        rows: list[tuple[int, bytes, str]] = []
        for digest, body in bodies.items():
            if digest not in found:
                last += 1
                found[digest] = last
                rows.append((last, key_of[digest], body))
        if rows:
            conn.executemany("INSERT INTO search_texts (id, hash, body) VALUES (?, ?, ?)", rows)
        new = [(i, body) for i, _, body in rows]
        # The full-text index of the texts added (schema 14: no trigger does it); in a batch, at its commit.
        if self._fts_pending is not None:
            self._fts_pending += new
        else:
            conn.executemany("INSERT INTO search_fts (rowid, body) VALUES (?, ?)", new)
        return found

    def _write_search(self, ep: Episode, turn: int | None = None) -> None:
        """Point the search index at an episode's texts (or at its opening's and one turn's)."""
        conn = self.db.conn
        if turn is None:
            conn.execute("DELETE FROM search_refs WHERE episode_id = ?", [ep.id])
        parts = search_texts(ep, turn)
        ids = self._text_ids((x for _, texts in parts for x in texts),
                             (x for part, texts in parts if part == CONTEXT_PART for x in texts))
        refs = []
        for part, texts in parts:
            if turn is not None:
                conn.execute("DELETE FROM search_refs WHERE episode_id = ? AND part = ?", [ep.id, part])
            refs += [(ep.id, part, i) for i in sorted({ids[x] for x in texts if x in ids})]
        conn.executemany("INSERT OR IGNORE INTO search_refs (episode_id, part, text_id) VALUES (?, ?, ?)", refs)

    # -- reading for Browse ----------------------------------------------------

    def _reader(self, background: bool = False, charts: bool = False) -> tuple[sqlite3.Connection, threading.RLock]:
        """A connection for Browse's reads, apart from the store's own, so a long aggregate never holds up a
        turn commit (WAL lets it read the last committed state while the store's connection writes).

        ``background``: the connection of the reads that follow a page (exact counts, the choices), so a page
        never waits for them. ``charts``: the charts' own (``stats``), so neither a page nor the exact count after
        it waits for a filter the maintained aggregates cannot answer, whose charts count every matching episode.
        """
        name = "_charts" if charts else "_bg" if background else "_read"
        # Not the store's own lock: a write holds that for its whole transaction (a batch of thousands of
        # episodes), and a read that waited on it, holding its own connection's lock, would hold up every read
        # behind it.
        with self._readers_lock:
            conn = getattr(self, f"{name}_conn", None)
            if conn is None:
                if self._closed:  # as the store's own connection says
                    raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
                if self.read_only:
                    conn = self._read_only_file().connect()
                else:
                    conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=BUSY_TIMEOUT_S)
                conn.execute("PRAGMA temp_store=MEMORY")
                setattr(self, f"{name}_conn", conn)
                setattr(self, f"{name}_lock", threading.RLock())
            return conn, getattr(self, f"{name}_lock")

    def close_reader(self) -> None:
        with self._readers_lock:
            held = [(conn, getattr(self, f"{name}_lock")) for name in ("_read", "_bg", "_charts")
                    if (conn := getattr(self, f"{name}_conn", None)) is not None]
            for name in ("_read_conn", "_bg_conn", "_charts_conn"):
                setattr(self, name, None)
        # Each closed once its read in progress ends (a reader holding its lock may be waiting for the readers' lock:
        # not held here).
        for conn, lock in held:
            with lock:
                conn.close()

    def browse_query(self, sql: str, args: Sequence[Any] = (), background: bool = False) -> list[tuple[Any, ...]]:
        """Rows of a read-only query on the Browse connection (``background``: on the one for what follows a
        page)."""
        conn, lock = self._reader(background)
        with lock:
            return conn.execute(sql, list(args)).fetchall()

    def finding_kinds(self) -> list[tuple[str, int]]:
        """Every finding kind in the database with the number of episodes that have it."""
        rows = self.browse_query("SELECT kind, COUNT(DISTINCT episode_id) FROM findings GROUP BY kind ORDER BY kind")
        return [(r[0], int(r[1])) for r in rows]

    def root_kind_counts(self) -> list[tuple[str, int]]:
        """Every root finding kind in the database with the number of episodes that have it as a root."""
        counts: dict[str, int] = {}
        for kinds, n in self.browse_query(
                "SELECT root_kinds, COUNT(*) FROM episode_index WHERE root_kinds > '' GROUP BY root_kinds"):
            for k in {k for k in str(kinds).split(",") if k}:
                counts[k] = counts.get(k, 0) + int(n)
        return sorted(counts.items())

    def run_level_kinds(self, run_ids: Sequence[str]) -> dict[str, tuple[int, list[str]]]:
        """For each run: (its episode count, the kinds that every one of its episodes has or could not be checked
        for, two or more having it, among the kinds that describe a preset, template or source). Runs of one
        episode have none."""
        from ..checks.diagnosis import RUN_KINDS

        runs = sorted({r for r in run_ids if r})
        if not runs:
            return {}
        marks = ",".join("?" * len(runs))
        counted = f"SELECT run_id, SUM(n) FROM episode_stats WHERE run_id IN ({marks}) GROUP BY run_id" \
            if self._has_stats() else f"SELECT run_id, COUNT(*) FROM episode_index WHERE run_id IN ({marks}) GROUP BY run_id"
        sizes = {r: int(n) for r, n in self.browse_query(counted, runs)}
        kinds = sorted(RUN_KINDS)
        # Small runs: their episodes' findings, by episode (the page's runs among a thousand others); runs larger
        # than that: the findings of these kinds, by kind (the planner's choice, which reads every run's).
        join = "episode_index e CROSS JOIN findings f" if sum(sizes.values()) <= RUN_KINDS_BY_EPISODE else \
            "findings f JOIN episode_index e"
        rows = self.browse_query(
            f"SELECT e.run_id, f.kind, COUNT(DISTINCT f.episode_id) FROM {join} "
            f"ON e.id = f.episode_id WHERE e.run_id IN ({marks}) AND f.kind IN ({','.join('?' * len(kinds))}) "
            "AND f.severity != 'info' GROUP BY e.run_id, f.kind", [*runs, *kinds])
        # Episodes a check could not look at for the kind (``not_checked`` names it first) do not count against it.
        unchecked = {(run, kind): int(n) for run, kind, n in self.browse_query(
            f"SELECT e.run_id, substr(f.message, 1, instr(f.message, ':') - 1) AS k, COUNT(DISTINCT f.episode_id) "
            f"FROM {join} ON e.id = f.episode_id WHERE e.run_id IN ({marks}) "
            "AND f.kind = 'not_checked' GROUP BY e.run_id, k", runs)}
        out: dict[str, tuple[int, list[str]]] = {}
        for run, kind, n in rows:
            size = sizes.get(run, 0)
            if int(n) >= 2 and int(n) + unchecked.get((run, kind), 0) == size:
                out.setdefault(run, (size, []))[1].append(kind)
        return out

    def tag_counts(self) -> list[tuple[str, int]]:
        """Every tag in use with the number of episodes carrying it."""
        sql = "SELECT tag, n FROM tag_stats ORDER BY tag" if self._has_table("tag_stats") else \
            "SELECT tag, COUNT(*) FROM tags GROUP BY tag ORDER BY tag"
        return [(r[0], int(r[1])) for r in self.browse_query(sql)]

    def group_stats(self, flt: Any = None, limit: int = 500) -> tuple[int, list[RewardStats]]:
        """(how many groups, the first ``limit`` by id): the GRPO groups (two or more samples of one task) among
        the episodes ``flt`` selects, each with its reward count, mean, deviation and range."""
        where, args = self._filter_sql(flt)
        # From the maintained per-group counts when they answer the filter (a row per group and reward, not per
        # episode); the groups counted in SQL, and only the first ``limit`` read out.
        charted = (flt is None or bool(getattr(flt, "on_chart_stats", False))) and self._has_chart_stats()
        src, n, weight = (f"FROM group_stats WHERE ({where})", "SUM(n)", "n") if charted else \
            (f"FROM episode_index WHERE ({where})", "COUNT(*)", "1")
        stat = _reward_stat(n, weight)
        if charted and where == "1" and "group_summary" in self._tables():
            # Every episode: the groups counted, and the first ``limit`` picked, from a row a group; only their rows
            # of ``group_stats`` read.
            multi = "FROM group_summary WHERE group_id IS NOT NULL AND n > 1"
            total = int(self.browse_query(f"SELECT COUNT(*) {multi}", background=True)[0][0])
            rows = self.browse_query(
                f"SELECT group_id, MIN(task_id), {stat}, MIN(env), MIN(preset) FROM group_stats WHERE group_id IN "
                f"(SELECT group_id {multi} ORDER BY group_id LIMIT ?) GROUP BY group_id ORDER BY 1", [limit],
                background=True)
            return total, [_reward_stats(r) for r in rows]
        rows = self.browse_query(
            f"SELECT *, COUNT(*) OVER () FROM (SELECT group_id, MIN(task_id), {stat}, MIN(env), MIN(preset) {src} "
            f"AND group_id IS NOT NULL GROUP BY group_id HAVING {n} > 1) ORDER BY 1 LIMIT ?", [*args, limit],
            background=True)
        return (int(rows[0][-1]) if rows else 0), [_reward_stats(r[:-1]) for r in rows]

    def stats(self, flt: Any = None, *, task_limit: int = 40, group_limit: int = 2000, max_bars: int = 30,
              reward_sets: int = 6) -> BrowseStats:
        """Aggregates of the episodes ``flt`` (an ``EpisodeFilter``) selects, for Browse's charts.

        Distributions come back binned (at most ``max_bars`` bars; one bar
        per value when there are that few). Rewards are binned per (env,
        preset), the ``reward_sets`` most frequent pairs, and the
        ``task_limit`` most frequent tasks come back per (env, preset) (at
        most ``task_limit`` rows): a preset's rewards are on its own scale.
        Groups (two or more samples, each of one run, so of one preset) come
        back the first ``group_limit`` by id.
        """
        where, args = self._filter_sql(flt)
        # Counts by status, turns and reward come from the maintained aggregates when they answer the filter, and
        # so do the lengths, tasks and groups when theirs do; anything else is counted from the browse index.
        counted = (flt is None or bool(getattr(flt, "on_stats", False))) and self._has_stats()
        charted = (flt is None or bool(getattr(flt, "on_chart_stats", False))) and self._has_chart_stats()
        conn, lock = self._reader(charts=True)
        with lock:
            self._maybe_analyze(conn)
            q = conn.execute
            if "SELECT" in where:
                # Text, tag and finding filters are subqueries: run them once,
                # not once per aggregate.
                q("DROP TABLE IF EXISTS temp.browse_sel")
                q(f"CREATE TEMP TABLE browse_sel AS SELECT rid FROM episode_index WHERE {where}", args)
                where, args = "rid IN (SELECT rid FROM temp.browse_sel)", []
            sel = f"FROM episode_index WHERE {where}"
            by, n = (f"FROM episode_stats WHERE {where}", "SUM(n)") if counted else (sel, "COUNT(*)")
            total = q(f"SELECT {n} {by}", args).fetchone()[0]
            if not total:
                return BrowseStats()
            status = q(f"SELECT status, {n} {by} GROUP BY status ORDER BY 2 DESC, 1", args).fetchall()
            turns = q(f"SELECT n_turns, {n} {by} GROUP BY n_turns ORDER BY 1", args).fetchall()
            rewards, n_sets = _reward_sets(q, by, args, reward_sets, max_bars, n)
            if charted:
                lengths = q(f"SELECT measure, bucket, SUM(n) FROM length_stats WHERE {where} GROUP BY 1, 2",
                            args).fetchall()
                tasks_from = f"FROM task_stats WHERE {where}"
                groups_from = f"FROM group_stats WHERE {where}"
                n = "SUM(n)"
            else:
                lengths = q(f"SELECT 'tokens', {length_bucket_sql('n_tokens')}, COUNT(*) {sel} GROUP BY 2 UNION ALL "
                            f"SELECT 'trainable', {length_bucket_sql('n_trainable')}, COUNT(*) {sel} GROUP BY 2",
                            [*args, *args]).fetchall()
                tasks_from = groups_from = sel
                n = "COUNT(*)"
            tokens, trainable = _length_bars(lengths, max_bars)
            # A row of the aggregates holds ``n`` episodes of one reward; a row of the index, one.
            weight = "n" if charted else "1"
            stat = _reward_stat(n, weight)
            # Every episode: the tasks and groups counted from rows a task or group (``schema.TOTAL_TABLES``), not a
            # task or group per run and status.
            totals = charted and where == "1" and set(TOTAL_TABLES) <= self._tables()
            if totals:
                tasks_from = f"FROM task_rewards WHERE {where}"
            n_tasks = q(f"SELECT COUNT(DISTINCT task_id) {tasks_from}", args).fetchone()[0]
            # The most frequent tasks, then their rows per env and preset.
            top = [r[0] for r in q(f"SELECT task_id, {n} {tasks_from} GROUP BY task_id ORDER BY 2 DESC, 1 LIMIT ?",
                                   [*args, task_limit]).fetchall()]
            tasks = q(f"SELECT task_id, task_id, {stat}, env, preset {tasks_from} AND task_id IN "
                      f"({','.join('?' * len(top))}) GROUP BY env, preset, task_id ORDER BY 3 DESC, 1, 8, 9 LIMIT ?",
                      [*args, *top, task_limit]).fetchall()
            # The first group_limit groups, then all of them counted in SQL (a run holds a group for every eight
            # or so episodes: they are not read out to be counted).
            multi = f"{groups_from} AND group_id IS NOT NULL GROUP BY group_id HAVING {n} > 1"
            groups = q(f"SELECT group_id, MIN(task_id), {stat}, '', '' {multi} ORDER BY group_id LIMIT ?",
                       [*args, group_limit]).fetchall()
            if totals:  # flat: at most one reward among its samples (none known counts as one)
                n_groups, n_flat = q("SELECT COUNT(*), IFNULL(SUM(rewards <= 1), 0) FROM group_summary "
                                     "WHERE group_id IS NOT NULL AND n > 1").fetchone()
            else:
                n_groups, n_flat = q(f"SELECT COUNT(*), IFNULL(SUM(lo IS hi), 0) FROM (SELECT MIN(reward) AS lo, "
                                     f"MAX(reward) AS hi {multi})", args).fetchone()
        return BrowseStats(
            total=int(total), rewards=rewards, n_reward_sets=n_sets, status=tuple((str(s), int(c)) for s, c in status),
            turns=tuple((int(t or 0), int(c)) for t, c in turns), tokens=tokens, trainable=trainable,
            tasks=tuple(_reward_stats(r) for r in tasks), n_tasks=int(n_tasks),
            groups=tuple(_reward_stats(r) for r in groups), n_groups=int(n_groups), n_flat_groups=int(n_flat),
        )


# ``run_level_kinds`` reads the findings of runs of up to this many episodes in all episode by episode.
RUN_KINDS_BY_EPISODE = 50_000

# Distinct (env, preset, reward) rows read in one pass; a selection with more (continuous rewards at scale)
# is binned per pair in SQL instead.
_REWARD_ROWS = 4096


def _reward_sets(q: Any, sel: str, args: list[Any], limit: int, bars: int, n: str = "COUNT(*)"
                 ) -> tuple[tuple[RewardBins, ...], int]:
    """The reward bars of the ``limit`` most frequent (env, preset) pairs, and how many pairs there are (``n``:
    how a row counts, ``SUM(n)`` for the rows of ``episode_stats``)."""
    rows = q(f"SELECT env, preset, reward, {n} {sel} GROUP BY env, preset, reward LIMIT ?",
             [*args, _REWARD_ROWS + 1]).fetchall()
    if len(rows) <= _REWARD_ROWS:
        values: dict[tuple[Any, Any], list[tuple[float, int]]] = {}
        for env, preset, reward, n in rows:
            values.setdefault((env, preset), []).append((float(reward), int(n)))
        sets = sorted(values.items(), key=lambda kv: (-sum(n for _, n in kv[1]), str(kv[0][0]), str(kv[0][1])))
        return tuple(RewardBins(str(env or ""), str(preset or ""), sum(n for _, n in vs), _bars(vs, bars))
                     for (env, preset), vs in sets[:limit]), len(sets)
    sets = q(f"SELECT env, preset, {n}, MIN(reward), MAX(reward) {sel} GROUP BY env, preset "
             "ORDER BY 3 DESC, 1, 2", args).fetchall()
    out = []
    for env, preset, size, lo, hi in sets[:limit]:
        one = f"{sel} AND env IS ? AND preset IS ?"
        found = q(f"SELECT reward, {n} {one} GROUP BY reward ORDER BY 1 LIMIT ?",
                   [*args, env, preset, bars + 1]).fetchall()
        bins = _discrete(found) if len(found) <= bars else _binned(q, one, [*args, env, preset], "reward", lo, hi, bars, n)
        out.append(RewardBins(str(env or ""), str(preset or ""), int(size), bins))
    return tuple(out), len(sets)


def _bars(values: Sequence[tuple[float, int]], bars: int) -> Bins:
    """(value, count) pairs as bars: one per value when there are at most ``bars``, else ``bars`` equal bins over
    their range (as ``_binned`` makes them in SQL)."""
    values = sorted(values)
    if len(values) <= bars:
        return _discrete(values)
    lo, hi = values[0][0], values[-1][0]
    width = (hi - lo) / bars
    counts = [0] * bars
    for v, n in values:
        counts[min(max(int((v - lo) / width), 0), bars - 1)] += n
    return Bins(tuple(lo + (k + 0.5) * width for k in range(bars)), tuple(counts), width)


def _discrete(rows: Sequence[tuple[Any, Any]]) -> Bins:
    values = [float(v) for v, _ in rows]
    gaps = [b - a for a, b in zip(values, values[1:], strict=False)]
    return Bins(tuple(values), tuple(int(c) for _, c in rows), 0.8 * min(gaps) if gaps else 1.0)


def _binned(q: Any, sel: str, args: list[Any], column: str, lo: float, hi: float, bars: int,
            n: str = "COUNT(*)") -> Bins:
    """``bars`` equal bins of ``column`` over [lo, hi] (one bin when lo == hi)."""
    if lo is None:
        return Bins()
    if hi <= lo:
        total = q(f"SELECT {n} {sel}", args).fetchone()[0]
        return Bins((float(lo),), (int(total),), 1.0)
    width = (hi - lo) / bars
    rows = q(f"SELECT MIN(MAX(CAST(({column} - ?) / ? AS INTEGER), 0), {bars - 1}) AS b, {n} {sel} "
             "GROUP BY b ORDER BY b", [lo, width, *args]).fetchall()
    counts = [0] * bars
    for b, c in rows:
        counts[int(b)] += int(c)
    return Bins(tuple(lo + (k + 0.5) * width for k in range(bars)), tuple(counts), width)


def _length_bars(rows: Sequence[tuple[str, int, int]], bars: int) -> tuple[Bins, Bins]:
    """(all tokens, trainable tokens) per episode as bars on one grid, from (measure, bin edge, episodes) rows
    (``schema.length_bucket``): a bar a bin from the shortest to the longest, empty bins included, or, where that
    makes more than ``bars``, every k consecutive bins as one bar. Bins widen with the length (a sixteenth to an
    eighth of it), so bars do too; below 16 tokens a bar is one length."""
    counts: dict[str, dict[int, int]] = {"tokens": {}, "trainable": {}}
    for measure, edge, n in rows:
        counts[str(measure)][int(edge)] = counts[str(measure)].get(int(edge), 0) + int(n)
    edges = sorted({*counts["tokens"], *counts["trainable"]})
    if not edges:
        return Bins(), Bins()
    grid = [edges[0]]
    while grid[-1] < edges[-1]:
        grid.append(grid[-1] + bucket_width(grid[-1]))
    k = -(-len(grid) // bars)
    spans = [(grid[j], grid[min(j + k, len(grid)) - 1] + bucket_width(grid[min(j + k, len(grid)) - 1]))
             for j in range(0, len(grid), k)]
    centers = tuple((lo + hi - 1) / 2 for lo, hi in spans)
    widths = tuple(float(hi - lo) for lo, hi in spans)

    def bars_of(measure: str) -> Bins:
        made = [sum(c for e, c in counts[measure].items() if lo <= e < hi) for lo, hi in spans]
        return Bins(centers, tuple(made), min(widths), widths) if any(made) else Bins()
    return bars_of("tokens"), bars_of("trainable")


def _reward_stats(row: Sequence[Any]) -> RewardStats:
    key, task, n, mean, mean_sq, lo, hi, env, preset = row
    # Population standard deviation, as GRPO normalizes advantages within a group.
    std = max(0.0, float(mean_sq) - float(mean) ** 2) ** 0.5
    return RewardStats(str(key), str(task), int(n), float(mean), std, float(lo), float(hi), str(env or ""),
                       str(preset or ""))


def _reward_stat(n: str, weight: str) -> str:
    """The SQL of a set's reward count, mean, mean square, minimum and maximum (``_reward_stats``' columns): ``n``
    counts the rows, each standing for ``weight`` episodes (``n`` in the aggregates, 1 in the browse index); the means
    are over the episodes with a reward."""
    known = f"SUM(CASE WHEN reward IS NOT NULL THEN {weight} END)"
    return f"{n}, SUM(reward * {weight}) / {known}, SUM(reward * reward * {weight}) / {known}, MIN(reward), MAX(reward)"
