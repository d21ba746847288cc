"""``rollscope explain``: why each episode earned its reward, at the turn (the stored ``Outcome``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from ..errors import ConfigError
from ..records.episode import Episode
from ..records.outcome import Outcome, OutcomeCall
from .common import DEFAULT_DB, open_store, where

SHOWN_DB_CHANGES = 8


def register(sub: Any) -> None:
    ex = sub.add_parser("explain", help="why each episode earned its reward: expected vs taken, at the turn")
    ex.add_argument("episode_id", nargs="?", help="one episode (an id or a unique prefix); default: every match")
    ex.add_argument("--db", default=DEFAULT_DB)
    ex.add_argument("--where", action="append", default=[], help="filter: outcome=wrong_arguments, env=retail, ...")
    ex.add_argument("--json", action="store_true", help="one JSON object a line")
    ex.set_defaults(handler=cmd_explain)


def outcome_json(ep: Episode) -> dict[str, Any]:
    """``{episode_id, task_id, reward, outcome}``: what ``explain --json`` prints for an episode."""
    return {"episode_id": ep.id, "task_id": ep.task_id, "reward": ep.reward,
            "outcome": None if ep.outcome is None else ep.outcome.to_dict()}


def _call(c: OutcomeCall) -> str:
    return f"{c.name}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in c.arguments.items())})"


def outcome_lines(o: Outcome | None) -> list[str]:
    """The outcome as lines of text (``show`` prints them under the reward)."""
    if o is None:
        return ["outcome: none yet (the episode has not ended)"]
    at = f" at turn {o.turn}" if o.turn is not None else ""
    out = [f"outcome: {o.kind}{at}: {o.text}"]
    if o.expected is not None:
        out.append(f"  expected  {_call(o.expected)}")
    if o.taken is not None:
        out.append(f"  taken     {_call(o.taken)}")
    if o.expected is not None and o.taken is not None:
        for k in o.differing_arguments:
            got, want = o.taken.arguments.get(k), o.expected.arguments.get(k)
            out.append(f"  differs   {k}: {json.dumps(got, ensure_ascii=False)} (expected "
                       f"{json.dumps(want, ensure_ascii=False)})")
    if o.missing_outputs:
        out.append("  never said " + ", ".join(json.dumps(m, ensure_ascii=False) for m in o.missing_outputs))
    for c in o.db_diff[:SHOWN_DB_CHANGES]:
        where = ".".join(p for p in (c.table, c.key, c.field) if p)
        out.append(f"  database  {where}: {json.dumps(c.got, ensure_ascii=False, default=str)} (expected "
                   f"{json.dumps(c.expected, ensure_ascii=False, default=str)})")
    if len(o.db_diff) > SHOWN_DB_CHANGES:
        out.append(f"  database  … {len(o.db_diff) - SHOWN_DB_CHANGES} more differences (--json lists them)")
    for a in o.answers:
        verdict = "right" if a.correct else "wrong"
        cut = ", cut by the length limit" if a.finish_reason == "length" else ""
        out.append(f"  turn {a.turn}   answered {a.extracted!r}: {verdict}{cut}")
    if o.reference_answer is not None:
        out.append(f"  reference {o.reference_answer!r}")
    return out


def cmd_explain(a: argparse.Namespace) -> int:

    store = open_store(a.db, must_exist=True)
    if a.episode_id and a.where:
        raise ConfigError("give an episode id or --where, not both")
    if a.episode_id:
        episodes: Any = [store.get_episode(store.resolve_id(a.episode_id))]
    else:
        episodes = store.iter_episodes(where(store, a.where))
    kinds: Counter[str] = Counter()
    for ep in episodes:
        kinds[ep.outcome.kind if ep.outcome is not None else "none"] += 1
        if a.json:
            print(json.dumps(outcome_json(ep), ensure_ascii=False))
            continue
        print(f"{ep.id}  {ep.env} task {ep.task_id}  reward {ep.reward:g}  {ep.status.value}")
        for line in outcome_lines(ep.outcome):
            print(f"  {line}")
    if not kinds:  # as ``check``: nothing to say is not an answer
        why = f"no episode matched {' '.join(a.where)} in {a.db}" if a.where else f"{a.db} holds no episodes"
        print(f"rollscope: nothing explained: {why}", file=sys.stderr)
        return 2
    if not a.json and sum(kinds.values()) > 1:
        print(f"({sum(kinds.values())} episodes: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()) + ")")
    return 0
