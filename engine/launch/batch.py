"""Batches: tasks x samples with bounded concurrency, written as they go."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..backends.base import Backend, SamplingParams
from ..checks import CheckOptions, with_checks
from ..envs.base import Env
from ..errors import ConfigError
from ..loop.stepper import Stepper, drive, new_id
from ..presets import LoopConfig
from ..records import textsafe
from ..records.episode import Episode, Finding, Severity, Status
from ..store import Store, damaged
from ..tokens.tokenizer import Tokenizer


@dataclass(frozen=True)
class BatchSpec:
    """A batch: which tasks, how many samples each, and how to run them."""

    env: str
    tasks: tuple[str, ...]
    samples: int
    preset: str
    config: LoopConfig
    sampling: SamplingParams
    policy: str
    concurrency: int = 4
    seed: int = 0
    tokenizer: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    """The run's name; None: a fresh id."""
    tags: tuple[str, ...] = ()
    """Tags every episode of the run gets."""

    def describe(self) -> dict[str, Any]:
        d = asdict(self)
        d["config"] = self.config.to_dict()
        d["sampling"] = self.sampling.to_dict()
        d["tasks"] = list(self.tasks)
        return d


@dataclass
class BatchResult:
    run_id: str
    episodes: list[Episode]
    elapsed_s: float
    cancelled: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for ep in self.episodes:
            out[ep.status.value] = out.get(ep.status.value, 0) + 1
        return out

    @property
    def n_turns(self) -> int:
        return sum(ep.n_turns for ep in self.episodes)


ProgressHook = Callable[[Episode, int, int], None]


async def run_batch(
    spec: BatchSpec,
    make_env: Callable[[], Env],
    backend: Backend,
    tokenizer: Tokenizer,
    store: Store | None,
    *,
    run_id: str | None = None,
    progress: bool = False,
    on_episode: ProgressHook | None = None,
) -> BatchResult:
    """Run every (task, sample) pair; each turn is committed to the store as it ends.

    Cancelling the task that awaits this (Ctrl-C, the dashboard's Cancel)
    keeps finished episodes and marks the ones in flight ``interrupted``.
    """
    run_id = run_id or spec.run_id or new_id()
    jobs = [(task, s) for task in spec.tasks for s in range(spec.samples)]
    if store is not None:
        if store.has_run(run_id):
            raise ConfigError(f"{store.path} has a run {run_id!r} already: choose another run name")
        store.save_run(run_id, spec.describe(), n_episodes=len(jobs))
    sem = asyncio.Semaphore(max(1, spec.concurrency))
    done: list[Episode] = []
    started: dict[str, Stepper] = {}
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), unit="ep", desc=f"run {run_id}", dynamic_ncols=True)
    t0 = time.perf_counter()

    async def one(task_id: str, sample: int) -> None:
        async with sem:
            stepper = Stepper(
                make_env(),
                backend,
                tokenizer,
                spec.config,
                task_id,
                sampling=_sampling_for(spec, task_id, sample),
                preset=spec.preset,
                run_id=run_id,
                group_id=f"{run_id}:{task_id}",
                sample_index=sample,
                tokenizer_name=spec.tokenizer,
                on_turn=store.save_turn if store is not None else None,
            )
            started[stepper.episode.id] = stepper
            episode = with_checks(await _drive(stepper), CheckOptions(tokenizer=tokenizer))
            if spec.tags:
                episode = episode.evolve(tags=spec.tags)
            del started[stepper.episode.id]
            if store is not None:
                episode = _store_or_fail(store, episode)
            done.append(episode)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(_postfix(done))
            if on_episode is not None:
                on_episode(episode, len(done), len(jobs))

    tasks = [asyncio.create_task(one(t, s)) for t, s in jobs]
    cancelled = False
    finished = False
    try:
        await asyncio.gather(*tasks)
        finished = True
    except asyncio.CancelledError:
        cancelled = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if store is not None:
            # In-flight episodes are kept with the turns they finished, even none.
            for stepper in started.values():
                snap = stepper.snapshot().evolve(status=Status.INTERRUPTED, reason="the batch was cancelled")
                store.finish_episode(snap)
    finally:
        if bar is not None:
            bar.close()
        if store is not None:
            # The run row tells the truth: a batch that stopped on an error did not finish.
            try:
                store.finish_run(run_id, "cancelled" if cancelled else "finished" if finished else "failed")
            except Exception as e:
                if finished or damaged(e, store.path) is None:
                    raise
                # the batch stops on a damaged database already: that error is the one to say
    result = BatchResult(run_id, done, time.perf_counter() - t0, cancelled)
    if cancelled:
        raise asyncio.CancelledError
    return result


def _store_or_fail(store: Store, episode: Episode) -> Episode:
    """Store a finished episode; when that fails, store it ``failed`` with the reason and no more, and go on.

    One episode the store cannot take (a bug in writing or indexing it) must not end the batch.
    """
    try:
        store.finish_episode(episode)
        return episode
    except Exception as e:  # a bug in storing this one episode: record it, keep the batch going
        error = damaged(e, store.path)
        if error is not None:  # not this episode's fault: nothing more can be stored, the batch stops
            raise error from None
        reason = textsafe.clean_text(f"could not be stored: {type(e).__name__}: {e}")
        stub = Episode(id=episode.id, env=episode.env, task_id=episode.task_id, run_id=episode.run_id,
                       group_id=episode.group_id, sample_index=episode.sample_index, preset=episode.preset,
                       config=episode.config, backend=episode.backend, tokenizer=episode.tokenizer,
                       status=Status.FAILED, reason=reason, created_at=episode.created_at,
                       findings=(Finding("internal_error", Severity.ERROR, reason,
                                         evidence={"traceback": traceback.format_exc()}),))
        store.finish_episode(stub)
        return stub


async def _drive(stepper: Stepper) -> Episode:
    """Run a stepper to the end; a bug in our code or the env marks it ``failed``."""
    try:
        return await drive(stepper)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # a bug: keep the batch going, but record it loudly as failed
        return stepper.fail(e)


def _sampling_for(spec: BatchSpec, task_id: str, sample: int) -> SamplingParams:
    # Distinct but reproducible seeds per episode, so samples of a task differ.
    # (Python's hash() of a str changes from process to process, so a digest is used.)
    digest = hashlib.sha256(f"{spec.seed}|{task_id}|{sample}".encode()).digest()
    seed = int.from_bytes(digest[:4], "little") & 0x7FFFFFFF if spec.sampling.seed is None else spec.sampling.seed
    return dataclasses.replace(spec.sampling, seed=seed)


def _postfix(done: list[Episode]) -> dict[str, Any]:
    n = len(done)
    mean = sum(e.reward for e in done) / n if n else 0.0
    return {"reward": f"{mean:.2f}", "completed": sum(e.status is Status.COMPLETED for e in done)}
