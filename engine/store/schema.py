"""The database's tables, as each migration (``migrations``) creates or changes them, and the diagnosis
columns' contents.

``DB_SCHEMA`` is stored in ``meta.db_schema``: 1 the tables; 2 added the full-text search index
(``search_texts``, ``search_refs``, ``search_fts``); 3 added ``diagnosis`` and ``root_kinds``; 4 added
Browse's ``episode_index``, ``runs.pid`` and the compressed token arrays (``tokens.packed``) and turns; 5
added ``rollout_step`` (the trainer's step an imported episode came from) and ``watched_files`` (what
``rollscope watch`` has imported); 6 indexes system prompts and tool schemas apart from what a search
looks in by default (``search_refs.part`` -1), then repairs numbers that are not finite; 7 added ``outcome`` (the
kind of each episode's outcome, in ``episodes`` and the browse index), filled on the open after it; 8 added
``episode_stats``, the charts' aggregates kept by triggers; 9 an index of each run's episodes in time; 10 lets a
turn row give its prompt text as pieces of the turn before it (``records.prompts``), where 9 and before gave a
prompt that extended it only; 11 explains the math episodes whose reward sums every turn's again (record version 9);
12 added each episode's entropy figures (``n_entropy``, ``entropy_micronats``, ``n_low_entropy``: its generated tokens
with a known entropy, their sum, how many are near zero) to ``episodes``, the browse index and ``episode_stats``,
filled from the stored token arrays; 13 added the Browse charts' other aggregates (``length_stats``, ``task_stats``,
``group_stats``); 14 has the writer fill the full-text index with each text it adds, where a trigger did (``search_fts``
is the same; a version before 14 would add texts without indexing them, so it refuses the file); 15 added ``checked``
(whether the checks ran on the episode) to ``episodes`` and the browse index (``steps``, which holds the steps of 14
and after). Every step is written to be safe on a file that already has what it adds.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

import numpy as np
import sqlite_utils

from ..checks.diagnosis import diagnosis_parts, linked
from ..errors import StoreError
from ..records.episode import Finding, Severity
from ..records.provenance import Source
from .counts import Counted, count_triggers, counted_table

DB_SCHEMA = 15

# The columns of ``episode_index``: what Browse filters, sorts, counts and charts by.
INDEX_COLUMNS_14 = (
    "id", "env", "task_id", "status", "reward", "n_turns", "n_tokens", "n_trainable", "preset", "model", "run_id",
    "group_id", "sample_index", "created_at", "starred", "n_findings", "n_errors", "source", "parent_id",
    "diagnosis", "root_kinds", "rollout_step", "outcome", "n_entropy", "entropy_micronats", "n_low_entropy",
)
# Schema 15 added ``checked``: the checks' version that ran on the episode (``Episode.checked``), NULL where none ran.
INDEX_COLUMNS = (*INDEX_COLUMNS_14, "checked")
# Per episode: its generated tokens with a known entropy, the sum of their entropies in micro-nats (an integer, so
# the maintained sums equal a recount exactly), and how many are under ``alternatives.NEAR_ZERO_ENTROPY``. Summed,
# never sorted by: the browse index has no index on them.
ENTROPY_COLUMNS = INDEX_COLUMNS_14[-3:]
# The index columns the browse index had before ``rollout_step`` (its triggers were made from these), before
# ``outcome``, and before the entropy figures.
INDEX_COLUMNS_4 = INDEX_COLUMNS_14[:-5]
INDEX_COLUMNS_5 = INDEX_COLUMNS_14[:-4]
INDEX_COLUMNS_7 = INDEX_COLUMNS_14[:-3]
# Columns of the browse index with no index of their own: the diagnosis (a filter on it reads ``root_kinds``), the
# entropy figures (summed, never sorted by), and ``checked`` (a filter on it reads the rows another index orders).
UNINDEXED = ("id", "diagnosis", *ENTROPY_COLUMNS, "checked")


def _columns(db: sqlite_utils.Database, table: str) -> set[str]:
    return {c.name for c in db.table(table).columns} if table in db.table_names() else set()


def create_tables_v1(db: sqlite_utils.Database) -> None:
    """Schema 1: meta, runs, episodes, turns, tokens (raw little-endian arrays), findings, tags, replays."""
    db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
    db.table("runs").create(
        {"id": str, "created_at": float, "config": str, "status": str, "n_episodes": int},
        pk="id",
        if_not_exists=True,
    )
    db.table("episodes").create(
        {
            "id": str, "run_id": str, "env": str, "task_id": str, "group_id": str,
            "sample_index": int, "preset": str, "model": str, "status": str, "reason": str,
            "reward": float, "n_turns": int, "n_tokens": int, "n_trainable": int, "prompt_len": int,
            "created_at": float, "updated_at": float, "parent_id": str, "fork_turn": int,
            "starred": int, "note": str, "source": str, "n_findings": int, "n_errors": int,
            "pid": int, "schema_version": int, "data": str,
        },
        pk="id",
        not_null={"env", "task_id", "status"},
        defaults={"starred": 0, "note": "", "n_findings": 0, "n_errors": 0},
        if_not_exists=True,
    )
    db.table("turns").create(
        {"episode_id": str, "idx": int, "reward": float, "done": int, "data": str},
        pk=("episode_id", "idx"),
        if_not_exists=True,
    )
    db.table("tokens").create(
        {"episode_id": str, "ids": bytes, "loss_mask": bytes, "logprobs": bytes, "versions": bytes},
        pk="episode_id",
        if_not_exists=True,
    )
    db.table("findings").create(
        {
            "episode_id": str, "turn": int, "kind": str, "severity": str,
            "token_start": int, "token_end": int, "message": str, "evidence": str,
        },
        if_not_exists=True,
    )
    db.table("tags").create({"episode_id": str, "tag": str}, pk=("episode_id", "tag"), if_not_exists=True)
    # Re-executions are records of their own, linked to the episode they replayed.
    db.table("replays").create(
        {"id": str, "episode_id": str, "created_at": float, "kind": str, "reproduced": int, "data": str},
        pk="id",
        if_not_exists=True,
    )
    for table, cols in (
        ("episodes", ["env"]), ("episodes", ["status"]), ("episodes", ["reward"]),
        ("episodes", ["created_at"]), ("episodes", ["run_id"]), ("episodes", ["task_id"]),
        ("episodes", ["parent_id"]), ("findings", ["episode_id"]), ("findings", ["kind"]),
        ("tags", ["tag"]), ("replays", ["episode_id"]),
    ):
        db.table(table).create_index(cols, if_not_exists=True)


def refill_search(db: sqlite_utils.Database) -> None:
    """Index every stored episode again when the store opens (``meta.search_fill``): how its texts are parted
    changed."""
    if db.execute("SELECT 1 FROM episodes LIMIT 1").fetchone():
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('search_fill', 'pending')")


def search_filled_by_writer(db: sqlite_utils.Database) -> None:
    """Schema 14: the full-text index is filled by the writer (``IndexQueries._digest_ids``) with the texts it adds,
    a statement for an episode's new texts, where a trigger ran one for each text (at twice the cost). Deleting a
    text still takes it out of the index by trigger."""
    db.execute("DROP TRIGGER IF EXISTS search_texts_ai")


def create_search_index(db: sqlite_utils.Database) -> None:
    """Schema 2: the full-text index over the episodes' texts (deduplicated), trigram-tokenized. The
    stored episodes are indexed when the store opens (``meta.search_fill``), as that reads them whole."""
    had = "search_texts" in db.table_names()
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
    if not had and db.execute("SELECT 1 FROM episodes LIMIT 1").fetchone():
        db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('search_fill', 'pending')")


def add_diagnosis(db: sqlite_utils.Database) -> None:
    """Schema 3: ``diagnosis`` and ``root_kinds`` of each episode, filled from its stored findings."""
    for table in ("episodes", "episode_index"):
        have = _columns(db, table)
        if not have:
            continue
        for col in ("diagnosis", "root_kinds"):
            if col not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {col} TEXT")
    backfill_diagnosis(db)
    if "episode_index" in db.table_names():  # its triggers, from before, do not copy these columns
        db.execute("UPDATE episode_index SET diagnosis = e.diagnosis, root_kinds = e.root_kinds "
                   "FROM episodes AS e WHERE e.id = episode_index.id")
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('diagnosis_filled', '1')")


def create_browse_index(db: sqlite_utils.Database, columns: Sequence[str] = INDEX_COLUMNS_4) -> None:
    """Schema 4: ``episode_index``, the slim copy of ``episodes`` that Browse reads.

    An ``episodes`` row carries the episode's JSON (often several KB), so a query that visits many rows
    (a count, a sort, an aggregate) reads hundreds of MB at 100,000 episodes. ``episode_index`` holds
    only the summary columns (about 150 bytes a row) with an index per sortable column. Triggers keep it
    equal to ``episodes`` whatever writes there, including code that knows nothing of it.
    """
    cols = ", ".join(columns)
    new = ", ".join(f"new.{c}" for c in columns)
    created = "episode_index" not in db.table_names()
    db.execute(
        "CREATE TABLE IF NOT EXISTS episode_index (rid INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, "
        "env TEXT, task_id TEXT, status TEXT, reward REAL, n_turns INTEGER, n_tokens INTEGER, n_trainable INTEGER, "
        "preset TEXT, model TEXT, run_id TEXT, group_id TEXT, sample_index INTEGER, created_at REAL, "
        "starred INTEGER, n_findings INTEGER, n_errors INTEGER, source TEXT, parent_id TEXT, diagnosis TEXT, "
        "root_kinds TEXT)"
    )
    # rid is the episodes rowid: the tie-breaker of every sort, so a page
    # of a sorted column is a walk along that column's index.
    # Delete then insert, not INSERT OR REPLACE: a trigger's conflict
    # clause yields to the outer statement's (the store's upserts).
    copy = (f"DELETE FROM episode_index WHERE rid = new.rowid OR id = new.id; "
            f"INSERT INTO episode_index (rid, {cols}) VALUES (new.rowid, {new});")
    for event, body in (
        ("INSERT", copy),
        ("UPDATE", "DELETE FROM episode_index WHERE rid = old.rowid; " + copy),
        ("DELETE", "DELETE FROM episode_index WHERE rid = old.rowid;"),
    ):
        db.execute(f"DROP TRIGGER IF EXISTS episodes_index_{event.lower()}")
        db.execute(f"CREATE TRIGGER episodes_index_{event.lower()} AFTER {event} ON episodes BEGIN {body} END")
    for col in columns:
        if col not in UNINDEXED:
            db.execute(f"CREATE INDEX IF NOT EXISTS episode_index_{col} ON episode_index ({col})")
    # Per-task and per-group reward aggregates read these and nothing else.
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_task_reward ON episode_index (task_id, reward)")
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_group_reward ON episode_index (group_id, reward, task_id)")
    # Browse's first question, "these statuses, newest first (or by
    # reward)", answered from one index range without a sort.
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_status_created ON episode_index (status, created_at)")
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_status_reward ON episode_index (status, reward)")
    if created:
        db.execute(f"INSERT INTO episode_index (rid, {cols}) SELECT rowid, {cols} FROM episodes")


def add_run_pids(db: sqlite_utils.Database) -> None:
    """Schema 4: ``runs.pid``, the process that runs a run while it runs."""
    if "pid" not in _columns(db, "runs"):
        db.execute("ALTER TABLE runs ADD COLUMN pid INTEGER")


def add_packed_tokens(db: sqlite_utils.Database) -> None:
    """Schema 4: ``tokens.packed``, the four arrays compressed in one blob (``codec``). Rows written
    before keep their raw arrays and read as they are; turns written from now on are compressed JSON
    (a blob in ``turns.data``, where earlier rows hold text)."""
    if "packed" not in _columns(db, "tokens"):
        db.execute("ALTER TABLE tokens ADD COLUMN packed BLOB")


def add_rollout_steps(db: sqlite_utils.Database) -> None:
    """Schema 5: ``rollout_step`` of ``episodes`` and ``episode_index``, the trainer's rollout step an imported
    episode came from (its source's ``rollout_step``), filled for the episodes stored before; the browse
    index's triggers now copy it."""
    from .codec import unpack_json

    for table in ("episodes", "episode_index"):
        if "rollout_step" not in _columns(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN rollout_step INTEGER")
    rows = db.execute("SELECT id, data FROM episodes WHERE source IN ('slime', 'areal', 'verl')").fetchall()
    for eid, data in rows:
        try:
            details = ((unpack_json(data) or {}).get("source") or {}).get("details")
            step = Source(details=details).rollout_step if isinstance(details, dict) else None
        except (ValueError, TypeError, AttributeError):
            continue
        if step is not None:
            db.execute("UPDATE episodes SET rollout_step = ? WHERE id = ?", [step, eid])
    create_browse_index(db, INDEX_COLUMNS_5)  # the triggers again, with the new column
    db.execute("UPDATE episode_index SET rollout_step = e.rollout_step FROM episodes AS e "
               "WHERE e.id = episode_index.id AND e.rollout_step IS NOT NULL")
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_run_step ON episode_index (run_id, rollout_step)")


def add_outcomes(db: sqlite_utils.Database) -> None:
    """Schema 7: ``outcome`` of ``episodes`` and ``episode_index``, the kind of why an episode earned its reward
    (``records.outcome``); the browse index's triggers now copy it. The stored episodes get their outcome on the
    open after this step (``Store``), and again on the next open if that was cut off (``outcomes_fill``)."""
    for table in ("episodes", "episode_index"):
        if "outcome" not in _columns(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN outcome TEXT")
    create_browse_index(db, INDEX_COLUMNS_7)
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_run_step_outcome ON episode_index (run_id, rollout_step, outcome)")
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('outcomes_fill', '1')")


# The columns ``episode_stats`` counts episodes by: a row per run, rollout step, env, preset, status, outcome kind,
# reward and number of turns that some episode has.
STATS_KEY = ("run_id", "rollout_step", "env", "preset", "status", "outcome", "reward", "n_turns")


# What ``episode_stats`` sums over the episodes of a row: (column, what an episode adds, given the browse index row as
# ``{r}``). Schema 8 summed the first three; schema 12 added the entropy figures; schema 15 the finished episodes no check
# ran on and no error was found in (a running one is checked as it ends; one its loop found an error in has one).
STATS_SUMS_8 = (
    ("n", "1"),
    ("trainable", "IFNULL({r}.n_trainable, 0)"),
    ("with_errors", "(IFNULL({r}.n_errors, 0) > 0)"),
)
STATS_SUMS_12 = STATS_SUMS_8 + tuple((c, f"IFNULL({{r}}.{c}, 0)") for c in ENTROPY_COLUMNS)
STATS_SUMS = (*STATS_SUMS_12, ("unchecked", "({r}.checked IS NULL AND {r}.status != 'running' AND IFNULL({r}.n_errors, 0) = 0)"))


def create_episode_stats(db: sqlite_utils.Database, sums: Sequence[tuple[str, str]] = STATS_SUMS_8) -> None:
    """Schema 8: ``episode_stats``, the episodes counted per ``STATS_KEY`` (with their trainable tokens and how many
    have an error; from schema 12 their entropy figures too: ``sums``), a :func:`counted_table`.

    The charts of a run, or of a filter on these columns alone, read a few thousand of these rows instead of every
    episode: a run's rewards take few values (a scorer's 0 and 1, a rubric's levels), so a rollout step of 1,024
    episodes makes a few dozen rows. Rewards that take a new value in every episode make a row per episode, and
    read no faster than the index."""
    counted_table(db, dataclasses.replace(EPISODE_STATS, sums=tuple(sums)))
    # A run's root findings per step are read from its episodes with errors alone.
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_run_errors ON episode_index (run_id, rollout_step) "
               "WHERE n_errors > 0")


# The columns the Browse charts' other aggregates (``CHART_TABLES``) count episodes by, beside their own: a filter
# on these alone (``EpisodeFilter.CHART_FILTERS``) is answered by them.
CHART_KEY = (("run_id", "TEXT"), ("env", "TEXT"), ("preset", "TEXT"), ("status", "TEXT"), ("outcome", "TEXT"),
             ("reward", "REAL"))
# A length keeps its four leading bits: exact below 16, else a bin 1/16 to 1/8 of its size.
LENGTH_BITS = 4


def length_bucket(n: int) -> int:
    """The lower edge of the bin ``length_bucket_sql`` puts a length of ``n`` in."""
    if n < 1 << LENGTH_BITS:
        return max(n, 0)
    shift = n.bit_length() - LENGTH_BITS
    return (n >> shift) << shift


def bucket_width(edge: int) -> int:
    """How many lengths the bin starting at ``edge`` holds."""
    return 1 if edge < 1 << LENGTH_BITS else 1 << (edge.bit_length() - LENGTH_BITS)


def length_bucket_sql(column: str) -> str:
    """``length_bucket`` of an integer column, in SQL (NULL as 0)."""
    v = f"IFNULL({column}, 0)"
    top = 1 << LENGTH_BITS
    whens = [f"WHEN {v} < {top} THEN MAX({v}, 0)"]
    whens += [f"WHEN {v} < {top << k} THEN ({v} >> {k}) << {k}" for k in range(1, 48)]
    return f"(CASE {' '.join(whens)} ELSE {v} END)"


_TYPES = {"rollout_step": "INTEGER", "reward": "REAL", "n_turns": "INTEGER"}
_CHART = tuple(f"{{r}}.{c}" for c, _ in CHART_KEY)
_WATCHED = tuple(c for c, _ in CHART_KEY)

# The aggregates, as this version keeps them (``episode_stats`` had the first three sums before schema 12, and no
# ``unchecked`` before 15: ``EPISODE_STATS_14``).
EPISODE_STATS_14 = Counted("episode_stats", tuple((c, _TYPES.get(c, "TEXT")) for c in STATS_KEY),
                           (tuple(f"{{r}}.{c}" for c in STATS_KEY),), STATS_SUMS_12)
EPISODE_STATS = dataclasses.replace(EPISODE_STATS_14, sums=STATS_SUMS)
LENGTH_STATS = Counted("length_stats", (*CHART_KEY, ("measure", "TEXT"), ("bucket", "INTEGER")),
                       ((*_CHART, "'tokens'", length_bucket_sql("{r}.n_tokens")),
                        (*_CHART, "'trainable'", length_bucket_sql("{r}.n_trainable"))),
                       (("n", "1"),), (*_WATCHED, "n_tokens", "n_trainable"))
TASK_STATS = Counted("task_stats", (("task_id", "TEXT"), *CHART_KEY), (("{r}.task_id", *_CHART),), (("n", "1"),),
                     (*_WATCHED, "task_id"))
GROUP_STATS = Counted("group_stats", (("group_id", "TEXT"), ("task_id", "TEXT"), *CHART_KEY),
                      (("{r}.group_id", "{r}.task_id", *_CHART),), (("n", "1"),), (*_WATCHED, "group_id", "task_id"))
RUN_MODELS = Counted("run_models", (("run_id", "TEXT"), ("model", "TEXT")), (("{r}.run_id", "{r}.model"),),
                     (("n", "1"),), ("run_id", "model"))
TAG_STATS = Counted("tag_stats", (("tag", "TEXT"),), (("{r}.tag",),), (("n", "1"),), ("tag",), source="tags")
# Every episode in one row: the count a page's stamp polls, whatever the rewards (``episode_stats`` holds a row an
# episode where each reward is new). An update changes no count: only a new id would.
EPISODE_TOTAL = Counted("episode_total", (("everything", "INTEGER"),), (("1",),), (("n", "1"),), ("id",))
TASK_REWARDS = Counted("task_rewards", (("task_id", "TEXT"), ("env", "TEXT"), ("preset", "TEXT"), ("reward", "REAL")),
                       (("{r}.task_id", "{r}.env", "{r}.preset", "{r}.reward"),), (("n", "1"),),
                       ("task_id", "env", "preset", "reward"))
GROUP_REWARDS = Counted("group_rewards", (("group_id", "TEXT"), ("reward", "REAL")), (("{r}.group_id", "{r}.reward"),),
                        (("n", "1"),), ("group_id", "reward"))
COUNTED = (EPISODE_STATS, LENGTH_STATS, TASK_STATS, GROUP_STATS, RUN_MODELS, TAG_STATS, EPISODE_TOTAL, TASK_REWARDS,
           GROUP_REWARDS)
COUNTED_14 = (EPISODE_STATS_14, *COUNTED[1:])  # as schema 14 kept them, before the browse index had ``checked``


def count_at_commit(db: sqlite_utils.Database) -> None:
    """The aggregates' triggers on the browse index made again to leave the rows above an import batch's mark
    (``count_mark``) to the batch, which counts them at its commit (``fold_counts``). Nothing is counted again."""
    for spec in COUNTED_14:
        if spec.source == "episode_index":
            count_triggers(db, spec)


def create_chart_stats(db: sqlite_utils.Database) -> None:
    """Schema 13: Browse's token-length, per-task and per-group charts read maintained aggregates too, each a
    :func:`counted_table` over ``CHART_KEY`` and its own columns: ``length_stats`` the episodes per bin of their
    length (``measure`` tokens, and trainable tokens; ``length_bucket``), ``task_stats`` per task, ``group_stats``
    per group (and task). Rewards are counted per value, so a task's or group's mean, spread and range come from a
    few rows. Like ``episode_stats``, a reward that takes a new value in every episode makes a row an episode."""
    for spec in (LENGTH_STATS, TASK_STATS, GROUP_STATS):
        counted_table(db, spec)
    # A run's tasks and groups (Browse's usual filter), in order, without reading every run's.
    db.execute("CREATE INDEX IF NOT EXISTS task_stats_run ON task_stats (run_id, task_id)")
    db.execute("CREATE INDEX IF NOT EXISTS group_stats_run ON group_stats (run_id, group_id)")


CHART_TABLES = ("length_stats", "task_stats", "group_stats")


def add_entropy_stats(db: sqlite_utils.Database) -> None:
    """Schema 12: each episode's entropy figures (``ENTROPY_COLUMNS``) in ``episodes`` and the browse index, and their
    sums in ``episode_stats``, so a run's mean entropy and share of near-zero-entropy tokens per rollout step are read
    from the aggregates rather than counted from every token array. The episodes stored before get theirs from their
    token arrays: only arrays in the packed form with alternatives (``codec.VERSION_ALTERNATIVES``) hold an entropy;
    the rest keep 0."""
    from ..records.alternatives import entropy_figures
    from .codec import VERSION_ALTERNATIVES, unpack_tokens

    for table in ("episodes", "episode_index"):
        have = _columns(db, table)
        for col in ENTROPY_COLUMNS:
            if col not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {col} INTEGER NOT NULL DEFAULT 0")
    # Filled in episodes alone, then copied to the browse index in one statement, then the aggregates made again
    # from it: the triggers that would copy each row (and count it) are made after.
    for trigger in ("episodes_index_insert", "episodes_index_update", "episodes_index_delete", "episode_stats_insert",
                    "episode_stats_delete", "episode_stats_update"):
        db.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    version = VERSION_ALTERNATIVES.to_bytes(2, "little")
    ids = [r[0] for r in db.execute("SELECT episode_id FROM tokens WHERE packed IS NOT NULL AND "
                                    "substr(packed, 5, 2) = ?", [version])]
    for eid in ids:  # one blob at a time: together they may not fit in memory
        packed = db.execute("SELECT packed FROM tokens WHERE episode_id = ?", [eid]).fetchone()[0]
        try:
            figures = entropy_figures(unpack_tokens(packed).entropy)
        except StoreError:  # an unreadable row is its reader's to report
            continue
        if figures[0]:
            db.execute(f"UPDATE episodes SET {', '.join(f'{c} = ?' for c in ENTROPY_COLUMNS)} WHERE id = ?",
                       [*figures, eid])
    create_browse_index(db, INDEX_COLUMNS_14)  # its triggers again, with the new columns
    db.execute(f"UPDATE episode_index SET {', '.join(f'{c} = e.{c}' for c in ENTROPY_COLUMNS)} FROM episodes AS e "
               "WHERE e.id = episode_index.id AND e.n_entropy > 0")
    create_episode_stats(db, STATS_SUMS_12)


def add_run_time_index(db: sqlite_utils.Database) -> None:
    """Schema 9: ``episode_index`` by run then time, so a run's episodes newest first (Browse's default sort) are one
    range of an index: step and time move together in a run, so a walk of the time index from the newest episode
    reads every newer run's before it reaches an older one."""
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_run_created ON episode_index (run_id, created_at)")


LISTING_TABLES = ("run_models", "tag_stats", "episode_total")


def create_listing_stats(db: sqlite_utils.Database) -> None:
    """The counts the lists of runs and tags read on every page load, kept by triggers (:func:`counted_table`), so
    they read a row a run or a tag instead of every episode: ``run_models``, the episodes of each run per model (the
    Runs list's policies; its counts, rewards and errors come from ``episode_stats``), and ``tag_stats``, the
    episodes carrying each tag (the tag filter's and the demo guide's counts); ``episode_total``, every episode in one
    row (the count a page's stamp polls, and the count of everything); and the findings by kind then episode, which
    replaces the index by kind alone."""
    for spec in (RUN_MODELS, TAG_STATS, EPISODE_TOTAL):
        counted_table(db, spec)
    # The findings filter's choices count the episodes of each kind: from an index that holds both, not the rows.
    db.execute("CREATE INDEX IF NOT EXISTS findings_kind_episode ON findings (kind, episode_id)")
    db.execute("DROP INDEX IF EXISTS idx_findings_kind")


TOTAL_TABLES = ("task_rewards", "group_rewards", "group_summary")


def create_chart_totals(db: sqlite_utils.Database) -> None:
    """What the charts of every episode count over all tasks and groups, kept by triggers, so those charts read a
    row a task or group instead of grouping ``task_stats`` and ``group_stats`` (rows a task or group per run, env,
    preset, status, outcome and reward): ``task_rewards``, the episodes of each task per env, preset and reward
    (how many tasks, the most frequent, their rewards per env and preset); ``group_rewards``, the episodes of each group per reward (a :func:`counted_table`); and
    ``group_summary``, per group its episodes and how many distinct rewards they earned (``rewards``, nulls left
    out), kept by triggers on ``group_rewards``: a group of two or more samples with at most one reward is flat."""
    for spec in (TASK_REWARDS, GROUP_REWARDS):
        counted_table(db, spec)
    db.execute("DROP TABLE IF EXISTS group_summary")
    db.execute("CREATE TABLE group_summary (group_id TEXT, n INTEGER NOT NULL, rewards INTEGER NOT NULL)")
    db.execute("CREATE UNIQUE INDEX group_summary_key ON group_summary (group_id)")
    one = "group_summary.group_id IS {r}.group_id"
    for event, body in (
        # A reward new to its group: a row with n 0, raised by the update that follows.
        ("INSERT", "INSERT INTO group_summary (group_id, n, rewards) SELECT new.group_id, 0, 0 WHERE NOT EXISTS "
                   f"(SELECT 1 FROM group_summary WHERE {one.format(r='new')}); UPDATE group_summary SET "
                   f"n = n + new.n, rewards = rewards + (new.reward IS NOT NULL) WHERE {one.format(r='new')};"),
        ("UPDATE", f"UPDATE group_summary SET n = n + new.n - old.n WHERE {one.format(r='new')};"),
        # The last episode of a reward gone (its n already taken off): the group has one reward fewer.
        ("DELETE", f"UPDATE group_summary SET n = n - old.n, rewards = rewards - (old.reward IS NOT NULL) WHERE "
                   f"{one.format(r='old')}; DELETE FROM group_summary WHERE {one.format(r='old')} AND n <= 0 AND "
                   "rewards <= 0;"),
    ):
        db.execute(f"DROP TRIGGER IF EXISTS group_summary_{event.lower()}")
        db.execute(f"CREATE TRIGGER group_summary_{event.lower()} AFTER {event} ON group_rewards BEGIN {body} END")
    # The summary is filled from ``group_rewards`` once both exist, then kept by the triggers.
    db.execute("INSERT INTO group_summary (group_id, n, rewards) SELECT group_id, SUM(n), COUNT(reward) "
               "FROM group_rewards GROUP BY group_id")


def add_status_sort_indexes(db: sqlite_utils.Database) -> None:
    """``episode_index`` by status then turns, and by status then tokens: a filter on one status sorted by either is
    one range of an index. The episodes that ran out of turns or tokens are the long ones, so the matches of a status
    lie together at one end of those sorts, where a walk of the sort's own index meets the other statuses' first and
    the page was read by sorting every match."""
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_status_turns ON episode_index (status, n_turns)")
    db.execute("CREATE INDEX IF NOT EXISTS episode_index_status_tokens ON episode_index (status, n_tokens)")


def create_watched_files(db: sqlite_utils.Database) -> None:
    """Schema 5: ``watched_files``, one row per dump file ``rollscope watch`` has read: its size and
    modification time when read, how far (bytes, for a JSONL file still growing), and what it held."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS watched_files (path TEXT PRIMARY KEY, run_id TEXT, fmt TEXT, size INTEGER, "
        "mtime REAL, offset INTEGER, lines INTEGER, state TEXT, n_episodes INTEGER, n_skipped INTEGER, message TEXT, "
        "updated_at REAL)"
    )


def backfill_diagnosis(db: sqlite_utils.Database) -> None:
    """Fill ``diagnosis``/``root_kinds`` of episodes stored before they existed, from their findings,
    one episode at a time (evidence can be long)."""
    ids = [r[0] for r in db.execute("SELECT id FROM episodes WHERE diagnosis IS NULL AND n_findings > 0").fetchall()]
    for eid in ids:
        found = []
        for turn, kind, sev, start, end, message, evidence in db.execute(
                "SELECT turn, kind, severity, token_start, token_end, message, evidence FROM findings "
                "WHERE episode_id = ? ORDER BY rowid", [eid]):
            try:
                ev = json.loads(evidence) if evidence else {}
            except json.JSONDecodeError:
                ev = {}
            ev = {k: v for k, v in ev.items() if k != "diff"} if isinstance(ev, dict) else {}
            # Read as stored: a kind this version no longer has still counts toward the diagnosis.
            found.append(Finding(kind, Severity(sev), message, turn, start, end, ev))
        diag, kinds = diagnosis_columns(found)
        db.execute("UPDATE episodes SET diagnosis = ?, root_kinds = ? WHERE id = ?", [diag, kinds, eid])


def diagnosis_columns(found: Sequence[Finding]) -> tuple[str, str]:
    """(diagnosis, root kinds) columns: the parts of the diagnosis joined by "; ", and their kinds in the same
    order as ",kind,kind," (so a filter is one LIKE and a part can be left out by its kind)."""
    parts = diagnosis_parts(linked(found))
    return "; ".join(text for _, text in parts), ("," + ",".join(k for k, _ in parts) + ",") if parts else ""


def queue_number_repair(db: sqlite_utils.Database) -> None:
    """Schema 5: mark the file for the repair of numbers an earlier Rollscope let in (``Store`` runs it once the
    steps are applied, and again on the next open when it was cut off: see :func:`nonfinite_episodes`)."""
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('numbers_repair', '1')")


_NONFINITE_JSON = (b"NaN", b"Infinity")


def nonfinite_episodes(db: sqlite_utils.Database) -> list[str]:
    """The episodes that may hold a number an earlier Rollscope stored but that is not finite: a reward
    SQLite keeps as NULL (a NaN) or infinite, a NaN or Infinity in their JSON, an infinite logprob in their
    arrays. A superset (a text that says "NaN" is looked at again), read one row at a time."""
    from .codec import json_bytes, unpack_tokens

    big = "(reward IS NULL OR abs(reward) > 1.7e308)"
    found = {r[0] for r in db.execute(f"SELECT id FROM episodes WHERE {big} OR created_at IS NULL")}
    found |= {r[0] for r in db.execute(f"SELECT DISTINCT episode_id FROM turns WHERE {big}")}
    for table, key in (("episodes", "id"), ("turns", "episode_id")):
        for eid, data in db.execute(f"SELECT {key}, data FROM {table}"):
            if eid in found or data is None:
                continue
            try:
                raw = json_bytes(data)
            except StoreError:  # an unreadable row is its reader's to report, not this scan's
                continue
            if any(word in raw for word in _NONFINITE_JSON):
                found.add(eid)
    for eid, packed, logprobs in db.execute("SELECT episode_id, packed, logprobs FROM tokens"):
        if eid in found:
            continue
        try:
            lp = unpack_tokens(packed).logprobs if packed is not None else \
                np.frombuffer(logprobs or b"", dtype="<f4")
        except (StoreError, ValueError):  # as above
            continue
        if np.isinf(lp).any():
            found.add(eid)
    return sorted(found)


def allow_prompt_pieces(db: sqlite_utils.Database) -> None:
    """Schema 10: turn rows written from now on may give their prompt text as pieces of the turn before it
    (``codec.pack_turn``), which a Rollscope of schema 9 cannot read; the schema number keeps one from
    trying. Rows stored before (whole prompts, ``$extends``) read as they are, so nothing is rewritten."""


def refill_summed_outcomes(db: sqlite_utils.Database) -> None:
    """Schema 11: records of version 9 (an outcome that says whether the reward counts every turn), which a
    Rollscope of schema 10 cannot read. The math episodes stored before are explained again on the open after this
    step (``Store``, ``outcomes_fill``): those whose reward is the first turn's return get the outcome of every turn,
    the rest keep theirs."""
    db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('outcomes_fill', '1')")
