"""Many re-executions at a glance: their divergences grouped by cause, with counts.

A cause is what differs in an episode, in words that are the same for every
episode the same change hit (``ReplayResult.cause``: each differing tool's
name and the path-level shape of its diff, values left out). So 120 airline
episodes recorded before ``address.province`` became ``address.state`` are
one line, and how many of them still earn the recorded reward is counted
with it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..loop.replay import ReplayResult

REPRODUCED = "reproduced"
NOT_REPRODUCIBLE = "not reproducible"


@dataclass(frozen=True)
class ReplayCause:
    """One cause and the episodes it covers (``status``: reproduced, diverged or not reproducible)."""

    status: str
    cause: str
    episodes: tuple[str, ...]
    reward_reproduced: int
    reward_differs: int

    @property
    def n(self) -> int:
        return len(self.episodes)

    @property
    def reward_unknown(self) -> int:
        return self.n - self.reward_reproduced - self.reward_differs

    def line(self) -> str:
        """``120 episodes: get_user_details output: `address.province` is now `address.state`; reward
        reproduced 118 of them``."""
        many = f"{self.n} episode{'s' if self.n != 1 else ''}"
        if self.status == REPRODUCED:
            return f"{many} reproduced every output and the reward"
        if self.status == NOT_REPRODUCIBLE:
            return f"{many} cannot be re-executed exactly: {self.cause}"
        if self.n == 1:
            tail = ("; reward reproduced" if self.reward_reproduced else "; reward not reproduced" if self.reward_differs
                    else "; the end was not reached")
        else:
            tail = f"; reward reproduced {self.reward_reproduced} of them"
            if self.reward_unknown:
                tail += f" ({self.reward_unknown} did not reach the end)"
        return f"{many}: {self.cause}{tail}"


def replay_causes(results: Iterable[ReplayResult]) -> list[ReplayCause]:
    """The re-executions grouped by cause, the largest group first (reproduced ones are one group)."""
    groups: dict[tuple[str, str], list[ReplayResult]] = {}
    for r in results:
        if not r.reproducible:
            key = (NOT_REPRODUCIBLE, r.reason)
        elif r.reproduced:
            key = (REPRODUCED, "")
        else:
            key = ("diverged", r.cause)
        groups.setdefault(key, []).append(r)
    out = [ReplayCause(status, cause, tuple(r.episode_id for r in rs),
                       sum(1 for r in rs if r.reward_reproduced is True),
                       sum(1 for r in rs if r.reward_reproduced is False))
           for (status, cause), rs in groups.items()]
    return sorted(out, key=lambda g: (-g.n, g.status, g.cause))


def replay_summary(results: Iterable[ReplayResult]) -> list[str]:
    """The summary ``rollscope replay`` prints: a count line, then one line per cause."""
    rs = list(results)
    groups = replay_causes(rs)
    if not rs:
        return ["nothing matched"]
    reached = [r for r in rs if r.reward_reproduced is not None]
    same = sum(1 for r in reached if r.reward_reproduced)
    head = (f"{len(rs)} episode{'s' if len(rs) != 1 else ''} re-executed: "
            f"{sum(1 for r in rs if r.reproducible and r.reproduced)} reproduced every output and the reward; "
            f"the reward reproduced in {same} of the {len(reached)} that reached the end")
    return [head, *("  " + g.line() for g in groups)]
