"""Where a number was not finite: the tokens whose logprobs were marked, and a stored record repaired.

The policy is ``numbers``'; this module makes its findings (``logprob_not_finite``, ``reward_not_finite``),
so the reading of fields (``reading``) and the records (``episode``) stay below it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .episode import Episode, Finding, Severity, Turn
from .numbers import is_finite, nonfinite_positions, spell


def _runs(positions: Iterable[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for p in sorted(set(positions)):
        if out and out[-1][1] == p:
            out[-1] = (out[-1][0], p + 1)
        else:
            out.append((p, p + 1))
    return out


def _turn_of(ep: Episode, pos: int) -> int | None:
    return next((s.turn for s in ep.segments if s.start <= pos < s.end), None)


def generation_position(ep_or_segments: Any, turn: int, j: int) -> int | None:
    """The array position of the ``j``-th generated token of ``turn`` (its assistant segment), or None."""
    segments = getattr(ep_or_segments, "segments", ep_or_segments)
    seg = next((s for s in segments if s.kind == "assistant" and s.turn == turn), None)
    if seg is None or not 0 <= seg.start + j < seg.end:
        return None
    return int(seg.start + j)


def findings_for(positions: Iterable[int], *, turn_of: Any = None, where: str = "",
                 values: dict[int, float] | None = None) -> list[Finding]:
    """``logprob_not_finite`` warnings, one per run of consecutive positions (its span those tokens)."""
    out = []
    for a, b in _runs(positions):
        seen = sorted({spell(values[p]) for p in range(a, b) if values and p in values}) or ["not finite"]
        at = f"token {a}" if b == a + 1 else f"tokens {a} to {b - 1}"
        out.append(Finding(
            "logprob_not_finite", Severity.WARNING,
            f"the rollout logprob of {at} was {' / '.join(seen)}, not a finite number"
            f"{f' (in {where})' if where else ''}: kept as unknown; a trainer reading it would compute a "
            "NaN or infinite loss there",
            turn=turn_of(a) if turn_of is not None else None, token_start=a, token_end=b,
            evidence={"values": seen, "count": b - a, **({"where": where} if where else {})}))
    return out


def _clean(xs: tuple[float, ...] | None) -> tuple[tuple[float, ...] | None, list[int]]:
    if xs is None or not np.isinf(np.asarray(xs, dtype=np.float64)).any():
        return xs, []
    bad = [i for i, x in enumerate(xs) if math.isinf(x)]
    if not bad:
        return xs, []
    return tuple(math.nan if math.isinf(x) else x for x in xs), bad


def unknown_logprobs(ep: Episode, flagged: Sequence[tuple[str, int, float]] = (), where: str = "") -> Episode:
    """``ep`` with every infinite logprob (arrays and generations) made unknown, and a ``logprob_not_finite``
    warning on those tokens and on those ``flagged`` (non-finite numbers a reader already made NaN, as
    (field path, index, value): ``logprobs`` or ``turns.K.generation.logprobs``). The same episode when
    there is nothing to mark."""
    lp = ep.tokens.logprobs
    values: dict[int, float] = {int(p): float(lp[p]) for p in nonfinite_positions(lp)}
    loose: list[tuple[int, int, float]] = []  # (turn, index in its generation, value) with no array position
    turns: list[Turn] = []
    changed = bool(values)
    for t in ep.turns:
        g = t.generation
        logprobs, bad = _clean(g.logprobs if g is not None else None)
        if bad and g is not None:
            changed = True
            assert g.logprobs is not None
            for j in bad:
                pos = generation_position(ep, t.index, j)
                if pos is None:
                    loose.append((t.index, j, g.logprobs[j]))
                else:
                    values.setdefault(pos, g.logprobs[j])
            t = replace(t, generation=replace(g, logprobs=logprobs))
        turns.append(t)
    for path, j, x in flagged:
        if path == "logprobs":
            values.setdefault(j, x)
            continue
        parts = path.split(".")
        turn = int(parts[1]) if len(parts) == 4 and parts[0] == "turns" and parts[1].isdigit() else None
        pos = generation_position(ep, turn, j) if turn is not None else None
        if pos is not None:
            values.setdefault(pos, x)
        elif turn is not None:
            loose.append((turn, j, x))
    if not values and not loose:
        return ep

    found = findings_for(values, turn_of=lambda p: _turn_of(ep, p), where=where, values=values)
    for turn, j, x in loose:
        found.append(Finding(
            "logprob_not_finite", Severity.WARNING,
            f"turn {turn}'s generation had logprob {spell(x)} at its token {j}, not a finite number: kept as unknown",
            turn=turn, evidence={"values": [spell(x)], "generation_index": j, **({"where": where} if where else {})}))
    have = {(f.kind, f.turn, f.token_start, f.token_end) for f in ep.all_findings()}
    new = [f for f in found if (f.kind, f.turn, f.token_start, f.token_end) not in have]
    ids = {f.id for f in ep.all_findings()}
    if new and all(ids):  # linked findings (a stored episode's): the new ones take the next free ids
        k = len(ids)
        for i, f in enumerate(new):
            k += 1
            while f"f{k}" in ids:
                k += 1
            new[i] = replace(f, id=f"f{k}")
    out = ep.evolve(findings=(*ep.findings, *new))
    if changed:
        arrays = ep.tokens
        clean = np.where(np.isinf(arrays.logprobs), np.float32(np.nan), arrays.logprobs)
        out = out.evolve(tokens=arrays.evolve(logprobs=clean), turns=tuple(turns))
    return out


def _fix(holder: dict[str, Any], key: str, path: str, fixed: dict[str, str]) -> None:
    v = holder.get(key)
    if isinstance(v, bool) or not (v is None or isinstance(v, (int, float))) or is_finite(v):
        return
    fixed[path] = "NaN (stored as NULL)" if v is None else spell(float(v))
    holder[key] = 0.0


def repair_record(d: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A stored record whose numbers an earlier Rollscope let in (a NaN reward SQLite keeps as NULL, an
    infinite return) made readable: each reward, turn reward and return that is not a finite number becomes 0,
    with a ``reward_not_finite`` error saying what it was; a time (``created_at``, a latency, a timing) becomes 0.
    Logprobs are left to the reader (unknown, marked). Returns (the record, field -> what it held); the same
    dict when nothing was wrong."""
    out = dict(d)
    fixed: dict[str, str] = {}
    _fix(out, "reward", "reward", fixed)
    _fix(out, "created_at", "created_at", fixed)
    for key in ("turn_rewards", "returns"):
        if isinstance(out.get(key), list):
            values = {str(i): v for i, v in enumerate(out[key])}
            for i in list(values):
                _fix(values, i, f"{key}.{i}", fixed)
            out[key] = [values[str(i)] for i in range(len(values))]
    turns = []
    for k, raw in enumerate(out.get("turns") or []):
        t = dict(raw) if isinstance(raw, dict) else raw
        if isinstance(t, dict):
            _fix(t, "reward", f"turns.{k}.reward", fixed)
            if isinstance(t.get("generation"), dict):
                t["generation"] = dict(t["generation"])
                _fix(t["generation"], "latency_s", f"turns.{k}.generation.latency_s", fixed)
            if isinstance(t.get("timings"), dict):
                t["timings"] = dict(t["timings"])
                for name in list(t["timings"]):
                    _fix(t["timings"], name, f"turns.{k}.timings.{name}", fixed)
        turns.append(t)
    if "turns" in out:
        out["turns"] = turns
    if not fixed:
        return d, {}
    rewards = {k: v for k, v in fixed.items() if k == "reward" or k.startswith(("turn_rewards", "returns"))
               or k.endswith(".reward")}
    if rewards and isinstance(out.get("findings"), list):
        said = ", ".join(f"{k} was {v}" for k, v in rewards.items())
        found = Finding(
            "reward_not_finite", Severity.ERROR,
            f"this episode was stored with rewards that are not finite numbers ({said}); they read as 0 now. "
            "Its real reward is unknown: import it again from a source with a finite reward, or leave it out "
            "of training", evidence={"fields": rewards})
        taken = {f.get("id") for f in out["findings"] if isinstance(f, dict)} | {
            f.get("id") for t in turns if isinstance(t, dict) for f in (t.get("findings") or []) if isinstance(f, dict)}
        k = len(taken) + 1
        while f"f{k}" in taken:
            k += 1
        out["findings"] = [*out["findings"], replace(found, id=f"f{k}").to_dict()]
    return out, fixed
