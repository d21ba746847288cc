"""Text from outside (a model, a server, an env, a file, a person) made safe to store, once, where it enters.

A JSON string may hold ``\\ud800``: a lone UTF-16 surrogate that Python
keeps in a ``str`` but that UTF-8 (SQLite, files, the browser) cannot
encode. Such characters become U+FFFD, and the caller records where.

Numbers strict JSON cannot hold (NaN, infinities) in free-form values are
spelled so that they store, export and read back (:func:`json_safe`).
"""

from __future__ import annotations

import math
from typing import Any

REPLACEMENT = "\ufffd"


def clean(text: str) -> tuple[str, int]:
    """(``text`` with lone surrogates replaced by U+FFFD, how many were replaced)."""
    try:
        text.encode("utf-8")
        return text, 0
    except UnicodeEncodeError:
        # Paired surrogates (a character outside the BMP split in two) join again; lone ones are replaced.
        out = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return out, out.count(REPLACEMENT) - text.count(REPLACEMENT)


def clean_text(text: str) -> str:
    return clean(text)[0]


def clean_value(value: Any) -> tuple[Any, int]:
    """(a JSON value with every string, key included, made safe by :func:`clean`, how many characters were replaced)."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        out, n = {}, 0
        for k, v in value.items():
            k2, a = clean(k) if isinstance(k, str) else (k, 0)
            v2, b = clean_value(v)
            out[k2] = v2
            n += a + b
        return out, n
    if isinstance(value, list):
        items, n = [], 0
        for v in value:
            v2, a = clean_value(v)
            items.append(v2)
            n += a
        return items, n
    return value, 0


def may_hold_surrogates(raw: bytes) -> bool:
    """Whether a line of JSON could decode to a lone surrogate (it escapes one: ``\\ud800``-``\\udfff``)."""
    return b"\\ud" in raw or b"\\uD" in raw


# -- numbers JSON cannot hold ---------------------------------------------------

NONFINITE_KEY = "$nonfinite"
"""A free-form value (tool arguments, evidence, env info) that is NaN or
infinite is stored as ``{"$nonfinite": "NaN" | "Infinity" | "-Infinity"}``:
strict JSON (exports, the browser, JSON Schema) has no such numbers, and
Python's JSON reader accepts them from a model (``{"amount": NaN}``)."""

_SPELLING = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _spell(x: float) -> str:
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float spelled as a ``$nonfinite`` object; the same object when it has none."""
    if isinstance(value, float):
        return value if math.isfinite(value) else {NONFINITE_KEY: _spell(value)}
    if isinstance(value, dict):
        out = {k: json_safe(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    if isinstance(value, (list, tuple)):
        items = [json_safe(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    return value


def from_json_safe(value: Any) -> Any:
    """The inverse of :func:`json_safe`: ``$nonfinite`` objects become floats again."""
    if isinstance(value, dict):
        if len(value) == 1 and value.get(NONFINITE_KEY) in _SPELLING:
            return _SPELLING[value[NONFINITE_KEY]]
        return {k: from_json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json_safe(v) for v in value]
    return value
