"""Strict reading of record dicts: a missing or mistyped field is a ``FormatError`` naming it.

Every ``from_dict`` of the records reads through :class:`Fields`, so a
malformed record (a hand-edited JSONL line, a truncated database row) is
refused with the path of the field at fault, e.g. ``turns.2.generation.text``,
instead of being filled with a default nobody wrote.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from ..errors import FormatError
from .jsonbounds import depth_over, too_deep
from .numbers import as_float, is_finite, not_finite
from .textsafe import NONFINITE_KEY, from_json_safe


def json_type(v: Any) -> str:
    """What ``v`` is in JSON's words (null, an object, a list, a string, a boolean, an integer, a decimal number),
    for an error."""
    return "null" if v is None else {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
                                     int: "an integer", float: "a decimal number"}.get(type(v), type(v).__name__)


class Fields:
    """One JSON object being read into a record; ``path`` names it in errors.

    Numbers must be finite (``numbers``: a NaN reward refuses the record); a logprob that is not is read as
    unknown (NaN) and listed in ``nonfinite`` as (field path, index, value), shared by the objects read
    inside this one, so the record can mark those tokens (``marks.unknown_logprobs``).
    """

    __slots__ = ("d", "path", "nonfinite")

    def __init__(self, d: Any, path: str = "", nonfinite: list[tuple[str, int, float]] | None = None) -> None:
        if not isinstance(d, dict):
            raise FormatError(f"must be an object, got {json_type(d)}", field=path or "(record)")
        self.d: dict[str, Any] = d
        self.path = path
        self.nonfinite: list[tuple[str, int, float]] = [] if nonfinite is None else nonfinite

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str, message: str) -> FormatError:
        return FormatError(message, field=self.name(key))

    def has(self, key: str) -> bool:
        return key in self.d

    def raw(self, key: str) -> Any:
        if key not in self.d:
            raise self.fail(key, "missing")
        return self.d[key]

    def _typed(self, key: str, null: bool, ok: Any, what: str) -> Any:
        v = self.raw(key)
        if v is None and null:
            return None
        if not ok(v):
            shown = "" if v is None else f" {v!r:.40}"
            raise self.fail(key, f"must be {what}{' or null' if null else ''}, got {json_type(v)}{shown}")
        return v

    # Each reader first takes a value of the exact type JSON decodes to (one dict lookup, one type test) and
    # leaves everything else (a missing key, a subclass, a wrong type, an int where a float goes) to ``_typed``,
    # which reads it the same way or names the field at fault.

    def text(self, key: str) -> str:
        v = self.d.get(key)
        if type(v) is str:
            return v
        return str(self._typed(key, False, _is_str, "a string"))

    def text_or_none(self, key: str) -> str | None:
        v = self.d.get(key, _MISSING)
        if v is None or type(v) is str:
            return v
        v = self._typed(key, True, _is_str, "a string")
        return None if v is None else str(v)

    def integer(self, key: str) -> int:
        v = self.d.get(key)
        if type(v) is int and -_INT64 <= v < _INT64:
            return v
        return self._int64(key, int(self._typed(key, False, _is_int, "an integer")))

    def int_or_none(self, key: str) -> int | None:
        v = self.d.get(key, _MISSING)
        if v is None or (type(v) is int and -_INT64 <= v < _INT64):
            return v
        v = self._typed(key, True, _is_int, "an integer")
        return None if v is None else self._int64(key, int(v))

    def _int64(self, key: str, v: int) -> int:
        """``v`` if a 64-bit integer holds it (what SQLite and every trainer's arrays hold), else the field refused."""
        if not -_INT64 <= v < _INT64:
            raise self.fail(key, f"must be an integer within 64 bits, got one of {len(str(abs(v))):,} digits")
        return v

    def number(self, key: str) -> float:
        v = self.d.get(key)
        if type(v) is float and v - v == 0.0:  # finite: NaN - NaN and inf - inf are NaN
            return v
        return self._finite(key, self._typed(key, False, _is_number, "a number"))

    def number_or_none(self, key: str) -> float | None:
        v = self.d.get(key, _MISSING)
        if v is None or (type(v) is float and v - v == 0.0):
            return v
        v = self._typed(key, True, _is_number, "a number")
        return None if v is None else self._finite(key, v)

    def _finite(self, key: str, v: float) -> float:
        if not is_finite(v):  # NaN, an infinity, or an integer past what a float holds
            raise self.fail(key, not_finite(v))
        return float(v)

    def boolean(self, key: str) -> bool:
        v = self.d.get(key)
        if v is True or v is False:
            return v
        return bool(self._typed(key, False, lambda v: isinstance(v, bool), "true or false"))

    def obj(self, key: str) -> dict[str, Any]:
        """A free-form object; numbers stored as ``$nonfinite`` (see ``textsafe.json_safe``) read back as floats."""
        value = self.d.get(key)
        if type(value) is dict and NONFINITE_KEY not in value and set(map(type, value.values())) <= _SCALARS:
            return dict(value)  # flat (no nesting to bound, no ``$nonfinite`` object), as most are
        value = self._typed(key, False, lambda v: isinstance(v, dict), "an object")
        if depth_over(value):
            raise self.fail(key, too_deep())
        read = from_json_safe(value)
        if not isinstance(read, dict):  # the object itself spells a number
            raise self.fail(key, f"must be an object, got the number {value[NONFINITE_KEY]}")
        return dict(read)

    def items(self, key: str) -> list[Any]:
        v = self.d.get(key)
        if type(v) is list:
            return v[:]
        return list(self._typed(key, False, lambda v: isinstance(v, list), "a list"))

    def choice(self, key: str, allowed: Collection[str]) -> str:
        v = self.text(key)
        if v not in allowed:
            raise self.fail(key, f"must be one of {', '.join(sorted(allowed))}, got {v!r:.40}")
        return v

    def sub(self, key: str) -> Fields:
        return Fields(self.raw(key), self.name(key), self.nonfinite)

    def sub_or_none(self, key: str) -> Fields | None:
        v = self.raw(key)
        return None if v is None else Fields(v, self.name(key), self.nonfinite)

    def subs(self, key: str) -> list[Fields]:
        at = self.name(key)
        return [Fields(v, f"{at}.{i}", self.nonfinite) for i, v in enumerate(self.items(key))]

    def texts(self, key: str) -> tuple[str, ...]:
        out = self.items(key)
        for i, v in enumerate(out):
            if not isinstance(v, str):
                raise FormatError(f"must be a string, got {json_type(v)}", field=f"{self.name(key)}.{i}")
        return tuple(out)

    def numbers(self, key: str) -> tuple[float, ...]:
        out = self.items(key)
        if set(map(type, out)) <= _FLOAT and math.isfinite(sum(out)):  # as in ``logprobs_or_none``
            return tuple(out)
        for i, v in enumerate(out):
            if not _is_number(v):
                raise FormatError(f"must be a number, got {json_type(v)}", field=f"{self.name(key)}.{i}")
            if not is_finite(v):
                raise FormatError(not_finite(v), field=f"{self.name(key)}.{i}")
        return tuple(float(v) for v in out)

    def ints(self, key: str) -> tuple[int, ...]:
        out = self.items(key)
        if not set(map(type, out)) <= _INT and not all(_is_int(v) for v in out):
            i = next(i for i, v in enumerate(out) if not _is_int(v))
            raise FormatError(f"must be an integer, got {json_type(out[i])}", field=f"{self.name(key)}.{i}")
        if out and not (-_INT64 <= min(out) and max(out) < _INT64):  # what SQLite and the arrays hold
            i = next(i for i, v in enumerate(out) if not -_INT64 <= v < _INT64)
            raise FormatError(f"must be an integer within 64 bits, got one of {len(str(abs(out[i]))):,} digits",
                              field=f"{self.name(key)}.{i}")
        return tuple(out)

    def logprobs_or_none(self, key: str) -> tuple[float, ...] | None:
        """A list of numbers where null stands for an unknown logprob (NaN), or null for none at all; a number
        that is not finite is unknown too, and listed in ``nonfinite``."""
        v = self.raw(key)
        if v is None:
            return None
        if not isinstance(v, list):
            raise self.fail(key, f"must be a list or null, got {json_type(v)}")
        # The common case, finite floats and nulls, at C speed: a sum of floats is finite only when each of them
        # is (a NaN or an infinity carries through; a sum of finite floats that overflows goes the long way).
        kinds = set(map(type, v))
        if kinds <= _FLOAT:
            if math.isfinite(sum(v)):
                return tuple(v)
        elif kinds <= _FLOAT_OR_NULL and math.isfinite(sum([x for x in v if x is not None])):
            return tuple([math.nan if x is None else x for x in v])  # a list first: faster than a generator
        out = []
        for i, x in enumerate(v):
            if x is None:
                out.append(math.nan)
            elif _is_number(x):
                if not is_finite(x):
                    self.nonfinite.append((self.name(key), i, as_float(x)))
                    x = math.nan
                out.append(float(x))
            else:
                raise FormatError(f"must be a number or null, got {json_type(x)}", field=f"{self.name(key)}.{i}")
        return tuple(out)


_INT64 = 2 ** 63
_MISSING = object()
_SCALARS = frozenset((str, int, float, bool, type(None)))
# The types of a list's values that its common case, checked at C speed (``set(map(type, values))``), may hold.
_FLOAT = frozenset((float,))
_FLOAT_OR_NULL = frozenset((float, type(None)))
_INT = frozenset((int,))


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
