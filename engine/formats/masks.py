"""A token array whose only structure is its loss mask (a trainer's dump: slime's, AReaL's, verl's rows), read
into the segments and turns of an episode."""

from __future__ import annotations

import typing

import numpy as np

from ..records.episode import FinishReason, Generation, Segment, Turn
from ..records.generation import FINISH_REASONS, READ_OFF_IDS
from ..tokens.tokenizer import Tokenizer

STATUS_FINISH: dict[str, FinishReason] = {"truncated": "length", "aborted": "abort"}
"""A dump's status, as its last reply's finish reason."""


def runs(mask: np.ndarray, start: int) -> list[tuple[int, int, int]]:
    """(start, end, value) of every maximal run of equal mask values from ``start``."""
    n = len(mask)
    if start >= n:
        return []
    tail = mask[start:]
    cuts = np.flatnonzero(np.diff(tail)) + 1
    bounds = [0, *cuts.tolist(), len(tail)]
    return [(start + a, start + b, int(tail[a])) for a, b in zip(bounds, bounds[1:])]


def mask_structure(
    ids: np.ndarray,
    mask: np.ndarray,
    logprobs: np.ndarray,
    versions: np.ndarray,
    prompt_len: int,
    *,
    tokenizer: Tokenizer | None = None,
    texts: list[str] | None = None,
    prompt_text: str | None = None,
    status: str = "completed",
    reward: float = 0.0,
    finish: list[str] | None = None,
    cut_without_eot: bool = False,
) -> tuple[tuple[Segment, ...], tuple[Turn, ...]]:
    """Segments and turns of a token array whose only structure is its loss mask.

    The prompt is one ``prompt`` segment; each run of mask 1 after it is an
    ``assistant`` segment and one turn; each run of mask 0 after it is an
    ``env`` segment of that turn (tool results, user replies and template
    text, which a mask cannot tell apart). Generated text comes from
    ``texts`` (one per turn) or from decoding with the tokenizer; without
    either it is empty and the ids speak for themselves. A turn's finish reason is ``finish``'s (one per turn, as a
    Rollscope export records them); else the last turn's is ``status``'s where that says it was cut or aborted; else,
    with ``cut_without_eot`` (a dump that records no finish reason, of a loop whose replies end on the template's
    end-of-turn token or at the length limit: AReaL's, verl's) and a tokenizer, a reply whose last id is no
    end-of-turn token stopped on the length limit (``READ_OFF_IDS`` says so); else ``stop``.
    """
    from ..tokens import chat

    segments: list[Segment] = []
    if prompt_len:
        segments.append(Segment(0, prompt_len, "prompt", 0, False))
    turn_spans: list[tuple[int, int]] = []
    turn_segments: list[list[Segment]] = []
    for a, b, v in runs(mask, prompt_len):
        if v:
            seg = Segment(a, b, "assistant", len(turn_spans), True)
            turn_spans.append((a, b))
            turn_segments.append([seg])
        else:
            t = max(0, len(turn_spans) - 1)
            seg = Segment(a, b, "env", t, False)
            if turn_segments:
                turn_segments[-1].append(seg)
        segments.append(seg)
    turns: list[Turn] = []
    last = len(turn_spans) - 1
    known = [typing.cast(FinishReason, f) for f in finish] if finish is not None and len(finish) == len(turn_spans) \
        and all(f in FINISH_REASONS for f in finish) else None
    read = _ended(ids, turn_spans, tokenizer) if known is None and (cut_without_eot or status == "truncated") \
        and tokenizer is not None and turn_spans else None

    def finish_of(t: int) -> FinishReason:
        # The record's own reasons; else its status for the last reply: aborted, or truncated, which is a length cut
        # where its ids say so and a turn limit where the reply ended on its end-of-turn token (slime's tau agent
        # says truncated for a conversation out of turns); else the ids' word where the loop ends replies on them.
        if known:
            return known[t]
        if t == last and status in STATUS_FINISH:
            return read[t] if read and status == "truncated" else STATUS_FINISH[status]
        return read[t] if read and cut_without_eot else "stop"

    for t, (a, b) in enumerate(turn_spans):
        lp = logprobs[a:b]
        ver = int(versions[a]) if versions[a] >= 0 else None
        if texts is not None and t < len(texts):
            text = texts[t]
        elif tokenizer is not None:
            text = chat.decode(tokenizer, ids[a:b].tolist())
        else:
            text = ""
        gen = Generation(
            text=text,
            token_ids=tuple(ids[a:b].tolist()),
            logprobs=None if np.isnan(lp).all() else tuple(lp.tolist()),
            finish_reason=finish_of(t),
            finish_detail=READ_OFF_IDS if not known and read and cut_without_eot and read[t] == "length" and not (
                t == last and status in STATUS_FINISH) else "",
            prompt_tokens=a,
            weight_version=ver,
        )
        turns.append(Turn(index=t, prompt_text=prompt_text if t == 0 else None, prompt_len=a, generation=gen,
                          reward=reward if t == last else 0.0, done=t == last, segments=tuple(turn_segments[t])))
    return tuple(segments), tuple(turns)


def _ended(ids: np.ndarray, spans: list[tuple[int, int]], tok: Tokenizer) -> list[FinishReason] | None:
    """How each reply of a dump that records no finish reason ended, read off its ids: ``stop`` where its last id
    (the template's whitespace after it aside: a mask that trains the newline) ends a turn, the template's own
    closing token included, else ``length``; None where the template writes no closing to know one by."""
    from ..tokens import chat

    try:
        closing = chat.encode(tok, chat.assistant_closing(tok))
    except Exception:  # noqa: BLE001 - a template that does not render a reply verbatim: no way to tell
        return None
    ends = chat.end_of_turn_ids(tok) | set(closing[:1])
    out: list[FinishReason] = []
    for a, b in spans:
        e = b
        while e > a + 1 and int(ids[e - 1]) not in ends and not chat.decode(tok, [int(ids[e - 1])]).strip():
            e -= 1
        out.append("stop" if int(ids[e - 1]) in ends else "length")
    return out
