"""Fanning work out to worker processes, or to a Ray cluster, with one writer in the calling process.

``Fanout(workers, ray)`` maps a module-level function over chunks of items and yields the results in
the order of the items, with a bounded number of chunks in flight (memory stays a few chunks above
one item, however long the input). ``workers=1`` without Ray runs in the calling process; more
workers are a local process pool (``spawn``: a tokenizer or torch in the parent never meets a forked
child); ``ray`` is a Ray address (``"local"`` starts a Ray on this machine with ``workers`` CPUs), and
needs the ``rollscope[ray]`` extra.

Workers die with their parent: each asks Linux to kill it when the thread that started it ends
(``PR_SET_PDEATHSIG``, when the pool is started from the main thread), and watches its parent's pid
from a thread as well (every ``WATCH_S``), so a parent killed with SIGKILL leaves no worker behind (nor
the multiprocessing resource tracker, which exits once no process holds its pipe). The command line
turns SIGTERM into an ordinary exit, which shuts the pool down (``engine.cli.main``).

``check_chunk`` is the work ``check``, ``import --check`` and ``watch`` fan out: the fidelity checks of
a chunk of episodes, returning only the findings (episode and turn level), which the writer puts back
on the episode it kept (``apply_findings``).
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from ..errors import ConfigError
from ..records.episode import Episode, Finding, TokenArrays

T = TypeVar("T")
R = TypeVar("R")

WATCH_S = 0.5
RAY_MISSING = "Ray is not installed: pip install 'rollscope[ray]' (or pip install ray), or leave out --ray"


def default_workers() -> int:
    """The CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for x in items:
        chunk.append(x)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class Fanout:
    """A pool of workers (local processes or Ray) that maps a function over chunks, in order."""

    def __init__(self, workers: int = 1, ray: str | None = None) -> None:
        if workers < 1:
            raise ConfigError(f"--workers must be 1 or more, got {workers}")
        self.workers = workers
        self.ray_address = ray
        self._pool: ProcessPoolExecutor | None = None
        self._ray: Any = None
        self._remote: dict[Callable[..., Any], Any] = {}

    def describe(self) -> str:
        if self.ray_address is not None:
            return f"Ray ({self.ray_address})"
        return "this process" if self.workers == 1 else f"{self.workers} worker processes"

    @property
    def inline(self) -> bool:
        return self.ray_address is None and self.workers == 1

    def _start_ray(self) -> Any:
        if self._ray is None:
            try:
                import ray
            except ImportError:
                raise ConfigError(RAY_MISSING) from None
            if not ray.is_initialized():
                kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
                if self.ray_address in (None, "", "local"):
                    kw["num_cpus"] = self.workers
                else:
                    kw["address"] = self.ray_address
                try:
                    ray.init(**kw)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise ConfigError(f"cannot reach the Ray cluster at {self.ray_address!r}: {e}") from None
            self._ray = ray
        return self._ray

    def map(self, fn: Callable[[list[T]], list[R]], items: Iterable[T], *, chunk: int = 8,
            window: int | None = None, weight: Callable[[T], int] | None = None, budget: int = 0) -> Iterator[R]:
        """``fn`` over ``items`` in chunks of ``chunk``; results in item order. ``fn`` takes a list and returns
        one result per item; it must be a module-level function (it is sent to the workers by name). At most
        ``window`` chunks are out at a time, and with ``weight``, items weighing ``budget`` at most (and one chunk
        alone however much it weighs)."""
        it: Iterator[T] = iter(items)
        here = self.inline
        if self.ray_address is None and not here:
            head = list(itertools.islice(it, chunk * self.workers + 1))
            here = len(head) <= chunk * self.workers  # one round's worth: not worth starting processes for
            it = itertools.chain(head, it)
        if here:
            for c in _chunks(it, chunk):
                yield from fn(c)
            return
        window = window or 2 * self.workers
        pending: deque[tuple[Any, int]] = deque()
        held = 0
        submit, result = self._submitter(fn)
        for c in _chunks(it, chunk):
            w = sum(map(weight, c)) if weight is not None else 0
            pending.append((submit(c), w))
            held += w
            while pending and (len(pending) >= window or held > budget):
                out, w = pending.popleft()
                held -= w
                yield from result(out)
        while pending:
            yield from result(pending.popleft()[0])

    def _submitter(self, fn: Callable[[list[T]], list[R]]) -> tuple[Callable[[list[T]], Any], Callable[[Any], list[R]]]:
        if self.ray_address is not None:
            ray = self._start_ray()
            remote = self._remote.get(fn)
            if remote is None:
                remote = self._remote[fn] = ray.remote(num_cpus=1)(fn)
            return (lambda c: remote.remote(c)), (lambda ref: ray.get(ref))
        if self._pool is None:
            import multiprocessing

            # The kernel's parent-death signal follows the thread that starts a worker: asked for only when that
            # is the main thread (a background thread's end would kill the workers with it).
            main = threading.current_thread() is threading.main_thread()
            self._pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_init, initargs=(os.getpid(), main))

        pool = self._pool

        def submit(c: list[T]) -> Future[list[R]]:
            return pool.submit(fn, c)

        return submit, (lambda fut: fut.result())

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None
        self._remote.clear()

    def __enter__(self) -> Fanout:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _worker_init(parent: int | None = None, deathsig: bool = False) -> None:
    """A worker is one CPU's worth: no tokenizer thread pool of its own (the local model, when a check
    recomputes logprobs, keeps torch to one thread itself). It dies with ``parent``: by the kernel's
    parent-death signal (``deathsig``, Linux) and by a thread that watches the parent's pid."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if parent is None:
        return
    if deathsig and sys.platform.startswith("linux"):
        _parent_death_signal()
    if os.getppid() != parent:  # the parent died before this could be set up
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), name="rollscope-parent-watch", daemon=True).start()


def _parent_death_signal() -> None:
    import ctypes

    PR_SET_PDEATHSIG = 1
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the watching thread is enough


def _watch_parent(parent: int) -> None:
    """Exit at once when the parent is gone (its child then belongs to another process)."""
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    os._exit(1)


# -- the checks, fanned out -------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckJob:
    """One episode to check, with what to check it with (a tokenizer name, not a tokenizer: each worker
    loads its own once)."""

    episode: Episode
    tokenizer: str | None = None
    recompute_logprobs: bool = False
    model: str | None = None
    threshold: float = 0.5
    top_logprobs: int | None = None
    """With ``recompute_logprobs``: alternatives recomputed per trained token (None: as recorded, else 5)."""


@dataclass(frozen=True)
class Checked:
    """The findings of one checked episode, episode-level and per turn, and a tokenizer that would not load."""

    episode_id: str
    findings: tuple[Finding, ...]
    turn_findings: tuple[tuple[Finding, ...], ...]
    tokenizer_error: tuple[str, str] | None = None
    checked: str | None = None
    """The checks' version (``Episode.checked``)."""
    tokens: TokenArrays | None = None
    """The episode's arrays with the entropy and top K the model recomputed (``recompute_logprobs``), if it ran."""


_CACHES: dict[str | None, Any] = {}


def check_chunk(jobs: list[CheckJob]) -> list[Checked]:
    """The checks of each job's episode (in a worker, or inline)."""
    from ..backends.tokenizers import TokenizerCache
    from . import CheckOptions, with_checks
    from .recompute import recomputed

    out = []
    for job in jobs:
        cache = _CACHES.get(job.tokenizer)
        if cache is None:
            cache = _CACHES[job.tokenizer] = TokenizerCache(job.tokenizer)
        before = dict(cache.errors)
        opts = CheckOptions(tokenizer=cache.get(job.episode), recompute_logprobs=job.recompute_logprobs,
                            model=job.model, logprob_threshold=job.threshold)
        # Filled first: the logprob check then reuses the same teacher-forced pass.
        filled = recomputed(job.episode, job.model, job.top_logprobs) if job.recompute_logprobs else None
        checked = with_checks(job.episode if filled is None else job.episode.evolve(tokens=filled), opts)
        new_error = next(((k, v) for k, v in cache.errors.items() if k not in before), None)
        out.append(Checked(checked.id, checked.findings, tuple(t.findings for t in checked.turns), new_error,
                           checked.checked, filled))
    return out


def apply_findings(ep: Episode, checked: Checked) -> Episode:
    """``ep`` carrying the findings a worker found for it."""
    if checked.episode_id != ep.id or len(checked.turn_findings) != len(ep.turns):
        raise ValueError(f"findings of {checked.episode_id} do not fit episode {ep.id}")
    turns = tuple(t if t.findings == f else replace(t, findings=f) for t, f in zip(ep.turns, checked.turn_findings))
    tokens = ep.tokens if checked.tokens is None else checked.tokens
    return ep.evolve(findings=checked.findings, turns=turns, checked=checked.checked,
                     checked_arrays=tokens.digest() if checked.checked else None, tokens=tokens)


def check_episodes(fanout: Fanout, episodes: Iterable[Episode], *, tokenizer: str | None = None,
                   recompute_logprobs: bool = False, model: str | None = None, threshold: float = 0.5,
                   top_logprobs: int | None = None,
                   errors: dict[str, str] | None = None, chunk: int = 4) -> Iterator[Episode]:
    """Each episode with its checks' findings, in order, the checks run by ``fanout``'s workers.

    The episodes are held here while their chunk is out (a window of a few chunks), so the workers send
    back findings only. Tokenizers that would not load are added to ``errors`` (name: why).
    """
    held: deque[Episode] = deque()

    def jobs() -> Iterator[CheckJob]:
        for ep in episodes:
            held.append(ep)
            yield CheckJob(ep, tokenizer, recompute_logprobs, model, threshold, top_logprobs)

    for checked in fanout.map(check_chunk, jobs(), chunk=chunk):
        ep = held.popleft()
        if checked.tokenizer_error is not None and errors is not None:
            errors.setdefault(*checked.tokenizer_error)
        yield apply_findings(ep, checked)

