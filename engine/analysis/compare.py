"""Two episodes aligned turn by turn: what differs, and where they first diverge.

Turns are aligned by index, which is what a fork and its parent share (the
fork replays the parent's turns before its fork turn) and what two samples
of one task are usually compared by. The opening (system prompt and first
observation) is compared first: different openings mean different tasks or
a changed env, and every later difference follows from that.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any

from ..records.episode import Episode, Message, Turn

# What a turn can differ in, in the order a reader checks them.
FIELDS = ("assistant text", "tool calls", "parse error", "observation", "reward", "done")
# Word diffs of texts longer than this (in words, per side) fall back to a line diff.
WORD_DIFF_LIMIT = 4000
_WORDS = re.compile(r"\s+|[^\s\w]|\w+")


@dataclass(frozen=True)
class TurnDiff:
    """Turn ``index`` of both episodes (``None`` where one has no such turn)."""

    index: int
    a: Turn | None
    b: Turn | None
    differs: tuple[str, ...]  # names from FIELDS, plus "missing" when one side has no turn

    @property
    def same(self) -> bool:
        return not self.differs


@dataclass(frozen=True)
class Comparison:
    a: Episode
    b: Episode
    opening_a: tuple[Message, ...]
    opening_b: tuple[Message, ...]
    turns: tuple[TurnDiff, ...]

    @property
    def opening_same(self) -> bool:
        return _msgs(self.opening_a) == _msgs(self.opening_b)

    @property
    def first_divergence(self) -> int | None:
        """The first turn that differs; -1 when the openings already differ; None when nothing does."""
        if not self.opening_same:
            return -1
        return next((d.index for d in self.turns if not d.same), None)

    @property
    def relation(self) -> str:
        """How the two are related, in words."""
        a, b = self.a, self.b
        if a.id == b.id:
            return "the same episode"
        if b.parent_id == a.id:
            return f"B is a fork of A at turn {b.fork_turn}"
        if a.parent_id == b.id:
            return f"A is a fork of B at turn {a.fork_turn}"
        if a.parent_id and a.parent_id == b.parent_id:
            return f"forks of the same parent {a.parent_id} (at turns {a.fork_turn} and {b.fork_turn})"
        if a.group_id and a.group_id == b.group_id:
            return f"samples {a.sample_index} and {b.sample_index} of the same group"
        if (a.env, a.task_id) == (b.env, b.task_id):
            return "the same task"
        return "different tasks"

    def summary(self) -> str:
        first = self.first_divergence
        if first is None:
            return f"{self.relation}: identical turn by turn ({len(self.turns)} turns)"
        if first == -1:
            return f"{self.relation}: they differ from the start (system prompt or first observation)"
        d = self.turns[first]
        return f"{self.relation}: they first diverge at turn {first} ({', '.join(d.differs)})"


def _msgs(ms: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in ms]


def opening_messages(ep: Episode) -> tuple[Message, ...]:
    """The messages before the episode's first turn: system prompt and first observation."""
    out: list[Message] = []
    for m in ep.messages:
        if m.role == "assistant" and ep.turns:
            break
        out.append(m)
    return tuple(out)


def _calls(t: Turn) -> list[dict[str, Any]]:
    return [{"name": c.name, "arguments": c.arguments} for c in t.tool_calls]


def diff_turn(index: int, a: Turn | None, b: Turn | None) -> TurnDiff:
    """What differs between two turns with the same index."""
    if a is None or b is None:
        return TurnDiff(index, a, b, ("missing",))
    ga = a.generation.text if a.generation else ""
    gb = b.generation.text if b.generation else ""
    checks = (
        ("assistant text", ga == gb),
        ("tool calls", _calls(a) == _calls(b)),
        ("parse error", a.parse_error == b.parse_error),
        ("observation", _msgs(a.observation) == _msgs(b.observation)),
        ("reward", a.reward == b.reward),
        ("done", a.done == b.done),
    )
    return TurnDiff(index, a, b, tuple(name for name, same in checks if not same))


def compare(a: Episode, b: Episode) -> Comparison:
    """Align ``a`` and ``b`` by turn index and say what differs in each turn."""
    n = max(a.n_turns, b.n_turns)
    turns = tuple(
        diff_turn(i, a.turns[i] if i < a.n_turns else None, b.turns[i] if i < b.n_turns else None) for i in range(n)
    )
    return Comparison(a, b, opening_messages(a), opening_messages(b), turns)


def word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """``[(op, text)]`` with op ``same``, ``del`` (only in a) or ``ins`` (only in b), word by word.

    Whitespace and punctuation are their own pieces, so a changed number
    inside a sentence marks that number, not the sentence. Very long texts
    are diffed line by line to keep the cost bounded.
    """
    if a == b:
        return [("same", a)] if a else []
    wa, wb = _WORDS.findall(a), _WORDS.findall(b)
    if len(wa) > WORD_DIFF_LIMIT or len(wb) > WORD_DIFF_LIMIT:
        wa, wb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    out: list[tuple[str, str]] = []
    sm = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            out.append(("same", "".join(wa[i1:i2])))
            continue
        if op in ("replace", "delete"):
            out.append(("del", "".join(wa[i1:i2])))
        if op in ("replace", "insert"):
            out.append(("ins", "".join(wb[j1:j2])))
    return out


def calls_text(t: Turn | None) -> str:
    """A turn's tool calls as pretty JSON (empty when it made none), for diffing."""
    if t is None or not t.tool_calls:
        return ""
    return "\n".join(json.dumps(c, indent=2, ensure_ascii=False, sort_keys=True) for c in _calls(t))


def observation_text(t: Turn | None) -> str:
    """A turn's observation as text (``[role name] content`` per message), for diffing."""
    if t is None:
        return ""
    return "\n".join(f"[{m.role}{' ' + m.name if m.name else ''}] {m.content}" for m in t.observation)


__all__ = ["FIELDS", "Comparison", "TurnDiff", "calls_text", "compare", "diff_turn", "observation_text", "opening_messages",
           "word_diff"]
