"""JSON from outside read with bounds: a model, a server or a file can nest values deeper than anything
downstream can follow (Python's JSON reader and writer, and every recursive walk, stop near 1,000 levels).

:func:`loads` refuses such text with a ``ValueError`` that says so, instead of the ``RecursionError`` that
would otherwise end an episode ``failed`` or stop an import.
"""

from __future__ import annotations

import json
from typing import Any

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


def loads(text: str | bytes, limit: int | None = MAX_DEPTH) -> Any:
    """``json.loads`` that raises :class:`TooDeep` (a ValueError) past ``limit`` levels, or past what the
    reader itself can follow when ``limit`` is None."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(too_deep(limit) if limit is not None else "nested too deeply to read") from None
    if limit is not None and depth_over(value, limit):
        raise TooDeep(too_deep(limit))
    return value


def describe(e: ValueError) -> str:
    """A JSON error in a few words: the reader's message and column, or why it was refused."""
    return f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
