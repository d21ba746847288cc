"""The one number policy, applied where a number enters (a file, a server, a database written before it).

- A reward (an episode's, a turn's, a return) or any other typed number of a record that is NaN or
  infinite refuses the record: a trainer cannot use it, and nothing downstream (SQLite, strict JSON,
  charts) can hold it. The reader names the record and the field (:func:`not_finite`).
- A logprob that is NaN or infinite is unknown (NaN in the arrays, ``null`` in JSON), and a
  ``logprob_not_finite`` warning marks its tokens (``marks.unknown_logprobs``), so nothing is dropped silently.
  ``null`` itself is the ordinary unknown logprob and is not marked.

Free-form values (tool arguments, env info, evidence) keep their non-finite numbers, spelled
``{"$nonfinite": ...}`` (``textsafe.json_safe``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def spell(x: float) -> str:
    """NaN, Infinity or -Infinity, as JSON readers write them."""
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def not_finite(value: Any) -> str:
    """The sentence a reader refuses a non-finite number with (an integer past what a float holds is one)."""
    if isinstance(value, float) and not math.isfinite(value):
        shown = spell(value)
    elif isinstance(value, int) and too_big(value):
        shown = f"an integer of {len(str(abs(value))):,} digits, past what a float holds"
    else:
        shown = repr(value)
    return (f"must be a finite number, got {shown}: nothing downstream can hold it; write the value the source "
            "meant, or leave the record out")


def too_big(value: int) -> bool:
    """Whether an integer is past what a float holds (``float(value)`` would raise)."""
    try:
        float(value)
    except OverflowError:
        return True
    return False


def is_finite(value: Any) -> bool:
    """Whether a number (int, float, numpy scalar) is finite; None and non-numbers are not, nor an integer past
    what a float holds (JSON's integers have no bound)."""
    try:
        return math.isfinite(value)
    except (TypeError, OverflowError):
        return False


def as_float(value: Any) -> float:
    """A number as a float: an integer past what a float holds is infinite, with its sign (then refused or marked as
    any infinite number is)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def nan_to_none(xs: Any) -> list[float | None] | None:
    """Logprobs as JSON: unknown (NaN, and anything not finite) as ``null``."""
    if xs is None:
        return None
    try:
        arr = np.asarray(xs, dtype=np.float64)
        if np.isfinite(arr).all():
            return [float(x) for x in xs]
    except (TypeError, ValueError):  # a None among them
        pass
    return [float(x) if is_finite(x) else None for x in xs]


def nonfinite_positions(values: Any, unknown: str = "nan") -> list[int]:
    """Positions of the logprobs in ``values`` that are not finite numbers; ``unknown="nan"``: NaN is the
    array's own unknown (packed arrays, Parquet columns) and is not counted, only infinities are;
    ``unknown="none"``: only ``None`` is unknown (a JSON list, where NaN was written as NaN)."""
    if unknown == "nan":
        arr = np.asarray(values, dtype=np.float64) if not isinstance(values, np.ndarray) else values
        return np.flatnonzero(np.isinf(arr)).tolist() if arr.size else []
    return [i for i, x in enumerate(values) if x is not None and not is_finite(x)]


def bad_rewards(ep: Any) -> list[tuple[str, Any]]:
    """(field, value) of each reward of ``ep`` that is not a finite number (``reward``, ``turn_rewards.2``,
    ``turns.1.reward``)."""
    out: list[tuple[str, Any]] = [] if is_finite(ep.reward) else [("reward", ep.reward)]
    for key in ("turn_rewards", "returns"):
        out += [(f"{key}.{i}", x) for i, x in enumerate(getattr(ep, key)) if not is_finite(x)]
    return out + [(f"turns.{k}.reward", t.reward) for k, t in enumerate(ep.turns) if not is_finite(t.reward)]
