"""Rollscope's own JSONL: one episode per line, lossless.

Each line is ``Episode.to_dict()``: at least ``id, env, task_id, status,
reward, turn_rewards, messages, tokens, loss_mask, logprobs, prompt_len,
tools, turns`` plus the rest of the record and ``schema_version``. NaN
logprobs are written as ``null``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import FormatError
from ..records import Episode, Status
from .base import ImportContext, discover, json_lines

REQUIRED = ("id", "env", "task_id", "status", "reward", "turn_rewards", "messages", "tokens", "loss_mask",
            "logprobs", "prompt_len", "tools", "turns")
_LISTS = ("turn_rewards", "messages", "tokens", "loss_mask", "tools", "turns")


def dumps(ep: Episode) -> str:
    return json.dumps(ep.to_dict(), ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def write(episodes: Iterable[Episode], out: IO[str]) -> int:
    n = 0
    for ep in episodes:
        out.write(dumps(ep))
        out.write("\n")
        n += 1
    return n


def parse_line(line: str, where: str) -> Episode:
    """One line to an Episode, or a FormatError naming the field at fault."""
    try:
        d = json.loads(line)
    except json.JSONDecodeError as e:
        raise FormatError(f"not valid JSON ({e.msg} at column {e.colno})", where) from None
    if not isinstance(d, dict):
        raise FormatError(f"expected a JSON object, got {type(d).__name__}", where)
    return parse_dict(d, where)


def parse_dict(d: dict[str, Any], where: str) -> Episode:
    """One decoded record to an Episode, or a FormatError naming the field at fault."""
    for key in REQUIRED:
        if key not in d:
            raise FormatError("missing", where, key)
    for key in _LISTS:
        if not isinstance(d[key], list):
            raise FormatError(f"must be a list, got {type(d[key]).__name__}", where, key)
    if d["logprobs"] is not None and not isinstance(d["logprobs"], list):
        raise FormatError("must be a list or null", where, "logprobs")
    if d["status"] not in {s.value for s in Status}:
        raise FormatError(f"unknown status {d['status']!r}", where, "status")
    if not isinstance(d["reward"], (int, float)) or isinstance(d["reward"], bool):
        raise FormatError(f"must be a number, got {d['reward']!r}", where, "reward")
    n = len(d["tokens"])
    for key in ("loss_mask", "logprobs", "versions"):
        v = d.get(key)
        if isinstance(v, list) and len(v) != n:
            raise FormatError(f"has {len(v)} entries for {n} tokens", where, key)
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in d["tokens"]):
        raise FormatError("must be a list of integer token ids", where, "tokens")
    if not all(x in (0, 1) for x in d["loss_mask"]):
        raise FormatError("must contain only 0 and 1", where, "loss_mask")
    if not isinstance(d["prompt_len"], int) or not 0 <= d["prompt_len"] <= n:
        raise FormatError(f"must be an integer between 0 and {n}", where, "prompt_len")
    try:
        return Episode.from_dict(d)
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


def read(path: str | Path, report: ReadReport | None = None) -> Iterator[Episode]:
    """Stream episodes from a file; malformed lines go to ``report.errors`` and are skipped."""
    p = Path(path)
    if not p.is_file():
        raise FormatError("no such file", str(p))
    rep = report if report is not None else ReadReport()
    with p.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ep = parse_line(line, f"{p}:{lineno}")
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
            yield ep
