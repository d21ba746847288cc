"""Step-tab sessions: one hand-driven conversation per browser session, kept on the server.

A ``HandStepper`` holds an env, a backend and a tokenizer: not values to
put in a ``gr.State`` (Gradio may copy those). The page keeps a session
key; ``Sessions`` maps keys to live conversations, forgetting the least
recently used beyond a limit. Each session runs one action at a time
(a second click waits for the first), and every async engine call runs on
the shared stepping loop (see ``jobs.LoopThread``).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from engine import (
    BackendSettings,
    ConfigError,
    Episode,
    Generation,
    HandStart,
    HandStepper,
    Store,
    Turn,
    UserSettings,
    plan_fork,
    plan_step,
)

from .jobs import LoopThread, shared_loop

GENERATE_TIMEOUT_S = 600.0  # a local model on a laptop CPU can take minutes for a long turn
MAX_SESSIONS = 32


@dataclass
class Generating:
    """A generation in flight: what has arrived so far (from backends that stream it) and how to stop it."""

    future: concurrent.futures.Future[Generation]
    turn: int
    started: float = field(default_factory=time.perf_counter)
    tokens: int = 0
    text: str = ""
    first_token_s: float | None = None
    prefill: tuple[int, int, int] | None = None  # (prompt tokens read, of how many, from the cache), local model

    def prefilled(self, done: int, total: int, cached: int) -> None:
        """The backend's prefill hook (called from the model's thread)."""
        self.prefill = (done, total, cached)

    def progress(self, tokens: int, text: str) -> None:
        """The backend's progress hook (called from the model's thread)."""
        if self.first_token_s is None:
            self.first_token_s = time.perf_counter() - self.started
        self.tokens, self.text = tokens, text

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @property
    def running(self) -> bool:
        return not self.future.done()


@dataclass
class StepSession:
    """One conversation being stepped by hand, and what the page shows of it."""

    key: str
    hand: HandStepper
    tokenizer: Any
    backend_label: str
    saved_id: str | None = None
    last_turn: Turn | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    touched: float = field(default_factory=time.time)
    generating: Generating | None = None

    def episode(self) -> Episode:
        return self.hand.episode()

    @property
    def fork_turn(self) -> int | None:
        return self.hand.report.turn if self.hand.report is not None else None


class Sessions:
    """Live Step conversations by key; thread-safe, bounded."""

    def __init__(self, limit: int = MAX_SESSIONS, loop: LoopThread | None = None) -> None:
        self.limit = limit
        self._loop = loop
        self._items: OrderedDict[str, StepSession] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def loop(self) -> LoopThread:
        return self._loop or shared_loop()

    def _add(self, hand: HandStepper, tokenizer: Any, label: str) -> StepSession:
        session = StepSession(uuid.uuid4().hex, hand, tokenizer, label)
        with self._lock:
            self._items[session.key] = session
            while len(self._items) > self.limit:
                self._items.popitem(last=False)
        return session

    def get(self, key: str | None) -> StepSession:
        with self._lock:
            session = self._items.get(key or "")
            if session is not None:
                self._items.move_to_end(session.key)
                session.touched = time.time()
        if session is None:
            raise ConfigError("no conversation yet (or it was forgotten): start one or fork an episode")
        return session

    def drop(self, key: str | None) -> None:
        with self._lock:
            self._items.pop(key or "", None)

    # -- starting -------------------------------------------------------------

    def start_new(self, env: Any, task: Any, preset: Any, settings: Any, user: str,
                  backend: BackendSettings, user_model: UserSettings | None = None) -> StepSession:
        """A fresh conversation on one task of an env; ``settings`` changes the preset's knobs."""
        return self._start(plan_step(env, task, preset, settings, user, backend, user_model))

    def start_fork(self, store: Store, episode_id: Any, turn: Any, user: str, settings: Any,
                   backend: BackendSettings, user_model: UserSettings | None = None) -> StepSession:
        """A fork of a stored episode at ``turn`` (``engine.plan_fork``)."""
        return self._start(plan_fork(store, episode_id, turn, user, settings, backend, user_model))

    def _start(self, start: HandStart) -> StepSession:
        hand = self.loop.run(start.start(), GENERATE_TIMEOUT_S)
        return self._add(hand, start.tokenizer, start.backend_label)

    # -- stepping ---------------------------------------------------------------

    def start_generate(self, key: str | None) -> tuple[StepSession, Generating]:
        """Ask for the next assistant turn without waiting: the returned ``Generating`` follows it."""
        session = self.get(key)
        with session.lock:
            if session.hand.done:
                raise ConfigError("the episode has ended: save it, or start or fork another")
            if session.generating is not None and session.generating.running:
                raise ConfigError("a generation is already running: wait for it, or Cancel it")
            run = Generating(concurrent.futures.Future(), session.hand.turn)
            run.future = self.loop.submit(session.hand.generate(on_progress=run.progress,
                                                                        on_prefill=run.prefilled))
            session.generating = run
        return session, run

    def generate(self, key: str | None, timeout: float = GENERATE_TIMEOUT_S) -> tuple[StepSession, Generation]:
        """Ask for the next assistant turn and wait for it."""
        session, run = self.start_generate(key)
        try:
            return session, run.future.result(timeout)
        except concurrent.futures.TimeoutError:
            run.future.cancel()
            raise ConfigError(f"the generation took longer than {timeout:.0f} s and was cancelled") from None

    def cancel(self, key: str | None) -> Generating | None:
        """Stop the generation in flight (the backend drops it); the one that was running, if any."""
        try:
            session = self.get(key)
        except ConfigError:
            return None
        run = session.generating
        if run is not None and run.running:
            run.future.cancel()
            return run
        return None

    def commit(self, key: str | None, text: str, user_reply: str | None) -> tuple[StepSession, Turn]:
        session = self.get(key)
        if session.generating is not None and session.generating.running:
            raise ConfigError("a generation is running: wait for it, or Cancel it, before committing")
        with session.lock:
            turn = self.loop.run(session.hand.commit(text or "", user_reply), GENERATE_TIMEOUT_S)
            session.last_turn = turn
        return session, turn

    def save(self, key: str | None, store: Store) -> tuple[StepSession, Episode]:
        """Store the conversation (checks run first); saving again replaces the earlier copy."""
        session = self.get(key)
        with session.lock:
            ep = session.hand.to_save(session.tokenizer)
            if store.has_episode(ep.id):
                # Tags, star and note set in the Episode tab since the last save stay.
                old = store.get_episode(ep.id)
                ep = ep.evolve(tags=old.tags, starred=old.starred, note=old.note)
            store.save_episode(ep)
            session.saved_id = ep.id
        return session, ep
