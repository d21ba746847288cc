"""``rollscope fork``: a stored episode forked at a turn and played to its end by the policy, some samples of it."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
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
    f.add_argument("--samples", type=positive_int, default=1,
                   help="forks to play, each with a seed of its own made from the parent's id, --seed and its number "
                   "(never the parent's seed, which would play the parent again)")
    f.add_argument("--user", default="scripted",
                   help="who answers as the user after the fork, in envs with a user: scripted, llm, recorded>scripted "
                   "or recorded>llm (the recorded user while the conversation matches the record)")
    f.add_argument("--user-url", help="--user llm: an sglang server for the user model (default: the local model)")
    f.add_argument("--user-model", help="--user llm: a local model for the user (default: the embedded SmolLM2)")
    f.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                   help="change one of the parent's loop knobs for the forks (repeatable); the summary says which, "
                   "since their rewards then are not the parent's kind")
    policy_options(f, sampling_default="the parent's recorded sampling")
    f.add_argument("--db", default=DEFAULT_DB)
    f.add_argument("--no-store", action="store_true", help="play the forks without storing them")
    f.add_argument("--json", action="store_true", help="one JSON object per fork")
    f.set_defaults(handler=cmd_fork)


def cmd_fork(a: argparse.Namespace) -> int:
    from ..launch.forks import PlayedFork, check_samples, fork_seeds, play_forks
    from ..launch.plan import UserSettings, fork_setup

    store = open_store(a.db, must_exist=True)
    parent = store.get_episode(store.resolve_id(a.episode_id))
    recorded = parent.config.sampling
    for name in ("temperature", "top_p", "max_new_tokens"):
        if getattr(a, name) is None and recorded is not None:  # the parent's, as it was sampled
            setattr(a, name, getattr(recorded, name))
    own = parent.backend.settings.get("mistake_rate") if parent.backend is not None else None
    if a.mistake_rate is None:  # the scripted policy's: the parent's where it played it
        a.mistake_rate = own if isinstance(own, (int, float)) and not isinstance(own, bool) else 0.2
    backend = backend_settings(a)
    who = a.user.partition(">")[2] or a.user
    user_model = UserSettings("llm", a.user_model, a.user_url) if who == "llm" else None
    knobs = knob_settings(a.set)
    setup = fork_setup(store, parent.id, a.turn, a.user, "\n".join(f"{k} = {v}" for k, v in knobs.items()), backend,
                       user_model)
    check_samples(a.samples, setup)
    out = sys.stderr if a.json else sys.stdout
    ran = f"{parent.backend.name}{' ' + parent.backend.model if parent.backend.model else ''}" \
        + (f", mistake rate {own:g}" if isinstance(own, (int, float)) and not isinstance(own, bool) else "") \
        if parent.backend is not None else "not recorded"
    seeds, passed = fork_seeds(setup, backend.seed, a.samples, None if a.no_store else store)
    print(f"parent {parent.id}: {parent.status}, reward {parent.reward:g}, {parent.n_turns} turns (its policy: {ran})\n"
          f"forks at turn {a.turn}: policy {backend.describe()}", file=out)
    if passed:
        print(f"  note: {passed} seed{'s' if passed != 1 else ''} of --seed {backend.seed} already sampled the forks "
              f"stored at this turn: these sample the next ones (--seed N for another series)", file=out)

    def said(p: PlayedFork) -> None:
        ep = p.episode
        if a.json:
            print(json.dumps({"id": ep.id, "parent_id": parent.id, "fork_turn": a.turn, "seed": p.seed,
                              "status": ep.status.value, "reason": ep.reason, "reward": ep.reward,
                              "turns": ep.n_turns, "replay_matched": p.report.ok, "replay": p.report.summary(),
                              "stored": not a.no_store}, ensure_ascii=False), flush=True)
            return
        ended = f" ({ep.reason})" if ep.status.value in ("aborted", "failed") else ""
        print(f"  fork {ep.id}  seed {p.seed:<10}  {ep.status.value:<11} reward {ep.reward:g}  {ep.n_turns} turns"
              f"{ended}", flush=True)

    forks: list[PlayedFork] = []

    def played(p: PlayedFork) -> None:
        forks.append(p)
        said(p)

    try:
        play_forks(setup, backend, a.samples, None if a.no_store else store, on_fork=played, seeds=seeds)
    except KeyboardInterrupt:
        print(f"rollscope: interrupted: {len(forks)} fork{'s' if len(forks) != 1 else ''} played"
              f"{'' if a.no_store else ' and stored'}", file=sys.stderr)
        return 130
    replayed = forks[0].report
    print(replayed.summary(), file=out if replayed.ok else sys.stderr)
    for note in replayed.notes:
        print(f"  note: {note}", file=out)
    statuses = Counter(p.episode.status.value for p in forks)
    mean = sum(p.episode.reward for p in forks) / len(forks)
    better = sum(p.episode.reward > parent.reward for p in forks)
    changed = f"; knobs changed from the parent's: {', '.join(f'{k}={v}' for k, v in knobs.items())}" if knobs else ""
    print(f"from turn {a.turn}, {len(forks)} sample{'s' if len(forks) != 1 else ''} "
          f"({', '.join(f'{k} {v}' for k, v in sorted(statuses.items()))}): mean reward {mean:.3f}, {better} above the "
          f"parent's {parent.reward:g}{changed}"
          + ("" if a.no_store else f" -> {a.db} (`rollscope diff {parent.id[:8]} {forks[0].episode.id[:8]}` "
                                   "compares one with its parent)"), file=out)
    return 0 if replayed.ok else 1
