"""Two episodes aligned turn by turn: what differs, and where they first diverge.

Turns are aligned by index, which is what a fork and its parent share (the
fork replays the parent's turns before its fork turn) and what two samples
of one task are usually compared by. The opening (system prompt and first
observation) is compared first: different openings mean different tasks or
a changed env, and every later difference follows from that.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from ..records.episode import Episode, Message, Turn
from ..tokens.tokenizer import Tokenizer

# What a turn can differ in, in the order a reader checks them.
FIELDS = ("assistant text", "generated ids", "tool calls", "parse error", "observation", "reward", "done")
# Word diffs of texts longer than this (in words, per side) fall back to a line diff.
WORD_DIFF_LIMIT = 4000
_WORDS = re.compile(r"\s+|[^\s\w]|\w+")


@dataclass(frozen=True)
class TurnDiff:
    """Turn ``index`` of both episodes (``None`` where one has no such turn)."""

    index: int
    a: Turn | None
    b: Turn | None
    differs: tuple[str, ...]  # names from FIELDS, plus "missing" when one side has no turn

    @property
    def same(self) -> bool:
        return not self.differs


@dataclass(frozen=True)
class Comparison:
    a: Episode
    b: Episode
    opening_a: tuple[Message, ...]
    opening_b: tuple[Message, ...]
    turns: tuple[TurnDiff, ...]

    @property
    def opening_same(self) -> bool:
        return _msgs(self.opening_a) == _msgs(self.opening_b)

    @property
    def first_divergence(self) -> int | None:
        """The first turn that differs; -1 when the openings already differ; None when nothing does."""
        if not self.opening_same:
            return -1
        return next((d.index for d in self.turns if not d.same), None)

    @property
    def relation(self) -> str:
        """How the two are related, in words."""
        a, b = self.a, self.b
        if a.id == b.id:
            return "the same episode"
        if b.parent_id == a.id:
            return f"B is a fork of A at turn {b.fork_turn}"
        if a.parent_id == b.id:
            return f"A is a fork of B at turn {a.fork_turn}"
        if a.parent_id and a.parent_id == b.parent_id:
            return f"forks of the same parent {a.parent_id} (at turns {a.fork_turn} and {b.fork_turn})"
        if a.group_id and a.group_id == b.group_id:
            return f"samples {a.sample_index} and {b.sample_index} of the same group"
        if (a.env, a.task_id) == (b.env, b.task_id):
            return "the same task"
        return "different tasks"

    def summary(self) -> str:
        first = self.first_divergence
        if first is None:
            return f"{self.relation}: identical turn by turn ({len(self.turns)} turns)"
        if first == -1:
            return f"{self.relation}: they differ from the start (system prompt or first observation)"
        d = self.turns[first]
        return f"{self.relation}: they first diverge at turn {first} ({', '.join(d.differs)})"


def _msgs(ms: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in ms]


def opening_messages(ep: Episode) -> tuple[Message, ...]:
    """The messages before the episode's first turn: system prompt and first observation."""
    out: list[Message] = []
    for m in ep.messages:
        if m.role == "assistant" and ep.turns:
            break
        out.append(m)
    return tuple(out)


def _calls(t: Turn) -> list[dict[str, Any]]:
    # Arguments that are not a JSON object compare as the text the model wrote (``ToolCall.wire_arguments``).
    return [{"name": c.name, "arguments": c.wire_arguments} for c in t.tool_calls]


def diff_turn(index: int, a: Turn | None, b: Turn | None) -> TurnDiff:
    """What differs between two turns with the same index."""
    if a is None or b is None:
        return TurnDiff(index, a, b, ("missing",))
    ga = a.generation.text if a.generation else ""
    gb = b.generation.text if b.generation else ""
    # A reply kept as ids alone (a trainer's dump read without a tokenizer) is compared by its ids: two empty texts
    # are not two same replies. Where one side holds no ids (chat messages read without a tokenizer) there is
    # nothing to compare them with: the reply's text and calls say it.
    ia = tuple(a.generation.token_ids) if a.generation and not ga else ()
    ib = tuple(b.generation.token_ids) if b.generation and not gb else ()
    checks = (
        ("assistant text", ga == gb),
        ("generated ids", ia == ib or not ia or not ib),
        ("tool calls", _calls(a) == _calls(b)),
        ("parse error", a.parse_error == b.parse_error),
        ("observation", _msgs(a.observation) == _msgs(b.observation)),
        ("reward", a.reward == b.reward),
        ("done", a.done == b.done),
    )
    return TurnDiff(index, a, b, tuple(name for name, same in checks if not same))


def compare(a: Episode, b: Episode) -> Comparison:
    """Align ``a`` and ``b`` by turn index and say what differs in each turn."""
    n = max(a.n_turns, b.n_turns)
    turns = tuple(
        diff_turn(i, a.turns[i] if i < a.n_turns else None, b.turns[i] if i < b.n_turns else None) for i in range(n)
    )
    return Comparison(a, b, opening_messages(a), opening_messages(b), turns)


def word_diff(a: str, b: str) -> list[tuple[str, str]]:
    """``[(op, text)]`` with op ``same``, ``del`` (only in a) or ``ins`` (only in b), word by word.

    Whitespace and punctuation are their own pieces, so a changed number
    inside a sentence marks that number, not the sentence. Very long texts
    are diffed line by line to keep the cost bounded.
    """
    if a == b:
        return [("same", a)] if a else []
    wa, wb = _WORDS.findall(a), _WORDS.findall(b)
    if len(wa) > WORD_DIFF_LIMIT or len(wb) > WORD_DIFF_LIMIT:
        wa, wb = a.splitlines(keepends=True), b.splitlines(keepends=True)
    out: list[tuple[str, str]] = []
    sm = difflib.SequenceMatcher(None, wa, wb, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            out.append(("same", "".join(wa[i1:i2])))
            continue
        if op in ("replace", "delete"):
            out.append(("del", "".join(wa[i1:i2])))
        if op in ("replace", "insert"):
            out.append(("ins", "".join(wb[j1:j2])))
    return out


def calls_text(t: Turn | None) -> str:
    """A turn's tool calls as pretty JSON (empty when it made none), for diffing."""
    if t is None or not t.tool_calls:
        return ""
    return "\n".join(json.dumps(c, indent=2, ensure_ascii=False, sort_keys=True) for c in _calls(t))


def observation_text(t: Turn | None) -> str:
    """A turn's observation as text (``[role name] content`` per message), for diffing."""
    if t is None:
        return ""
    return "\n".join(f"[{m.role}{' ' + m.name if m.name else ''}] {m.content}" for m in t.observation)


@dataclass(frozen=True)
class PartingSide:
    """One sample's side of a parting: its own token there, the other sample's, and how likely each was under this
    sample's distribution at that position."""

    own_id: int
    other_id: int
    own_logprob: float | None
    """Its own token's logprob (the rollout logprob; else the one its top K gives; None when neither is known)."""
    other_logprob: float | None
    """The other sample's token's logprob among this sample's top K; None when it is not there or none was
    recorded."""
    other_rank: int | None
    """Where the other token stands in this sample's top K (1: the most likely); None when it is not there."""
    top_k: int
    """How many alternatives this sample recorded at the position (0: none: generated without ``--top-logprobs``)."""

    @property
    def own_prob(self) -> float | None:
        return None if self.own_logprob is None else math.exp(self.own_logprob)

    @property
    def other_prob(self) -> float | None:
        return None if self.other_logprob is None else math.exp(self.other_logprob)

    @property
    def other_state(self) -> str:
        """``found`` (the other token is among this sample's top K), ``not_in_top_k`` or ``no_top_k``."""
        if not self.top_k:
            return "no_top_k"
        return "found" if self.other_rank is not None else "not_in_top_k"


@dataclass(frozen=True)
class TokenParting:
    """Where two episodes' token arrays first differ. ``position`` is None when they never do (or one ends where the
    other goes on); ``a``/``b`` are None when the parting is not a token both generated (``why`` says where it is)."""

    position: int | None
    turn: int | None = None
    """The turn whose generation holds the parting token (A's)."""
    a: PartingSide | None = None
    b: PartingSide | None = None
    text_a: str = ""
    """A's token there, decoded ('' without a tokenizer)."""
    text_b: str = ""
    why: str = ""
    """When there are no probabilities to show: why, in a sentence."""

    @property
    def generated(self) -> bool:
        """Whether the two part at a token both generated (the probabilities are then in ``a`` and ``b``)."""
        return self.a is not None and self.b is not None


def _kind_at(ep: Episode, p: int) -> str:
    """What kind of token ``p`` of ``ep`` is: its segment's kind; without segments (an import), ``assistant`` where
    the loss mask trains it, else ``unknown``."""
    for seg in ep.segments:
        if seg.start <= p < seg.end:
            return str(seg.kind)
    if not ep.segments and p < len(ep.tokens) and ep.tokens.loss_mask[p]:
        return "assistant"
    return "unknown"


def _turn_at(ep: Episode, p: int) -> int | None:
    return next((seg.turn for seg in ep.segments if seg.start <= p < seg.end), None)


def _choice(ep: Episode, p: int, other_id: int) -> PartingSide:
    t = ep.tokens
    own = int(t.ids[p])
    ids = t.top_ids[p].tolist() if t.top_k else []
    lps = t.top_logprobs[p].tolist() if t.top_k else []
    k = sum(1 for i in ids if i >= 0)

    def among(token: int) -> tuple[float | None, int | None]:
        for rank, (i, lp) in enumerate(zip(ids[:k], lps[:k]), start=1):
            if i == token:
                return (lp if math.isfinite(lp) else None), rank
        return None, None

    rollout = float(t.logprobs[p])
    own_lp = rollout if math.isfinite(rollout) else among(own)[0]
    other_lp, rank = among(other_id)
    return PartingSide(own, other_id, own_lp, other_lp, rank, k)


def token_parting(a: Episode, b: Episode, tokenizer: Tokenizer | None = None) -> TokenParting:
    """Where ``a``'s and ``b``'s token arrays first differ and, when both generated the token there, each one's
    probabilities of both tokens from its top K (``tokenizer``: to decode the two tokens)."""
    ia, ib = a.tokens.ids, b.tokens.ids
    n = min(len(ia), len(ib))
    differ = (ia[:n] != ib[:n]).nonzero()[0]
    if not len(differ):
        if len(ia) == len(ib):
            return TokenParting(None, why="their token arrays are the same: they never part")
        longer, shorter = ("A", "B") if len(ia) > len(ib) else ("B", "A")
        return TokenParting(None, why=f"{shorter}'s tokens end at token {n} where {longer}'s go on: no token of both "
                                      "to set side by side")
    p = int(differ[0])
    kind_a, kind_b = _kind_at(a, p), _kind_at(b, p)
    if kind_a != "assistant" or kind_b != "assistant":
        where = kind_a if kind_a == kind_b else f"A's {kind_a}, B's {kind_b}"
        return TokenParting(p, _turn_at(a, p), why=f"they part at token {p}, in the {where} tokens: not a token both "
                                                   "generated, so no model choice to weigh")
    id_a, id_b = int(ia[p]), int(ib[p])
    texts = ("", "")
    if tokenizer is not None:
        texts = (str(tokenizer.decode([id_a], skip_special_tokens=False)),
                 str(tokenizer.decode([id_b], skip_special_tokens=False)))
    return TokenParting(p, _turn_at(a, p), _choice(a, p, id_b), _choice(b, p, id_a), texts[0], texts[1])


__all__ = ["FIELDS", "Comparison", "PartingSide", "TokenParting", "TurnDiff", "calls_text", "compare", "diff_turn",
           "observation_text", "opening_messages", "token_parting", "word_diff"]
