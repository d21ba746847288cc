"""An episode our own loop built, given at every generated token a distribution whose entropy and top K are known.

The scripted policy records no alternatives; ``with_alternatives`` gives each generated token an explicit
distribution over a few dozen ids of the vocabulary (the sampled id among them), from which the exact entropy,
the top K and the sampled token's logprob are computed here in float64, as a model's would be from its logits.
The spread varies from token to token, so entropies range from near zero to a few nats; the sampled token is
mostly the most likely, sometimes the second, and sometimes not among the top K at all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.envs.math import MathEnv
from engine.records.alternatives import estimate_entropy
from engine.records.episode import Episode
from tests.planted import play


@dataclass(frozen=True)
class Truth:
    """The distribution given to each generated token: position -> (ids, probabilities), most likely first."""

    dist: dict[int, tuple[np.ndarray, np.ndarray]]

    def entropy(self, position: int) -> float:
        p = self.dist[position][1]
        return float(-(p * np.log(p)).sum())


def with_alternatives(ep: Episode, k: int = 5, seed: int = 0, vocab: int = 49152, width: int = 40,
                      estimated: bool = False) -> tuple[Episode, Truth]:
    """``ep`` with entropy, top ``k`` and logprobs recorded at each of its assistant tokens (see the module)."""
    t = ep.tokens
    n = len(t)
    rng = np.random.default_rng(seed)
    entropy = np.full(n, np.nan, dtype=np.float32)
    top_ids = np.full((n, k), -1, dtype=np.int32)
    top_lps = np.full((n, k), np.nan, dtype=np.float32)
    logprobs = t.logprobs.copy()
    dist: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for s in ep.segments:
        if s.kind != "assistant":
            continue
        for p in range(s.start, s.end):
            sampled = int(t.ids[p])
            others = rng.choice(vocab, size=width + 8, replace=False)
            ids = np.concatenate(([sampled], [i for i in others if i != sampled][: width - 1])).astype(np.int64)
            logits = rng.normal(size=width) * rng.choice([0.3, 1.5, 4.0, 12.0])
            rank = rng.choice([0, 0, 0, 1, k + 2])  # where the sampled token falls
            order = np.argsort(-logits, kind="stable")
            logits[0], logits[order[rank]] = logits[order[rank]], logits[0]
            lp = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
            order = np.argsort(-lp, kind="stable")
            probs = np.exp(lp[order])
            dist[p] = (ids[order], probs)
            top_ids[p] = ids[order[:k]]
            top_lps[p] = lp[order[:k]]
            # A server's estimate from its top K (a lower bound), else the exact entropy.
            entropy[p] = estimate_entropy(lp[order[:k]].tolist()) if estimated else -(np.exp(lp) * lp).sum()
            logprobs[p] = lp[0]
    tokens = t.evolve(logprobs=logprobs, entropy=entropy, top_ids=top_ids, top_logprobs=top_lps,
                      entropy_estimated=estimated)
    return ep.evolve(tokens=tokens), Truth(dist)


def plain_math_episode(tokenizer: object) -> Episode:
    """The entropy tests' episode before any alternatives: areal-math task 1, five turns, right and wrong answers."""
    return play(MathEnv, tokenizer, "areal-math", task=1, mistake_rate=0.5, seed=2, tokenizer_name="smollm2")
