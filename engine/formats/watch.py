"""``rollscope watch``: import and check a training run's dumps as the run writes them.

A ``Watcher`` polls one folder for the dump files of a format (slime's ``.pt`` rollout dumps, AReaL's and
verl's ``.jsonl``) and imports what is new into the store, checked (on a ``Fanout``'s workers), in one run
(``run_id``) with each episode's rollout step, so the run view can plot the run step by step.

- A ``.pt`` dump is read once it is whole: a complete zip (``torch.save`` writes the zip's directory
  last). A half-written one is ``waiting``.
- A ``.jsonl`` dump is read up to its last complete line, and again from there when it grows. A last
  line without its newline is read only when it is a whole JSON record and the file has not changed for
  ``settle`` seconds; its newline, when it comes, ends that line and starts no new one. A last line cut
  mid-record is never read before its newline: every line keeps the number (and its record the id) an
  import of the finished file gives it. One that stays cut (a writer that stopped) is said once.
- What was read is recorded in the store's ``watched_files`` (size, time, bytes and lines read), in the
  same database as the episodes: a restarted watch reads nothing twice. A ``.pt`` file rewritten later
  (another size or time) is read again; its episodes keep their ids, so only new samples are added.
- A file that cannot be read (corrupt, unsafe) is ``failed`` with the reason, and tried again when it
  changes; the other files go on.
"""

from __future__ import annotations

import hashlib
import threading
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import ConfigError, RollscopeError
from ..store import Store, WatchedFile
from ..tokens.tokenizer import Tokenizer
from .limits import MAX_RECORD_MB, record_limit

WATCH_FORMATS = {"slime": (".pt",), "areal": (".jsonl",), "verl": (".jsonl",)}
BLOCK = 1 << 20
WATCH_BATCH = 1024
"""Episodes a watch commits at a time: a dashboard's watches share its store, whose lock a batch holds while it
writes (opening an episode and Launch's turns wait for it), and the episodes show as each batch commits."""


@dataclass(frozen=True)
class WatchEvent:
    """What one poll did with one file."""

    path: str
    state: str
    """done, partial, waiting or failed."""
    new: int = 0
    present: int = 0
    skipped: int = 0
    message: str = ""
    seconds: float = 0.0
    """How long reading, checking and storing it took."""
    at: float = field(default_factory=time.time)

    def line(self) -> str:
        what = {"done": "read", "partial": "read so far", "waiting": "still being written", "failed": "failed"}
        counts = f": {self.new} new, {self.present} already stored, {self.skipped} malformed" if self.state in (
            "done", "partial") else ""
        return f"{self.path}: {what.get(self.state, self.state)}{counts}{f' ({self.message})' if self.message else ''}"


def default_run_id(folder: Path) -> str:
    """The run a watched folder's episodes go to: its name and a short hash of its full path."""
    full = str(folder.resolve())
    return f"{folder.resolve().name or 'run'}-{hashlib.sha256(full.encode()).hexdigest()[:6]}"


def zip_complete(path: Path) -> bool:
    """Whether a zip file (``torch.save``'s format) has its central directory: written whole."""
    try:
        with zipfile.ZipFile(path) as z:
            return bool(z.namelist())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return False


def _ends_mid_line(path: Path, offset: int) -> bool:
    """Whether the byte before ``offset`` is not a newline: a read that stopped there took a last line that had
    none (a whole record), and what follows up to the next newline is the rest of that line."""
    if offset <= 0:
        return False
    with path.open("rb") as f:
        f.seek(offset - 1)
        return f.read(1) != b"\n"


def _complete_lines(path: Path, start: int, size: int) -> tuple[int, int]:
    """(end of the last complete line at or after ``start``, lines up to it), reading ``start:size``."""
    end, n = start, 0
    with path.open("rb") as f:
        f.seek(start)
        pos = start
        while pos < size:
            block = f.read(min(BLOCK, size - pos))
            if not block:
                break
            k = block.rfind(b"\n")
            if k >= 0:
                end = pos + k + 1
                n += block.count(b"\n")
            pos += len(block)
    return end, n


class Watcher:
    """Polls ``folder`` for ``fmt`` dumps and imports what is ready (``poll``), or keeps doing so (``run``)."""

    def __init__(self, store: Store, folder: str | Path, fmt: str, *, run_id: str | None = None,
                 tokenizer: Tokenizer | str | None = None, check: bool = True, fanout: Any = None, settle: float = 2.0,
                 env: str | None = None, max_record_mb: float = MAX_RECORD_MB, reward_key: str = "") -> None:
        if fmt not in WATCH_FORMATS:
            raise ConfigError(f"watch reads {', '.join(WATCH_FORMATS)} dumps, not {fmt!r}")
        self.store, self.folder, self.fmt = store, Path(folder), fmt
        if not self.folder.is_dir():
            raise ConfigError(f"{self.folder} is not a folder: watch a training run's dump folder")
        self.run_id = run_id or default_run_id(self.folder)
        self.tokenizer, self.check, self.fanout, self.settle, self.env = tokenizer, check, fanout, settle, env
        record_limit(max_record_mb)
        self.max_record_mb, self.reward_key = max_record_mb, reward_key
        self._seen: dict[str, tuple[int, float, float]] = {}  # path -> (size, mtime, when first seen so)
        self._cut: dict[str, tuple[int, int, float]] = {}  # path -> (where its cut last line starts, size, mtime)
        self.tokenizer_errors: dict[str, str] = {}
        saved = self.folder / "tokenizer"
        if tokenizer is None and fmt == "slime" and saved.is_dir():
            tokenizer = str(saved)  # what slime's --dump-details saves beside its dumps
        if isinstance(tokenizer, str):  # loaded once here, not at every file
            from ..backends.tokenizers import load_tokenizer

            self.tokenizer = load_tokenizer(tokenizer)

    def files(self) -> list[Path]:
        """The folder's dump files of this format, oldest first (slime: ``rollout_data/`` when it has one)."""
        base = self.folder
        if self.fmt == "slime":
            base = self.folder / "rollout_data" if (self.folder / "rollout_data").is_dir() else self.folder
            found = [p for p in base.glob("*.pt") if p.is_file()]
        else:
            found = [p for p in base.rglob("*.jsonl") if p.is_file() and not p.name.startswith(".")]
        return sorted(found, key=lambda p: (p.stat().st_mtime, str(p)))

    def _settled(self, key: str, size: int, mtime: float) -> bool:
        """Whether the file has not changed for ``settle`` seconds: by its time, or as seen by earlier polls.

        Its time is the file server's clock, compared with this one's: a skew between them only changes when a
        last line that is a whole JSON record is read, since one that is not is never read before its newline."""
        if time.time() - mtime >= self.settle:
            return True
        before = self._seen.get(key)
        now = time.monotonic()
        if before is None or before[:2] != (size, mtime):
            self._seen[key] = (size, mtime, now)
            return False
        return now - before[2] >= self.settle

    def poll(self) -> list[WatchEvent]:
        """One pass over the folder: every file with something ready is read; returns what happened."""
        events = []
        for path in self.files():
            try:
                event = self._poll_file(path)
            except FileNotFoundError:
                continue  # removed (or renamed) between the listing and the read
            if event is not None:
                events.append(event)
        return events

    def _run_of(self, path: Path) -> str:
        return f"{self.run_id}:eval" if path.stem.startswith("eval") else self.run_id

    def _poll_file(self, path: Path) -> WatchEvent | None:
        key = str(path.resolve())
        st = path.stat()
        known = self.store.watched_file(key)
        if self.fmt == "slime":
            if known is not None and (known.size, known.mtime) == (st.st_size, st.st_mtime) and known.state in (
                    "done", "failed"):
                return None
            if not zip_complete(path):
                if known is None or known.state != "waiting":
                    self._record(key, path, st, known, 0, 0, "waiting", message="not yet written whole")
                    return WatchEvent(key, "waiting", message="not yet written whole")
                return None
            return self._import(key, path, st, known, None, 0, "done")
        return self._poll_lines(key, path, st, known)

    def _poll_lines(self, key: str, path: Path, st: Any, known: WatchedFile | None) -> WatchEvent | None:
        """A JSONL dump: its complete lines from where the last read stopped, numbered on from there."""
        start, line = 0, 1
        if known is not None and known.state in ("partial", "done") and st.st_size >= known.offset:
            start, line = known.offset, known.lines + 1
        if st.st_size == start or self._cut.get(key) == (start, st.st_size, st.st_mtime):
            return None
        rest = _ends_mid_line(path, start)
        if rest:
            line -= 1  # the first bytes finish the line read last, which had no newline
        end, n = _complete_lines(path, start, st.st_size)
        note = ""
        if end < st.st_size and not (rest and end == start) and self._settled(key, st.st_size, st.st_mtime):
            last = line + n
            whole = self._whole_record(path, end, st.st_size, f"{path}:{last}")
            if whole:
                end, n = st.st_size, n + 1  # a last line without its newline, whole, and the file no longer changes
            elif whole is not None:
                said = self._cut.get(key)
                self._cut[key] = (end, st.st_size, st.st_mtime)
                if said is None or said[0] != end:
                    note = (f"its last line, line {last}, has no newline and is not a whole JSON record: left "
                            "unread, it is read when it completes")
        if end == start:
            return WatchEvent(key, "waiting", message=note) if note else None
        from . import LineRange

        event = self._import(key, path, st, known, LineRange(start, line, end), line - 1 + n, "partial", end)
        return replace(event, message="; ".join(m for m in (event.message, note) if m)) if note else event

    def _whole_record(self, path: Path, start: int, size: int, where: str) -> bool | None:
        """Whether the bytes ``start:size`` (a last line without its newline) are a whole JSON object; None when
        they are blank (a line that may yet hold a record)."""
        from .base import json_object

        if size - start > record_limit(self.max_record_mb):
            return False  # read, and skipped as too long, once its newline comes
        with path.open("rb") as f:
            f.seek(start)
            raw = f.read(size - start)
        try:
            obj, _ = json_object(raw, where)
        except RollscopeError:
            return False
        return None if obj is None else True

    def _import(self, key: str, path: Path, st: Any, known: WatchedFile | None, lines: Any, n_lines: int, state: str,
                offset: int | None = None) -> WatchEvent:
        from . import import_path

        t0 = time.perf_counter()
        try:
            report = import_path(path, self.fmt, self.store, tokenizer=self.tokenizer, env=self.env,
                                 run_id=self._run_of(path), check=self.check, fanout=self.fanout, lines=lines,
                                 max_record_mb=self.max_record_mb, batch=WATCH_BATCH, reward_key=self.reward_key)
        except RollscopeError as e:
            self._record(key, path, st, known, 0, 0, "failed", message=str(e))
            return WatchEvent(key, "failed", message=str(e), seconds=time.perf_counter() - t0)
        self.tokenizer_errors.update(report.tokenizer_errors)
        self._record(key, path, st, known, st.st_size if offset is None else offset, n_lines, state, report.new,
                     report.skipped, "; ".join(str(e) for e in report.errors[:3]))
        differ = (f"{report.differ} already stored differ{'s' if report.differ == 1 else ''} from the file in "
                  f"{report.fields()}: left as {'it was' if report.differ == 1 else 'they were'} (`rollscope import "
                  "--replace` writes the file's over them)") if report.differ else ""
        return WatchEvent(key, state, report.new, report.already_present, report.skipped, message=differ,
                          seconds=time.perf_counter() - t0)

    def _record(self, key: str, path: Path, st: Any, known: WatchedFile | None, offset: int, lines: int, state: str,
                n: int = 0, skipped: int = 0, message: str = "") -> None:
        total = (known.n_episodes if known is not None and state == "partial" else 0) + n
        self.store.record_watched(WatchedFile(key, self._run_of(path), self.fmt, st.st_size, st.st_mtime, offset,
                                              lines, state, total, skipped, message[:500]))

    def run(self, stop: threading.Event | None = None, on_event: Callable[[WatchEvent], None] | None = None,
            interval: float = 2.0, on_look: Callable[[], None] | None = None) -> None:
        """Poll every ``interval`` seconds until ``stop`` is set (or forever); ``on_event`` hears each event,
        ``on_look`` each finished pass."""
        stop = stop or threading.Event()
        while not stop.is_set():
            for event in self.poll():
                if on_event is not None:
                    on_event(event)
            if on_look is not None:
                on_look()
            stop.wait(interval)
