"""Where a training run's data changed for the worse: from one rollout step to the next, a share of episodes
(with a root error, aborted, truncated) jumps, or the policy's entropy collapses (the share of near-zero-entropy
tokens jumps, or the mean entropy of the generated tokens falls to half or less).

A change is between two steps, so a run needs two steps before anything can be said to have changed; a share
that is high from the first step on is a level, shown by the step's own figures, not a change. The CLI and the
Runs tab read the same answer from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..store import StepStats

JUMP = 0.2
"""A share that rises by this much (20 points) from one step to the next marks the step."""

MEASURES: tuple[tuple[str, Callable[[StepStats], float | None]], ...] = (
    ("root errors", lambda s: s.error_rate),
    ("aborted", lambda s: s.aborted_rate),
    ("truncated", lambda s: s.truncated_rate),
)


ENTROPY_DROP = 0.5
"""A step whose mean entropy is this fraction of the step before's, or less, is marked (an entropy collapse)."""

COLLAPSED = 0.1
"""A mean entropy (nats) under which a run has already collapsed: a fall from a mean this low is not marked again
(halving 0.02 nats is noise, not news)."""

NEAR_ZERO = "near-zero entropy"
MEAN_ENTROPY = "mean entropy"
ENTROPY_MEASURES = (NEAR_ZERO, MEAN_ENTROPY)
"""The changes that mark an entropy collapse: ``StepChange.what`` of either says so."""


@dataclass(frozen=True)
class StepChange:
    """A step where a share of episodes jumped over the step before it."""

    step: int
    what: str
    """Which share: ``root errors``, ``aborted``, ``truncated`` or ``near-zero entropy`` (of the generated tokens
    with a known entropy); or ``mean entropy`` (nats, not a share)."""
    before: float
    """The share (or mean entropy) at the step before."""
    after: float
    """The share (or mean entropy) at this step."""
    kinds: tuple[str, ...] = ()
    """For root errors: the kinds whose share grew most at this step."""

    @property
    def collapse(self) -> bool:
        """Whether this change is the policy's entropy collapsing."""
        return self.what in ENTROPY_MEASURES

    def text(self) -> str:
        if self.what == MEAN_ENTROPY:
            return f"step {self.step}: mean entropy {self.before:.3g} → {self.after:.3g} nats (entropy collapse)"
        if self.what == NEAR_ZERO:
            return (f"step {self.step}: near-zero-entropy tokens {self.before:.0%} → {self.after:.0%} "
                    "(entropy collapse)")
        return (f"step {self.step}: {self.what} {self.before:.0%} → {self.after:.0%}"
                + (f" ({', '.join(self.kinds)})" if self.kinds else ""))


def _grown_kinds(before: StepStats, s: StepStats, n: int = 3) -> tuple[str, ...]:
    def share(st: StepStats, kind: str) -> float:
        return st.root_kinds.get(kind, 0) / st.checked if st.checked else 0.0

    growth = sorted(((share(s, k) - share(before, k), k) for k in s.root_kinds), key=lambda g: (-g[0], g[1]))
    return tuple(k for g, k in growth[:n] if g > 0)


def _entropy_changes(before: StepStats, s: StepStats, jump: float, drop: float) -> list[StepChange]:
    """An entropy collapse at ``s``: its share of near-zero-entropy tokens rose by ``jump`` or more, or its mean
    entropy fell to ``drop`` of the step before's or less. Only between two steps that both know their entropy."""
    out: list[StepChange] = []
    low_before, low = before.near_zero_rate, s.near_zero_rate
    if low_before is not None and low is not None and low - low_before >= jump:
        out.append(StepChange(s.step, NEAR_ZERO, low_before, low))
    mean_before, mean = before.entropy_mean, s.entropy_mean
    if mean_before is not None and mean is not None and mean_before >= COLLAPSED and mean <= drop * mean_before:
        out.append(StepChange(s.step, MEAN_ENTROPY, mean_before, mean))
    return out


def step_changes(stats: Sequence[StepStats], jump: float = JUMP, drop: float = ENTROPY_DROP) -> list[StepChange]:
    """The steps where a share of episodes (with root errors, aborted, truncated) or of generated tokens (near-zero
    entropy) rose by ``jump`` or more over the step before, or the mean entropy fell to ``drop`` of the step before's
    or less, in step order; nothing for a run of fewer than two steps. The share with root errors is of the episodes
    the checks ran on, and compared only between two steps that have some: a step no check ran on is no step
    without errors."""
    out: list[StepChange] = []
    for before, s in zip(stats, stats[1:]):
        for what, share in MEASURES:
            was, now = share(before), share(s)
            if was is not None and now is not None and now - was >= jump:
                kinds = _grown_kinds(before, s) if what == "root errors" else ()
                out.append(StepChange(s.step, what, was, now, kinds))
        out += _entropy_changes(before, s, jump, drop)
    return out


__all__ = ["COLLAPSED", "ENTROPY_DROP", "ENTROPY_MEASURES", "JUMP", "MEAN_ENTROPY", "MEASURES", "NEAR_ZERO", "StepChange",
           "step_changes"]
