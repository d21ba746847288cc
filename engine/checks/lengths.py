"""Findings on an array whose length is not the response's: a dump's loss mask or rollout logprobs that the
importer laid from the response start (cut, or padded past their end), so the record is shown rather than
dropped. The importer keeps both lengths in ``source``: ``loss_mask_length`` (slime) or ``logprobs_length`` (slime's
``rollout_log_probs``, verl's ``response_logprobs``), beside ``response_length``. A slime ``response_length`` that the
mask and the logprobs both contradict is the one wrong (``arrays.check_response_length``): they are laid as the
response, and neither is reported here."""

from __future__ import annotations

from ..records.episode import Episode, Finding
from .base import ERROR, turn_at


def mask_length(ep: Episode) -> list[Finding]:
    """``mask_misaligned`` where the dump's loss mask has another length than the response."""
    src = ep.source.details
    have, want = src.get("loss_mask_length"), _response(ep)
    if have is None or want is None or have == want:
        return []
    return [Finding("mask_misaligned", ERROR, f"loss mask has {have} entries for a response of {want} tokens",
                    token_start=ep.prompt_len, token_end=len(ep.tokens.loss_mask),
                    evidence={"loss_mask_length": have, "response_length": want})]


def logprobs_length(ep: Episode) -> list[Finding]:
    """``logprobs_misaligned`` where the dump's rollout logprobs have another length than the response (and than its
    trained tokens): from the first token where the record and its logprobs may part (the response's first, as
    nothing says which entry went missing or which is extra) to the response's end."""
    src = ep.source.details
    have, want = src.get("logprobs_length"), _response(ep)
    if have is None or want is None or have == want:
        return []
    n = len(ep.tokens.ids)
    start = ep.prompt_len
    past = (f"the last {want - have} response token{'s have' if want - have != 1 else ' has'} none"
            if have < want else f"{have - want} entr{'ies' if have - want != 1 else 'y'} past the response's end "
                                "were dropped")
    return [Finding(
        "logprobs_misaligned", ERROR,
        f"the rollout logprobs have {have} entries for a response of {want} tokens: no entry can be matched to its "
        f"token (the loop lost or added one: every entry after it belongs to another token). Read from the "
        f"response's start, {past}",
        turn=turn_at(ep, start) if start < n else None, token_start=start, token_end=n,
        evidence={"logprobs_length": have, "response_length": want})]


def _response(ep: Episode) -> int | None:
    """The response's length as the importer laid it (the tokens after the prompt), where the dump has a
    ``response_length`` field: the field itself, unless the mask and the logprobs agree on another length, which
    ``check_response_length`` reports."""
    if "response_length" not in ep.source.details:
        return None
    return len(ep.tokens.ids) - ep.prompt_len
