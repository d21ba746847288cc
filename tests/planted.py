"""Plant one known bug into an episode our own loop built, for the checks' corpus.

Each planting function takes a :class:`Base` (a clean episode the real loop
produced, with the tokenizer and the recipe that made it) and returns a
:class:`Planted`: the modified copy, plus the finding a correct check must
report for it (kind, severity, first token position, turn). Positions are
computed here, from the edit itself (usually the first index where the
planted arrays differ from the clean ones), never by asking the checks.

The clean episodes come from :class:`SampledScripted`: the scripted policy
with the non-zero, deterministic logprobs a sampling model would give, so
that moving logprobs around is visible (the plain scripted policy gives
every token logprob 0, which a shifted array cannot be told from).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.backends.base import SamplingParams
from engine.envs.math import MathEnv
from engine.records.episode import Episode, Segment, Severity, Status
from engine.records.provenance import Source
from engine.tokens import chat
from tests.planted_base import (  # noqa: F401  (re-exported for the tests)
    ANY,
    BASES,
    Base,
    BaseSpec,
    CutTurns,
    Planted,
    SampledScripted,
    ThinkingBackend,
    arrays,
    build_base,
    env_seg,
    eot_pos,
    find_split,
    first_diff,
    first_lp_diff,
    mid_turn,
    play,
    replace_generation,
    replace_turn,
    seg,
    splice,
    strip_findings,
    with_arrays,
)
from tests.toolenv import PriceEnv

# -- tokens_not_rendering -------------------------------------------------------

TNR = "tokens_not_rendering"
GPM = "generation_prompt_missing"
ERR, WARN, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO


def drop_gen_prompt(b: Base) -> Planted:
    ep = b.episode
    t = mid_turn(ep)
    gp = seg(ep, "gen_prompt", t)
    out = splice(ep, gp.start, gp.end, [], [], [], [])
    at = first_diff(out.tokens.ids, ep.tokens.ids)
    assert at == gp.start
    return Planted(out, GPM, ERR, at, t, f"generation prompt of turn {t} left out")


def duplicate_env_segment(b: Base) -> Planted:
    ep = b.episode
    s = env_seg(ep, 0)
    ids, mask, lp, ver = arrays(ep)
    sl = slice(s.start, s.end)
    dup = Segment(s.end, s.end + (s.end - s.start), s.kind, s.turn, s.trainable)
    out = splice(ep, s.end, s.end, ids[sl], mask[sl], lp[sl], ver[sl], add=dup)
    at = first_diff(out.tokens.ids, ep.tokens.ids)
    return Planted(out, TNR, ERR, at, 0, f"{s.kind} message of turn 0 encoded twice")


def drop_closing_newline(b: Base) -> Planted:
    ep = b.episode
    p = eot_pos(ep, b.tok, 0) + 1  # the newline the template writes after <|im_end|>
    assert chat.decode(b.tok, ep.tokens.ids[p : p + 1]) == "\n"
    out = splice(ep, p, p + 1, [], [], [], [])
    return Planted(out, TNR, ERR, p, 0, "newline after the end-of-turn token of turn 0 left out")


def loop_without_gen_prompts(b: Base) -> Planted:
    out = b.rebuild(gen_prompt_tokens=False)
    at = first_diff(out.tokens.ids, b.episode.tokens.ids)
    assert at == seg(b.episode, "gen_prompt", 1).start
    return Planted(out, GPM, ERR, at, 1, "a loop that drops the generation prompts (the slime seed)")


# -- retokenization_drift -------------------------------------------------------

DRIFT = "retokenization_drift"


def _split(b: Base, turn: int, in_array: bool, in_generation: bool) -> tuple[Episode, int]:
    ep = b.episode
    g = ep.turns[turn].generation
    assert g is not None and g.logprobs is not None
    k, ta, tb = find_split(b.tok, g.token_ids)
    s = seg(ep, "assistant", turn)
    assert int(ep.tokens.ids[s.start + k]) == g.token_ids[k]
    out = ep
    if in_generation:
        ids = [*g.token_ids[:k], ta, tb, *g.token_ids[k + 1 :]]
        lps = [*g.logprobs[:k], -0.5, -0.5, *g.logprobs[k + 1 :]]
        assert chat.decode(b.tok, ids) == g.text
        out = replace_generation(out, turn, token_ids=tuple(ids), logprobs=tuple(lps))
    if in_array:
        p = s.start + k
        ver = int(ep.tokens.versions[p])
        out = splice(out, p, p + 1, [ta, tb], [1, 1], [-0.5, -0.5], [ver, ver])
    return out, s.start + k


def split_generated_and_trained(b: Base) -> Planted:
    # The model sampled a non-canonical split and the loop kept it: trained ids
    # are the generated ones, but re-encoding the text gives others.
    t = mid_turn(b.episode)
    out, at = _split(b, t, in_array=True, in_generation=True)
    return Planted(out, DRIFT, WARN, at, t, f"turn {t} generated with a non-canonical split, kept as generated",
                   {"trained_vs": "reencoded"})


def split_generated_only(b: Base) -> Planted:
    # The model sampled a non-canonical split; the loop re-encoded the text.
    t = mid_turn(b.episode)
    out, at = _split(b, t, in_array=False, in_generation=True)
    return Planted(out, DRIFT, ERR, at, t, f"turn {t} generated with a split the loop re-encoded away",
                   {"trained_vs": "generated"})


def split_trained_only(b: Base) -> Planted:
    out, at = _split(b, 0, in_array=True, in_generation=False)
    return Planted(out, DRIFT, ERR, at, 0, "turn 0 trained on a different tokenization than generated",
                   {"trained_vs": "generated"})


def end_of_turn_as_text(b: Base) -> Planted:
    # The end-of-turn token written out as ordinary text pieces ("<", "|", "im", ...):
    # it decodes the same but re-encoding gives the special token.
    ep, tok = b.episode, b.tok
    t = 0
    p = eot_pos(ep, tok, t)
    s = seg(ep, "assistant", t)
    k = p - s.start
    pieces = list(tok.encode(chat.end_of_turn_texts(tok)[0], add_special_tokens=False, split_special_tokens=True))
    assert len(pieces) > 1
    g = ep.turns[t].generation
    assert g is not None and g.logprobs is not None and g.token_ids[k] == int(ep.tokens.ids[p])
    ids = [*g.token_ids[:k], *pieces, *g.token_ids[k + 1 :]]
    lps = [*g.logprobs[:k], *([-0.5] * len(pieces)), *g.logprobs[k + 1 :]]
    out = replace_generation(ep, t, token_ids=tuple(ids), logprobs=tuple(lps))
    ver = int(ep.tokens.versions[p])
    out = splice(out, p, p + 1, pieces, [1] * len(pieces), [-0.5] * len(pieces), [ver] * len(pieces))
    # The body the check re-encodes is the generation without a trailing end-of-turn id:
    # here the whole generation, so the first difference is where the pieces start.
    return Planted(out, DRIFT, WARN, p, t, "end-of-turn token generated as plain text pieces",
                   {"trained_vs": "reencoded"})


# -- mask_misaligned ------------------------------------------------------------

MASK = "mask_misaligned"


def _mask_plant(b: Base, mask: np.ndarray, turn: Any, what: str, severity: Severity = ERR, **ev: Any) -> Planted:
    ids, old, lp, ver = arrays(b.episode)
    at = first_diff(mask, old)
    return Planted(with_arrays(b.episode, ids, mask, lp, ver), MASK, severity, at, turn, what, ev)


def mask_shift_right(b: Base) -> Planted:
    m = b.episode.tokens.loss_mask
    new = np.concatenate([[0], m[:-1]]).astype(np.uint8)
    return _mask_plant(b, new, 0, "loss mask shifted one token to the right")


def mask_shift_left(b: Base) -> Planted:
    m = b.episode.tokens.loss_mask
    new = np.concatenate([m[1:], [0]]).astype(np.uint8)
    return _mask_plant(b, new, 0, "loss mask shifted one token to the left", generation_prompt=True)


def mask_on_env_token(b: Base) -> Planted:
    s = env_seg(b.episode, 0)
    new = b.episode.tokens.loss_mask.copy()
    new[s.start + 2] = 1
    return _mask_plant(b, new, s.turn, f"loss mask 1 on a {s.kind} token", generation_prompt=False)


def mask_off_assistant_token(b: Base) -> Planted:
    t = mid_turn(b.episode)
    s = seg(b.episode, "assistant", t)
    new = b.episode.tokens.loss_mask.copy()
    new[(s.start + s.end) // 2] = 0
    return _mask_plant(b, new, t, f"loss mask 0 on an assistant token of turn {t}")


def gen_prompt_trainable(b: Base) -> Planted:
    t = mid_turn(b.episode)
    s = seg(b.episode, "gen_prompt", t)
    new = b.episode.tokens.loss_mask.copy()
    new[s.start : s.end] = 1
    return _mask_plant(b, new, t, f"generation prompt of turn {t} trainable", generation_prompt=True)


def first_gen_prompt_trainable(b: Base) -> Planted:
    ep = b.episode
    header = chat.encode(b.tok, "<|im_start|>assistant\n")
    assert ep.tokens.ids[ep.prompt_len - len(header) : ep.prompt_len].tolist() == header
    new = ep.tokens.loss_mask.copy()
    new[ep.prompt_len - len(header) : ep.prompt_len] = 1
    return _mask_plant(b, new, 0, "generation prompt at the end of the first prompt trainable", generation_prompt=True)


def end_of_turn_untrained(b: Base) -> Planted:
    t = mid_turn(b.episode)
    new = b.episode.tokens.loss_mask.copy()
    new[eot_pos(b.episode, b.tok, t)] = 0
    return _mask_plant(b, new, t, f"end-of-turn token of turn {t} not trained (the other turns' are)")


def closing_newline_inconsistent(b: Base) -> Planted:
    # Training the template's newline after <|im_end|> is a choice; flipping it in one turn is a bug.
    t = 1
    p = eot_pos(b.episode, b.tok, t) + 1
    new = b.episode.tokens.loss_mask.copy()
    new[p] = 1 - new[p]
    return _mask_plant(b, new, t, f"newline after the end-of-turn token of turn {t} handled unlike the others", WARN)


def mask_length_disagrees(b: Base) -> Planted:
    ep = b.episode
    n = ep.response_len
    out = ep.evolve(source=Source.imported("slime", "planted.pt", response_length=n, loss_mask_length=n - 1))
    return Planted(out, MASK, ERR, ep.prompt_len, None, "loss mask one entry shorter than the response")


# -- logprobs ---------------------------------------------------------------------

MISSING, MISALIGNED = "logprobs_missing", "logprobs_misaligned"


def _lp_plant(b: Base, lp: np.ndarray, kind: str, turn: Any, what: str, at: int | None = None) -> Planted:
    ids, mask, old, ver = arrays(b.episode)
    first = first_lp_diff(lp, old)
    return Planted(with_arrays(b.episode, ids, mask, lp, ver), kind, ERR, first if at is None else at, turn, what)


def nan_logprobs_turn(b: Base) -> Planted:
    t = mid_turn(b.episode)
    s = seg(b.episode, "assistant", t)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start : s.end] = np.nan
    return _lp_plant(b, lp, MISSING, t, f"no logprobs on the trainable tokens of turn {t}")


def nan_logprob_one_token(b: Base) -> Planted:
    s = seg(b.episode, "assistant", 0)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start + 3] = np.nan
    return _lp_plant(b, lp, MISSING, 0, "one trainable token of turn 0 without a logprob")


def nan_logprobs_all(b: Base) -> Planted:
    # Not a lost logprob but a backend that has none: one warning for the source, no error.
    ep = b.episode
    lp = np.full(len(ep.tokens), np.nan, dtype=np.float32)
    out = _lp_plant(b, lp, MISSING, 0, "a backend that returned no logprobs")
    turns = tuple(replace(t, generation=replace(t.generation, logprobs=None)) if t.generation else t for t in ep.turns)
    return replace(out, episode=out.episode.evolve(turns=turns), kind="logprobs_absent", severity=WARN,
                   token_start=None, turn=None)


def nan_logprobs_array(b: Base) -> Planted:
    # The generations carry logprobs; the assembled array lost every one of them.
    ep = b.episode
    lp = np.full(len(ep.tokens), np.nan, dtype=np.float32)
    return _lp_plant(b, lp, MISSING, 0, "logprobs dropped when the arrays were assembled")


def logprobs_shift_right(b: Base) -> Planted:
    lp = b.episode.tokens.logprobs
    new = np.concatenate([[np.nan], lp[:-1]]).astype(np.float32)
    return _lp_plant(b, new, MISALIGNED, 0, "logprobs shifted one token to the right")


def logprobs_shift_left(b: Base) -> Planted:
    lp = b.episode.tokens.logprobs
    new = np.concatenate([lp[1:], [np.nan]]).astype(np.float32)
    return _lp_plant(b, new, MISALIGNED, 0, "logprobs shifted one token to the left")


def logprobs_shift_in_one_turn(b: Base) -> Planted:
    # One turn's stored logprobs moved a token later inside its reply (its first kept): the generation's, misplaced.
    t = mid_turn(b.episode)
    s = seg(b.episode, "assistant", t)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start + 1 : s.end] = b.episode.tokens.logprobs[s.start : s.end - 1]
    return replace(_lp_plant(b, lp, MISALIGNED, t, f"turn {t}'s logprobs one token later"),
                   says="the generation's one token later")


def logprob_above_zero(b: Base) -> Planted:
    # A log probability above 0 (a probability above 1): an edited or corrupt file, not a shift.
    t = mid_turn(b.episode)
    s = seg(b.episode, "assistant", t)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start + 2] = 5.0
    return replace(_lp_plant(b, lp, MISALIGNED, t, f"a logprob of 5.0 in turn {t}"),
                   says=f"a logprob above 0, first at {s.start + 2} (5), which no probability has")


def id_past_vocab(b: Base) -> Planted:
    # An id the tokenizer has no entry for: a corrupt file, or another tokenizer's ids.
    t = mid_turn(b.episode)
    s = seg(b.episode, "assistant", t)
    ids, mask, lp, ver = arrays(b.episode)
    ids[s.start + 1] = len(b.tok) + 7
    return Planted(with_arrays(b.episode, ids, mask, lp, ver), "token_out_of_vocab", ERR, s.start + 1, t,
                   f"an id past the vocabulary in turn {t}", says=f"id {len(b.tok) + 7:,}")


def logprobs_on_context(b: Base) -> Planted:
    s = env_seg(b.episode, 0)
    lp = b.episode.tokens.logprobs.copy()
    lp[s.start : s.end] = -0.3
    return _lp_plant(b, lp, MISALIGNED, s.turn, f"logprobs on the {s.kind} message of turn 0")


def fewer_logprobs_than_ids(b: Base) -> Planted:
    ep = b.episode
    t = mid_turn(ep)
    g = ep.turns[t].generation
    assert g is not None and g.logprobs is not None
    out = replace_generation(ep, t, logprobs=g.logprobs[:-2])
    at = seg(ep, "assistant", t).start + len(g.logprobs) - 2  # the first generated token without a logprob
    return Planted(out, MISALIGNED, ERR, at, t, f"turn {t}'s generation has 2 logprobs fewer than ids")


# -- truncation ---------------------------------------------------------------------


def finish_reason_length(b: Base) -> Planted:
    t = mid_turn(b.episode)
    out = replace_generation(b.episode, t, finish_reason="length")
    return Planted(out, "truncated_turn", WARN, seg(b.episode, "assistant", t).start, t,
                   f"turn {t} stopped on the length limit")


def loop_max_new_tokens(b: Base) -> Planted:
    out = b.rebuild(sampling=SamplingParams(max_new_tokens=4))
    assert out.turns[0].generation.finish_reason == "length"
    return Planted(out, "truncated_turn", WARN, out.prompt_len, 0, "max_new_tokens=4 cuts every reply")


def cut_turn_trained_complete(b: Base) -> Planted:
    # The reply stopped on the length limit; the loop closed it with the template's end-of-turn token and
    # trained that token as if the model had generated it.
    ep = b.episode
    t = mid_turn(ep)
    g = ep.turns[t].generation
    assert g is not None and int(g.token_ids[-1]) in chat.end_of_turn_ids(b.tok)
    ids = g.token_ids[:-1]
    out = replace_generation(ep, t, token_ids=ids, logprobs=None if g.logprobs is None else g.logprobs[:-1],
                             text=chat.decode(b.tok, ids), finish_reason="length")
    p = seg(ep, "assistant", t).start + len(ids)
    return Planted(out, MASK, ERR, p, t, f"turn {t} cut by the length limit, its end-of-turn token trained")


def status_truncated(b: Base) -> Planted:
    ep = b.episode
    out = ep.evolve(status=Status.TRUNCATED, reason=f"reached max_turns={ep.n_turns}")
    return Planted(out, "truncated_episode", WARN, None, ep.n_turns - 1, "episode marked truncated")


def loop_max_turns(b: Base) -> Planted:
    n = min(2, b.episode.n_turns - 1)
    out = b.rebuild(max_turns=n, turn_limit_status="truncated", mistake_rate=1.0 if b.spec.env is MathEnv else 0.0)
    assert out.status is Status.TRUNCATED
    return Planted(out, "truncated_episode", WARN, None, n - 1, f"cut by max_turns={n}")


# -- response_length ------------------------------------------------------------------

RLEN = "response_length_mismatch"


def _rlen(b: Base, value: int, what: str) -> Planted:
    ep = b.episode
    assert value != ep.response_len
    out = ep.evolve(source=Source.imported("slime", "planted.pt", response_length=int(value)))
    return Planted(out, RLEN, ERR, ep.prompt_len, None, what)


def response_length_mask_sum(b: Base) -> Planted:
    return _rlen(b, int(b.episode.tokens.loss_mask.sum()), "response_length = sum of the loss mask")


def response_length_off_by_one(b: Base) -> Planted:
    return _rlen(b, b.episode.response_len + 1, "response_length one too many")


def response_length_whole_sequence(b: Base) -> Planted:
    return _rlen(b, len(b.episode.tokens), "response_length counts the prompt too")


# -- the registry ---------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str
    plant: Callable[[Base], Planted]
    applies: Callable[[BaseSpec], bool] = lambda spec: True


def _multi_tail(spec: BaseSpec) -> bool:
    # at least two newlines after <|im_end|> in the tokens, so "some but not others" exists
    # (a tito array ends on the last <|im_end|>; the 2-turn price episode has one newline)
    return spec.mode == "retokenize" or spec.env is MathEnv


VARIANTS: tuple[Variant, ...] = (
    Variant("drop-gen-prompt", GPM, drop_gen_prompt),
    Variant("duplicate-env-segment", TNR, duplicate_env_segment),
    Variant("drop-closing-newline", TNR, drop_closing_newline),
    Variant("loop-without-gen-prompts", GPM, loop_without_gen_prompts),
    Variant("split-generated-and-trained", DRIFT, split_generated_and_trained),
    Variant("split-generated-only", DRIFT, split_generated_only),
    Variant("split-trained-only", DRIFT, split_trained_only),
    Variant("end-of-turn-as-text", DRIFT, end_of_turn_as_text),
    Variant("mask-shift-right", MASK, mask_shift_right),
    Variant("mask-shift-left", MASK, mask_shift_left),
    Variant("mask-on-env-token", MASK, mask_on_env_token),
    Variant("mask-off-assistant-token", MASK, mask_off_assistant_token),
    Variant("gen-prompt-trainable", MASK, gen_prompt_trainable),
    Variant("first-gen-prompt-trainable", MASK, first_gen_prompt_trainable),
    Variant("end-of-turn-untrained", MASK, end_of_turn_untrained),
    Variant("closing-newline-inconsistent", MASK, closing_newline_inconsistent, _multi_tail),
    Variant("mask-length-disagrees", MASK, mask_length_disagrees),
    Variant("nan-logprobs-turn", MISSING, nan_logprobs_turn),
    Variant("nan-logprob-one-token", MISSING, nan_logprob_one_token),
    Variant("nan-logprobs-all", "logprobs_absent", nan_logprobs_all),
    Variant("nan-logprobs-array", MISSING, nan_logprobs_array),
    Variant("logprobs-shift-right", MISALIGNED, logprobs_shift_right),
    Variant("logprobs-shift-left", MISALIGNED, logprobs_shift_left),
    Variant("logprobs-shift-in-one-turn", MISALIGNED, logprobs_shift_in_one_turn),
    Variant("logprob-above-zero", MISALIGNED, logprob_above_zero),
    Variant("id-past-vocab", "token_out_of_vocab", id_past_vocab),
    Variant("logprobs-on-context", MISALIGNED, logprobs_on_context),
    Variant("fewer-logprobs-than-ids", MISALIGNED, fewer_logprobs_than_ids),
    Variant("finish-reason-length", "truncated_turn", finish_reason_length),
    Variant("cut-turn-trained-complete", MASK, cut_turn_trained_complete, lambda spec: spec.mode == "tito"),
    Variant("loop-max-new-tokens", "truncated_turn", loop_max_new_tokens),
    Variant("status-truncated", "truncated_episode", status_truncated),
    Variant("loop-max-turns", "truncated_episode", loop_max_turns),
    Variant("response-length-mask-sum", RLEN, response_length_mask_sum),
    Variant("response-length-off-by-one", RLEN, response_length_off_by_one),
    Variant("response-length-whole-sequence", RLEN, response_length_whole_sequence),
)


# -- bugs the loop itself plants (given the right env, policy or template) ----------------


def _price_first_assistant(ep: Episode) -> int:
    return seg(ep, "assistant", 0).start


def parse_error_feedback(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "tito", "tito", mistake_rate=1.0, tokenizer_name=name)
    assert ep.turns[0].parse_error
    return Planted(ep, "tool_call_parse_error", ERR, _price_first_assistant(ep), 0, "malformed JSON, error fed back")


def parse_error_abort(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "slime-tau", mistake_rate=1.0, tokenizer_name=name)
    assert ep.status is Status.ABORTED
    # slime returns before appending the reply: the finding points where it would have started.
    assert not [s for s in ep.segments if s.kind == "assistant"]
    return Planted(ep, "tool_call_parse_error", ERR, ep.prompt_len, 0, "malformed JSON, episode aborted")


def parse_error_without_finding(tok: Any, name: str) -> Planted:
    # The turn records the parse error, but the episode was written without findings
    # (an older writer, or an import): the checks must still surface it.
    p = parse_error_feedback(tok, name)
    return replace(p, episode=strip_findings(p.episode), what="parse error on the turn, no finding stored")


def env_error_tito(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "tito", "tito", task=1, env=PriceEnv(fail_on="fig"), tokenizer_name=name)
    assert ep.status is Status.ABORTED
    return Planted(ep, "env_error", ERR, ANY, 0, "the tool raised (tito)")


def env_error_slime(tok: Any, name: str) -> Planted:
    ep = play(PriceEnv, tok, "slime-tau", task=1, env=PriceEnv(fail_on="fig"), tokenizer_name=name)
    assert ep.status is Status.ABORTED
    return Planted(ep, "env_error", ERR, ANY, 0, "the tool raised (slime-tau)")


def think_retokenize(tok: Any, name: str) -> Planted:
    """Qwen3 drops the <think> block of turn 0 once the env's reply follows it: the
    sliced text delta of that reply is wrong from its first token (here it is
    even empty: the rewritten render is shorter than the previous one)."""
    ep = play(MathEnv, tok, "areal-math", "retokenize", backend=ThinkingBackend(MathEnv, tok), tokenizer_name=name)
    return Planted(ep, "template_not_prefix_stable", ERR, seg(ep, "assistant", 0).end, 0,
                   "reasoning model, areal-math, retokenize")


def empty_think_retokenize_tools(tok: Any, name: str) -> Planted:
    """Qwen3 renders the last assistant message with an empty ``<think></think>``
    block and drops it once a tool result follows (a reply that really thinks
    keeps its block before a tool result: only a new user turn strips it). slime refuses the rewrite and the
    episode ends there; the finding sits on the token rewritten, the reply's ``<think>``."""
    ep = play(PriceEnv, tok, "slime-tau", tokenizer_name=name)
    return Planted(ep, "template_not_prefix_stable", ERR, seg(ep, "assistant", 0).start, 0,
                   "slime-tau with tools, retokenize")


def think_retokenize_without_finding(tok: Any, name: str) -> Planted:
    p = think_retokenize(tok, name)
    return replace(p, episode=strip_findings(p.episode), what="reasoning model, retokenize, findings not stored")


LOOP_PLANTS: dict[str, tuple[Callable[[Any, str], Planted], tuple[str, ...]]] = {
    # name: (builder, tokenizers it applies to)
    "parse-error-feedback": (parse_error_feedback, ("smollm2", "qwen3")),
    "parse-error-abort": (parse_error_abort, ("smollm2", "qwen3")),
    "parse-error-without-finding": (parse_error_without_finding, ("smollm2", "qwen3")),
    "env-error-tito": (env_error_tito, ("smollm2", "qwen3")),
    "env-error-slime": (env_error_slime, ("smollm2", "qwen3")),
    # SmolLM2's template is prefix-stable: only Qwen3's can rewrite history.
    "think-retokenize": (think_retokenize, ("qwen3",)),
    "empty-think-retokenize-tools": (empty_think_retokenize_tools, ("qwen3",)),
    "think-retokenize-without-finding": (think_retokenize_without_finding, ("qwen3",)),
}
