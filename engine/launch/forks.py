"""Forks played to their end by the policy (``rollscope fork``): what the policy makes of one point of a stored
conversation, sampled again.

Each fork replays the parent's turns before ``turn`` (``loop.fork.fork``: the record's generations, the env
stepped again and compared with what was stored), then the policy generates and the env (and its user) answers
until the episode ends, as a run drives an episode: a backend that fails ends it ``aborted``, a bug ``failed``. A
replay that cannot reach the fork turn (the parent's record holds no reply to replay, or the episode ends during
it) plays nothing. The forks are stored with the parent's id and the turn, checked as a live episode is (a replay
that diverged from the record leaves its ``fork_replay_diverged`` findings), so ``diff``, ``show`` and the
dashboard's Compare read them like any other episode.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.base import Backend
from ..errors import BackendError, ConfigError
from ..loop.fork import ForkReport
from ..records.episode import Episode
from ..store import Store
from .plan import BackendSettings, ForkSetup, fork_seed, start_fork

MAX_SAMPLES = 256


@dataclass(frozen=True)
class PlayedFork:
    """One fork played to its end, the seed it sampled with, and how replaying the parent's turns before it went."""

    episode: Episode
    report: ForkReport
    seed: int


def check_samples(samples: int, f: ForkSetup) -> None:
    """A ConfigError unless ``samples`` forks of ``f`` can be played by the policy alone."""
    if not 1 <= samples <= MAX_SAMPLES:
        raise ConfigError(f"samples: 1 to {MAX_SAMPLES}, not {samples}")
    after = f.then if f.who == "recorded" else f.who
    if after == "human":
        raise ConfigError("a fork played to its end has no person to answer as the user: choose --user scripted, "
                          "llm, recorded>scripted or recorded>llm (the dashboard's Step tab lets you play the user)")
    if not f.parent.n_turns:
        raise ConfigError(f"episode {f.parent.id} has no turns to fork at")
    if f.turn >= f.parent.n_turns:
        raise ConfigError(f"episode {f.parent.id} has turns 0 to {f.parent.n_turns - 1}: fork at one of them to "
                          "sample that turn again")


def fork_seeds(f: ForkSetup, seed: int, samples: int, store: Store | None = None) -> tuple[list[int], int]:
    """The seeds of ``samples`` forks of ``f`` under ``--seed`` ``seed`` (``fork_seed(parent, seed, i)``, i from 0),
    past those that the forks ``store`` holds of the parent at this turn sampled with: a fork run again samples
    new forks rather than storing the same ones again. (seeds, how many were passed over)."""
    used: set[int] = set()
    if store is not None:
        for (eid,) in store.browse_query("SELECT id FROM episode_index WHERE parent_id = ?", [f.parent.id]):
            ep = store.get_episode(eid)
            if ep.fork_turn == f.turn and ep.config.sampling is not None and ep.config.sampling.seed is not None:
                used.add(ep.config.sampling.seed)
    seeds: list[int] = []
    i = 0
    while len(seeds) < samples:
        s = fork_seed(f.parent.id, seed, i)
        i += 1
        if s not in used:
            seeds.append(s)
    return seeds, i - samples


def play_forks(f: ForkSetup, backend: BackendSettings, samples: int, store: Store | None = None,
               on_fork: Callable[[PlayedFork], None] | None = None, seeds: list[int] | None = None) -> list[PlayedFork]:
    """``samples`` forks of ``f`` played to their end by ``backend``'s policy, with ``seeds`` (by default
    ``fork_seeds``: new ones past those of the forks ``store`` holds at this turn), for the scripted policy's
    mistakes or a model's sampling, each stored in ``store`` as it ends (None: not stored) and told to ``on_fork``.
    A ConfigError, before any is stored, when the replay cannot reach the fork turn."""
    check_samples(samples, f)
    out: list[PlayedFork] = []
    shared = None if backend.policy == "scripted" else backend.build(f.make_env, f.tokenizer)  # a model loads once
    for seed in seeds if seeds is not None else fork_seeds(f, backend.seed, samples, store)[0]:
        policy = shared or dataclasses.replace(backend, seed=seed).build(f.make_env, f.tokenizer)
        played = asyncio.run(_play(f, policy, backend, seed))
        if store is not None:
            store.save_episode(played.episode)
        out.append(played)
        if on_fork is not None:
            on_fork(played)
    return out


async def _play(f: ForkSetup, policy: Backend, backend: BackendSettings, seed: int) -> PlayedFork:
    """One fork: the parent's turns replayed, then driven as a run drives an episode (``stepper.drive``)."""
    hand = await start_fork(f, policy, backend, seed)
    report = hand.report
    assert report is not None
    if report.ended or report.replayed < f.turn:
        raise ConfigError(f"cannot fork {f.parent.id} at turn {f.turn}: replayed {report.replayed} of its turns "
                          f"before it ({report.ended or 'the replay stopped short'})")
    stepper = hand.stepper
    while not stepper.done:
        await asyncio.sleep(0)
        try:
            await stepper.generate()
        except BackendError as e:  # the episode ends aborted, as in a run
            stepper.backend_failed(e)
            break
        except Exception as e:  # noqa: BLE001 - a bug (ours, the env's): the fork ends failed, as in a run
            stepper.fail(e)
            break
        try:
            await stepper.commit()
        except Exception as e:  # noqa: BLE001
            stepper.fail(e)
            break
    ep = hand.to_save()
    ep = ep.evolve(source=dataclasses.replace(ep.source, by_hand=False))  # the policy played it, not a person
    return PlayedFork(ep, report, seed)
