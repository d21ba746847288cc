"""What else the model could have said: per generated token, its K most likely tokens and the entropy.

The convention is the logprobs': the distribution the token was sampled from, the log-softmax of the logits
over the temperature (unscaled when greedy), before top-p. The embedded model has the whole distribution, so
its entropy is exact. A server gives only its top K, so there the entropy is estimated (:func:`estimate_entropy`)
and the record says so (``entropy_estimated``).

In memory the top K of an episode are two (n tokens, K) arrays, id -1 and logprob NaN where a token has fewer
(none where it was not generated); on the wire each token's list holds only the ones it has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import FormatError
from .reading import json_type

NEAR_ZERO_ENTROPY = 0.01
"""Entropy (nats) under which a generated token counts as near-zero: the model all but certain of it (a token at
probability 0.999 with the rest spread thin sits near 0.008 nats). A run whose share of such tokens climbs step after
step is collapsing onto fixed answers. The store counts them per episode as it writes it (``entropy_figures``): a
change of this number needs a migration that counts the stored episodes again."""

MICRONATS = 1_000_000
"""The store keeps an episode's sum of entropies in whole micro-nats, so that sums and differences of sums (the
maintained aggregates add an episode's and take it away again) are exact: a recount gives the same integer."""


def estimate_entropy(top_logprobs: Sequence[float]) -> float:
    """The entropy (nats) of a distribution of which only the ``top_logprobs`` are known.

    The top K give ``-sum p log p`` exactly. The rest, of mass ``R = 1 - sum p``, lies on tokens each no more
    likely than the least of the top K, ``p_K``, so each contributes at least ``-log p_K`` per unit of mass:
    the estimate adds ``R * -log p_K``. It is therefore a lower bound of the exact entropy, equal to it when
    the top K hold all the mass, and NaN when no finite logprob is given.
    """
    lps = [x for x in top_logprobs if x is not None and math.isfinite(x)]
    if not lps:
        return math.nan
    p = np.exp(np.asarray(lps, dtype=np.float64))
    head = float(-(p * np.asarray(lps, dtype=np.float64)).sum())
    rest = max(0.0, 1.0 - float(p.sum()))
    return head + rest * -min(lps)


def entropy_figures(entropy: np.ndarray) -> tuple[int, int, int]:
    """(tokens with a known entropy, the sum of their entropies in micro-nats, how many are under
    ``NEAR_ZERO_ENTROPY``) of an episode's entropy array (NaN where unknown: tokens not generated, or generated
    without it). The store keeps these per episode; a run's step reads their sums."""
    known = entropy[np.isfinite(entropy)].astype(np.float64)
    if known.size == 0:
        return 0, 0, 0
    return int(known.size), int(round(float(known.sum()) * MICRONATS)), int((known < NEAR_ZERO_ENTROPY).sum())


def padded(rows: Sequence[Sequence[Any]], fill: Any, dtype: Any, n: int, what: str) -> np.ndarray:
    """Ragged per-token lists as one (n, K) array, K the longest; ``fill`` where a row is shorter. An empty
    ``rows`` stands for none at all: (n, 0)."""
    if len(rows) == 0:
        return np.zeros((n, 0), dtype=dtype)
    if len(rows) != n:
        raise ValueError(f"{what} has {len(rows)} rows for {n} tokens")
    k = max((len(r) for r in rows), default=0)
    out = np.full((n, k), fill, dtype=dtype)
    for i, r in enumerate(rows):
        if len(r):
            out[i, : len(r)] = [fill if x is None else x for x in r]
    return out


def rows(ids: np.ndarray, lps: np.ndarray) -> tuple[list[list[int]], list[list[float | None]]]:
    """The (n, K) arrays as per-token lists holding only the alternatives each token has."""
    out_ids: list[list[int]] = []
    out_lps: list[list[float | None]] = []
    for row_ids, row_lps in zip(ids.tolist(), lps.tolist()):
        k = sum(1 for x in row_ids if x >= 0)
        out_ids.append(row_ids[:k])
        out_lps.append([x if math.isfinite(x) else None for x in row_lps[:k]])
    return out_ids, out_lps


def read_rows(v: Any, field: str, number: bool) -> list[list[Any]]:
    """A record's ``top_ids`` or ``top_logprobs``: a list of lists of token ids (or numbers, null where unknown)."""
    if not isinstance(v, list):
        raise FormatError(f"must be a list, got {json_type(v)}", field=field)
    out: list[list[Any]] = []
    for i, row in enumerate(v):
        if not isinstance(row, list):
            raise FormatError(f"must be a list, got {json_type(row)}", field=f"{field}.{i}")
        for j, x in enumerate(row):
            ok = (x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))) if number else \
                (isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 2**31)
            if not ok:
                what = "a number or null" if number else "a token id"
                raise FormatError(f"must be {what}, got {x!r:.40}", field=f"{field}.{i}.{j}")
        out.append([math.nan if x is None or (number and not math.isfinite(x)) else x for x in row])
    return out


def check_pair(ids: list[list[Any]], lps: list[list[Any]], field: str) -> None:
    """``top_ids`` and ``top_logprobs`` must agree row by row."""
    if len(ids) != len(lps):
        raise FormatError(f"has {len(lps)} rows for {len(ids)} rows of top_ids", field=field)
    for i, (a, b) in enumerate(zip(ids, lps)):
        if len(a) != len(b):
            raise FormatError(f"has {len(b)} entries for {len(a)} top_ids", field=f"{field}.{i}")
