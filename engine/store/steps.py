"""The migration steps of schema 14 and after (``migrations``), on the tables ``schema`` creates: indexes dropped,
counts made again, and the columns added since, filled from the rows stored before."""

from __future__ import annotations

import sqlite_utils

from ..errors import StoreError
from .codec import unpack_json
from .schema import INDEX_COLUMNS, INDEX_COLUMNS_14, STATS_SUMS, _columns, create_browse_index, create_episode_stats


def drop_episodes_secondary_indexes(db: sqlite_utils.Database) -> None:
    """Schema 14: drop the indexes ``create_tables_v1`` gave ``episodes`` beside its key: every query they served
    reads ``episode_index``, which indexes the same columns, so they only cost each write."""
    for col in ("env", "status", "reward", "created_at", "run_id", "task_id", "parent_id"):
        db.execute(f"DROP INDEX IF EXISTS idx_episodes_{col}")


def count_findings_without_notes(db: sqlite_utils.Database) -> None:
    """Schema 14: ``n_findings`` counts an episode's errors and warnings, what ``check`` and ``show`` list, not its
    notes (severity ``info``); counted again from ``findings`` for the episodes with notes. No aggregate counts
    ``n_findings``, so the rows are changed in ``episodes`` and in the browse index alone: the browse index's
    update trigger (which would write each row's every index again) is made again after, and the aggregates'
    triggers are held off by a mark below every row (``count_mark``) unless a batch left one."""
    kept = ("(SELECT episode_id, SUM(severity != 'info') AS n FROM findings GROUP BY episode_id "
            "HAVING SUM(severity != 'info') < COUNT(*))")
    db.execute("DROP TRIGGER IF EXISTS episodes_index_update")
    db.execute(f"UPDATE episodes SET n_findings = c.n FROM {kept} AS c WHERE c.episode_id = episodes.id "
               "AND episodes.n_findings != c.n")
    _copy_to_index(db, "n_findings", "episode_index.n_findings != e.n_findings")
    create_browse_index(db, INDEX_COLUMNS_14)  # its triggers again


def _copy_to_index(db: sqlite_utils.Database, column: str, where: str) -> None:
    """Copy ``column`` of the episodes (``e``) that ``where`` picks to the browse index, with the aggregates' triggers
    held off by a mark below every row (``count_mark``) unless a batch left one: no aggregate counts the column as
    it was."""
    left = db.execute("SELECT rid FROM count_mark").fetchone()
    if left is None:
        db.execute("INSERT INTO count_mark (one, rid) VALUES (0, 0)")
    db.execute(f"UPDATE episode_index SET {column} = e.{column} FROM episodes AS e WHERE e.id = episode_index.id "
               f"AND {where}")
    if left is None:
        db.execute("DELETE FROM count_mark")


# Episodes read a chunk at a time to fill ``checked``: their records (several KB each) are not held all at once.
_FILL_CHUNK = 2000


def add_checked(db: sqlite_utils.Database) -> None:
    """Schema 15: ``checked`` of ``episodes`` and ``episode_index``, the checks' version that ran on the episode
    (``Episode.checked``), NULL where no check ran: an episode imported without ``--check`` has no findings because
    nothing looked, and Browse, ``ls`` and the findings filter tell it from a clean one. Filled from each stored
    record (its JSON holds ``checked``): in SQL where the record is text, decompressed a chunk at a time where it is
    not. As ``count_findings_without_notes``: the rows change in ``episodes`` and the browse index alone, with the
    browse index's update trigger made again after and the aggregates' triggers held off by a mark below every row;
    then ``episode_stats`` is made again with a sum of the finished episodes no check ran on (``unchecked``: a run's
    root errors are a share of the others)."""
    for table in ("episodes", "episode_index"):
        if "checked" not in _columns(db, table):
            db.execute(f"ALTER TABLE {table} ADD COLUMN checked TEXT")
    db.execute("DROP TRIGGER IF EXISTS episodes_index_update")
    db.execute("UPDATE episodes SET checked = NULLIF(json_extract(data, '$.checked'), '') "
               "WHERE typeof(data) = 'text' AND json_valid(data)")  # an empty version names no checks, as read
    last = 0
    while True:
        rows = db.execute("SELECT rowid, data FROM episodes WHERE rowid > ? AND typeof(data) = 'blob' "
                          "ORDER BY rowid LIMIT ?", [last, _FILL_CHUNK]).fetchall()
        if not rows:
            break
        last = rows[-1][0]
        found = []
        for rowid, data in rows:
            try:
                version = (unpack_json(data) or {}).get("checked")
            except (StoreError, ValueError, AttributeError):  # a damaged row: its readers say why
                continue
            if isinstance(version, (str, int)) and not isinstance(version, bool) and version != "":
                found.append((str(version), rowid))
        db.conn.executemany("UPDATE episodes SET checked = ? WHERE rowid = ?", found)
    _copy_to_index(db, "checked", "e.checked IS NOT NULL")  # episode_stats is made again below, from the index
    create_browse_index(db, INDEX_COLUMNS)  # its triggers again, with the new column
    create_episode_stats(db, STATS_SUMS)  # made again with the finished episodes no check ran on, and filled
