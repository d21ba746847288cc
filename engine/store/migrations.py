"""The ordered, named steps that bring a database of any earlier schema to this version's.

Each ``Migration`` is applied once, in its own transaction, and recorded in the ``migrations`` table
(name and time) in that same transaction: a step that fails leaves the file as it was before it, and is
tried again on the next open. A database written before the table existed says its schema in
``meta.db_schema``; the steps up to that schema are recorded as applied (``applied_at`` NULL: by an
earlier version) without being run again.

Adding a step: append a ``Migration`` with the next name and the schema it brings the file to, raise
``schema.DB_SCHEMA`` to match, and keep a golden database of the version before in ``tests/golden``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import sqlite_utils

from ..errors import StoreError
from . import schema, steps


@dataclass(frozen=True)
class Migration:
    """One step: ``name`` (``NNNN_what``), the schema the file has after it, and what it does. A ``repair``
    changes rows, not tables: a read-only file that lacks it still opens (and reads as it is). A ``derived`` step
    adds only what the stored rows give again (an index, aggregates), or nothing but the number that keeps an older
    version from misreading what this one writes: a read-only file that lacks it opens, and its readers do without
    it."""

    name: str
    schema: int
    apply: Callable[[sqlite_utils.Database], None]
    doc: str
    repair: bool = False
    derived: bool = False


MIGRATIONS: tuple[Migration, ...] = (
    Migration("0001_tables", 1, schema.create_tables_v1,
              "runs, episodes, turns, token arrays, findings, tags and replays"),
    Migration("0002_search_index", 2, schema.create_search_index,
              "the full-text search index (filled from the stored episodes when the store opens)"),
    Migration("0003_diagnosis", 3, schema.add_diagnosis,
              "each episode's diagnosis and root finding kinds, filled from its findings"),
    Migration("0004_browse_index", 4, schema.create_browse_index,
              "Browse's slim episode_index, kept equal to episodes by triggers"),
    Migration("0005_run_pids", 4, schema.add_run_pids,
              "which process runs a run, so a run whose process died is marked interrupted"),
    Migration("0006_packed_tokens", 4, schema.add_packed_tokens,
              "compressed token arrays (tokens.packed) and compressed turns"),
    Migration("0007_rollout_steps", 5, schema.add_rollout_steps,
              "the trainer's rollout step of each imported episode, in episodes and the browse index"),
    Migration("0008_watched_files", 5, schema.create_watched_files,
              "the dump files `rollscope watch` has read, so a restart reads nothing twice"),
    Migration("0009_search_context", 6, schema.refill_search,
              "system prompts and tool schemas indexed apart, so a search leaves them out unless asked"),
    Migration("0010_finite_numbers", 6, schema.queue_number_repair,
              "numbers an earlier version let in made readable: a reward that is not finite becomes 0 with a "
              "reward_not_finite error, an infinite logprob unknown with a logprob_not_finite warning", repair=True),
    Migration("0011_outcomes", 7, schema.add_outcomes,
              "each episode's outcome (why it earned its reward) in the record and its kind in a column, computed by "
              "its env for the episodes stored before"),
    Migration("0012_episode_stats", 8, schema.create_episode_stats,
              "the charts' aggregates (episodes per run, rollout step, env, preset, status, outcome, reward and turns), "
              "kept by triggers and filled from the episodes stored before", derived=True),
    Migration("0013_run_time_index", 9, schema.add_run_time_index,
              "an index of each run's episodes in time, so an older run's newest episodes are read first", derived=True),
    Migration("0014_prompt_pieces", 10, schema.allow_prompt_pieces,
              "a turn's prompt text stored as pieces of the previous turn's prompt and reply, also where the chat "
              "template rewrote part of the conversation (rows stored before read as they are)", derived=True),
    Migration("0015_summed_outcomes", 11, schema.refill_summed_outcomes,
              "the outcome of each math episode whose reward sums every turn's (the first turn's return) computed "
              "again, so right and wrong turns together read as some_turns_wrong, not as the last answer alone",
              derived=True),
    Migration("0016_entropy_stats", 12, schema.add_entropy_stats,
              "each episode's entropy figures (generated tokens with a known entropy, their sum, how many are near "
              "zero) in the episodes, the browse index and the charts' aggregates, filled from the stored token "
              "arrays", derived=True),
    Migration("0017_chart_stats", 13, schema.create_chart_stats,
              "Browse's token-length, per-task and per-group charts' aggregates (length_stats, task_stats, "
              "group_stats), kept by triggers and filled from the episodes stored before", derived=True),
    Migration("0018_status_sort_indexes", 13, schema.add_status_sort_indexes,
              "indexes of the episodes by status then turns and by status then tokens, so one status sorted by either "
              "is read from an index (the long episodes are the truncated ones)", derived=True),
    Migration("0019_listing_stats", 13, schema.create_listing_stats,
              "the episodes of each run per model and of each tag, kept by triggers, and the findings indexed by kind "
              "then episode, so the lists of runs, tags and finding kinds read a row a run or tag, or an index, not "
              "every episode", derived=True),
    Migration("0020_chart_totals", 13, schema.create_chart_totals,
              "the episodes of each task per env, preset and reward, and of each group with how many rewards they "
              "earned, kept by triggers, so the charts of every episode count tasks and flat groups from rows a task "
              "or group", derived=True),
    Migration("0021_search_filled_by_writer", 14, schema.search_filled_by_writer,
              "the full-text index filled by the writer with the texts it adds, where a trigger ran for each text (at "
              "twice the cost); schema 14 keeps an older version, which would add texts without indexing them, from "
              "writing to the file", derived=True),
    Migration("0022_counts_at_commit", 14, schema.count_at_commit,
              "the aggregates' triggers leave the episodes an import batch writes to the batch, which counts them at "
              "its commit, a statement per key instead of one per episode; a writer of schema 14 without it still "
              "counts every episode by trigger", derived=True),
    Migration("0023_episodes_found_by_the_browse_index", 14, steps.drop_episodes_secondary_indexes,
              "the episodes' indexes by env, status, reward, time, run, task and parent dropped: every query that "
              "finds episodes by those columns reads the browse index, which has the same, so each write keeps seven "
              "fewer indexes up to date", derived=True),
    Migration("0024_findings_counted_without_notes", 14, steps.count_findings_without_notes,
              "each episode's findings counted as its errors and warnings, what check and show list, not its notes "
              "(what a check could not look at): a clean episode lists 0", derived=True),
    Migration("0025_checked", 15, steps.add_checked,
              "whether the fidelity checks ran on each episode (the checks' version, in the episodes and the browse "
              "index), so an episode imported without --check reads as not checked, not as clean; a read-only file without "
              "it reads every episode as checked, as before", derived=True),
)

if [m.name for m in MIGRATIONS] != sorted(m.name for m in MIGRATIONS) or \
        len({m.name for m in MIGRATIONS}) != len(MIGRATIONS):
    raise AssertionError("migrations must have unique names in order")


@contextmanager
def _transaction(db: sqlite_utils.Database) -> Iterator[None]:
    """One transaction around a step, schema changes included (Python's sqlite3 opens one only before
    data changes, so ``ALTER TABLE`` would otherwise commit at once)."""
    conn = db.conn
    if conn.in_transaction:
        conn.commit()
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.rollback()
        raise
    conn.commit()


def _schema_of(db: sqlite_utils.Database) -> int:
    if "meta" not in db.table_names():
        return 0
    row = db.execute("SELECT value FROM meta WHERE key = 'db_schema'").fetchone()
    return int(row[0]) if row else 0


def pending(db: sqlite_utils.Database) -> list[Migration]:
    """The steps this file has not had (a read-only look: nothing is written)."""
    if "migrations" in db.table_names():
        done = {r[0] for r in db.execute("SELECT name FROM migrations")}
        return [m for m in MIGRATIONS if m.name not in done]
    # A file from before the table: the steps up to the schema it says were applied then.
    version = _schema_of(db)
    return [m for m in MIGRATIONS if m.schema > version]


def migrate(db: sqlite_utils.Database, path: object) -> list[str]:
    """Apply the pending steps in order, each in its own transaction; returns the names applied."""
    version = _schema_of(db)
    if version > schema.DB_SCHEMA:
        raise StoreError(f"{path} was written by a newer Rollscope (database schema {version}, this one reads "
                         f"{schema.DB_SCHEMA}); upgrade")
    todo = pending(db)
    with db.conn:
        fresh = "migrations" not in db.table_names()
        db.execute("CREATE TABLE IF NOT EXISTS migrations (name TEXT PRIMARY KEY, applied_at REAL)")
        if fresh:
            names = {m.name for m in todo}
            db.conn.executemany("INSERT OR IGNORE INTO migrations (name, applied_at) VALUES (?, NULL)",
                                [(m.name,) for m in MIGRATIONS if m.name not in names])
    applied = []
    for m in todo:
        with _transaction(db):
            m.apply(db)
            db.execute("INSERT OR REPLACE INTO migrations (name, applied_at) VALUES (?, ?)", [m.name, time.time()])
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('db_schema', ?)",
                       [str(max(m.schema, _schema_of(db)))])
        applied.append(m.name)
    return applied


def history(db: sqlite_utils.Database) -> list[tuple[str, float | None]]:
    """(name, applied_at) of every recorded step, in order (applied_at None: by an earlier version)."""
    if "migrations" not in db.table_names():
        return []
    return [(r[0], r[1]) for r in db.execute("SELECT name, applied_at FROM migrations ORDER BY name")]
