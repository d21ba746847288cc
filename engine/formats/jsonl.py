"""Rollscope's own JSONL: one episode per line, lossless.

Each line is ``Episode.to_dict()``: at least ``id, env, task_id, status,
reward, turn_rewards, messages, tokens, loss_mask, logprobs, prompt_len,
tools, turns`` plus the rest of the record and ``schema_version``. NaN
logprobs are written as ``null``. A turn's prompt text that repeats the turn
before it is written as pieces of it (``records.prompts``; ``full_prompts``
writes every one whole); reading restores it.

``packed_episodes`` reads a file in chunks of lines, each parsed and each episode packed into the rows the store
writes (``store.packing``): on worker processes, the process that writes does little but SQL.
"""

from __future__ import annotations

import functools
import json
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ..checks.diagnosis import read_episode
from ..errors import FormatError
from ..records import prompts
from ..records.bounds import within_bounds
from ..records.episode import Episode
from ..store.packing import PackedEpisode, pack_episode
from .base import ImportContext, discover, first_record_is_ours, json_lines, json_object, mark_replaced, raw_lines
from .limits import MAX_RECORD_MB, bounded_lines, over_limit
from .sniff import start_of_text

if TYPE_CHECKING:
    from ..checks.fanout import Fanout

# What trainers read from every line (the schema requires every field of the record).
REQUIRED = ("id", "env", "task_id", "status", "reward", "turn_rewards", "messages", "tokens", "loss_mask",
            "logprobs", "prompt_len", "tools", "turns")


def dumps(ep: Episode, full_prompts: bool = False) -> str:
    d = ep.to_dict()
    if not full_prompts:
        d["turns"] = prompts.compact_turns(d["turns"])
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def write(episodes: Iterable[Episode], out: IO[str], full_prompts: bool = False) -> int:
    n = 0
    for ep in episodes:
        out.write(dumps(ep, full_prompts))
        out.write("\n")
        n += 1
    return n


def parse_line(line: str, where: str) -> Episode:
    """One line to an Episode, or a FormatError naming the field at fault."""
    d, _ = json_object(line.encode("utf-8", "surrogatepass"), where)
    if d is None:
        raise FormatError("blank line", where)
    return parse_dict(d, where)


def parse_dict(d: dict[str, Any], where: str) -> Episode:
    """One decoded record to an Episode, or a FormatError naming the field at fault.

    ``Episode.from_dict`` reads strictly: every field checked, the first bad one named; then every token position
    the record gives must lie in its token array (``records.bounds``).
    """
    try:
        return within_bounds(read_episode(d))
    except FormatError as e:
        raise e.at(where) from None
    except (KeyError, TypeError, ValueError) as e:
        field_name = e.args[0] if isinstance(e, KeyError) else ""
        raise FormatError(f"malformed record ({type(e).__name__}: {e})", where, str(field_name)) from None


@dataclass
class ReadReport:
    """What an import read: good episodes and the lines it skipped, with why."""

    episodes: int = 0
    errors: list[FormatError] = field(default_factory=list)


def read(path: str | Path, report: ReadReport | None = None, max_record: int = int(MAX_RECORD_MB * 2**20)
         ) -> Iterator[Episode]:
    """Stream episodes from a file; malformed lines, and lines over ``max_record`` bytes, go to ``report.errors``
    and are skipped."""
    p = Path(path)
    if not p.is_file():
        raise FormatError("no such file", str(p))
    rep = report if report is not None else ReadReport()
    ctx = ImportContext("jsonl")
    first = True
    with p.open("rb") as f:
        start_of_text(f, p)
        for lineno, raw in enumerate(bounded_lines(f, max_record), 1):
            where = f"{p}:{lineno}"
            if isinstance(raw, int):
                rep.errors.append(over_limit(raw, max_record, "the line", where))
                continue
            try:
                d, n = json_object(raw, where)
            except FormatError as e:
                rep.errors.append(e)
                continue
            if d is None:
                continue
            if first:  # a file of another format is refused whole, saying which reads it, not a line at a time
                first = False
                first_record_is_ours(d, p, "jsonl")
            try:
                ctx.replaced[where] = n
                ep = ctx.mark_replaced(parse_dict(d, where), where)
            except FormatError as e:
                rep.errors.append(e)
                continue
            rep.episodes += 1
            yield ep



def import_episodes(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """The registry's importer: every ``*.jsonl`` under ``path``, errors to ``ctx``."""
    for f in discover(path, (".jsonl",)):
        for where, d in json_lines(f, ctx):
            try:
                ep = parse_dict(d, where)
            except FormatError as e:
                ctx.skip(e)
                continue
            yield ctx.mark_replaced(ep, where)


# -- reading, in this process or on workers -----------------------------------------------------------------------

LINES_A_CHUNK = 32
"""Lines a worker parses and packs at a time (fewer when they hold more than ``CHUNK_BYTES``)."""
CHUNK_BYTES = 4 << 20
"""Bytes of lines a chunk holds at most (one longer line goes alone)."""
CHUNKS_AHEAD = 128
"""Chunks given to the workers before the first of them is written: a transaction's worth of small episodes
(``Store.save_batches``), so the workers pack the next batch while this process writes one."""
BYTES_AHEAD = 192 << 20
"""Bytes of lines given to the workers before the first of them is written, at most (or one chunk alone): what a file
of long episodes (1.8 MB a line for 60 retail turns) holds in memory while it is read."""

WORKERS_FROM_BYTES = 8 << 20
"""Less JSONL than this is read in the writing process: starting the workers (about a second each, spawned, while
this process goes on) costs more than they save."""
MOST_WORKERS = 4
"""Workers an import starts by default (one per CPU up to this): one process writes, and more than this many
readers wait for it."""


def worth_workers(path: Path) -> bool:
    """Whether the JSONL under ``path`` is worth reading on workers (``WORKERS_FROM_BYTES``)."""
    total = 0
    try:
        for f in discover(path, (".jsonl",)):
            total += f.stat().st_size
            if total >= WORKERS_FROM_BYTES:
                return True
    except (FormatError, OSError):
        pass  # said by the reading itself
    return False


# A line as it is packed: its position, its bytes (or its length, over the limit), the record limit, the run the
# episodes go in (``import --run``) and the pid of the process that writes them.
_Line = tuple[str, "bytes | int", int, "str | None", int]
# What packing gives back for a line: the packed episode, a skipped line's error (detail, position, field), or None
# for a blank line.
_Packed = PackedEpisode | tuple[str, str, str] | None


def read_line(raw: bytes, where: str, run_id: str | None = None) -> Episode | None:
    """One line of a JSONL file as an import reads it (None for a blank line), with ``run_id`` when its record names
    no run; a FormatError for a line that is not a record."""
    d, n = json_object(raw, where)
    if d is None:
        return None
    ep = mark_replaced(parse_dict(d, where), where, n)
    return ep.evolve(run_id=run_id) if run_id and not ep.run_id else ep


def _reread(raw: bytes, where: str, run_id: str | None) -> Episode:
    ep = read_line(raw, where, run_id)
    assert ep is not None
    return ep


def pack_lines(lines: list[_Line]) -> list[_Packed]:
    """A chunk of ``packed_episodes``: each line parsed as ``import_episodes`` parses it and packed as the store packs
    an episode (``store.packing.pack_episode``)."""
    out: list[_Packed] = []
    for where, raw, max_record, run_id, pid in lines:
        if isinstance(raw, int):
            e = over_limit(raw, max_record, "the line", where)
            out.append((e.detail, e.where, e.field))
            continue
        try:
            ep = read_line(raw, where, run_id)
        except FormatError as e:
            out.append((e.detail, e.where, e.field))
            continue
        out.append(None if ep is None else pack_episode(ep, pid, failed_ok=True))
    return out


def pack_chunks(chunks: list[list[_Line]]) -> list[list[_Packed]]:
    """What a worker is given: ``pack_lines`` of each chunk."""
    return [pack_lines(c) for c in chunks]


def packed_episodes(path: Path, ctx: ImportContext, fanout: Fanout, run_id: str | None = None
                    ) -> Iterator[PackedEpisode]:
    """Every ``*.jsonl`` under ``path`` read as ``import_episodes`` reads it, each episode packed into its rows (with
    ``run_id`` when its record names no run), in the file's order, errors to ``ctx``: on ``fanout``'s worker
    processes, or in this one when it has none. The lines are sent in chunks, at most ``CHUNKS_AHEAD`` out. A packed
    episode names its line (``where``) and can be read again whole from it (``PackedEpisode.episode``), for a
    re-import to compare."""
    pid = os.getpid()
    for f in discover(path, (".jsonl",)):
        sent: deque[list[tuple[str, bytes | int]]] = deque()  # the chunks out, in order
        try:
            for got in fanout.map(pack_chunks, _chunks(f, ctx, run_id, pid, sent), chunk=1, window=CHUNKS_AHEAD,
                                  weight=_chunk_bytes, budget=BYTES_AHEAD):
                for (where, raw), one in zip(sent.popleft(), got, strict=True):
                    if isinstance(one, tuple):
                        ctx.skip(FormatError(*one))
                    elif isinstance(one, PackedEpisode) and isinstance(raw, bytes):
                        one.where = where
                        one.reread = functools.partial(_reread, raw, where, run_id)
                        one.line_bytes = len(raw)
                        yield one
        except (BrokenProcessPool, MemoryError) as e:  # a worker killed (out of memory, a signal), or out of memory
            what = f"a worker process reading this file died ({e})" if isinstance(e, BrokenProcessPool) else \
                f"{'this process' if fanout.inline else 'a worker process'} ran out of memory reading this file"
            raise FormatError(f"{what}: import the file again (the episodes stored are found and left as they are)"
                              f"{'' if fanout.inline else ', with --workers 1 to read it in one process'}",
                              sent[0][0][0] if sent else str(f)) from None


def _chunk_bytes(lines: list[_Line]) -> int:
    return sum(len(line[1]) for line in lines if isinstance(line[1], bytes))


def _chunks(f: Path, ctx: ImportContext, run_id: str | None, pid: int, sent: deque[list[tuple[str, bytes | int]]]
            ) -> Iterator[list[_Line]]:
    """The lines of ``f`` in chunks of ``LINES_A_CHUNK`` and ``CHUNK_BYTES`` at most, each kept in ``sent`` as it goes
    out."""
    lines: list[tuple[str, bytes | int]] = []
    size = 0
    first = True
    for where, raw in raw_lines(f, ctx):
        if first and isinstance(raw, bytes) and raw.strip():
            first = False
            try:
                record, _ = json_object(raw, where)
            except FormatError:
                record = None  # the line's own error, from its worker
            first_record_is_ours(record, f, ctx.fmt)
        n = len(raw) if isinstance(raw, bytes) else 0
        if lines and (len(lines) >= LINES_A_CHUNK or size + n > CHUNK_BYTES):
            sent.append(lines)
            yield [(w, r, ctx.max_record, run_id, pid) for w, r in lines]
            lines, size = [], 0
        lines.append((where, raw))
        size += n
    if lines:
        sent.append(lines)
        yield [(w, r, ctx.max_record, run_id, pid) for w, r in lines]
