"""``rollscope ls``: stored episodes, filtered and sorted, one line each."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import DEFAULT_DB, open_store, positive_int, table, where


def register(sub: Any) -> None:
    from ..store.filter import SORTABLE

    ls = sub.add_parser("ls", help="list stored episodes")
    ls.add_argument("--db", default=DEFAULT_DB)
    ls.add_argument("--where", action="append", default=[], metavar="CLAUSE",
                    help="filter (repeatable, all must hold): status=completed,truncated  reward>=0.5  env=math  "
                    "run=NAME  preset=NAME  tag=x  starred=true  checked=no|part|whole  turns>=3  step=N  finding=KIND  root=KIND  "
                    "outcome=KIND  family=ID (an episode and its forks)  text=WORDS  text_all=WORDS (system prompts "
                    "and tool schemas too)  id=ID,... (a unique prefix is enough); a key given twice must hold twice: "
                    "tag=a tag=b is both tags")
    ls.add_argument("--sort", default="created_at", choices=SORTABLE, metavar="COLUMN",
                    help="sort by this column, largest first (default: created_at, the newest first); one of "
                    + ", ".join(SORTABLE))
    ls.add_argument("--ascending", action="store_true", help="smallest (oldest) first")
    ls.add_argument("--limit", type=positive_int, default=50, help="list at most this many (default 50); the last "
                    "line says how many match")
    ls.add_argument("--json", action="store_true", help="one JSON object an episode, its summary columns")
    ls.set_defaults(handler=cmd_ls)


def cmd_ls(a: argparse.Namespace) -> int:

    store = open_store(a.db, must_exist=True)
    flt = where(store, a.where)
    rows = store.list_episodes(flt, order_by=a.sort, descending=not a.ascending, limit=a.limit)
    not_run = store.checks_not_run([r.id for r in rows])
    if a.json:  # with the checks that could not run on each, as the table says beside its count
        for r in rows:
            row = {**r.__dict__, "root_kinds": [k for k in (r.root_kinds or "").split(",") if k],
                   "checks_not_run": not_run.get(r.id, [])}
            print(json.dumps(row))
        return 0
    total = store.count(flt)
    print(table(
        [[r.id, r.env, r.task_id, r.status, f"{r.reward:.3f}", str(r.n_turns), str(r.n_tokens), str(r.n_trainable),
          r.preset, findings_cell(r.n_findings, r.unchecked, len(not_run.get(r.id, ())))] for r in rows],
        ["id", "env", "task", "status", "reward", "turns", "tokens", "trainable", "preset", "findings"],
    ))
    print(f"({len(rows)} of {total} episode{'s' if total != 1 else ''})")
    unchecked = sum(1 for r in rows if r.unchecked)
    if unchecked:
        print(f"{unchecked} of these not checked: no fidelity check ran on {'it' if unchecked == 1 else 'them'}, so "
              f"finding nothing means nothing yet (`rollscope check {a.db}` runs the checks)")
    if not_run:
        first = next(r.id for r in rows if r.id in not_run)
        print(f"{len(not_run)} of these checked in part: a check could not run on {'it' if len(not_run) == 1 else 'them'}"
              f" (one that needs a tokenizer or a model, run without it), so {'its' if len(not_run) == 1 else 'their'} "
              "findings are those of the checks that ran "
              f"(`rollscope show {first}` says which and why)")
    return 0


def findings_cell(n: int, unchecked: bool, not_run: int = 0) -> str:
    """An episode's findings (errors and warnings) as ``ls`` lists them: a count, that no check ran on it, or how
    many checks could not run on it."""
    if unchecked:
        return "not checked" if n == 0 else f"{n}, not checked"
    return f"{n}, {not_run} check{'s' if not_run != 1 else ''} not run" if not_run else str(n)
