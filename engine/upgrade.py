"""Earlier episode records brought to the current schema, one version step at a time.

``Episode.from_dict`` runs every record through :func:`upgrade`, so a file or
database written by an earlier Rollscope reads as if written today. Each step
takes a record dict of version N and returns one of version N + 1.

* 1 -> 2: findings gained ``id`` and ``caused_by``. A version-1 record's
  findings (its own and its turns') are linked the way the checks link them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _v1_to_v2(d: dict[str, Any]) -> dict[str, Any]:
    from .diagnosis import link_findings
    from .records import Finding

    own_raw = d.get("findings") or []
    turns_raw = d.get("turns") or []
    if not isinstance(own_raw, list) or not isinstance(turns_raw, list):
        return {**d, "schema_version": 2}  # malformed: left for from_dict to refuse with the field named
    own = [Finding.from_dict(f) for f in own_raw if isinstance(f, dict)]
    per_turn = [[Finding.from_dict(f) for f in (t.get("findings") or []) if isinstance(f, dict)]
                if isinstance(t, dict) else [] for t in turns_raw]
    flat = link_findings(own + [f for fs in per_turn for f in fs])
    k = len(own)
    turns = []
    for t, fs in zip(turns_raw, per_turn, strict=True):
        if isinstance(t, dict):
            t = {**t, "findings": [f.to_dict() for f in flat[k : k + len(fs)]]}
        k += len(fs)
        turns.append(t)
    return {**d, "schema_version": 2, "findings": [f.to_dict() for f in flat[: len(own)]], "turns": turns}


STEPS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def upgrade(d: dict[str, Any], to: int) -> dict[str, Any]:
    """``d`` (of the version it says, 1 when it says none) brought to version ``to``."""
    version = int(d.get("schema_version", 1))
    while version < to:
        d = STEPS[version](d)
        version += 1
    return d
