"""One task's GRPO group, side by side: each sample's reward and advantage, and where the samples part ways.

The advantage is GRPO's group-normalized reward, ``(r - mean) / (std + 1e-6)``
with the sample standard deviation over the group (``rewards.group_advantages``,
as verl's ``compute_grpo_outcome_advantage`` computes it). A group whose rewards
are all equal has zero spread: every advantage is 0 and the group gives no
learning signal.

The samples part ways at the first turn where they do not all take the same
actions (the same tool calls with the same arguments, or the same text to the
user); a sample that has already ended counts as taking none.

Where the rewards spread, each sample below the group's best reward is set
beside the best sample that shares the most turns with it (the same actions up
to there): the turn where the two part is the first action that separates a
rewarded path from an unrewarded one (``Parting``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..checks.diagnosis import roots
from ..loop.rewards import group_advantages
from ..records.episode import Episode, Finding, Turn

GROUP_NORMALIZATION = "GRPO: (reward − group mean) / (group std + 1e-6), sample std (n − 1)"


@dataclass(frozen=True)
class GroupSample:
    episode: Episode
    advantage: float
    roots: tuple[Finding, ...]

    @property
    def reward(self) -> float:
        return self.episode.reward


@dataclass(frozen=True)
class Parting:
    """Where an unrewarded sample parts from the rewarded sample closest to it: the first turn their actions
    differ, and what each did there."""

    rewarded: Episode
    """A sample with the group's best reward."""
    unrewarded: Episode
    """A sample below it."""
    turn: int | None
    """The first turn where their actions differ; None when they took the same actions throughout."""
    rewarded_action: str
    """What the rewarded sample did at ``turn`` (``action_text``; ``(ended)`` when it had ended)."""
    unrewarded_action: str
    """What the unrewarded sample did there."""


@dataclass(frozen=True)
class GroupView:
    group_id: str
    samples: tuple[GroupSample, ...]
    normalization: str
    diverge_turn: int | None  # None: every sample took the same actions throughout
    actions_at_divergence: tuple[str, ...]  # per sample, what it did at diverge_turn
    partings: tuple[Parting, ...] = ()  # per sample below the best reward, where it parts from a rewarded one

    @property
    def spread(self) -> float:
        rewards = [s.reward for s in self.samples]
        return max(rewards) - min(rewards) if rewards else 0.0

    @property
    def zero_spread(self) -> bool:
        return len(self.samples) > 1 and self.spread == 0.0

    @property
    def task_id(self) -> str:
        return self.samples[0].episode.task_id if self.samples else ""


def action_text(turn: Turn | None) -> str:
    """What a turn did, as one comparable string: its tool calls, else its text to the user; ``ended`` if none."""
    if turn is None:
        return "(ended)"
    if turn.tool_calls:
        return "; ".join(f"{c.name}({json.dumps(c.arguments, sort_keys=True, ensure_ascii=False)})"
                         for c in turn.tool_calls)
    if turn.parse_error:
        return f"(parse error: {turn.parse_error[:80]})"
    if turn.action is not None:
        return f"say: {turn.action.text}" if turn.action.is_respond else turn.action.name
    return f"say: {turn.generation.text if turn.generation is not None else ''}"


def first_divergence(episodes: Sequence[Episode]) -> tuple[int | None, tuple[str, ...]]:
    """(the first turn where the samples' actions differ, each sample's action there); (None, ()) if none."""
    if len(episodes) < 2:
        return None, ()
    longest = max(ep.n_turns for ep in episodes)
    for k in range(longest):
        acts = tuple(action_text(ep.turns[k] if k < ep.n_turns else None) for ep in episodes)
        if len(set(acts)) > 1:
            return k, acts
    return None, ()


def _parting_turn(a: Episode, b: Episode) -> int | None:
    for k in range(max(a.n_turns, b.n_turns)):
        if action_text(a.turns[k] if k < a.n_turns else None) != action_text(b.turns[k] if k < b.n_turns else None):
            return k
    return None


def reward_partings(episodes: Sequence[Episode]) -> tuple[Parting, ...]:
    """For each sample below the group's best reward (in sample order), where it parts from the best-rewarded
    sample that shares the most turns with it; () when the rewards do not spread."""
    eps = sorted(episodes, key=lambda e: (e.sample_index, e.id))
    if len(eps) < 2:
        return ()
    best = max(e.reward for e in eps)
    rewarded = [e for e in eps if e.reward == best]
    if len(rewarded) == len(eps):
        return ()
    out: list[Parting] = []
    for u in (e for e in eps if e.reward != best):
        turns = [(_parting_turn(r, u), r) for r in rewarded]
        # The closest rewarded sample: the latest parting (one that never parts is closest of all).
        k, r = max(turns, key=lambda t: (t[0] is None, -1 if t[0] is None else t[0]))
        acts = ("", "") if k is None else tuple(action_text(e.turns[k] if k < e.n_turns else None) for e in (r, u))
        out.append(Parting(r, u, k, acts[0], acts[1]))
    return tuple(out)


def group_view(episodes: Sequence[Episode]) -> GroupView:
    """The group of ``episodes`` (one task's samples, in sample order)."""
    eps = sorted(episodes, key=lambda e: (e.sample_index, e.id))
    advantages = group_advantages([e.reward for e in eps])
    samples = tuple(GroupSample(e, a, tuple(roots(e.all_findings()))) for e, a in zip(eps, advantages))
    turn, acts = first_divergence(eps)
    gid = eps[0].group_id or "" if eps else ""
    return GroupView(gid, samples, GROUP_NORMALIZATION, turn, acts, reward_partings(eps))


MAX_SAMPLES = 256


def load_group(store: Any, group_id: str) -> GroupView:
    """The group ``group_id`` from ``store`` (ConfigError when it has no episodes)."""
    from ..errors import ConfigError
    from ..store import EpisodeFilter

    rows = store.list_episodes(EpisodeFilter(group_id=group_id), order_by="sample_index", descending=False,
                               limit=MAX_SAMPLES)
    if not rows:
        raise ConfigError(f"no episodes in group {group_id!r}: Browse's group column names the groups")
    return group_view([store.get_episode(r.id) for r in rows])


def flat_groups(store: Any, run_id: str | None, limit: int = 5000) -> list[tuple[str, str, float, int]]:
    """The groups of ``run_id`` (all runs: None) whose samples all got the same reward:
    (group id, task id, reward, samples), by group id."""
    from ..store import EpisodeFilter

    by_group: dict[str, list[Any]] = {}
    for r in store.list_episodes(EpisodeFilter(run_id=run_id), order_by="created_at", limit=limit):
        if r.group_id:
            by_group.setdefault(r.group_id, []).append(r)
    return [(g, rs[0].task_id, rs[0].reward, len(rs)) for g, rs in sorted(by_group.items())
            if len(rs) > 1 and len({x.reward for x in rs}) == 1]
