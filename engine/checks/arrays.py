"""Checks on the token arrays: generated against trained ids, the loss mask, logprobs, truncation, slime's
length fields, and logprobs recomputed by teacher forcing."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..errors import RollscopeError
from ..records.episode import Episode, Finding
from ..records.generation import READ_OFF_IDS
from ..tokens import chat
from ..tokens.tokenizer import Tokenizer
from .base import (
    ERROR,
    INFO,
    WARNING,
    CheckOptions,
    assistant_seg,
    chatml_ids,
    first_diff,
    id_evidence,
    loop_config,
    position_runs,
    skip,
    turn_at,
)
from .lengths import logprobs_length, mask_length
from .verl_layout import is_verl, past_template_rest


def check_drift(ep: Episode, o: CheckOptions) -> list[Finding]:
    tok = o.tokenizer
    out: list[Finding] = []
    have_ids = False
    eot = chat.end_of_turn_ids(tok) if tok is not None else set()
    for t in ep.turns:
        g = t.generation
        if g is None or not g.token_ids or g.model == "manual":
            continue
        have_ids = True
        gen = list(g.token_ids)
        seg = next((s for s in t.segments if s.kind == "assistant"), None)
        if seg is not None:
            stored = ep.tokens.ids[seg.start : seg.end].tolist()
            if is_verl(ep) and seg.end == len(ep.tokens) and gen[: len(stored)] == stored:
                continue  # verl's final cut at response_length ends the reply early (response_cut_trained)
            at = first_diff(stored[: len(gen)], gen)
            if at is not None:
                out.append(
                    Finding(
                        "retokenization_drift",
                        ERROR,
                        f"turn {t.index}: the trained ids differ from the ids the model generated at token {at} of the turn",
                        turn=t.index,
                        token_start=seg.start + at,
                        token_end=seg.end,
                        evidence=id_evidence(tok, stored, gen, at, o.context) | {"trained_vs": "generated"},
                    )
                )
                continue
        if tok is not None:
            body = gen[:-1] if gen[-1] in eot else gen
            again = chat.encode(tok, chat.decode(tok, body))
            at = first_diff(again, body)
            if at is not None:
                start = seg.start + at if seg is not None else None
                out.append(
                    Finding(
                        "retokenization_drift",
                        WARNING,
                        f"turn {t.index}: re-encoding the generated text gives other ids from token {at}; "
                        "a loop that re-tokenizes this text trains on ids the model never produced"
                        + (" (the length limit cut the reply inside a character, whose bytes no text holds)"
                           if g.finish_reason == "length" and set(chat.decode(tok, body[at:]) or "x") <= {"\ufffd"}
                           else ""),
                        turn=t.index,
                        token_start=start,
                        token_end=None if start is None else start + 1,
                        evidence=id_evidence(tok, again, body, at, o.context) | {"trained_vs": "reencoded"},
                    )
                )
    if not have_ids:
        return [skip("retokenization_drift", "no generated token ids in the trace")]
    return out




def assistant_spans(ep: Episode, tok: Tokenizer | None) -> list[tuple[int, int]] | None:
    """[start, end) of each assistant reply, read off the token stream itself.

    For ChatML templates the header ``<|im_start|>assistant\\n`` opens a reply
    and ``<|im_end|>`` closes it (inclusive). This does not trust the
    episode's segments, which may carry the very bug being looked for. A trained
    run that starts right after a closed message with no header at all (past the
    newline after ``<|im_end|>``, on no ``<|im_start|>``) and closes on ``<|im_end|>`` is a reply whose header is
    missing: ``generation_prompt_missing`` roots it (``check_rendering``,
    ``check_chat_markup``), and its mask and closing newline are read as a reply's.
    """
    marks = chatml_ids(tok)
    if tok is None or marks is None:
        return None
    start_id, end_id = marks
    header = chat.encode(tok, "<|im_start|>assistant\n")
    ids = ep.tokens.ids.tolist()
    spans, i, n, h = [], 0, len(ids), len(header)

    def reply_from(s: int) -> tuple[int, int]:
        e = s
        while e < n and ids[e] != end_id and ids[e] != start_id:
            e += 1
        return s, e + 1 if e < n and ids[e] == end_id else e

    while i < n:
        if ids[i] == start_id and ids[i : i + h] == header:
            spans.append(reply_from(i + h))
            i = spans[-1][1]
        else:
            i += 1
    mask, nl = ep.tokens.loss_mask, set(chat.encode(tok, "\n"))
    inside = np.zeros(n + 1, dtype=bool)
    for s, e in spans:
        inside[s:e] = True
    bare = [reply_from(s) for s in range(max(2, ep.prompt_len), n)
            if mask[s] and not mask[s - 1] and not inside[s] and ids[s] != start_id and ids[s] not in nl
            and (ids[s - 1] == end_id or (ids[s - 1] in nl and ids[s - 2] == end_id))]
    # A reply closes on <|im_end|>; text glued on that runs into the next message (a raw tool answer) is no reply.
    return sorted(spans + [(s, e) for s, e in bare if ids[e - 1] == end_id])


def closing_newlines(ep: Episode, tok: Tokenizer | None, spans: list[tuple[int, int]]) -> list[int]:
    """Positions of the newline a template writes right after an assistant's ``<|im_end|>``."""
    if tok is None:
        return []
    nl = set(chat.encode(tok, "\n"))
    n = len(ep.tokens)
    return [e for _, e in spans if 0 < e < n and int(ep.tokens.ids[e]) in nl]


def _mask_shift(mask: np.ndarray, expected: np.ndarray, free: np.ndarray) -> int:
    """k (in -2..2, not 0) when ``mask`` is ``expected`` moved k tokens later (free positions aside), else 0."""
    n = len(mask)
    for k in (1, -1, 2, -2):
        restored = np.zeros(n, dtype=mask.dtype)  # the stored mask moved k tokens back
        if k > 0:
            restored[: n - k] = mask[k:]
        else:
            restored[-k:] = mask[: n + k]
        ok = (restored == expected) | free
        edge = slice(n - k, n) if k > 0 else slice(0, -k)
        ok[edge] = True  # what fell off the end of the array cannot be compared
        if restored.any() and bool(np.all(ok)):
            return k
    return 0


def check_mask(ep: Episode, o: CheckOptions) -> list[Finding]:
    tok = o.tokenizer
    mask = ep.tokens.loss_mask
    n = len(mask)
    out: list[Finding] = mask_length(ep)
    spans = assistant_spans(ep, tok)
    if spans is None:
        if not ep.segments:
            return out + [skip("mask_misaligned", "no ChatML tokenizer and no segments to tell assistant tokens", "tokenizer")]
        spans = [(s.start, s.end) for s in ep.segments if s.kind == "assistant"]
    if tok is not None:
        spans = past_template_rest(ep, tok, spans)
    # Replies inside the record's prompt are context for this sample (AReaL's per-turn rows train only
    # their own turn), not output to train.
    spans = [(s, e) for s, e in spans if e > ep.prompt_len]
    expected = np.zeros(n, dtype=np.uint8)
    for s, e in spans:
        expected[s:e] = 1
    # The newline a template writes after <|im_end|> is trained by some loops
    # (slime) and not by others; either is fine if every turn does the same.
    either = closing_newlines(ep, tok, spans)
    free = np.zeros(n, dtype=bool)
    free[either] = True
    # After a reply cut by the length limit the template writes the end-of-turn
    # token; the model never generated it, so it must not be trained.
    cut_eot: set[int] = set()
    eot_ids = chat.end_of_turn_ids(tok) if tok is not None else set()
    for t in ep.turns:
        a = next((sg for sg in t.segments if sg.kind == "assistant"), None)
        g = t.generation
        if g is None or a is None or g.model == "manual" or tok is None:
            continue
        gen = list(g.token_ids)
        if g.finish_reason == "length" and not gen:
            if a.end < n:
                cut_eot.add(a.end)
            continue
        # A reply that did not end on an end-of-turn token (cut by the length limit, or the model wrote the
        # marker as plain text): the end-of-turn token after it was written by the template, not generated.
        if g.finish_reason != "length" and not ep.source.live:
            continue  # an imported record's replies are read off its mask, not generated
        if not gen or int(gen[-1]) in eot_ids or ep.tokens.ids[a.start : a.start + len(gen)].tolist() != gen:
            continue
        p = a.start + len(gen)
        if p < n and (int(ep.tokens.ids[p]) in eot_ids or p == a.end):
            cut_eot.add(p)
    expected[sorted(cut_eot)] = 0

    bad_on = np.flatnonzero((mask == 1) & (expected == 0) & ~free)
    bad_off = np.flatnonzero((mask == 0) & (expected == 1))
    is_gp = False
    if bad_on.size:
        at = int(bad_on[0])
        header = chat.encode(tok, "<|im_start|>assistant\n") if tok is not None else []
        is_gp = bool(header) and any(
            ep.tokens.ids[p : p + len(header)].tolist() == header
            for p in range(max(0, at - len(header) + 1), at + 1)
        )
    shift = _mask_shift(mask, expected, free) if bad_on.size or bad_off.size else 0
    if shift:
        # One cause: the whole mask is laid one (or two) tokens off; the wrong 1s and 0s are its two sides.
        bad = np.union1d(bad_on, bad_off)
        at = int(bad[0])
        side = "right (later)" if shift > 0 else "left (earlier)"
        out.append(Finding("mask_misaligned", ERROR,
                           f"the loss mask is shifted {abs(shift)} token{'s' if abs(shift) != 1 else ''} to the {side}: "
                           f"{bad_on.size} tokens trained that are not assistant output, {bad_off.size} assistant tokens "
                           f"not trained; first at {at}",
                           turn=turn_at(ep, at), token_start=at, token_end=int(bad[-1]) + 1,
                           evidence={"positions": bad[:200].tolist(), "runs": position_runs(bad), "shift": shift,
                                     "generation_prompt": is_gp}))
        return out
    if bad_on.size:
        at = int(bad_on[0])
        what = "the generation prompt (assistant header) is trainable" if is_gp else "loss mask 1 on tokens that are not assistant output"
        if set(bad_on.tolist()) <= cut_eot:
            what = ("a reply cut by the length limit is trained as if the model had ended it: the end-of-turn "
                    "token after it was written by the template, not generated")
        out.append(Finding("mask_misaligned", ERROR, f"{what}: {bad_on.size} tokens, first at {at}",
                           turn=turn_at(ep, at), token_start=at, token_end=int(bad_on[-1]) + 1,
                           evidence={"positions": bad_on[:200].tolist(), "runs": position_runs(bad_on),
                                     "generation_prompt": is_gp}))
    if bad_off.size:
        at = int(bad_off[0])
        out.append(Finding("mask_misaligned", ERROR, f"loss mask 0 on assistant output: {bad_off.size} tokens, first at {at}",
                           turn=turn_at(ep, at), token_start=at, token_end=int(bad_off[-1]) + 1,
                           evidence={"positions": bad_off[:200].tolist(), "runs": position_runs(bad_off)}))
    if either:
        trained = {bool(mask[e]) for e in either}
        if len(trained) > 1:
            odd = [e for e in either if bool(mask[e]) != bool(mask[either[0]])]
            out.append(Finding("mask_misaligned", WARNING,
                               "the newline after the end-of-turn token is trained in some turns and not in others",
                               turn=turn_at(ep, odd[0]), token_start=odd[0], token_end=odd[0] + 1,
                               evidence={"trained": [e for e in either if mask[e]], "not_trained": [e for e in either if not mask[e]]}))
    if tok is not None and spans:
        eot = chat.end_of_turn_ids(tok)
        ends = [(e - 1, bool(mask[e - 1])) for s, e in spans
                if e > s and int(ep.tokens.ids[e - 1]) in eot and e - 1 not in cut_eot]
        if len({m for _, m in ends}) > 1:
            odd = [p for p, m in ends if m != ends[0][1]]
            out.append(Finding("mask_misaligned", ERROR,
                               "the end-of-turn token is trained in some turns and not in others",
                               turn=turn_at(ep, odd[0]), token_start=odd[0], token_end=odd[0] + 1))
    return out




def _no_logprobs_at_all(ep: Episode) -> bool:
    """Nothing in the episode carries a logprob: not the token array, not one generation (hand-written
    replies aside). A source or backend without logprobs, not a loop that lost them."""
    if not bool(np.all(np.isnan(ep.tokens.logprobs) | (ep.tokens.loss_mask == 0))):
        return False
    gens = [t.generation for t in ep.turns if t.generation is not None and t.generation.model != "manual"]
    return bool(gens or not ep.source.live) and all(g.logprobs is None for g in gens)


def _generated_logprobs(ep: Episode) -> np.ndarray:
    """The generations' own logprobs laid at the positions where the arrays hold their generated ids
    (NaN elsewhere)."""
    want = np.full(len(ep.tokens), np.nan, dtype=np.float32)
    for t in ep.turns:
        g = t.generation
        seg = assistant_seg(ep, t.index)
        if g is None or g.logprobs is None or not g.token_ids or seg is None or g.model == "manual":
            continue
        n = min(len(g.token_ids), len(g.logprobs), seg.end - seg.start)
        if ep.tokens.ids[seg.start : seg.start + n].tolist() == list(g.token_ids[:n]):
            want[seg.start : seg.start + n] = np.asarray(g.logprobs[:n], dtype=np.float32)
    return want


def _logprob_shift(lp: np.ndarray, want: np.ndarray) -> int:
    """k (in -2..2, not 0) when the stored logprobs are the generated ones moved k tokens later, else 0."""
    known = ~np.isnan(want)
    if known.sum() < 2 or np.allclose(lp[known], want[known], atol=1e-4, equal_nan=False):
        return 0
    n = len(lp)
    for k in (1, -1, 2, -2):
        moved = np.full(n, np.nan, dtype=np.float32)
        if k > 0:
            moved[k:] = want[: n - k]
        else:
            moved[: n + k] = want[-k:]
        at = ~np.isnan(moved)
        if at.sum() >= 0.9 * known.sum() and not np.isnan(lp[at]).any() \
                and np.allclose(lp[at], moved[at], atol=1e-4):
            return k
    return 0


def check_vocabulary(ep: Episode, o: CheckOptions) -> list[Finding]:
    """``token_out_of_vocab``: ids the tokenizer has no entry for. A tokenizer's own ids are always inside its
    vocabulary, so these ids are another tokenizer's (the wrong ``--tokenizer``) or corrupted, and whatever the other
    checks read through it here follows from that (``diagnosis``)."""
    tok = o.tokenizer
    ids = ep.tokens.ids
    if tok is None or not len(ids):
        return []
    vocab = len(tok)
    past = np.flatnonzero(ids >= vocab)
    if not past.size:
        return []
    at = int(past[0])
    return [Finding("token_out_of_vocab", ERROR,
                    f"{past.size:,} token id{'s are' if past.size != 1 else ' is'} past the tokenizer's vocabulary "
                    f"(len(tokenizer) = {vocab:,}), first at token {at} (id {int(ids[at]):,}, largest "
                    f"{int(ids[past].max()):,}): it has no text for them. They are another tokenizer's (the wrong "
                    "--tokenizer?), corrupted, or sampled from the model's padding rows past the vocabulary; what the "
                    "checks read through this tokenizer follows from them",
                    turn=turn_at(ep, at), token_start=at, token_end=int(past[-1]) + 1,
                    evidence={"vocab": vocab, "count": int(past.size), "positions": past[:200].tolist(),
                              "runs": position_runs(past), "largest": int(ids[past].max())})]


def check_logprobs(ep: Episode, o: CheckOptions) -> list[Finding]:
    out: list[Finding] = logprobs_length(ep)
    lp, mask = ep.tokens.logprobs, ep.tokens.loss_mask
    above = np.flatnonzero(lp > ABOVE_ZERO)  # NaN compares False: an unknown logprob is not one
    if above.size:
        at = int(above[0])
        out.append(Finding("logprobs_misaligned", ERROR,
                           f"{above.size:,} token{'s carry' if above.size != 1 else ' carries'} a logprob above 0, "
                           f"first at {at} ({float(lp[at]):.4g}), which no probability has (a log probability is at "
                           "most 0): the array holds something else (probabilities, a flipped sign?)",
                           turn=turn_at(ep, at), token_start=at, token_end=int(above[-1]) + 1,
                           evidence={"positions": above[:200].tolist(), "runs": position_runs(above),
                                     "largest": float(np.nanmax(lp[above])), "impossible": True}))
    want = _generated_logprobs(ep)
    shift = _logprob_shift(lp, want)
    if shift:
        same = (np.isclose(lp, want, atol=1e-4)) | (np.isnan(lp) & np.isnan(want))
        bad = np.flatnonzero(~same & ((mask == 1) | ~np.isnan(lp) | ~np.isnan(want)))
        at = int(bad[0])
        side = "right (later)" if shift > 0 else "left (earlier)"
        return out + [Finding(
            "logprobs_misaligned", ERROR,
            f"the rollout logprobs are shifted {abs(shift)} token{'s' if abs(shift) != 1 else ''} to the "
            f"{side} of the ids they belong to; first at {at}",
            turn=turn_at(ep, at), token_start=at, token_end=int(bad[-1]) + 1,
            evidence={"positions": bad[:200].tolist(), "runs": position_runs(bad), "shift": shift})]
    missing = np.flatnonzero((mask == 1) & np.isnan(lp))
    # A logprob that came as NaN or infinity is unknown now and already said (logprob_not_finite, where it entered).
    said = {p for f in ep.all_findings() if f.kind == "logprob_not_finite" and f.token_start is not None
            for p in range(f.token_start, f.token_end or f.token_start + 1)}
    if said and missing.size:
        missing = np.array([p for p in missing.tolist() if p not in said], dtype=np.int64)
    if missing.size and is_verl(ep) and not loop_config(ep).calculate_log_probs \
            and bool(np.all(np.isnan(lp[ep.prompt_len:]))):
        return out + [Finding("logprobs_absent", INFO, "verl's calculate_log_probs is off: the response carries no "
                        "logprobs (as verl's AgentLoopOutput has none)",
                        evidence={"source": ep.source.kind, "trainable": int(np.count_nonzero(mask))})]
    if missing.size and _no_logprobs_at_all(ep):
        # Nothing was lost: the source (or the backend) has none. Said once, and nothing else to check here.
        live = ep.source.live
        return out + [Finding(
            "logprobs_absent", WARNING if live else INFO,
            "no token has a rollout logprob: the backend returned none" if live else
            f"the source ({ep.source.kind}) holds no logprobs: logprobs not checked",
            evidence={"source": ep.source.kind, "trainable": int(np.count_nonzero(mask))})]
    spans = assistant_spans(ep, o.tokenizer) or []
    template_nl = set(closing_newlines(ep, o.tokenizer, spans)) & set(missing.tolist())
    if template_nl:
        at = min(template_nl)
        out.append(Finding("template_newline_trained", WARNING,
                           (f"{len(template_nl)} trained newlines after the end-of-turn token were written by the "
                            "template, not generated by the model, so they have no rollout logprob"
                            if len(template_nl) > 1 else
                            "1 trained newline after the end-of-turn token was written by the template, not "
                            "generated by the model, so it has no rollout logprob"),
                           turn=turn_at(ep, at), token_start=at, token_end=at + 1,
                           evidence={"positions": sorted(template_nl)[:50]}))
        missing = np.array([p for p in missing.tolist() if p not in template_nl], dtype=np.int64)
    # Text no model sampled here: written by hand, or a reply a fork replayed from an imported record without logprobs
    written = {t.index: t.generation.model for t in ep.turns
               if t.generation is not None and t.generation.model in ("manual", "imported")}
    if missing.size:
        turns = sorted(t for t in {turn_at(ep, int(p)) for p in missing} if t is not None)
        only_manual = bool(turns) and set(turns) <= set(written)
        how = {written[t] for t in turns} if only_manual else set()
        why = [w for k, w in (("manual", "text written by hand"),
                              ("imported", "replies replayed from an imported record that holds none")) if k in how]
        at = int(missing[0])
        out.append(Finding("logprobs_missing", INFO if only_manual else ERROR,
                           f"{missing.size} trainable tokens have no rollout logprob, first at {at}"
                           + (f" ({' and '.join(why)})" if why else ""),
                           turn=turn_at(ep, at), token_start=at, token_end=int(missing[-1]) + 1,
                           evidence={"turns": turns, "count": int(missing.size), "positions": missing[:200].tolist(),
                                     "runs": position_runs(missing)}))
    stray = np.flatnonzero((mask == 0) & ~np.isnan(lp) & (lp != 0))
    if stray.size:
        at = int(stray[0])
        out.append(Finding("logprobs_misaligned", ERROR,
                           f"{stray.size} non-trainable tokens carry logprobs, first at {at}: "
                           + _apart(mask, lp, ep.prompt_len, o.tokenizer is None),
                           turn=turn_at(ep, at), token_start=at, token_end=int(stray[-1]) + 1,
                           evidence={"positions": stray[:200].tolist(), "runs": position_runs(stray)}))
    for t in ep.turns:
        g = t.generation
        seg = assistant_seg(ep, t.index)
        if g is None or g.logprobs is None or not g.token_ids or seg is None:
            continue
        if len(g.logprobs) != len(g.token_ids):
            lo = seg.start + len(g.logprobs) if len(g.logprobs) < len(g.token_ids) else seg.start
            out.append(Finding("logprobs_misaligned", ERROR,
                               f"turn {t.index}: {len(g.logprobs)} logprobs for {len(g.token_ids)} generated tokens",
                               turn=t.index, token_start=lo, token_end=seg.start + len(g.token_ids),
                               evidence={"logprobs": len(g.logprobs), "tokens": len(g.token_ids)}))
        # Where the trained ids are the generated ones, the stored logprobs must be the generation's.
        n = min(len(g.token_ids), len(g.logprobs), seg.end - seg.start)
        k = first_diff(ep.tokens.ids[seg.start : seg.start + n].tolist(), list(g.token_ids[:n]))
        k = n if k is None else k
        stored = lp[seg.start : seg.start + k]
        differ = ~np.isclose(stored, np.asarray(g.logprobs[:k], dtype=np.float32), atol=1e-4)
        if (differ & ~np.isnan(stored)).any():
            i = int(np.flatnonzero(differ & ~np.isnan(stored))[0])
            if stored[i] > ABOVE_ZERO:  # said above, once for the episode
                continue
            out.append(Finding("logprobs_misaligned", ERROR, _not_generated(t.index, seg.start, i, stored, g.logprobs[:k]),
                               turn=t.index, token_start=seg.start + i, token_end=seg.start + k))
    return out


ABOVE_ZERO = 1e-3
"""A logprob above this is above 0 for certain (float32 noise put aside): no probability has it."""


def _not_generated(turn: int, start: int, i: int, stored: np.ndarray, generated: Sequence[float | None]) -> str:
    """What a turn's stored logprobs are, from their ``i``-th on (token ``start + i``), where the generation's differ:
    impossible (above 0), the generation's a token off, or other numbers."""
    at, got = start + i, float(stored[i])
    gen = np.asarray([np.nan if x is None else x for x in generated], dtype=np.float32)
    want = f"{gen[i]:.4g}" if not np.isnan(gen[i]) else "unknown"
    if got > ABOVE_ZERO:  # a probability above 1
        return (f"turn {turn}: the stored logprob at token {at} is {got:.4g}, which no probability has (a log "
                f"probability is at most 0); the generation's is {want}")
    n = len(stored)
    for k, side in ((1, "later"), (-1, "earlier")):
        j = np.arange(max(i, k), min(n, n + k))  # stored[j] against the generation's at j - k
        a, b = stored[j], gen[j - k]
        ok = ~np.isnan(a) & ~np.isnan(b)
        if ok.sum() >= 2 and np.allclose(a[ok], b[ok], atol=1e-4):
            return f"turn {turn}: the stored logprobs are the generation's one token {side}, from token {at}"
    return f"turn {turn}: the stored logprobs are not the generation's from token {at} ({got:.4g} where it has {want})"


def check_turn_records(ep: Episode, o: CheckOptions) -> list[Finding]:
    """Parse errors recorded on turns, as findings, when the trace lacks them (imports, old records)."""
    logged = {(f.kind, f.turn) for f in ep.all_findings()}
    out = []
    for t in ep.turns:
        if t.parse_error and ("tool_call_parse_error", t.index) not in logged:
            a = assistant_seg(ep, t.index)
            out.append(Finding("tool_call_parse_error", ERROR, t.parse_error, turn=t.index,
                               token_start=a.start if a else None, token_end=a.end if a else None))
    return out


def _apart(mask: np.ndarray, lp: np.ndarray, start: int, no_tokenizer: bool) -> str:
    """What stray logprobs say: where the tokens that carry one are the trained ones moved by a token, that the mask
    or the logprobs moved (only the assistant output, read with a tokenizer, tells which: ``check_mask``)."""
    carry = (~np.isnan(lp[start:]) & (lp[start:] != 0)).astype(np.uint8)
    trained = mask[start:].astype(np.uint8)
    for shift, where in ((1, "after"), (-1, "before")):
        moved = np.roll(carry, shift)
        moved[0 if shift > 0 else -1] = 0
        # A shift moves every one of them: as many trained as carry, none lost off an end.
        if trained.any() and carry.sum() == trained.sum() == moved.sum() and np.array_equal(moved, trained):
            return (f"the trained tokens are the ones carrying logprobs moved 1 token {where}: the loss mask or the "
                    "logprobs is shifted" + (" (a tokenizer tells which: --tokenizer)" if no_tokenizer else ""))
    return "the logprobs or the mask are misplaced"


def check_truncation(ep: Episode, o: CheckOptions) -> list[Finding]:
    out = []
    logged = {(f.kind, f.turn) for t in ep.turns for f in t.findings}
    for t in ep.turns:
        if t.generation is not None and t.generation.finish_reason == "length" and ("truncated_turn", t.index) not in logged:
            seg = next((s for s in t.segments if s.kind == "assistant"), None)
            why = (f"turn {t.index} reads as cut by the length limit: {READ_OFF_IDS}"
                   if t.generation.finish_detail == READ_OFF_IDS else
                   f"turn {t.index} stopped on the length limit; its trainable tokens end mid-reply")
            out.append(Finding("truncated_turn", WARNING, why,
                               turn=t.index, token_start=seg.start if seg else None, token_end=seg.end if seg else None))
    # A dump's one status of a sample its ids say the length limit cut is its last reply's cut, said once (as that
    # turn's); a status of a conversation out of turns, its last reply ended on its own, is the episode's.
    last = ep.turns[-1].generation if ep.turns else None
    said_by_turn = not ep.source.live and o.tokenizer is not None and last is not None \
        and last.finish_reason == "length" and bool(last.token_ids) \
        and int(last.token_ids[-1]) not in chat.end_of_turn_ids(o.tokenizer)
    if ep.status.value == "truncated" and not said_by_turn and not any(k == "truncated_episode" for k, _ in logged):
        out.append(Finding("truncated_episode", WARNING, f"episode cut: {ep.reason or 'turn limit'}",
                           turn=ep.n_turns - 1 if ep.turns else None))
    return out


def check_trained(ep: Episode, o: CheckOptions) -> list[Finding]:
    """An episode that ended (completed or cut) with token ids and not one trained: it adds nothing to the loss, yet
    its reward counts in its group's mean and spread (GRPO's advantage of the others)."""
    if ep.status.value not in ("completed", "truncated") or not ep.n_tokens or ep.tokens.n_trainable:
        return []
    # Empty where the record says its response is (slime's response_length), or a live reply generated no token;
    # a prompt that runs to the end says nothing (AReaL's rows put it there when nothing is trained).
    empty = ep.source.details.get("response_length") == 0 or (ep.source.live and not any(
        t.generation is not None and t.generation.token_ids for t in ep.turns))
    return [Finding("nothing_trained", WARNING,
                    ("the response is empty: nothing was generated" if empty else "the loss mask is 0 on every token")
                    + f", so no token is trained, though the episode {ep.status.value} with reward {ep.reward:g}, "
                    "which still counts in its group's statistics",
                    turn=None, evidence={"tokens": ep.n_tokens, "prompt_len": ep.prompt_len})]


def check_response_length(ep: Episode, o: CheckOptions) -> list[Finding]:
    src = ep.source.details
    if "response_length" not in src:
        return []
    got = int(src["response_length"])
    actual = len(ep.tokens) - ep.prompt_len
    mask = ep.tokens.loss_mask[ep.prompt_len :]
    nz = np.flatnonzero(mask)
    span = int(nz[-1] - nz[0] + 1) if nz.size else 0
    if got == actual:
        return []
    how = " (it equals the span of the loss mask, not the response)" if got == span and span != actual else ""
    if src.get("response_from"):  # the dump's arrays agree on the response: the field is the one wrong
        how += f"; {' and '.join(str(src['response_from']).split(', '))} both have {actual} entries, read as the response"
    return [Finding("response_length_mismatch", ERROR,
                    f"response_length is {got} but the response has {actual} tokens{how}",
                    token_start=ep.prompt_len, token_end=len(ep.tokens),
                    evidence={"response_length": got, "tokens_after_prompt": actual, "mask_span": span, "mask_sum": int(nz.size)})]


def check_logprob_mismatch(ep: Episode, o: CheckOptions) -> list[Finding]:
    if not o.recompute_logprobs:
        return []
    spec = o.model
    if spec is None:
        if ep.backend is None or ep.backend.name != "local":
            return [skip("logprob_mismatch", "the rollout did not come from a local model; pass a model to recompute with",
                         "model")]
        spec = ep.backend.model_spec or "smollm2"
    mask = ep.tokens.loss_mask
    rollout = ep.tokens.logprobs
    if not mask.any() or np.isnan(rollout[mask == 1]).all():
        return [skip("logprob_mismatch", "no rollout logprobs on trainable tokens")]
    from ..backends.local import context_length, teacher_forced_logprobs

    temp = ep.config.sampling.temperature if ep.config.sampling is not None else 1.0
    ids = ep.tokens.ids.tolist()
    try:
        limit = context_length(None if spec == "smollm2" else spec)
    except RollscopeError as e:
        return [skip("logprob_mismatch", f"could not load the model: {e}", "model")]
    if limit is not None and len(ids) > limit:
        return [skip("logprob_mismatch", f"the episode has {len(ids)} tokens, more than the model's context of {limit}")]
    first = int(np.flatnonzero(mask)[0])
    try:
        recomputed = teacher_forced_logprobs(None if spec == "smollm2" else spec, ids, max(1, first), temperature=temp)
    except (RollscopeError, ValueError, RuntimeError) as e:
        return [skip("logprob_mismatch", f"could not run the model: {e}", "model")]
    diff = np.full(len(ids), np.nan, dtype=np.float32)
    diff[max(1, first) :] = np.asarray(recomputed, dtype=np.float32) - rollout[max(1, first) :]
    diff[(mask == 0) | np.isnan(rollout)] = np.nan
    valid = ~np.isnan(diff)
    absd = np.abs(diff[valid])
    over = np.flatnonzero(valid & (np.abs(np.nan_to_num(diff)) > o.logprob_threshold))
    ev = {"max_abs": float(absd.max()), "mean_abs": float(absd.mean()), "threshold": o.logprob_threshold,
          "over": over[:200].tolist(), "diff": [None if math.isnan(x) else round(float(x), 4) for x in diff.tolist()]}
    if not over.size:
        return [Finding("logprob_mismatch", INFO,
                        f"teacher-forced logprobs agree: max |diff| {ev['max_abs']:.4f}, mean {ev['mean_abs']:.5f}",
                        evidence=ev)]
    at = int(over[0])
    return [Finding("logprob_mismatch", ERROR,
                    f"{over.size} trainable tokens differ from teacher-forced logprobs by more than {o.logprob_threshold} "
                    f"(max {ev['max_abs']:.3f}, mean {ev['mean_abs']:.4f})",
                    turn=turn_at(ep, at), token_start=at, token_end=int(over[-1]) + 1, evidence=ev)]
