"""The retail env's outcome: the agent's calls against the task's reference writes and outputs, and the final
database, got by replaying the agent's calls on a fresh store, against the reference database."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ...records.episode import Episode
from ...records.outcome import Outcome, OutcomeCall
from ..toolcompare import AgentCall, agent_calls, agent_replies, compare_tools, db_changes, is_write
from .data import Db, base_db, fresh_db
from .tasks import get_task
from .tools import run_tool


def _changed(db: Db) -> dict[str, dict[str, Any]]:
    """The records of ``db`` that differ from the generated store, by table."""
    base = base_db()
    return {t: {k: v for k, v in db[t].items() if base[t].get(k) != v} for t in db}


@lru_cache(maxsize=256)
def _expected_changes(task_id: str) -> dict[str, dict[str, Any]]:
    db = fresh_db()
    for a in get_task(task_id).actions:
        run_tool(db, a.name, dict(a.arguments))
    return _changed(db)


def replayed(calls: list[AgentCall]) -> Db:
    """The database after the agent's writes, replayed in order on a fresh store (the store itself, unchanged,
    when no write went through)."""
    writes = [c for c in calls if is_write(c.name) and c.accepted]
    if not writes:
        return base_db()
    db = fresh_db()
    for c in writes:
        run_tool(db, c.name, c.arguments)
    return db


def outcome(ep: Episode) -> Outcome:
    task = get_task(ep.task_id)
    calls = agent_calls(ep)
    got = replayed(calls)
    base = base_db()
    changes = _expected_changes(task.id)
    # Only records either side changed can differ: compare those, not the whole store.
    keys = {t: set(changes.get(t, {})) | {k for k, v in got[t].items() if base[t].get(k) != v} for t in base}
    got_part = {t: {k: got[t].get(k) for k in keys[t]} for t in base}
    expected_part = {t: {k: changes.get(t, {}).get(k, base[t].get(k)) for k in keys[t]} for t in base}
    reference = [OutcomeCall(a.name, dict(a.arguments)) for a in task.actions]
    return compare_tools(reference, task.outputs, calls, agent_replies(ep), db_changes(got_part, expected_part))
