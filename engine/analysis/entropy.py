"""How sure the model was, turn by turn: the mean entropy of each turn's generated tokens, and its forks.

A turn's forks are its highest-entropy generated tokens: where the distribution the token was sampled from was
widest, so where another sample would most likely have said something else (a tool name, an argument's first
digit). Each comes with the top K alternatives the record holds at that position, the sampled one marked.

Pure functions of an ``Episode`` (its token arrays and its turns' spans, ``turn_span``), so the CLI and the
dashboard show the same numbers. A turn's generated tokens are those ``turn_span`` gives; a token's entropy is
the record's (NaN where unknown: such tokens count for neither the mean nor the forks). Ties in entropy go to
the earlier token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..records.episode import Episode
from .at_turn import turn_span

FORKS_PER_TURN = 3
"""How many forks a turn names by default."""


@dataclass(frozen=True)
class TokenChoice:
    """One of the top K alternatives at a generated token."""

    token_id: int
    logprob: float
    """Its logprob under the distribution the token was sampled from (NaN where the record lacks it)."""
    sampled: bool
    """Whether it is the token the model generated there."""

    @property
    def prob(self) -> float:
        return math.exp(self.logprob) if math.isfinite(self.logprob) else math.nan


@dataclass(frozen=True)
class ForkToken:
    """A generated token with the entropy and alternatives recorded at it."""

    position: int
    """Its index in the episode's token array."""
    turn: int
    token_id: int
    entropy: float
    """Nats; a lower bound when ``estimated``."""
    logprob: float
    """The sampled token's logprob (NaN where unknown)."""
    alternatives: tuple[TokenChoice, ...]
    """The top K at this position, most likely first (empty where none were recorded)."""
    estimated: bool
    """Whether the entropy is estimated from a server's top K (a lower bound) rather than exact."""

    @property
    def sampled_rank(self) -> int | None:
        """The sampled token's place among the alternatives (0: the most likely), None when it is not among them."""
        return next((r for r, c in enumerate(self.alternatives) if c.sampled), None)


@dataclass(frozen=True)
class TurnEntropy:
    """One turn's entropy: the mean over its generated tokens whose entropy is known, and its forks."""

    turn: int
    mean: float
    """Mean entropy in nats (NaN when no generated token of the turn has one)."""
    known: int
    """How many of its generated tokens have an entropy."""
    generated: int
    """How many tokens it generated (its span in the token array)."""
    forks: tuple[ForkToken, ...]
    """Its highest-entropy tokens, highest first (ties: the earlier token first)."""


def alternatives_at(ep: Episode, position: int) -> tuple[TokenChoice, ...]:
    """The top K recorded at token ``position``, most likely first, the sampled one marked; empty where none."""
    t = ep.tokens
    if not 0 <= position < len(t) or not t.top_k:
        return ()
    sampled = int(t.ids[position])
    return tuple(TokenChoice(int(i), float(lp), int(i) == sampled)
                 for i, lp in zip(t.top_ids[position].tolist(), t.top_logprobs[position].tolist()) if i >= 0)


def fork_token(ep: Episode, position: int, turn: int) -> ForkToken:
    """What the record says at generated token ``position`` of turn ``turn``."""
    t = ep.tokens
    return ForkToken(position, turn, int(t.ids[position]), float(t.entropy[position]), float(t.logprobs[position]),
                     alternatives_at(ep, position), t.entropy_estimated)


def turn_entropy(ep: Episode, forks: int = FORKS_PER_TURN) -> tuple[TurnEntropy, ...]:
    """Per turn, in turn order: the mean entropy of its generated tokens and its ``forks`` highest-entropy ones.

    An episode without entropy gives each turn a NaN mean and no forks (``has_entropy`` says which)."""
    entropy = ep.tokens.entropy.astype(np.float64)
    out: list[TurnEntropy] = []
    for k, turn in enumerate(ep.turns):
        span = turn_span(ep, k)
        values = entropy[span.gen_start:span.gen_end]
        known = np.flatnonzero(np.isfinite(values))
        mean = float(values[known].mean()) if known.size else math.nan
        # Highest first; among equal entropies the earlier token (lexsort's last key is the primary one).
        order = known[np.lexsort((known, -values[known]))][:max(forks, 0)]
        picked = tuple(fork_token(ep, span.gen_start + int(j), turn.index) for j in order)
        out.append(TurnEntropy(turn.index, mean, int(known.size), span.gen_end - span.gen_start, picked))
    return tuple(out)


def has_entropy(ep: Episode) -> bool:
    """Whether any token of the episode has an entropy."""
    return bool(np.isfinite(ep.tokens.entropy).any())
