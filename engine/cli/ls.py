"""``rollscope ls``: stored episodes, filtered and sorted, one line each."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import DEFAULT_DB, open_store, positive_int, table


def register(sub: Any) -> None:
    ls = sub.add_parser("ls", help="list stored episodes")
    ls.add_argument("--db", default=DEFAULT_DB)
    ls.add_argument("--where", action="append", default=[], help="filter: status=completed, reward>=0.5, env=math, tag=x ...")
    ls.add_argument("--sort", default="created_at")
    ls.add_argument("--limit", type=positive_int, default=50)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(handler=cmd_ls)


def cmd_ls(a: argparse.Namespace) -> int:
    from ..store import EpisodeFilter

    store = open_store(a.db, must_exist=True)
    flt = EpisodeFilter.from_where(a.where)
    rows = store.list_episodes(flt, order_by=a.sort, limit=a.limit)
    if a.json:
        for r in rows:
            print(json.dumps(r.__dict__))
        return 0
    total = store.count(flt)
    print(table(
        [[r.id, r.env, r.task_id, r.status, f"{r.reward:.3f}", str(r.n_turns), str(r.n_tokens), str(r.n_trainable),
          r.preset, str(r.n_findings)] for r in rows],
        ["id", "env", "task", "status", "reward", "turns", "tokens", "trainable", "preset", "findings"],
    ))
    print(f"({len(rows)} of {total} episodes)")
    return 0
