"""Questions asked of one stored episode at one turn: where the turn lies in the token array, what the
model was sent, the rewards and findings up to it.

Pure functions of an ``Episode`` (and a tokenizer, to decode prompt ids). Playback asks them turn by
turn; a script can too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records.episode import Episode, Finding, Severity
from ..tokens.chat import decode
from ..tokens.tokenizer import Tokenizer

_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``.

    Bisection over slice comparisons: each comparison is one C-level memcmp,
    so two 150,000-character prompts cost microseconds, not a Python loop.
    """
    hi = min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    lo = 0  # a[:lo] == b[:lo] holds, a[:hi] == b[:hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


# -- where turn k lives in the token array ------------------------------------


@dataclass(frozen=True)
class TurnSpan:
    """Token positions of turn k: its prompt ``[0, prompt_len)``, its generation ``[gen_start, gen_end)``,
    and ``cut``, where the tokens of later turns begin."""

    prompt_len: int
    gen_start: int
    gen_end: int
    cut: int


def turn_span(ep: Episode, k: int) -> TurnSpan:
    """Where turn ``k`` of ``ep`` sits in its token array (every bound clipped to the array)."""
    n = len(ep.tokens)
    t = ep.turns[k]
    prompt_len = min(max(t.prompt_len, 0), n)
    own = [s for s in ep.segments if s.turn == k and s.kind == "assistant"]
    if own:
        gen_start, gen_end = min(s.start for s in own), max(s.end for s in own)
    else:
        # No assistant segment (an old or foreign record): the generation
        # follows the prompt, as the loop lays it down.
        gen_start = prompt_len
        gen_end = prompt_len + (len(t.generation.token_ids) if t.generation is not None else 0)
    later = [s.start for s in ep.segments if s.turn > k]
    if later:
        cut = min(later)
    elif ep.segments or k + 1 >= len(ep.turns):
        cut = n
    else:
        cut = ep.turns[k + 1].prompt_len
    gen_start, gen_end = min(gen_start, n), min(max(gen_end, gen_start), n)
    return TurnSpan(prompt_len, gen_start, gen_end, min(max(cut, gen_end), n))


# -- the prompt the model received -------------------------------------------


@dataclass(frozen=True)
class PromptView:
    """The prompt of one turn: its text (None when it cannot be had), where the text came from, its tokens."""

    text: str | None
    source: str  # "prompt_text" (sent as text), "tokens" (decoded from the ids), "none"
    n_tokens: int  # the episode's tokens [0, n_tokens) are this prompt
    note: str = ""
    tokens_differ_at: int | None = None  # retokenize: where decoding the ids departs from the text sent


def rewrites_at(previous: str, current: str) -> int | None:
    """Where the prompt ``current`` stops extending the earlier prompt ``previous`` (the chat template rewrote what
    was already sent), or None when it extends it."""
    shared = common_prefix(previous, current)
    return shared if shared < len(previous) else None


def prompt_tokens(ep: Episode, k: int) -> int:
    """How many of the episode's tokens are turn ``k``'s prompt: ``tokens[:prompt_tokens(ep, k)]`` is what the model
    was sent, the generation prompt included (loops that lay it down with the reply, as slime does, record it in
    the turn's segments)."""
    t = ep.turns[k]
    n = min(max(t.prompt_len, 0), len(ep.tokens))
    return next((s.end for s in t.segments if s.kind == "gen_prompt" and s.start == n), n)


def prompt_at(ep: Episode, k: int, tokenizer: Tokenizer | None, tokenizer_error: str | None = None,
              decoded: str | None = None) -> PromptView:
    """What the model received at turn ``k``.

    Retokenize mode sent text, stored as ``Turn.prompt_text``. Otherwise the
    model got ids, the episode's ``tokens[:prompt_len]``, decoded here with
    the episode's tokenizer. ``decoded`` is the decoding of
    ``tokens[:prompt_tokens(ep, k)]`` when the caller already has it (it caches per turn). With prompt text and a tokenizer,
    the ids are decoded too: if they do not spell the text sent, the
    trainer's tokens are not what the model saw.
    """
    t = ep.turns[k]
    n = prompt_tokens(ep, k)
    if decoded is None and tokenizer is not None and n:
        decoded = decode(tokenizer, ep.tokens.ids[:n].tolist())
    # An import's empty prompt field is no prompt text when the tokens hold a prompt.
    if t.prompt_text is not None and (t.prompt_text or not n):
        differ = None
        if decoded is not None and decoded != t.prompt_text:
            differ = common_prefix(decoded, t.prompt_text)
        return PromptView(t.prompt_text, "prompt_text", n, "the text sent to the backend (Turn.prompt_text)", differ)
    live = ep.source.live
    if decoded is not None:
        how = ("the ids sent to the backend (token in, token out)" if live
               else f"the ids imported from {ep.source.kind}; the dump kept no prompt text")
        return PromptView(decoded, "tokens", n, f"decoded from the episode's tokens [0, {n:,}): {how}")
    if not n:
        return PromptView(None, "none", 0, "no prompt tokens and no prompt text stored for this turn")
    why = f": {tokenizer_error}" if tokenizer_error else ""
    return PromptView(None, "none", n, f"no prompt text stored and the tokenizer could not be loaded{why}; "
                                       f"the ids [0, {n:,}) are in the token view")


# -- rewards and findings up to turn k -------------------------------------------


@dataclass(frozen=True)
class RewardSoFar:
    """Rewards through turn k: the env's raw ones, the shaped ones and the return where the episode has them."""

    turn: float
    total: float
    shaped_turn: float | None
    shaped_total: float | None
    ret: float | None
    final: float


def reward_so_far(ep: Episode, k: int) -> RewardSoFar:
    """The env's reward at ``k`` and summed over turns ``0..k``; shaped and return values when stored."""
    raw = [t.reward for t in ep.turns]
    shaped = list(ep.turn_rewards)
    # turn_rewards equal to the raw ones say nothing new (no shaping configured).
    has_shaped = len(shaped) == len(raw) and any(abs(a - b) > 1e-12 for a, b in zip(shaped, raw, strict=True))
    return RewardSoFar(
        turn=raw[k], total=sum(raw[: k + 1]),
        shaped_turn=shaped[k] if has_shaped else None, shaped_total=sum(shaped[: k + 1]) if has_shaped else None,
        ret=ep.returns[k] if k < len(ep.returns) else None, final=ep.reward,
    )


def findings_up_to(ep: Episode, k: int) -> tuple[list[Finding], list[Finding]]:
    """(findings located at turns ``<= k``, sorted by turn then severity; findings located at no turn).

    A finding without a turn but with a token position counts from the turn
    whose tokens hold it.
    """
    cut = turn_span(ep, k).cut if ep.turns else 0
    located: list[tuple[int, Finding]] = []
    nowhere: list[Finding] = []
    for f in ep.all_findings():
        if f.turn is not None:
            if f.turn <= k:
                located.append((f.turn, f))
        elif f.token_start is not None:
            if f.token_start < cut:
                located.append((_turn_of_token(ep, f.token_start), f))
        else:
            nowhere.append(f)
    located.sort(key=lambda tf: (tf[0], _SEVERITY_ORDER.get(tf[1].severity, 3), tf[1].kind))
    return [f for _, f in located], nowhere


def _turn_of_token(ep: Episode, pos: int) -> int:
    for s in ep.segments:
        if s.start <= pos < s.end:
            return s.turn
    return 0


__all__ = ["PromptView", "RewardSoFar", "TurnSpan", "common_prefix", "findings_up_to", "prompt_at", "prompt_tokens", "rewrites_at",
           "reward_so_far", "turn_span"]
