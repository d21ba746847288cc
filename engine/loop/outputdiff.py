"""What changed between a stored output and the one an env gives now, as paths rather than two dumps.

``output_diff(stored, now)`` reads both as JSON when both parse, and walks
them together. Each difference is an :class:`OutputChange` at a path
(``address.state``, ``flights[0].price``; the whole output is ``""``):

- ``added`` and ``removed``: a key or list element on one side only;
- ``renamed``: a key that is gone and a new key at the same parent holding
  the same value (``address.province`` is now ``address.state``);
- ``changed``: the same path holding another value (a type change too).

Lists are aligned on their elements (an element inserted at the front is
one ``added``, not every element ``changed``). Text that is not JSON on
both sides is compared as text: one ``changed`` entry holding the part
that differs, a little context either side, and where it starts.

``shape`` is the path-level form of a diff, for grouping many replays by
cause: list indices become ``[*]`` and runs of three or more digits in a
key become ``#``, so a value that merely differs per user, or a key that
is an id, does not split one cause into many.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Literal

Change = Literal["added", "removed", "renamed", "changed"]
CHANGES: tuple[Change, ...] = ("added", "removed", "renamed", "changed")

CONTEXT = 24
"""Characters of context either side of a text difference."""
EXCERPT = 120
"""The most characters of a differing text span kept in an entry."""
MAX_CHANGES = 200
"""Entries past this many are summed up in one ``changed`` entry at the root."""

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_ID_DIGITS = re.compile(r"\d{3,}")
_INDEX = re.compile(r"\[\d+\]")


@dataclass(frozen=True)
class OutputChange:
    """One difference at one path. ``to`` is the new path of a ``renamed`` key; ``at`` is the character
    where two texts part (text outputs only)."""

    path: str
    change: Change
    stored: Any = None
    now: Any = None
    to: str | None = None
    at: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "change": self.change, "stored": self.stored, "now": self.now}
        if self.to is not None:
            d["to"] = self.to
        if self.at is not None:
            d["at"] = self.at
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutputChange:
        change = d.get("change")
        return cls(str(d.get("path", "")), change if change in CHANGES else "changed", d.get("stored"), d.get("now"),
                   d.get("to"), d.get("at"))

    def describe(self) -> str:
        """One line: ``address.province`` is now ``address.state``; ``total`` changed: 30.5 -> 31.0."""
        where = f"`{self.path}`" if self.path else "the output"
        if self.change == "renamed":
            return f"{where} is now `{self.to}`"
        if self.change == "added":
            return f"{where} added: {short(self.now)}"
        if self.change == "removed":
            return f"{where} removed (was {short(self.stored)})"
        if self.at is not None:
            return f"text differs from character {self.at}: {short(self.stored)} is now {short(self.now)}"
        return f"{where} changed: {short(self.stored)} -> {short(self.now)}"


def short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = repr(text) if isinstance(value, str) else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _parse(text: Any) -> tuple[bool, Any]:
    if not isinstance(text, str):
        return True, text
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def _key_path(parent: str, key: str) -> str:
    part = key if _PLAIN_KEY.match(key) else json.dumps(key, ensure_ascii=False)
    if _PLAIN_KEY.match(key):
        return f"{parent}.{part}" if parent else part
    return f"{parent}[{part}]"


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _walk(a: Any, b: Any, path: str, out: list[OutputChange]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        _dicts(a, b, path, out)
    elif isinstance(a, list) and isinstance(b, list):
        _lists(a, b, path, out)
    elif type(a) is not type(b) or a != b:
        if isinstance(a, str) and isinstance(b, str) and max(len(a), len(b)) > EXCERPT:
            out.append(_text_change(a, b, path))
        else:
            out.append(OutputChange(path, "changed", a, b))


def _dicts(a: dict[str, Any], b: dict[str, Any], path: str, out: list[OutputChange]) -> None:
    gone = [k for k in a if k not in b]
    new = [k for k in b if k not in a]
    # A key gone and a new one at the same parent with the same value is a rename; paired in order.
    renamed: dict[str, str] = {}
    for k in gone:
        match = next((n for n in new if n not in renamed.values() and _canon(a[k]) == _canon(b[n])), None)
        if match is not None:
            renamed[k] = match
    for k in a:
        if k in b:
            _walk(a[k], b[k], _key_path(path, str(k)), out)
        elif k in renamed:
            out.append(OutputChange(_key_path(path, str(k)), "renamed", a[k], b[renamed[k]],
                                    to=_key_path(path, str(renamed[k]))))
        else:
            out.append(OutputChange(_key_path(path, str(k)), "removed", a[k], None))
    for n in new:
        if n not in renamed.values():
            out.append(OutputChange(_key_path(path, str(n)), "added", None, b[n]))


def _lists(a: list[Any], b: list[Any], path: str, out: list[OutputChange]) -> None:
    ca, cb = [_canon(x) for x in a], [_canon(x) for x in b]
    for op, i1, i2, j1, j2 in SequenceMatcher(None, ca, cb, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        # Replaced elements are compared pair by pair (a record whose field changed is one change inside
        # it); what is left over on either side was removed or added.
        n = min(i2 - i1, j2 - j1)
        for k in range(n):
            _walk(a[i1 + k], b[j1 + k], f"{path}[{j1 + k}]", out)
        for i in range(i1 + n, i2):
            out.append(OutputChange(f"{path}[{i}]", "removed", a[i], None))
        for j in range(j1 + n, j2):
            out.append(OutputChange(f"{path}[{j}]", "added", None, b[j]))


def _text_change(a: str, b: str, path: str = "") -> OutputChange:
    """Where two texts part: the differing span of each, with a little context, and its offset."""
    head = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1

    def excerpt(s: str) -> str:
        start, end = max(0, head - CONTEXT), len(s) - tail
        mid = s[head:end]
        if len(mid) > EXCERPT:
            mid = mid[:EXCERPT] + f"… ({end - head - EXCERPT:,} more characters)"
        after = s[end: end + CONTEXT]
        return ("…" if start > 0 else "") + s[start:head] + mid + after + ("…" if end + CONTEXT < len(s) else "")

    return OutputChange(path, "changed", excerpt(a), excerpt(b), at=head)


def output_diff(stored: Any, now: Any) -> tuple[OutputChange, ...]:
    """The differences between a stored output and today's; ``()`` when they are the same.

    Texts are read as JSON when both parse; other values (message lists, numbers) are walked as they are.
    """
    if stored == now:
        return ()
    ok_a, a = _parse(stored)
    ok_b, b = _parse(now)
    if not (ok_a and ok_b):
        return (_text_change(str(stored), str(now)),)
    out: list[OutputChange] = []
    _walk(a, b, "", out)
    if not out:  # the same JSON written differently (spacing, key order)
        return (_text_change(str(stored), str(now)),) if isinstance(stored, str) else ()
    if len(out) > MAX_CHANGES:
        rest = len(out) - MAX_CHANGES
        out = [*out[:MAX_CHANGES], OutputChange("", "changed", f"{rest:,} more differences", None)]
    return tuple(out)


def generalise(path: str) -> str:
    """A path with its list indices as ``[*]`` and id-like digit runs as ``#``: per-user detail dropped."""
    return _ID_DIGITS.sub("#", _INDEX.sub("[*]", path))


def shape(changes: Sequence[OutputChange]) -> tuple[str, ...]:
    """The path-level form of a diff, one phrase per kind of change, the same for every user it hit:
    ``("`address.province` is now `address.state`",)``, ``("changed values at `status`, `total`",)``."""
    renamed = sorted({f"`{generalise(c.path)}` is now `{generalise(c.to or '')}`" for c in changes
                      if c.change == "renamed"})
    parts = list(renamed)
    for kind, label in (("added", "added"), ("removed", "removed"), ("changed", "changed values at")):
        paths = sorted({generalise(c.path) for c in changes if c.change == kind and c.at is None})
        if paths:
            parts.append(f"{label} " + ", ".join(f"`{p}`" if p else "the output" for p in paths))
        if kind == "changed" and any(c.change == "changed" and c.at is not None for c in changes):
            texts = sorted({generalise(c.path) for c in changes if c.at is not None})
            parts.append("text differs" + ("" if texts == [""] else " at " + ", ".join(f"`{p}`" for p in texts if p)))
    return tuple(parts)
