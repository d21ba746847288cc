"""``rollscope fork``: a stored episode forked at a turn and played to its end by the policy, some samples of it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .common import DEFAULT_DB, knob_settings, nonnegative_int, open_store, positive_int
from .run import backend_settings, policy_options


def register(sub: Any) -> None:
    f = sub.add_parser("fork", help="fork a stored episode at a turn and let the policy play it to its end, sampled "
                       "again; each fork is stored with its parent")
    f.add_argument("episode_id", help="the episode to fork (an id prefix is enough)")
    f.add_argument("--turn", type=nonnegative_int, required=True,
                   help="the turn to sample again: the turns before it are replayed from the record, this one and "
                   "those after it are the policy's")
    f.add_argument("--samples", type=positive_int, default=1, help="forks to play, with seeds --seed, --seed+1, ...")
    f.add_argument("--user", default="scripted",
                   help="who answers as the user after the fork, in envs with a user: scripted, llm, recorded>scripted "
                   "or recorded>llm (the recorded user while the conversation matches the record)")
    f.add_argument("--user-url", help="--user llm: an sglang server for the user model (default: the local model)")
    f.add_argument("--user-model", help="--user llm: a local model for the user (default: the embedded SmolLM2)")
    f.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                   help="change one of the parent's loop knobs for the forks (repeatable)")
    policy_options(f)
    f.add_argument("--db", default=DEFAULT_DB)
    f.add_argument("--no-store", action="store_true", help="play the forks without storing them")
    f.add_argument("--json", action="store_true", help="one JSON object per fork")
    f.set_defaults(handler=cmd_fork)


def cmd_fork(a: argparse.Namespace) -> int:
    from ..launch.forks import PlayedFork, check_samples, play_forks
    from ..launch.plan import UserSettings, fork_setup

    store = open_store(a.db, must_exist=True)
    backend = backend_settings(a)
    who = a.user.partition(">")[2] or a.user
    user_model = UserSettings("llm", a.user_model, a.user_url) if who == "llm" else None
    settings = "\n".join(f"{k} = {v}" for k, v in knob_settings(a.set).items())
    setup = fork_setup(store, a.episode_id, a.turn, a.user, settings, backend, user_model)
    check_samples(a.samples, setup)
    parent = setup.parent
    if not a.json:
        print(f"parent {parent.id}: {parent.status}, reward {parent.reward:g}, {parent.n_turns} turns; policy "
              f"{backend.describe()}")

    def said(p: PlayedFork) -> None:
        ep = p.episode
        if a.json:
            print(json.dumps({"id": ep.id, "parent_id": parent.id, "fork_turn": a.turn, "status": ep.status.value,
                              "reward": ep.reward, "turns": ep.n_turns, "replay_matched": p.report.ok,
                              "replay": p.report.summary(), "stored": not a.no_store}, ensure_ascii=False))
            return
        if not p.report.ok:
            print(f"  {p.report.summary()}", file=sys.stderr)
        print(f"  fork {ep.id}  {ep.status.value:<11} reward {ep.reward:g}  {ep.n_turns} turns")

    forks = play_forks(setup, backend, a.samples, None if a.no_store else store, on_fork=said)
    replayed = forks[0].report
    mean = sum(p.episode.reward for p in forks) / len(forks)
    better = sum(p.episode.reward > parent.reward for p in forks)
    out = sys.stderr if a.json else sys.stdout
    print(f"{replayed.summary()}", file=out)
    print(f"from turn {a.turn}, {len(forks)} sample{'s' if len(forks) != 1 else ''}: mean reward {mean:.3f}, "
          f"{better} above the parent's {parent.reward:g}"
          + ("" if a.no_store else f" -> {a.db} (`rollscope diff {parent.id[:8]} {forks[0].episode.id[:8]}` "
                                   "compares one with its parent)"), file=out)
    return 0
