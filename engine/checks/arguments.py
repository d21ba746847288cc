"""``wrong_argument_token``: the token where a wrong tool argument was generated, and whether the right value was
among the model's alternatives there.

For a tool episode whose outcome is ``wrong_arguments`` (``records.outcome``) and whose tokens carry their top K
(``TokenArrays.top_ids``), the check reads the outcome turn's generated tokens:

1. it decodes them with the episode's tokenizer and finds the taken argument's value in that text: after the
   key written as JSON (``"address1": ``), the JSON value that equals the taken one; else, for a string in a
   text that never writes the key as JSON, the value itself (the last such place in either case: a reply's call
   comes after any draft of it in its reasoning);
2. it writes the expected value in the same style (the JSON escaping and separators that reproduce the taken
   value's text) and finds the first character where the two texts part;
3. the token holding that character is the first wrong token. A top-K entry there continues the expected value
   when its text is a prefix of the expected text from that token's start on (or that text a prefix of it, at
   the end of the reply) and reaches the parting character: a token that stops before it fits both values and
   says nothing.

With several differing keys, the one that parts first in the reply is the subject: one finding, at its token,
the other keys named in the evidence. The finding is ``info`` either way: it explains a mistake the outcome
already names. Where the right value is among the alternatives it says at which rank and with which
probability ("the model gave '3' 0.61, '2' 0.34"); where it is not, it says so, with the sampled token's
probability, which tells a confident mistake from a near miss. An episode with no top K, or no
``wrong_arguments`` outcome, gets nothing; one that has top K elsewhere but not at that token (a re-encoded
reply) says it was not checked. The probabilities are the top K's own (the distribution the token was sampled
from, or the one a teacher-forced pass recomputed); a sampled token outside the top K is said to be less
likely than all of them, its rollout probability kept in the evidence.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..records.episode import Episode, Finding, Segment
from ..tokens import chat
from ..tokens.tokenizer import Tokenizer
from .base import INFO, CheckOptions, skip

KIND = "wrong_argument_token"
_STYLES = ((False, None), (True, None), (False, (",", ":")), (True, (",", ":")))


@dataclass(frozen=True)
class Parting:
    """Where one argument's taken value parts from the expected one in a reply's text."""

    key: str
    start: int  # the taken value's first character in the text
    end: int  # one past its last
    expected_text: str  # the expected value written as the taken one is
    char: int  # the first character where they part


def check_wrong_argument(ep: Episode, o: CheckOptions) -> list[Finding]:
    """``wrong_argument_token`` on the first token where the outcome's wrong argument parts from the expected
    value, with the top K there (see the module's docstring)."""
    out = ep.outcome
    t = ep.tokens
    if out is None or out.kind != "wrong_arguments" or out.turn is None or out.expected is None \
            or out.taken is None or not out.differing_arguments or not t.top_k or not (t.top_ids[:, 0] >= 0).any():
        return []
    tok = o.tokenizer
    if tok is None:
        return [skip(KIND, "no tokenizer to read the wrong argument's tokens")]
    segs = [s for s in ep.segments if s.kind == "assistant" and s.turn == out.turn]
    keys = [k for k in out.differing_arguments if k in out.taken.arguments and k in out.expected.arguments]
    found: list[tuple[int, Segment, str, Parting]] = []
    for seg in segs:
        ids = t.ids[seg.start : seg.end].tolist()
        text = chat.decode(tok, ids)
        for key in keys:
            p = parting(text, key, out.taken.arguments[key], out.expected.arguments[key])
            if p is None:
                continue
            at = chat.token_at_char(tok, ids, text, p.char)
            if at is not None:
                found.append((seg.start + at, seg, text, p))
    if not found:
        return [skip(KIND, f"turn {out.turn}: the taken value of {', '.join(keys) or 'no argument'} is not in the "
                           "turn's generated tokens")] if keys else []
    pos, seg, text, p = min(found, key=lambda f: f[0])
    if int(t.top_ids[pos, 0]) < 0:
        return [skip(KIND, f"turn {out.turn}: token {pos}, where {p.key} goes wrong, has no top K recorded")]
    return [_finding(ep, tok, pos, seg, text, p, [f[3].key for f in found if f[3].key != p.key])]


def parting(text: str, key: str, taken: Any, expected: Any) -> Parting | None:
    """Where the taken value of ``key`` lies in ``text`` and where the expected value, written the same way,
    parts from it; None when the value is not found or the two read the same."""
    span = _json_span(text, key, taken)
    if span is not None:
        a, b = span
        raw = text[a:b]
        style = next(((ea, sep) for ea, sep in _STYLES if json.dumps(taken, ensure_ascii=ea, separators=sep) == raw),
                     (False, None))
        want = json.dumps(expected, ensure_ascii=style[0], separators=style[1])
    elif isinstance(taken, str) and taken and isinstance(expected, str) and taken in text \
            and json.dumps(key) not in text:
        a = text.rindex(taken)
        b, raw, want = a + len(taken), taken, expected
    else:
        return None
    d = next((i for i, (x, y) in enumerate(zip(raw, want)) if x != y), min(len(raw), len(want)))
    if d == len(raw) == len(want):
        return None
    return Parting(key, a, b, want, a + d)


def _json_span(text: str, key: str, value: Any) -> tuple[int, int] | None:
    """The span of the last JSON value of ``"key":`` in ``text`` that equals ``value`` (the call a reply makes
    comes after any draft of it in its reasoning)."""
    name = json.dumps(key)
    dec = json.JSONDecoder()
    found = None
    i = text.find(name)
    while i >= 0:
        j = i + len(name)
        while j < len(text) and text[j].isspace():
            j += 1
        if j < len(text) and text[j] == ":":
            j += 1
            while j < len(text) and text[j].isspace():
                j += 1
            try:
                got, end = dec.raw_decode(text, j)
            except ValueError:
                got, end = None, j
            if end > j and got == value and type(got) is type(value):
                found = (j, end)
        i = text.find(name, i + 1)
    return found


@dataclass(frozen=True)
class Alternative:
    """One of the top K at a token: its rank (1 the most likely), id, text and probability (None: unknown)."""

    rank: int
    id: int
    token: str
    probability: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "id": self.id, "token": self.token, "probability": self.probability}


def _said(p: float | None) -> str:
    return "?" if p is None else f"{p:.2f}"


def _finding(ep: Episode, tok: Tokenizer, pos: int, seg: Segment, text: str, p: Parting,
             other_keys: Sequence[str]) -> Finding:
    t = ep.tokens
    out = ep.outcome
    if out is None or out.taken is None or out.expected is None:  # checked by the caller
        raise ValueError("a wrong_arguments outcome names both calls")
    sampled = int(t.ids[pos])
    alts = [Alternative(r + 1, int(i), chat.decode(tok, [int(i)]), math.exp(lp) if math.isfinite(lp) else None)
            for r, (i, lp) in enumerate(zip(t.top_ids[pos].tolist(), t.top_logprobs[pos].tolist())) if i >= 0]
    start = len(chat.decode(tok, t.ids[seg.start : pos].tolist()))
    rest = (text[: p.start] + p.expected_text + text[p.end :])[start:]
    reach = p.char - start  # an entry must cover more than this many characters of ``rest`` to tell the values apart

    def continues(a: Alternative) -> bool:
        u = a.token
        return bool(u) and a.id != sampled and (rest.startswith(u) and len(u) > reach or u.startswith(rest))

    right = next((a for a in alts if continues(a)), None)
    own = next((a for a in alts if a.id == sampled), None)
    p_sampled = own.probability if own is not None else None
    known = [a.probability for a in alts if a.probability is not None]
    # The sampled token outside the top K is less likely than the least of them, in the same distribution; its
    # rollout logprob (another pass, maybe another model: a recomputed top K) is evidence, not this number.
    token = chat.decode(tok, [sampled])
    gave = f"{token!r} {_said(p_sampled)}" if own is not None else \
        f"{token!r} (below its {len(alts)} most likely" + (f", the least of them {min(known):.2f})" if known else ")")
    taken_v, expected_v = out.taken.arguments[p.key], out.expected.arguments[p.key]
    head = (f"turn {out.turn}: {out.taken.name}'s {p.key} went wrong at token {pos} ({taken_v!r} where the "
            f"reference has {expected_v!r})")
    if right is not None:
        msg = (f"{head}: the model gave {gave}, {right.token!r} {_said(right.probability)}: "
               f"the right value was its choice {right.rank} of {len(alts)}")
    else:
        msg = (f"{head}: the model gave {gave}; the reference's value was not among its "
               f"{len(alts)} most likely tokens there")
    lp_rollout = float(t.logprobs[pos])
    evidence: dict[str, Any] = {
        "key": p.key, "tool": out.taken.name, "taken": taken_v, "expected": expected_v, "position": pos,
        "token": token, "token_id": sampled, "probability": p_sampled,
        "rollout_probability": math.exp(lp_rollout) if math.isfinite(lp_rollout) else None,
        "expected_in_top_k": right is not None,
        "expected_token": None if right is None else right.token,
        "expected_token_id": None if right is None else right.id,
        "expected_probability": None if right is None else right.probability,
        "expected_rank": None if right is None else right.rank, "top_k": len(alts),
        "alternatives": [a.to_dict() for a in alts], "text": text[max(0, p.start - 40) : p.end + 10],
    }
    if other_keys:
        evidence["other_keys"] = list(dict.fromkeys(other_keys))
    return Finding("wrong_argument_token", INFO, msg, turn=out.turn, token_start=pos, token_end=pos + 1,
                   evidence=evidence)
