"""Watches of training runs' dump folders for the Runs tab: an engine ``Watcher`` in a thread of its own.

``WatchManager.start`` checks the form at once (folder, format, tokenizer, a writable database) and
raises a ``RollscopeError`` that says what to do; then the watch looks at its folder every
``interval`` seconds, importing and checking what is new into the app's database, until ``stop()``.
The tab polls ``status()``, a copy taken under a lock. One watch per folder: what a watch has read
is recorded in the store, so a later watch of the same folder reads nothing twice.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from engine import WATCH_FORMATS, ConfigError, RollscopeError, Store, TokenizerNotFound, Watcher, WatchEvent

WATCHING, STOPPING, STOPPED, FAILED = "watching", "stopping", "stopped", "failed"
ACTIVE = frozenset({WATCHING, STOPPING})
FORMATS = tuple(WATCH_FORMATS)
MAX_EVENTS = 200


@dataclass(frozen=True)
class WatchStatus:
    """A consistent copy of a watch's progress."""

    watch_id: str
    folder: str
    fmt: str
    run_id: str
    state: str
    events: tuple[WatchEvent, ...]
    """The most recent events, oldest first."""
    new: int
    """Episodes imported."""
    reads: int
    """Files read (whole, or a growing JSONL file up to its last line)."""
    failed: int
    """File reads that failed."""
    looks: int
    """Passes over the folder."""
    last_look: float | None
    started_at: float
    error: str = ""
    tokenizer_errors: dict[str, str] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


class WatchJob:
    """One folder watched in a daemon thread until ``stop()``; safe to poll from any thread."""

    def __init__(self, watch_id: str, watcher: Watcher, interval: float) -> None:
        self.watch_id = watch_id
        self.watcher = watcher
        self.interval = interval
        self.folder = str(watcher.folder)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._state = WATCHING
        self._events: deque[WatchEvent] = deque(maxlen=MAX_EVENTS)
        self._new = self._reads = self._failed = self._looks = 0
        self._last_look: float | None = None
        self._error = ""
        self._started = time.time()
        self._thread = threading.Thread(target=self._main, name=f"rollscope-{watch_id}", daemon=True)

    def start(self) -> WatchJob:
        self._thread.start()
        return self

    def stop(self) -> bool:
        """Ask the watch to stop after the file in hand; False when it already ended."""
        with self._lock:
            if self._state != WATCHING:
                return False
            self._state = STOPPING
        self._stop.set()
        return True

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the watch ends; False when ``timeout`` ran out first."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def status(self) -> WatchStatus:
        with self._lock:
            return WatchStatus(
                self.watch_id, self.folder, self.watcher.fmt, self.watcher.run_id, self._state, tuple(self._events),
                self._new, self._reads, self._failed, self._looks, self._last_look, self._started, self._error,
                dict(self.watcher.tokenizer_errors))

    def _on_event(self, event: WatchEvent) -> None:
        with self._lock:
            self._events.append(event)
            self._new += event.new
            self._reads += event.state in ("done", "partial")
            self._failed += event.state == "failed"

    def _on_look(self) -> None:
        with self._lock:
            self._looks += 1
            self._last_look = time.time()

    @property
    def active(self) -> bool:
        with self._lock:
            return self._state in ACTIVE

    def _main(self) -> None:
        try:
            self.watcher.run(self._stop, self._on_event, self.interval, on_look=self._on_look)
            end, error = STOPPED, ""
        except RollscopeError as e:
            end, error = FAILED, str(e)
        except Exception as e:  # a bug: say so in the page, keep the traceback in the server log
            traceback.print_exc(file=sys.stderr)
            end, error = FAILED, f"internal error: {type(e).__name__}: {e}"
        with self._lock:
            self._state, self._error = end, error


def _blank(value: str | None) -> str | None:
    return (value or "").strip() or None


class WatchManager:
    """The watches this server started, by id; thread-safe. ``interval`` and ``settle`` apply to each."""

    def __init__(self, interval: float = 2.0, settle: float = 2.0) -> None:
        self.interval = interval
        self.settle = settle
        self._watches: dict[str, WatchJob] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def start(self, store: Store, folder: str | None, fmt: str | None, tokenizer: str | None = None,
              run_name: str | None = None, reward_key: str | None = None) -> WatchJob:
        """Start watching ``folder``; a ``RollscopeError`` saying what to do when the form is wrong. ``reward_key``:
        the score of a reward model's dict that is the reward (``rollscope watch --reward-key``).

        Loading ``tokenizer`` (a folder or a hub id in the local cache) happens here, before the watch
        starts, so a wrong one is said at once. A folder that is already watched is a ``ConfigError``
        (``running(folder)`` finds that watch).
        """
        path = _blank(folder)
        if path is None:
            raise ConfigError("Type the path of the training run's dump folder (slime: its --dump-details folder "
                              "or rollout_data; AReaL: its rollout log folder; verl: trainer.rollout_data_dir).")
        if fmt not in FORMATS:
            raise ConfigError(f"Choose the dumps' format: {', '.join(FORMATS)} (not {fmt!r}).")
        if store.read_only:
            raise ConfigError(f"{store.path} is read-only here: a watch stores what it reads. Serve a database "
                              "this user can write.")
        where = Path(path).expanduser()
        if not where.is_dir():
            raise ConfigError(f"{where} is not a folder on this server: type the folder the trainer writes its "
                              "dumps to (the path as this server sees it).")
        existing = self.running(str(where))
        if existing is not None:
            raise ConfigError(f"{existing.folder} is already watched (run {existing.watcher.run_id}); stop that "
                              "watch to start it again with other settings.")
        spec = _blank(tokenizer)
        try:
            watcher = Watcher(store, where, fmt, run_id=_blank(run_name), tokenizer=spec, check=True,
                              settle=self.settle, reward_key=_blank(reward_key) or "")
        except TokenizerNotFound as e:
            raise ConfigError(f"{e}. Give a tokenizer folder, or a hub id already in this server's Hugging Face "
                              "cache; or leave it empty to import without token checks.") from None
        with self._lock:
            watch_id = f"watch-{next(self._ids)}"
            job = WatchJob(watch_id, watcher, self.interval)
            self._watches[watch_id] = job
        return job.start()

    def get(self, watch_id: str | None) -> WatchJob | None:
        with self._lock:
            return self._watches.get(watch_id or "")

    def running(self, folder: str) -> WatchJob | None:
        """The active watch of ``folder`` (the same folder however it is written), if any."""
        key = Path(folder).expanduser().resolve()
        with self._lock:
            return next((w for w in self._watches.values() if w.active and Path(w.folder).resolve() == key), None)

    def active(self) -> list[WatchJob]:
        """The watches still running, oldest first."""
        with self._lock:
            return [w for w in self._watches.values() if w.active]

    def latest(self) -> WatchJob | None:
        """What a reloaded page shows: the newest running watch, else the newest watch."""
        with self._lock:
            watches = list(self._watches.values())
        running = [w for w in watches if w.active]
        chosen = running or watches
        return chosen[-1] if chosen else None

    def stop_all(self, timeout: float = 10.0) -> None:
        """Stop every watch and wait for each to end (tests; a server's threads end with it)."""
        with self._lock:
            watches = list(self._watches.values())
        for w in watches:
            w.stop()
        for w in watches:
            w.wait(timeout)
