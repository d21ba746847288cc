"""Many re-executions at a glance: their divergences grouped by cause, with counts.

A cause is one thing that differs, in words that are the same for every
episode the same change hit (``ReplayResult.causes``: a differing tool's
name and one path-level change of its output, values left out). An episode
is counted under every cause it shows, whatever else it shows and in
whatever order, so 120 airline episodes recorded before
``address.province`` became ``address.state`` are one line, and how many of
them still earn the recorded reward is counted with it. A cause that was an
episode's first divergence is marked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..loop.verdicts import ReplayResult

DIVERGED = "diverged"
NOT_REPRODUCIBLE = "not reproducible"
FIRST = "⚑"
"""The mark of a cause that was the first divergence of episodes it covers."""


@dataclass(frozen=True)
class ReplayCause:
    """One cause and the episodes showing it (``status``: diverged or not reproducible); ``first`` counts
    those whose first divergence it is, ``compared`` whether their rewards were compared at all."""

    status: str
    cause: str
    episodes: tuple[str, ...]
    reward_reproduced: int
    reward_differs: int
    first: int = 0
    compared: bool = True

    @property
    def n(self) -> int:
        return len(self.episodes)

    @property
    def reward_unknown(self) -> int:
        return self.n - self.reward_reproduced - self.reward_differs

    def line(self) -> str:
        """``⚑ 120 episodes: get_user_details output: `address.province` is now `address.state`; reward
        reproduced 118 of them``; the mark left blank for a cause that was no episode's first divergence,
        and the share said for one that was some episodes' only."""
        many = f"{self.n} episode{'s' if self.n != 1 else ''}"
        if self.status == NOT_REPRODUCIBLE:
            return f"  {many} cannot be re-executed exactly: {self.cause}"
        if not self.compared:
            tail = "; reward not compared (--until)"
        elif self.n == 1:
            tail = ("; reward reproduced" if self.reward_reproduced else "; reward not reproduced" if self.reward_differs
                    else "; the end was not reached")
        else:
            tail = f"; reward reproduced {self.reward_reproduced} of them"
            if self.reward_unknown:
                tail += f" ({self.reward_unknown} did not reach the end)"
        mark = f"{FIRST} " if self.first else "  "
        part = f" (the first divergence in {self.first} of them)" if 0 < self.first < self.n else ""
        return f"{mark}{many}: {self.cause}{tail}{part}"


def replay_causes(results: Iterable[ReplayResult]) -> list[ReplayCause]:
    """The diverged re-executions grouped by cause, an episode under every cause it shows, and those that
    cannot be re-executed by reason; the largest group first. Reproduced ones are in no group."""
    groups: dict[tuple[str, str], list[ReplayResult]] = {}
    firsts: dict[tuple[str, str], int] = {}
    for r in results:
        if not r.reproducible:
            groups.setdefault((NOT_REPRODUCIBLE, r.reason), []).append(r)
            continue
        first = set(r.first_causes)
        for cause in r.causes:
            groups.setdefault((DIVERGED, cause), []).append(r)
            firsts[(DIVERGED, cause)] = firsts.get((DIVERGED, cause), 0) + (cause in first)
    out = [ReplayCause(status, cause, tuple(r.episode_id for r in rs),
                       sum(1 for r in rs if r.reward_reproduced is True),
                       sum(1 for r in rs if r.reward_reproduced is False),
                       firsts.get((status, cause), 0), any(r.until is None for r in rs))
           for (status, cause), rs in groups.items()]
    return sorted(out, key=lambda g: (g.status == NOT_REPRODUCIBLE, -g.n, -g.first, g.cause))


def replay_summary(results: Iterable[ReplayResult]) -> list[str]:
    """The summary ``rollscope replay`` prints over many episodes: a count line, then one line per cause."""
    rs = list(results)
    if not rs:
        return ["nothing matched"]
    reproduced = sum(1 for r in rs if r.reproducible and r.reproduced)
    tried = sum(1 for r in rs if r.reproducible)  # the rest cannot be (below, by cause)
    many = f"{'' if tried == len(rs) else f'{tried} of '}{len(rs)} episode{'s' if len(rs) != 1 else ''} re-executed"
    if all(r.until is not None for r in rs):
        until = max(r.until or 0 for r in rs)
        head = f"{many}, turns 0-{until}: {reproduced} reproduced every output; reward not compared (--until)"
    else:
        reached = [r for r in rs if r.reward_reproduced is not None]
        same = sum(1 for r in reached if r.reward_reproduced)
        head = (f"{many}: {reproduced} reproduced every output and the reward; "
                f"the reward reproduced in {same} of the {len(reached)} that reached the end")
    return [head, *("  " + g.line() for g in replay_causes(rs))]
