"""Keyset pagination of the episode table, and counts that stop at a bound.

A page after another is asked for by a token that names the sort and the last row's place in it (its value
of the sorted column and its ``rid``, the tie-breaker of every sort), so the page is a walk of the sorted
column's index from that place: the same cost on page 1 and page 20,000, where an ``OFFSET`` reads every
row before it. NULLs sort first ascending and last descending (SQLite's order): a page that crosses from
the values to the NULLs (or back) is read in two index ranges, each a single range of one index.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .filter import EpisodeSummary


@dataclass(frozen=True)
class MatchCount:
    """How many episodes a filter selects, counted up to a bound: ``n`` is exact when ``exact``, else the
    selection holds at least ``n`` (the bound) and the exact count is ``Store.count``'s to give."""

    n: int
    exact: bool

    @property
    def label(self) -> str:
        """``1,234``, or ``10,000+`` when the count stopped at its bound."""
        return f"{self.n:,}" if self.exact else f"{self.n:,}+"

    @property
    def words(self) -> str:
        """``1,234``, or ``at least 10,000``."""
        return f"{self.n:,}" if self.exact else f"at least {self.n:,}"


@dataclass(frozen=True)
class EpisodePage:
    """One page of the episode table: its rows, and the tokens of the pages either side (None where there is
    none: ``before`` on the first page, ``after`` on the last)."""

    rows: tuple[EpisodeSummary, ...]
    after: str | None
    before: str | None


def filter_mark(where: str, args: list[Any]) -> str:
    """A short mark of a filter (its SQL and arguments), so a page token is refused with another filter."""
    raw = json.dumps([where, args], separators=(",", ":"), default=str)
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Cursor:
    """A place in one sort of one filter's episodes (``scope``: the filter's ``filter_mark``): just after (or
    before) the row whose sorted column holds ``value`` and whose ``rid`` is ``rid``."""

    by: str
    descending: bool
    value: Any
    rid: int
    scope: str

    def token(self) -> str:
        raw = json.dumps([self.by, self.descending, self.value, self.rid, self.scope], separators=(",", ":"))
        return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")

    @classmethod
    def parse(cls, token: str, by: str, descending: bool, scope: str) -> Cursor:
        """The cursor a token names; a ConfigError when it is not a token or was made for another sort or filter."""
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
            t_by, t_desc, value, rid, t_scope = json.loads(raw)
            if not isinstance(rid, int) or not isinstance(t_by, str) or not isinstance(t_scope, str) or \
                    value is not None and not isinstance(value, str | int | float):
                raise ValueError
        except (ValueError, TypeError):
            raise ConfigError(f"{token!r} is not a page token (take one from a page: its after or before)") from None
        if (t_by, bool(t_desc)) != (by, descending):
            raise ConfigError(f"the page token is for the sort by {t_by} {'descending' if t_desc else 'ascending'}, "
                              f"not by {by} {'descending' if descending else 'ascending'}: start again from page 1")
        if t_scope != scope:
            raise ConfigError("the page token is for another filter: start again from page 1")
        return cls(by, descending, value, rid, scope)


def ranges(col: str, walk_desc: bool, value: Any, rid: int) -> list[tuple[str, list[Any]]]:
    """The index ranges (SQL condition and its arguments), in order, that follow (``value``, ``rid``) in the
    order ``col`` then ``rid``, walked descending or ascending (NULLs lowest, as SQLite sorts them). The rows
    that tie with ``value`` are a range of their own (``col = ? AND rid < ?`` is one range of the column's
    index, which ends in the rowid; a row value ``(col, rid) < (?, ?)`` would walk every tie from its start)."""
    if value is None:
        if walk_desc:  # the NULLs come last: only the NULLs below this rid are left
            return [(f"{col} IS NULL AND rid < ?", [rid])]
        return [(f"{col} IS NULL AND rid > ?", [rid]), (f"{col} IS NOT NULL", [])]
    if walk_desc:
        return [(f"{col} = ? AND rid < ?", [value, rid]), (f"{col} < ?", [value]), (f"{col} IS NULL", [])]
    return [(f"{col} = ? AND rid > ?", [value, rid]), (f"{col} > ?", [value])]
