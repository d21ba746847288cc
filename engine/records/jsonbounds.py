"""JSON from outside read with bounds: a model, a server or a file can nest values deeper than anything
downstream can follow (Python's JSON reader and writer, and every recursive walk, stop near 1,000 levels).

:func:`loads` refuses such text with a ``ValueError`` that says so, instead of the ``RecursionError`` that
would otherwise end an episode ``failed`` or stop an import.

Text is parsed by ``orjson`` where it reads the same value as Python's ``json`` (several times faster), and by
``json`` where it may not: :func:`parse` is ``json.loads``, value for value and error for error.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

MAX_DEPTH = 100
"""How deeply a free-form value (tool arguments, evidence, env info) may nest."""


class TooDeep(ValueError):
    """JSON nested past the bound."""


def depth_over(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests lists and objects more than ``limit`` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            children: Any = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        if d + 1 > limit:
            return True
        stack.extend((c, d + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def too_deep(limit: int = MAX_DEPTH) -> str:
    return f"nested more than {limit} levels deep"


# An integer of 19 digits or more may be past 64 bits, where orjson reads a float. Such a run is found as 19 zeros
# after a space once every digit is a zero, a point stays and all else is a space (a fraction's run follows a point).
_SHAPE = bytes(48 if 48 <= i <= 57 else (46 if i == 46 else 32) for i in range(256))
_LONG_INT = b" " + b"0" * 19
# Nesting orjson's value is taken at: json's reader stops where the interpreter's recursion limit does (about 1,000
# levels less the caller's frames), orjson's at 1,024. A text with fewer brackets than this nests no deeper; a value
# orjson writes nests no deeper either (its writer stops past 254 levels), which is a check at C speed.
ORJSON_DEPTH = 255


def _shallow(value: Any) -> bool:
    """Whether a value read by orjson nests less than ``ORJSON_DEPTH`` levels: whether orjson writes it."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return True


def parse(text: str | bytes) -> Any:
    """``json.loads(text)``: the same value, or the same error. orjson reads it when it can; what orjson refuses
    (NaN and infinities, a lone surrogate, text that is not UTF-8, text that is not JSON), what it would read
    otherwise (an integer of 19 digits or more) and what nests past ``ORJSON_DEPTH`` levels go to ``json``, which
    reads it or says why not."""
    if isinstance(text, str):
        raw = text.encode("utf-8", "surrogatepass")
    elif type(text) in (bytes, bytearray):
        raw = bytes(text)
    else:  # json's own error for what it does not read
        return json.loads(text)
    if _LONG_INT not in (b" " + raw).translate(_SHAPE):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            if raw.count(b"[") + raw.count(b"{") < ORJSON_DEPTH or _shallow(value):
                return value
    return json.loads(text)


def loads(text: str | bytes, limit: int | None = MAX_DEPTH) -> Any:
    """``json.loads`` (:func:`parse`) that raises :class:`TooDeep` (a ValueError) past ``limit`` levels, or past
    what the reader itself can follow when ``limit`` is None."""
    try:
        value = parse(text)
    except RecursionError:
        raise TooDeep(too_deep(limit) if limit is not None else "nested too deeply to read") from None
    if limit is not None and depth_over(value, limit):
        raise TooDeep(too_deep(limit))
    return value


def describe(e: ValueError) -> str:
    """A JSON error in a few words: the reader's message and column, or why it was refused."""
    if not isinstance(e, json.JSONDecodeError):
        return str(e)
    return f"{e.msg.removesuffix(' at')} at column {e.colno}"


# What a text cut inside a value leaves from where the reader stopped: the start of a number's sign, fraction or
# exponent, of true, false or null, or of a \uXXXX escape.
_CUT_TOKEN = re.compile(r"(?:-|\.|[eE][-+]?|t(?:ru?)?|f(?:a(?:ls?)?)?|n(?:ul?)?|u[0-9a-fA-F]{0,3})\Z")
# A string run on to the end by a backslash before its closing quote (``"C:\"}``): written wrong, not cut.
_ESCAPED_CLOSE = re.compile(r'\\"[\]}]+\s*\Z')


def ends_early(e: ValueError, text: str) -> bool:
    """Whether ``e``, the error reading ``text``, says the text stopped before its value did: the reader ran out of
    text (at its end, inside a string, or inside a number, a literal or an escape) rather than meeting a wrong
    character."""
    if not isinstance(e, json.JSONDecodeError):
        return False
    end = text.rstrip()
    if e.msg.startswith("Unterminated string"):
        return not _ESCAPED_CLOSE.search(end)
    return e.pos >= len(end) or _CUT_TOKEN.match(end, e.pos) is not None
