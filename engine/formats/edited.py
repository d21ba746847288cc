"""Columns a person edited after export: a Rollscope Parquet file's summary columns, a verl row's ``reward_score``.

A lossless export writes the whole record beside columns that repeat a few of its fields for dataset tools (pandas,
polars, ``datasets``). Those columns are what a person edits: a re-scored reward, a status, a tag. Read back, an
edited column is taken over the record's copy (where they agree nothing changes), once checked as the record's
field would be, and the import says so once a file and field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checks.diagnosis import without_checks
from ..errors import FormatError
from ..records.episode import Episode, Status
from ..records.reading import json_type
from .base import ImportContext, reward_value

EDITABLE = ("env", "task_id", "run_id", "group_id", "sample_index", "preset", "status", "reason", "reward", "tags",
            "starred")
"""The record's fields a Parquet export repeats as columns that a person may edit; the others (``n_tokens``,
``prompt_len``, ``source``...) are figures of the record and its arrays, read from them."""
_TEXT = {"env", "task_id", "preset", "reason"}
_TEXT_OR_NULL = {"run_id", "group_id"}


def _value(name: str, value: Any, where: str) -> Any:
    """``value`` of column ``name`` as the record's field holds it, or a FormatError naming the column."""
    if name in _TEXT and not isinstance(value, str) or name in _TEXT_OR_NULL and not isinstance(value, (str, type(None))):
        raise FormatError(f"must be text, got {json_type(value)}", where, name)
    if name == "status":
        if value not in {s.value for s in Status}:
            raise FormatError(f"must be one of {', '.join(s.value for s in Status)}, got {value!r:.40}", where, name)
        return Status(value)
    if name == "reward":  # as the row's own reader reads it (a dict of scores too)
        return reward_value(value, where, name)
    if name == "sample_index" and (isinstance(value, bool) or not isinstance(value, int)):
        raise FormatError(f"must be an integer, got {json_type(value)}", where, name)
    if name == "starred" and not isinstance(value, bool):
        raise FormatError(f"must be true or false, got {json_type(value)}", where, name)
    if name == "tags":
        if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
            raise FormatError("must be a list of text", where, name)
        return tuple(value)
    return value


def _same(name: str, ep: Episode, value: Any) -> bool:
    held = getattr(ep, name)
    if name == "status":
        return bool(value == held.value)
    if name == "tags":
        return isinstance(value, (list, tuple)) and tuple(value) == held
    if name == "reward" and isinstance(value, float) and math.isnan(value):
        return False
    return bool(value == held)


def with_edited_columns(ep: Episode, columns: Mapping[str, Any], where: str, path: Path, ctx: ImportContext,
                        named: Mapping[str, str] | None = None) -> Episode:
    """``ep`` with each of ``columns`` (a field of ``EDITABLE`` -> the row's value) that differs from its record taken
    over it, checked as the field is (a FormatError names the column: ``named`` maps a field to the column's name
    where they differ); one note a file and field."""
    changes: dict[str, Any] = {}
    for name, value in columns.items():
        if _same(name, ep, value):
            continue
        column = (named or {}).get(name, name)
        try:
            read = _value(name, value, where)
        except FormatError as e:
            raise FormatError(e.detail, where, column) from None
        if _same(name, ep, read.value if isinstance(read, Status) else read):  # another spelling of the same
            continue
        changes[name] = read
        ctx.note(f"{path}: rows whose {column} column differs from their Rollscope record (edited after export) are "
                 "read with the column's value")
    return ep.evolve(**changes) if changes else ep


FIGURES = ("n_tokens", "n_trainable")
"""Columns a Parquet export counts from the token arrays: arrays that no longer give them were edited after export."""


def with_stale_checks(ep: Episode, figures: Mapping[str, Any], path: Path, ctx: ImportContext) -> Episode:
    """``ep`` as not checked when its arrays no longer give the figures the export counted from them
    (``FIGURES``): the findings its record holds are the checks' of other arrays. The loop's own findings stay
    (they are of the run, not of the arrays' check; those the checks write again go with theirs)."""
    now = {"n_tokens": ep.n_tokens, "n_trainable": ep.tokens.n_trainable}
    changed = [k for k, v in figures.items() if v is not None and v != now[k]]
    if not changed or ep.checked is None:
        return ep
    ctx.note(f"{path}: rows whose token arrays no longer give their {' and '.join(changed)} "
             f"column{'s' if len(changed) > 1 else ''} (edited after "
             "export) read as not checked: the findings their records hold were of other arrays; `rollscope check` "
             "checks them")
    return without_checks(ep, f"its token arrays no longer give its {' and '.join(changed)} column"
                              f"{'s' if len(changed) > 1 else ''} (edited after export)")
