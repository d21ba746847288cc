"""A server's top K alternatives per generated token, read into a generation's fields.

sglang's ``/generate`` (``top_logprobs_num``) answers ``meta_info.output_top_logprobs``: per generated token a
list of ``[logprob, token_id, text]``. OpenAI's completions (``logprobs: K``) answer ``logprobs.top_logprobs``: per
token an object of token string to logprob, which OpenAI and vLLM fill with the K most likely and the sampled
token. Chat (``logprobs: true, top_logprobs: K``) answers ``logprobs.content[i].top_logprobs``: per token a list
of ``{token, logprob, bytes}``. Each position's alternatives are ordered most likely first and cut to K; one whose
id cannot be told (a token string no single vocabulary entry spells) is left out. A server gives no more than the
top K, so the entropy is estimated from them (``records.alternatives.estimate_entropy``, a lower bound) and the
generation says so. They are taken as the server gives them, like its logprobs: servers differ on whether the
temperature scales them, so at a temperature other than 1 they follow the server's convention, which need not be
the embedded model's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..records.alternatives import estimate_entropy

Pairs = Sequence[tuple[int, float]]


def fields(positions: Sequence[Pairs] | None, n: int, k: int) -> dict[str, Any]:
    """The Generation fields for ``positions`` (one list of (id, logprob) per generated token), or none when the
    server gave none or not one per token."""
    if k <= 0 or positions is None or len(positions) != n or n == 0:
        return {}
    ids: list[tuple[int, ...]] = []
    lps: list[tuple[float, ...]] = []
    for pairs in positions:
        best = sorted(((i, lp) for i, lp in pairs if not math.isnan(lp)), key=lambda p: -p[1])[:k]
        ids.append(tuple(i for i, _ in best))
        lps.append(tuple(lp for _, lp in best))
    return {"top_ids": tuple(ids), "top_logprobs": tuple(lps),
            "entropy": tuple(estimate_entropy(row) for row in lps), "entropy_estimated": True}
