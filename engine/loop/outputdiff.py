"""What changed between a stored output and the one an env gives now, as paths rather than two dumps.

``output_diff(stored, now)`` reads both as JSON when both parse, and walks
them together. Each difference is an :class:`OutputChange` at a path
(``address.state``, ``flights[0].price``; the whole output is ``""``):

- ``added`` and ``removed``: a key or list element on one side only;
- ``renamed``: a key that is gone and a new key at the same parent holding
  the same value (``address.province`` is now ``address.state``). Only a
  telling value makes a rename: not null, a bool, an empty string or
  container, or a number under 10, and only when exactly one gone key and
  one new key hold it; anything else is a removal and an addition;
- ``changed``: the same path holding another value (a type change too).

Lists are aligned on their elements (an element inserted at the front is
one ``added``, not every element ``changed``). Where a run of elements was
replaced, records are paired by an id-like key both sides share (``id``,
``order_id``...) or else by likeness, and a pair's differences are walked
inside it; the elements left unpaired were removed or added. A list index in
a path is the element's place in the stored list, except for an ``added``
element: its place in the list now. Text that is not JSON on both sides is
compared as text: one ``changed`` entry holding the part that differs, a
little context either side, and where it starts. Past ``MAX_CHANGES``
entries, one last entry of its own kind, ``more``, counts the rest.

``shape`` is the path-level form of a diff, for grouping many replays by
cause: one phrase per path and kind of change, list indices as ``[*]`` and
runs of three or more digits in a key as ``#``, so a value that merely
differs per user, or a key that is an id, does not split one cause into
many.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any, Literal

Change = Literal["added", "removed", "renamed", "changed", "more"]
CHANGES: tuple[Change, ...] = ("added", "removed", "renamed", "changed")
"""The kinds of difference; ``more`` is not one, but the entry that counts those past ``MAX_CHANGES``."""

CONTEXT = 24
"""Characters of context either side of a text difference."""
EXCERPT = 120
"""The most characters of a differing text span kept in an entry."""
MAX_CHANGES = 200
"""Entries past this many are counted in one last ``more`` entry."""
SIMILAR = 0.5
"""The least likeness (share of equal fields) at which two records without an id are one record changed."""

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_ID_DIGITS = re.compile(r"\d{3,}")
_INDEX = re.compile(r"\[\d+\]")
_ID_KEY = re.compile(r"(^|_)(id|no|number|code|key)$", re.I)


@dataclass(frozen=True)
class OutputChange:
    """One difference at one path. ``to`` is the new path of a ``renamed`` key; ``at`` is the character
    where two texts part (text outputs only); ``more`` counts the differences left out (``change`` more)."""

    path: str
    change: Change
    stored: Any = None
    now: Any = None
    to: str | None = None
    at: int | None = None
    more: int | None = None

    def to_dict(self) -> dict[str, Any]:
        if self.change == "more":
            return {"path": self.path, "change": "more", "more": self.more}
        d: dict[str, Any] = {"path": self.path, "change": self.change, "stored": self.stored, "now": self.now}
        if self.to is not None:
            d["to"] = self.to
        if self.at is not None:
            d["at"] = self.at
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OutputChange:
        change = d.get("change")
        if change == "more":
            return cls(str(d.get("path", "")), "more", more=int(d.get("more") or 0))
        return cls(str(d.get("path", "")), change if change in CHANGES else "changed", d.get("stored"), d.get("now"),
                   d.get("to"), d.get("at"))

    def describe(self) -> str:
        """One line: ``address.province`` is now ``address.state``; ``total`` changed: 30.5 -> 31.0."""
        where = f"`{self.path}`" if self.path else "the output"
        if self.change == "more":
            return f"… and {self.more or 0:,} more differences"
        if self.change == "renamed":
            return f"{where} is now `{self.to}`"
        if self.change == "added":
            return f"{where} added: {short(self.now)}"
        if self.change == "removed":
            return f"{where} removed (was {short(self.stored)})"
        if self.at is not None:
            text = f"text differs from character {self.at}: {short(self.stored)} is now {short(self.now)}"
            return f"{where}: {text}" if self.path else text
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


def _telling(value: Any) -> bool:
    """Whether a value says enough to tell that a key holding it was renamed: not null, a bool, an empty
    string or container, or a small number, which many unrelated keys hold alike."""
    if value is None or isinstance(value, bool) or value in ("", [], {}):
        return False
    return not (isinstance(value, int | float) and abs(value) < 10)


def _dicts(a: dict[str, Any], b: dict[str, Any], path: str, out: list[OutputChange]) -> None:
    gone = [k for k in a if k not in b]
    new = [k for k in b if k not in a]
    # A key gone and a new one at the same parent is a rename when they are the only two holding one telling
    # value: ``ok: true`` becoming ``done: true`` is a removal and an addition, as is a value two keys share.
    held_gone: dict[str, list[str]] = {}
    held_new: dict[str, list[str]] = {}
    for k in gone:
        if k and _telling(a[k]):
            held_gone.setdefault(_canon(a[k]), []).append(k)
    for n in new:
        if n and _telling(b[n]):
            held_new.setdefault(_canon(b[n]), []).append(n)
    renamed = {ks[0]: held_new[v][0] for v, ks in held_gone.items() if len(ks) == 1 and len(held_new.get(v, ())) == 1}
    for k in a:
        if k in b:
            _walk(a[k], b[k], _key_path(path, str(k)), out)
        elif k in renamed:
            out.append(OutputChange(_key_path(path, str(k)), "renamed", a[k], b[renamed[k]],
                                    to=_key_path(path, str(renamed[k]))))
        else:
            out.append(OutputChange(_key_path(path, str(k)), "removed", a[k], None))
    taken = set(renamed.values())
    for n in new:
        if n not in taken:
            out.append(OutputChange(_key_path(path, str(n)), "added", None, b[n]))


def _id_key(xs: Sequence[Any], ys: Sequence[Any]) -> str | None:
    """A key that names each record on both sides: id-like by name, held by every record, a different
    string or number in each, and shared by at least one record on each side."""
    records = [*xs, *ys]
    if not records or not all(isinstance(r, dict) for r in records):
        return None
    common = set(records[0]).intersection(*records[1:])
    for key in sorted(common, key=lambda k: (not _ID_KEY.search(str(k)), str(k))):
        if not _ID_KEY.search(str(key)):
            break
        va, vb = [_canon(r[key]) for r in xs], [_canon(r[key]) for r in ys]
        if (all(isinstance(r[key], str | int) and not isinstance(r[key], bool) for r in records)
                and len(set(va)) == len(va) and len(set(vb)) == len(vb) and set(va) & set(vb)):
            return str(key)
    return None


def _likeness(x: Any, y: Any) -> float:
    """How alike two elements are: the share of their fields that are equal (records), else 0."""
    if isinstance(x, dict) and isinstance(y, dict):
        keys = set(x) | set(y)
        return sum(1 for k in keys if k in x and k in y and _canon(x[k]) == _canon(y[k])) / len(keys) if keys else 1.0
    if isinstance(x, list) and isinstance(y, list):
        return SequenceMatcher(None, [_canon(v) for v in x], [_canon(v) for v in y], autojunk=False).ratio()
    return 0.0


def _pairs(xs: Sequence[Any], ys: Sequence[Any]) -> list[tuple[int, int]]:
    """Which replaced elements are one element changed: plain values by place when as many were replaced as
    put in; records by an id-like key, else the most alike first; one record for one with the same fields."""
    if len(xs) == len(ys) and not any(isinstance(v, dict | list) for v in (*xs, *ys)):
        return [(i, i) for i in range(len(xs))]
    key = _id_key(xs, ys)
    if key is not None:
        where = {_canon(y[key]): j for j, y in enumerate(ys)}
        return [(i, where[_canon(x[key])]) for i, x in enumerate(xs) if _canon(x[key]) in where]
    scored = sorted(((_likeness(x, y), i, j) for i, x in enumerate(xs) for j, y in enumerate(ys)),
                    key=lambda t: (-t[0], t[1], t[2]))
    pairs: list[tuple[int, int]] = []
    used_i: set[int] = set()
    used_j: set[int] = set()
    for score, i, j in scored:
        if score < SIMILAR:
            break
        if i not in used_i and j not in used_j:
            pairs.append((i, j))
            used_i.add(i)
            used_j.add(j)
    if not pairs and len(xs) == len(ys) == 1 and type(xs[0]) is type(ys[0]) and (
            isinstance(xs[0], list) or isinstance(xs[0], dict) and set(xs[0]) == set(ys[0])):
        return [(0, 0)]
    return sorted(pairs)


def _lists(a: list[Any], b: list[Any], path: str, out: list[OutputChange]) -> None:
    ca, cb = [_canon(x) for x in a], [_canon(x) for x in b]
    for op, i1, i2, j1, j2 in SequenceMatcher(None, ca, cb, autojunk=False).get_opcodes():
        if op == "equal":
            continue
        # Replaced elements are paired by what they are, not where they stand (a record whose field changed
        # is one change inside it); what is left unpaired on either side was removed or added. A pair's
        # paths carry its stored index, an added element's its index now.
        pairs = dict(_pairs(a[i1:i2], b[j1:j2]))
        paired_j = set(pairs.values())
        for i in range(i2 - i1):
            if i in pairs:
                _walk(a[i1 + i], b[j1 + pairs[i]], f"{path}[{i1 + i}]", out)
            else:
                out.append(OutputChange(f"{path}[{i1 + i}]", "removed", a[i1 + i], None))
        for j in range(j2 - j1):
            if j not in paired_j:
                out.append(OutputChange(f"{path}[{j1 + j}]", "added", None, b[j1 + j]))


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
        out = [*out[:MAX_CHANGES], OutputChange("", "more", more=rest)]
    return tuple(out)


def generalise(path: str) -> str:
    """A path with its list indices as ``[*]`` and id-like digit runs as ``#``: per-user detail dropped."""
    return _ID_DIGITS.sub("#", _INDEX.sub("[*]", path))


def phrase(c: OutputChange) -> str:
    """One change in words that are the same for every user it hit: ``address.province`` is now
    ``address.state``, ``status`` changed, ``orders[*]`` removed; ``""`` for the count of those left out."""
    where = f"`{generalise(c.path)}`" if c.path else "the output"
    if c.change == "more":
        return ""
    if c.change == "renamed":
        return f"{where} is now `{generalise(c.to or '')}`"
    if c.at is not None:
        return "text differs" if not c.path else f"{where}: text differs"
    return f"{where} {c.change}"


def shape(changes: Sequence[OutputChange]) -> tuple[str, ...]:
    """The path-level form of a diff: one phrase per path and kind of change, in the diff's order, each once
    (``("`address.province` is now `address.state`", "`address.zip` changed")``)."""
    return tuple(p for p in dict.fromkeys(phrase(c) for c in changes) if p)
