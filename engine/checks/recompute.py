"""The entropy and top K of an episode's trained tokens, recomputed by teacher forcing with a local model.

``rollscope check --recompute-logprobs`` runs the model over the episode's ids once (the same pass
``check_logprob_mismatch`` compares logprobs with) and fills, at every token with loss mask 1, the exact entropy
and the K most likely ids with their logprobs, in the logprob convention at the episode's sampling temperature.
That gives them to imported episodes, which never had them, and replaces a server's estimate with the exact
value. Tokens outside the loss mask keep what they had.
"""

from __future__ import annotations

import numpy as np

from ..errors import RollscopeError
from ..records.episode import Episode, TokenArrays

DEFAULT_K = 5
"""Alternatives recomputed per token when the episode recorded none and none are asked for."""


def model_spec(ep: Episode, model: str | None) -> str | None:
    """The model to teacher-force with: the one given, else the episode's own local model; None when neither."""
    if model is not None:
        return model
    if ep.backend is None or ep.backend.name != "local":
        return None
    return ep.backend.model_spec or "smollm2"


def recomputed(ep: Episode, model: str | None, k: int | None = None) -> TokenArrays | None:
    """``ep``'s arrays with the entropy and top ``k`` (default: as many as it recorded, else 5) of its trained
    tokens recomputed; None when there is no model to run, nothing to fill, or the model cannot run."""
    spec = model_spec(ep, model)
    mask = ep.tokens.loss_mask
    if spec is None or not mask.any():
        return None
    recorded = ep.config.sampling.top_logprobs if ep.config.sampling is not None else 0
    k = max(0, k) if k is not None else (recorded or DEFAULT_K)
    temp = ep.config.sampling.temperature if ep.config.sampling is not None else 1.0
    ids = ep.tokens.ids.tolist()
    start = max(1, int(np.flatnonzero(mask)[0]))
    from ..backends.local import context_length, teacher_forced

    name = None if spec == "smollm2" else spec
    try:
        limit = context_length(name)
        if limit is not None and len(ids) > limit:
            return None
        forced = teacher_forced(name, ids, start, temperature=temp, k=k)
    except (RollscopeError, ValueError, RuntimeError):
        return None  # check_logprob_mismatch says why, from the same call
    t = ep.tokens
    n = len(t)
    at = np.flatnonzero(mask[start:] == 1) + start
    entropy = t.entropy.copy()
    width = max(k, t.top_k)
    top_ids = np.full((n, width), -1, dtype=np.int32)
    top_lps = np.full((n, width), np.nan, dtype=np.float32)
    top_ids[:, : t.top_k], top_lps[:, : t.top_k] = t.top_ids, t.top_logprobs
    entropy[at] = forced.entropy[at - start]
    top_ids[at] = -1
    top_lps[at] = np.nan
    top_ids[at, :k] = forced.top_ids[at - start]
    top_lps[at, :k] = forced.top_logprobs[at - start]
    rest = np.isfinite(entropy)
    rest[at] = False
    return t.evolve(entropy=entropy, top_ids=top_ids, top_logprobs=top_lps,
                    entropy_estimated=t.entropy_estimated and bool(rest.any()))
