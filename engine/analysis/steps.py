"""Where a training run's data changed for the worse: from one rollout step to the next, a share of episodes
(with a root error, aborted, truncated) jumps.

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

MEASURES: tuple[tuple[str, Callable[[StepStats], float]], ...] = (
    ("root errors", lambda s: s.error_rate),
    ("aborted", lambda s: s.aborted_rate),
    ("truncated", lambda s: s.truncated_rate),
)


@dataclass(frozen=True)
class StepChange:
    """A step where a share of episodes jumped over the step before it."""

    step: int
    what: str
    """Which share: ``root errors``, ``aborted`` or ``truncated``."""
    before: float
    """The share at the step before."""
    after: float
    """The share at this step."""
    kinds: tuple[str, ...] = ()
    """For root errors: the kinds whose share grew most at this step."""

    def text(self) -> str:
        return (f"step {self.step}: {self.what} {self.before:.0%} → {self.after:.0%}"
                + (f" ({', '.join(self.kinds)})" if self.kinds else ""))


def _grown_kinds(before: StepStats, s: StepStats, n: int = 3) -> tuple[str, ...]:
    def share(st: StepStats, kind: str) -> float:
        return st.root_kinds.get(kind, 0) / st.n if st.n else 0.0

    growth = sorted(((share(s, k) - share(before, k), k) for k in s.root_kinds), key=lambda g: (-g[0], g[1]))
    return tuple(k for g, k in growth[:n] if g > 0)


def step_changes(stats: Sequence[StepStats], jump: float = JUMP) -> list[StepChange]:
    """The steps where a share of episodes (with root errors, aborted, truncated) rose by ``jump`` or more over the
    step before, in step order; nothing for a run of fewer than two steps."""
    out: list[StepChange] = []
    for before, s in zip(stats, stats[1:]):
        for what, share in MEASURES:
            if share(s) - share(before) >= jump:
                kinds = _grown_kinds(before, s) if what == "root errors" else ()
                out.append(StepChange(s.step, what, share(before), share(s), kinds))
    return out


__all__ = ["JUMP", "MEASURES", "StepChange", "step_changes"]
