"""``rollscope replay``: stored episodes re-executed against their env: the first divergence named, each
differing output as paths, whether the final reward reproduces, and many episodes summed up by cause."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from ..errors import ConfigError
from .common import DEFAULT_DB, nonnegative_int, open_store, where

LISTED = 20
"""Diverged episodes listed one a line before the summary; past this many only the summary is printed."""


def register(sub: Any) -> None:
    rp = sub.add_parser("replay", help="re-execute stored episodes against their env and compare")
    rp.add_argument("episode_id", nargs="?", help="one episode (an id prefix is enough); or use --where (--where status=completed: every finished one)")
    rp.add_argument("--db", default=DEFAULT_DB)
    rp.add_argument("--until", type=nonnegative_int, metavar="TURN",
                    help="stop after this turn (the reward is then not compared; at or past an episode's last turn, "
                    "the whole episode is replayed and its reward compared)")
    rp.add_argument("--where", action="append", default=[], help="batch form: re-execute every episode matching")
    rp.add_argument("--json", action="store_true", help="one JSON object per episode")
    rp.add_argument("-q", "--quiet", action="store_true", help="batch form: print only the summary by cause")
    rp.add_argument("--no-store", action="store_true", help="do not store the results")
    rp.set_defaults(handler=cmd_replay)


def _one(res: Any) -> None:
    """One episode: the verdict, then each turn, a differing one with what changed."""
    print(res.summary())
    for v in res.turns:
        extra = f"  {v.what}: {v.describe()}" if not v.ok else (f"  ({v.note})" if v.note else "")
        print(f"  turn {v.turn:3d} {'ok  ' if v.ok else 'DIFF'}{extra}")


def cmd_replay(a: argparse.Namespace) -> int:
    from ..analysis.replays import replay_summary
    from ..loop.replay import replay_stored

    store = open_store(a.db, must_exist=True)
    if a.episode_id and a.where:
        raise ConfigError("give an episode id or --where, not both")
    if a.episode_id:
        episodes = iter([store.get_episode(store.resolve_id(a.episode_id))])
    elif a.where:
        episodes = store.iter_episodes(where(store, a.where))
    else:
        raise ConfigError("which episodes? give an episode id, or --where (e.g. --where env=retail)")
    results = []
    listed = 0
    for ep in episodes:
        res = asyncio.run(replay_stored(ep, a.until))
        results.append(res)
        if not a.no_store:
            store.save_replay(res)
        if a.json:
            print(json.dumps(res.to_dict(), ensure_ascii=False, default=str))
        elif a.episode_id:
            _one(res)
        elif res.kind != "reproduced" and not a.quiet:
            listed += 1
            if listed <= LISTED:
                print(res.summary())
    if not results:
        said = " ".join(f"--where {w}" for w in a.where)
        print(f"rollscope: nothing re-executed: no episode matches {said} (`rollscope ls {said}` lists what "
              "there is)", file=sys.stderr)
        return 2
    if listed > LISTED:
        print(f"… and {listed - LISTED} more diverged episodes (--json lists each)")
    if not a.episode_id:  # one episode's verdict is already whole
        out = sys.stderr if a.json else sys.stdout
        for line in replay_summary(results):
            print(line, file=out)
    # 1: a divergence; 2: none could be re-executed (said above, why); 0: every one re-executed reproduced.
    if any(r.reproducible and not r.reproduced for r in results):
        return 1
    return 0 if any(r.reproducible for r in results) else 2
