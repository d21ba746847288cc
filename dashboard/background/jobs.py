"""Background work for the dashboard: batches for Launch, the demo for Browse, an event loop for Step.

Gradio runs handlers on a thread pool and its own event loop; a batch can
run for hours and a local model blocks the thread it generates on, so
neither belongs there. ``BatchJob`` runs ``run_batch`` in a thread of its
own with its own event loop; the Launch tab polls ``status()`` (a copy
taken under a lock, so it never sees a half-updated job) and may
``cancel()`` from any thread. ``DemoJob`` builds the demo database
(``engine.build_demo``) the same way. ``LoopThread`` is one long-lived
event loop for the short async calls of manual stepping.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import threading
import time
import traceback
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from engine import (
    Backend,
    DemoReport,
    Episode,
    RollscopeError,
    RunPlan,
    Store,
    build_demo,
    load_tokenizer,
    new_id,
    run_batch,
)

T = TypeVar("T")

PREPARING, RUNNING, FINISHED, CANCELLING, CANCELLED, FAILED = (
    "preparing", "running", "finished", "cancelling", "cancelled", "failed")
ACTIVE = frozenset({PREPARING, RUNNING, CANCELLING})


@dataclass(frozen=True)
class EpisodeRow:
    """What the Launch table shows of a finished episode."""

    id: str
    task_id: str
    sample_index: int
    status: str
    reason: str
    reward: float
    n_turns: int
    n_tokens: int
    n_findings: int

    @classmethod
    def of(cls, ep: Episode) -> EpisodeRow:
        return cls(ep.id, ep.task_id, ep.sample_index, ep.status.value, ep.reason, ep.reward, ep.n_turns,
                   ep.n_tokens, len(ep.all_findings()))


@dataclass(frozen=True)
class JobStatus:
    """A consistent copy of a job's progress."""

    job_id: str
    state: str
    plan: str
    total: int
    rows: tuple[EpisodeRow, ...]
    run_id: str | None
    error: str
    started_at: float
    elapsed_s: float
    interrupted: int  # episodes in flight when the batch was cancelled (stored as interrupted)

    @property
    def done(self) -> int:
        return len(self.rows)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out

    @property
    def mean_reward(self) -> float | None:
        return sum(r.reward for r in self.rows) / len(self.rows) if self.rows else None


class BatchJob:
    """One Launch batch, run in its own thread and event loop, writing to ``store`` as it goes."""

    def __init__(self, job_id: str, plan: RunPlan, store: Store, backend: Backend | None = None) -> None:
        """``backend`` replaces the one the plan names (tests use it; a person never has to)."""
        self.job_id = job_id
        self.plan = plan
        self.store = store
        self._backend = backend
        self._lock = threading.Lock()
        self._state = PREPARING
        self._rows: list[EpisodeRow] = []
        self._error = ""
        self._run_id: str | None = None
        self._interrupted = 0
        self._started = time.time()
        self._ended: float | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancel_asked = False
        self._thread = threading.Thread(target=self._main, name=f"rollscope-batch-{job_id}", daemon=True)

    def start(self) -> BatchJob:
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the job ends; False when ``timeout`` ran out first."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def cancel(self) -> bool:
        """Ask the batch to stop: finished episodes stay, those in flight become ``interrupted``.

        Safe from any thread; False when the job already ended.
        """
        with self._lock:
            if self._state not in ACTIVE:
                return False
            self._cancel_asked = True
            self._state = CANCELLING
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            loop.call_soon_threadsafe(task.cancel)
        return True

    def status(self) -> JobStatus:
        with self._lock:
            end = self._ended if self._ended is not None else time.time()
            return JobStatus(self.job_id, self._state, self.plan.describe(), self.plan.total, tuple(self._rows),
                             self._run_id, self._error, self._started, end - self._started, self._interrupted)

    # -- the thread ---------------------------------------------------------

    def _set(self, **changes: Any) -> None:
        with self._lock:
            for k, v in changes.items():
                setattr(self, f"_{k}", v)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except RollscopeError as e:
            self._set(state=FAILED, error=str(e))
        except BaseException as e:  # a bug: show it in the page, keep the traceback in the server log
            traceback.print_exc(file=sys.stderr)
            self._set(state=FAILED, error=f"internal error: {type(e).__name__}: {e}")
        finally:
            self._set(ended=time.time())

    def _on_episode(self, ep: Episode, done: int, total: int) -> None:
        row = EpisodeRow.of(ep)
        with self._lock:
            self._rows.append(row)

    async def _run(self) -> None:
        plan = self.plan
        # Slow setup (tokenizer, a local model) happens here, off the page's
        # thread; a cancel during it is honoured before any episode starts.
        if self._backend is not None:
            tokenizer, backend = load_tokenizer(plan.backend.tokenizer_spec), self._backend
        else:
            tokenizer, backend = plan.backend.open(plan.make_env)
        spec = replace(plan.spec(), extra={**plan.extra, "launched_from": "dashboard"})
        run_id = plan.run_name or new_id()
        with self._lock:
            if self._cancel_asked:
                self._state = CANCELLED
                return
            self._run_id = run_id
            self._state = RUNNING
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.create_task(
                run_batch(spec, plan.make_env, backend, tokenizer, self.store, run_id=run_id,
                          on_episode=self._on_episode)
            )
            task = self._task
        try:
            await task
        except asyncio.CancelledError:
            # run_batch marked the episodes in flight interrupted; those never
            # started were never written.
            from engine import EpisodeFilter

            n = self.store.count(EpisodeFilter(run_id=run_id, status=("interrupted",)))
            self._set(interrupted=n, state=CANCELLED)
            return
        self._set(state=FINISHED)


class JobManager:
    """The batches this server started, by id; thread-safe."""

    def __init__(self) -> None:
        self._jobs: dict[str, BatchJob] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(self, plan: RunPlan, store: Store, backend: Backend | None = None) -> BatchJob:
        with self._lock:
            job_id = f"batch-{next(self._ids)}"
            job = BatchJob(job_id, plan, store, backend)
            self._jobs[job_id] = job
        return job.start()

    def get(self, job_id: str | None) -> BatchJob | None:
        with self._lock:
            return self._jobs.get(job_id or "")

    def latest(self) -> BatchJob | None:
        """The most recently started job (what a reloaded page shows)."""
        with self._lock:
            return next(reversed(self._jobs.values()), None)


@dataclass(frozen=True)
class DemoStatus:
    """A consistent copy of a demo build's progress: a line per part built, then its report or its error."""

    state: str
    lines: tuple[str, ...]
    report: DemoReport | None
    error: str
    elapsed_s: float

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


class DemoJob:
    """Browse's demo build, in a thread of its own like a Launch batch, writing to ``store`` as it goes."""

    def __init__(self, store: Store, qwen3: str | None = None) -> None:
        self.store = store
        self.qwen3 = qwen3
        self._lock = threading.Lock()
        self._state = RUNNING
        self._lines: list[str] = []
        self._report: DemoReport | None = None
        self._error = ""
        self._started = time.time()
        self._ended: float | None = None
        self._thread = threading.Thread(target=self._main, name="rollscope-demo", daemon=True)

    def start(self) -> DemoJob:
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the build ends; False when ``timeout`` ran out first."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def status(self) -> DemoStatus:
        with self._lock:
            end = self._ended if self._ended is not None else time.time()
            return DemoStatus(self._state, tuple(self._lines), self._report, self._error, end - self._started)

    def _line(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def _main(self) -> None:
        state, report, error = FAILED, None, ""
        try:
            report = build_demo(self.store, qwen3=self.qwen3, progress=self._line)
            state = FINISHED
        except RollscopeError as e:
            error = str(e)
        except BaseException as e:  # a bug: show it in the page, keep the traceback in the server log
            traceback.print_exc(file=sys.stderr)
            error = f"internal error: {type(e).__name__}: {e}"
        with self._lock:
            self._state, self._report, self._error, self._ended = state, report, error, time.time()


class DemoJobs:
    """The demo builds this server started, one at a time; thread-safe."""

    def __init__(self) -> None:
        self._latest: DemoJob | None = None
        self._lock = threading.Lock()

    def start(self, store: Store) -> DemoJob:
        """A new build, or the one still running."""
        with self._lock:
            if self._latest is None or not self._latest.status().active:
                self._latest = DemoJob(store).start()
            return self._latest

    def latest(self) -> DemoJob | None:
        with self._lock:
            return self._latest


class LoopThread:
    """An event loop running in a daemon thread; coroutines from any thread run on it.

    One loop for every stepping session, so HTTP backends keep one client
    (their clients belong to a loop) and a local model's generation never
    blocks Gradio's own loop.
    """

    def __init__(self, name: str = "rollscope-step-loop") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (its exception is raised here)."""
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


_shared: LoopThread | None = None
_shared_lock = threading.Lock()


def shared_loop() -> LoopThread:
    """The process's stepping loop, started on first use."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = LoopThread()
        return _shared
