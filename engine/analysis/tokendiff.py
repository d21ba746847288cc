"""Token-level diff of two episodes, or of one episode and its own conversation under another loop.

Two token arrays are aligned and every position that differs is named:
tokens only one side has, aligned tokens whose ids differ, and aligned
tokens with equal ids whose loss mask or logprob differ. The alignment is
anchored on the model's own output: each side is cut at its assistant
segments, and the k-th assistant run of one side is aligned with the k-th
of the other, as is what lies between them (prompts, template text,
observations). Within a piece, a common head and tail are matched first and
only the middle goes through ``difflib``, so two 100k-token episodes that
agree almost everywhere align in well under a second.

``retokenized(ep, preset=..., tokenizer=...)`` rebuilds an episode's own
conversation under another loop preset (or tokenizer) by replaying its
recorded generations through that loop (``fork`` at its last turn), so
``token_diff(ep, retokenized(ep, preset="tito"))`` answers "what would tito have
trained on here?".

Alignment keys are token ids when both sides use one tokenizer, else each
token's text (ids of two vocabularies are not comparable: there ``same``
means the same text, and ``changed`` a different one).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..records.episode import Episode, Status, raw_observations
from ..tokens.tokenizer import Tokenizer

LOGPROB_TOL = 1e-3
"""Aligned logprobs further apart than this differ (both known); one known and one not differs too."""

TD_SAME, TD_CHANGED, TD_ONLY_A, TD_ONLY_B = "same", "changed", "only_a", "only_b"


@dataclass(frozen=True)
class TokenDiffRow:
    """One aligned position: a token of A, of B, or of both."""

    op: str  # same, changed (ids differ), only_a, only_b
    a: int | None
    b: int | None
    mask_differs: bool = False
    logprob_differs: bool = False

    @property
    def differs(self) -> bool:
        return self.op != TD_SAME or self.mask_differs or self.logprob_differs


@dataclass
class KindCounts:
    """What differs among the tokens of one segment kind (a row counts under A's kind, else B's)."""

    kind: str
    rows: int = 0
    only_a: int = 0
    only_b: int = 0
    ids: int = 0
    mask: int = 0
    logprob: int = 0

    @property
    def differing(self) -> int:
        return self.only_a + self.only_b + self.ids + self.mask + self.logprob


@dataclass(frozen=True)
class Hunk:
    """A run of consecutive differing rows, ``rows[start:end]``."""

    start: int
    end: int


@dataclass
class TokenDiff:
    """Two episodes' tokens, aligned; see the module docstring."""

    a: Episode
    b: Episode
    rows: list[TokenDiffRow]
    by_text: bool  # aligned by token text (the tokenizers differ), not by id
    counts: dict[str, KindCounts] = field(default_factory=dict)
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def first(self) -> TokenDiffRow | None:
        """The first row that differs (None: the arrays agree everywhere)."""
        return self.rows[self.hunks[0].start] if self.hunks else None

    @property
    def n_differing(self) -> int:
        return sum(1 for r in self.rows if r.differs)

    def kind_of(self, row: TokenDiffRow) -> str:
        if row.a is not None:
            return _kind_at(self.a, row.a)
        assert row.b is not None
        return _kind_at(self.b, row.b)

    def turn_of(self, row: TokenDiffRow) -> int | None:
        ep, pos = (self.a, row.a) if row.a is not None else (self.b, row.b)
        assert pos is not None
        for s in ep.segments:
            if s.start <= pos < s.end:
                return s.turn
        return None

    def what(self, row: TokenDiffRow) -> str:
        """What differs at ``row``, in words."""
        if row.op == TD_ONLY_A:
            return "only A has this token"
        if row.op == TD_ONLY_B:
            return "only B has this token"
        bits = []
        if row.op == TD_CHANGED:
            bits.append("the token differs")
        if row.mask_differs:
            bits.append("the loss mask differs")
        if row.logprob_differs:
            bits.append("the logprob differs")
        return ", ".join(bits)


def _kind_at(ep: Episode, pos: int) -> str:
    for s in ep.segments:
        if s.start <= pos < s.end:
            return s.kind
    return "unsegmented"


def _pieces(ep: Episode) -> list[tuple[int, int]]:
    """``[start, end)`` cuts of ``ep``'s tokens: between-runs and assistant runs, alternating, between first."""
    n = len(ep.tokens)
    runs = sorted((s.start, s.end) for s in ep.segments if s.kind == "assistant" and s.end > s.start)
    # Adjacent assistant segments of one generation form one run.
    merged: list[list[int]] = []
    for a, b in runs:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    cuts, at = [], 0
    for a, b in merged:
        cuts.append((at, a))
        cuts.append((a, b))
        at = b
    cuts.append((at, n))
    return cuts


def _align(ka: Sequence[Any], kb: Sequence[Any], oa: int, ob: int, out: list[tuple[str, int | None, int | None]]) -> None:
    """Append aligned (op, a, b) for two key sequences whose positions start at ``oa`` and ``ob``."""
    n, m = len(ka), len(kb)
    head = 0
    while head < min(n, m) and ka[head] == kb[head]:
        head += 1
    tail = 0
    while tail < min(n, m) - head and ka[n - 1 - tail] == kb[m - 1 - tail]:
        tail += 1
    out.extend((TD_SAME, oa + i, ob + i) for i in range(head))
    mid_a, mid_b = ka[head : n - tail], kb[head : m - tail]
    if mid_a or mid_b:
        sm = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            a0, b0 = oa + head + i1, ob + head + j1
            if tag == "equal":
                out.extend((TD_SAME, a0 + i, b0 + i) for i in range(i2 - i1))
                continue
            paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
            out.extend((TD_CHANGED, a0 + i, b0 + i) for i in range(paired))
            out.extend((TD_ONLY_A, a0 + i, None) for i in range(paired, i2 - i1))
            out.extend((TD_ONLY_B, None, b0 + j) for j in range(paired, j2 - j1))
    out.extend((TD_SAME, oa + n - tail + i, ob + m - tail + i) for i in range(tail))


def _pair_moved(raw: list[tuple[str, int | None, int | None]], ka: Sequence[Any], kb: Sequence[Any]
                ) -> list[tuple[str, int | None, int | None]]:
    """Tokens one side has just before a piece boundary and the other just after it are the same tokens,
    moved between pieces (a template newline the one loop counts with the reply and the other with the
    next message): a run only A has next to a run only B has, with equal keys, is paired up."""
    out: list[tuple[str, int | None, int | None]] = []
    i = 0
    while i < len(raw):
        op = raw[i][0]
        if op not in (TD_ONLY_A, TD_ONLY_B):
            out.append(raw[i])
            i += 1
            continue
        j = i
        while j < len(raw) and raw[j][0] == op:
            j += 1
        other = TD_ONLY_B if op == TD_ONLY_A else TD_ONLY_A
        k = j
        while k < len(raw) and raw[k][0] == other:
            k += 1
        first, second = raw[i:j], raw[j:k]
        side_a, side_b = (first, second) if op == TD_ONLY_A else (second, first)
        if side_a and len(side_a) == len(side_b) and \
                all(ka[x[1]] == kb[y[2]] for x, y in zip(side_a, side_b)):  # type: ignore[index]
            out.extend((TD_SAME, x[1], y[2]) for x, y in zip(side_a, side_b))
            i = k
        else:
            out.extend(first)
            i = j
    return out


def _same_tokenizer(a: Episode, b: Episode) -> bool:
    return (a.template_hash == b.template_hash or not a.template_hash or not b.template_hash) and \
        (a.tokenizer == b.tokenizer or not a.tokenizer or not b.tokenizer)


def token_diff(a: Episode, b: Episode, tokenizer_a: Tokenizer | None = None, tokenizer_b: Tokenizer | None = None, *,
         by_text: bool | None = None) -> TokenDiff:
    """Align ``a``'s and ``b``'s tokens and name what differs.

    ``by_text`` (default: when the episodes name different tokenizers) aligns on each token's text,
    each side decoded with its own tokenizer (both required then).
    """
    if by_text is None:
        by_text = not _same_tokenizer(a, b)
    ids_a, ids_b = a.tokens.ids.tolist(), b.tokens.ids.tolist()
    if by_text:
        if tokenizer_a is None or tokenizer_b is None:
            raise ValueError("aligning by token text needs each side's tokenizer to decode with")
        keys_a: Sequence[Any] = _texts(tokenizer_a, ids_a)
        keys_b: Sequence[Any] = _texts(tokenizer_b, ids_b)
    else:
        keys_a, keys_b = ids_a, ids_b
    pa, pb = _pieces(a), _pieces(b)
    raw: list[tuple[str, int | None, int | None]] = []
    for k in range(max(len(pa), len(pb))):
        sa = pa[k] if k < len(pa) else (len(ids_a), len(ids_a))
        sb = pb[k] if k < len(pb) else (len(ids_b), len(ids_b))
        _align(keys_a[sa[0] : sa[1]], keys_b[sb[0] : sb[1]], sa[0], sb[0], raw)
    raw = _pair_moved(raw, keys_a, keys_b)
    mask_a, mask_b = a.tokens.loss_mask, b.tokens.loss_mask
    lp_a, lp_b = a.tokens.logprobs, b.tokens.logprobs
    rows: list[TokenDiffRow] = []
    for op, i, j in raw:
        if i is None or j is None:
            rows.append(TokenDiffRow(op, i, j))
            continue
        md = bool(mask_a[i] != mask_b[j])
        x, y = float(lp_a[i]), float(lp_b[j])
        ld = (math.isnan(x) != math.isnan(y)) or (not math.isnan(x) and abs(x - y) > LOGPROB_TOL)
        rows.append(TokenDiffRow(op, i, j, md, ld))
    out = TokenDiff(a, b, rows, by_text)
    _count(out)
    return out


def _texts(tokenizer: Tokenizer, ids: list[int]) -> list[str]:
    uniq = sorted(set(ids))
    texts = tokenizer.batch_decode([[i] for i in uniq], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    by_id = dict(zip(uniq, texts, strict=True))
    return [by_id[i] for i in ids]


def _count(d: TokenDiff) -> None:
    counts: dict[str, KindCounts] = {}
    start: int | None = None
    for n, r in enumerate(d.rows):
        kind = d.kind_of(r)
        c = counts.setdefault(kind, KindCounts(kind))
        c.rows += 1
        c.only_a += r.op == TD_ONLY_A
        c.only_b += r.op == TD_ONLY_B
        c.ids += r.op == TD_CHANGED
        c.mask += r.mask_differs
        c.logprob += r.logprob_differs
        if r.differs and start is None:
            start = n
        elif not r.differs and start is not None:
            d.hunks.append(Hunk(start, n))
            start = None
    if start is not None:
        d.hunks.append(Hunk(start, len(d.rows)))
    d.counts = counts


LAYOUT_KNOBS = ("token_mode", "gen_prompt_tokens", "keep_failed_turn", "observe_last", "shape_rewards", "reward_scale",
                "reward_bias", "turn_discount", "episode_reward")
"""The knobs that say how a loop lays a conversation down in tokens and rewards, not what the conversation is."""


async def retokenized(ep: Episode, *, preset: str | None = None, tokenizer: Tokenizer | None = None,
                      tokenizer_name: str | None = None, settings: dict[str, str] | None = None) -> Episode:
    """``ep``'s own conversation laid down again by another loop preset and/or tokenizer; its own preset lays it down
    with the knobs it ran with, and ``settings`` (``--set``) change the loop's knobs.

    In an env without a user (math) the env answers again, so the preset lends its layout (``LAYOUT_KNOBS``) and
    the record keeps its conversation knobs (feedback texts, when to stop).

    The recorded generations are replayed through the loop (``fork`` at the last turn, the recorded
    user answering), so the env runs again; with another tokenizer the generations are re-encoded
    from their text. The result is not stored.
    """
    from ..backends import tokenizers
    from ..errors import ConfigError, RollscopeError
    from ..loop.fork import fork, parent_env
    from ..loop.replay import USER_ENVS
    from ..presets import get_preset

    own = ep.config.loop if ep.config is not None else None
    # Its own preset lays it down with the knobs it ran with (a prompt_length it was given), not the preset's defaults.
    config = get_preset(preset) if preset and (preset != ep.preset or own is None) else own
    user = "recorded" if ep.env in USER_ENVS else "scripted"
    if preset and ep.env not in USER_ENVS and ep.config is not None and ep.config.loop is not None:
        # No user to replay (math): the env answers again, so the conversation must be the one it answered, with
        # the record's feedback and stopping rules; the other preset lays its tokens down.
        config = replace(ep.config.loop, **{k: getattr(config, k) for k in LAYOUT_KNOBS})
    if settings:
        if config is None:
            raise ConfigError(f"episode {ep.id} records no loop knobs to change: give --preset")
        config = config.with_settings(settings)
    other = tokenizer is not None and tokenizer_name is not None and tokenizer_name != ep.tokenizer
    if tokenizer is None:
        tokenizer, why = tokenizers.episode_tokenizer(ep)
        if tokenizer is None:
            raise ConfigError(f"episode {ep.id}: {why}")
    try:  # A's conversation is laid down by replaying it in its env: one Rollscope cannot rebuild is said as diff's
        parent_env(ep, "replay")
    except ConfigError as e:
        raise ConfigError(f"{e}; diff --preset/--tokenizer lays A's conversation down again by replaying it in its env "
                          "(`diff A B`, two stored episodes, needs none)") from None
    hand = await fork(ep, ep.n_turns, _NoModel(), tokenizer, config=config, user=user, then="scripted",
                      tokenizer_name=tokenizer_name, reencode=other)
    report = hand.report
    laid = hand.stepper.snapshot()
    differ = [v for v in (report.divergences if report is not None else ()) if not _layout_only(v, ep, laid)]
    if differ:
        v = differ[0]
        more = f", and {len(differ) - 1} more" if len(differ) > 1 else ""
        where = f"turn {v.turn} ({v.field}: {_short(v.stored)} stored, {_short(v.now)} now{more})"
        if not preset:
            raise RollscopeError(f"A's conversation cannot be laid down with tokenizer {tokenizer_name}: re-encoded "
                                 f"with it, what follows a reply differs at {where}, so it would be another "
                                 "conversation")
        raise RollscopeError(
            f"A's conversation cannot be laid down by {preset}: replayed under it, what follows a reply differs at "
            f"{where}: {preset}'s loop answers otherwise than {ep.preset or 'the one A ran'}, so it would be another "
            f"conversation. To compare the loops, run task {ep.task_id} under {preset} (rollscope run --env {ep.env} "
            f"--preset {preset}) and diff the two episodes (rollscope diff A B)")
    return laid.evolve(preset=preset or ep.preset, parent_id=None, fork_turn=None)


def _layout_only(v: Any, a: Episode, b: Episode) -> bool:
    """Whether a turn that replayed otherwise under another loop is still A's conversation: the tokens (what the
    diff is about), the rewards (the loop's shaping), and what the env answered kept the same in the words it said
    (each loop lays its answers down its own way: a tool message named or not, a long answer verl cuts), or not
    answered because B's loop ended at that turn (a response_length reached: ``laid_down_ending`` says so)."""
    if v.field in ("tokens", "reward"):
        return True
    t = v.turn
    if not 0 <= t < len(a.turns):
        return False
    if t == len(b.turns) - 1 and b.status is not Status.RUNNING and not b.turns[t].observation \
            and laid_down_ending(a, b) and v.field in ("observation", "done"):
        return True  # B's loop ended before the env answered: said by ``laid_down_ending``
    return v.field == "observation" and t < len(b.turns) and _answers(a.turns[t]) == _answers(b.turns[t])


def _answers(turn: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """What the env answered a turn, in its own words: each tool's raw output, and what else was said, by whom."""
    tools = list(raw_observations(turn)) or [m.content for m in turn.observation if m.role == "tool"]
    return tools, [(m.role, m.content) for m in turn.observation if m.role != "tool"]


def _short(value: Any, limit: int = 80) -> str:
    if isinstance(value, list) and all(isinstance(m, dict) and "content" in m for m in value):
        # messages: who says what (a tool message named or not is a difference too)
        return "[" + " / ".join(f"{m.get('role')}{'/' + str(m['name']) if m.get('name') else ''}: "
                                f"{_short(m['content'], limit // 2)}" for m in value) + "]"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def laid_down_ending(a: Episode, b: Episode) -> str:
    """How B, A's conversation laid down by another loop, ended otherwise than A: its status and reason ("" where it
    ended as A did). A loop that stopped early (a prompt past its prompt_length) leaves B short, and says why."""
    if b.status is a.status:  # the same end said in other words (each loop words its own) is the same end
        return ""
    return f"B ended {b.status.value}" + (f": {b.reason}" if b.reason else "") + f" (A ended {a.status.value})"


class _NoModel:
    """The replay commits recorded generations only; nothing asks for a new one."""

    name = "replay"

    async def generate(self, request: Any) -> Any:
        from ..errors import RollscopeError

        raise RollscopeError("re-tokenizing replays recorded generations; it does not generate")

    def describe(self) -> dict[str, Any]:
        return {"name": "replay"}


def context(d: TokenDiff, hunk: Hunk, around: int = 3) -> tuple[int, int]:
    """TokenDiffRow bounds of ``hunk`` with ``around`` equal rows either side."""
    return max(0, hunk.start - around), min(len(d.rows), hunk.end + around)


def side_ids(d: TokenDiff, rows: Sequence[TokenDiffRow]) -> tuple[list[int], list[int]]:
    """The ids of A and of B among ``rows``."""
    ia, ib = d.a.tokens.ids, d.b.tokens.ids
    return ([int(ia[r.a]) for r in rows if r.a is not None], [int(ib[r.b]) for r in rows if r.b is not None])


__all__ = ["LOGPROB_TOL", "TD_CHANGED", "TD_ONLY_A", "TD_ONLY_B", "TD_SAME", "Hunk", "KindCounts", "TokenDiff",
           "TokenDiffRow", "context", "retokenized", "side_ids", "token_diff"]
