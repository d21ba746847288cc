"""The database's tables, the columns later schemas added to them, and the diagnosis columns' contents.

``create_tables`` creates what is missing and adds what earlier schemas lacked, so opening any database
this version reads brings it up to date (the search index and Browse's ``episode_index`` are
``store_browse``'s). ``DB_SCHEMA`` is stored in ``meta.db_schema``: 2 added the full-text search index
(``search_texts``, ``search_refs``, ``search_fts``); 3 added ``diagnosis`` and ``root_kinds``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlite_utils

from .diagnosis import diagnosis_parts, linked
from .records import Finding, Severity

DB_SCHEMA = 3


def create_tables(db: sqlite_utils.Database) -> None:
    """Create every table and index that is missing, and add the columns later schemas brought (in the
    caller's transaction)."""
    db.table("meta").create({"key": str, "value": str}, pk="key", if_not_exists=True)
    db.table("meta").upsert({"key": "db_schema", "value": str(DB_SCHEMA)}, pk="key")
    db.table("runs").create(
        {"id": str, "created_at": float, "config": str, "status": str, "n_episodes": int, "pid": int},
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
            "diagnosis": str, "root_kinds": str, "pid": int, "schema_version": int, "data": str,
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
    if "pid" not in {c.name for c in db.table("runs").columns}:
        db.execute("ALTER TABLE runs ADD COLUMN pid INTEGER")  # which process runs it, while it runs
    for table in ("episodes", "episode_index"):  # schema 3
        if table not in db.table_names():
            continue
        have = {c.name for c in db.table(table).columns}
        for col in ("diagnosis", "root_kinds"):
            if col not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {col} TEXT")


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
