"""Rollscope's own JSONL: one episode per line, lossless.

Each line is ``Episode.to_dict()``: at least ``id, env, task_id, status,
reward, turn_rewards, messages, tokens, loss_mask, logprobs, prompt_len,
tools, turns`` plus the rest of the record and ``schema_version``. NaN
logprobs are written as ``null``. A turn's prompt text that repeats the turn
before it is written as pieces of it (``records.prompts``; ``full_prompts``
writes every one whole); reading restores it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..checks.diagnosis import read_episode
from ..errors import FormatError
from ..records import prompts
from ..records.episode import Episode
from .base import ImportContext, discover, json_lines, json_object
from .limits import MAX_RECORD_MB, bounded_lines, over_limit

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

    ``Episode.from_dict`` reads strictly: every field checked, the first bad one named.
    """
    try:
        return read_episode(d)
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
    with p.open("rb") as f:
        for lineno, raw in enumerate(bounded_lines(f, max_record), 1):
            where = f"{p}:{lineno}"
            if isinstance(raw, int):
                rep.errors.append(over_limit(raw, max_record, "the line", where))
                continue
            try:
                d, n = json_object(raw, where)
                if d is None:
                    continue
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
