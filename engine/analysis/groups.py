"""One task's GRPO group, side by side: each sample's reward and advantage, and where the samples part ways.

The advantage is GRPO's group-normalized reward, ``(r - mean) / (std + 1e-6)``
with the sample standard deviation over the group (``rewards.group_advantages``,
as verl's ``compute_grpo_outcome_advantage`` computes it). A group whose rewards
are all equal has zero spread: every advantage is 0 and the group gives no
learning signal.

The samples are lined up by what they did, not by turn number: each sample's actions are its tool calls in
order (a call that did not parse counts as one), and for math the answer the checker extracted from each
turn (``sample_actions``). Text to the user is left out: sampled policies and simulated users word their
replies differently, and one extra clarifying turn would shift every later turn. The samples part ways at
the first action that is not the same in all of them; a sample that has run out of actions shows what it
did instead at that point (its text, or ``(ended)``).

Where the rewards spread, each sample below the group's best reward is set beside the best-reward sample
that shares the most actions with it: where the two part is the first action that separates a best-reward
path from a lower-reward one (``Parting``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..checks.diagnosis import roots
from ..loop.rewards import group_advantages
from ..records.episode import Action, Episode, Finding, ToolCall, Turn

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
    """Where a lower-reward sample parts from the best-reward sample closest to it: the first action where the
    two differ, the turn of it in each, and what each did there. When they never part (the same actions
    throughout) both turns are None and both actions ''."""

    rewarded: Episode
    """A sample with the group's best reward."""
    unrewarded: Episode
    """A lower-reward sample."""
    turn: int | None
    """The lower-reward sample's turn where the two part; None when it had ended there, or never parts."""
    rewarded_action: str
    """What the best-reward sample did there (``action_text``; ``(ended)`` when it had ended; '' when the
    two never part)."""
    unrewarded_action: str
    """What the lower-reward sample did there (the same conventions)."""
    rewarded_turn: int | None = None
    """The best-reward sample's turn where the two part; None when it had ended there, or never parts."""

    @property
    def parts(self) -> bool:
        """The two samples took different actions somewhere."""
        return self.turn is not None or self.rewarded_turn is not None


@dataclass(frozen=True)
class GroupView:
    group_id: str
    samples: tuple[GroupSample, ...]
    normalization: str
    diverge_turn: int | None  # None: every sample took the same actions throughout
    actions_at_divergence: tuple[str, ...]  # per sample, what it did at diverge_turn
    partings: tuple[Parting, ...] = ()  # per sample below the best reward, where it parts from a best-reward one
    uncompared: str = ""  # why the samples' actions cannot be compared ("": they can); then no turn parts them

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


def call_text(call: ToolCall | Action) -> str:
    """A tool call as one comparable string: its name and its arguments as sorted JSON (as the model wrote them,
    where they are not a JSON object)."""
    if isinstance(call, ToolCall) and call.raw_arguments is not None:
        return f"{call.name}({call.raw_arguments})"
    return f"{call.name}({json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)})"


def action_text(turn: Turn | None) -> str:
    """What a turn did, as one string: its tool calls, else its text to the user; ``(ended)`` if none."""
    if turn is None:
        return "(ended)"
    if turn.tool_calls:
        return "; ".join(call_text(c) for c in turn.tool_calls)
    if turn.parse_error:
        return f"(parse error: {turn.parse_error[:80]})"
    if turn.action is not None:
        return f"say: {turn.action.text}" if turn.action.is_respond else call_text(turn.action)
    return f"say: {turn.generation.text if turn.generation is not None else ''}"


@dataclass(frozen=True)
class SampleAction:
    """One action samples are lined up by: a tool call, a call that did not parse, or a math answer."""

    turn: int
    text: str


def sample_actions(ep: Episode) -> tuple[SampleAction, ...]:
    """The actions of ``ep`` that samples are compared by, in order: for math (an outcome with answers) the
    answer extracted from each turn; else each tool call, and each turn whose call did not parse. Turns that
    only talk to the user are left out."""
    o = ep.outcome
    if o is not None and o.answers:
        return tuple(SampleAction(a.turn, "answer: " + ("(none)" if a.extracted is None else a.extracted))
                     for a in o.answers)
    out: list[SampleAction] = []
    for t in ep.turns:
        if t.tool_calls:
            out.extend(SampleAction(t.index, call_text(c)) for c in t.tool_calls)
        elif t.parse_error:
            out.append(SampleAction(t.index, f"(parse error: {t.parse_error[:80]})"))
        elif t.action is not None and not t.action.is_respond:
            out.append(SampleAction(t.index, call_text(t.action)))
    return tuple(out)


def _at(ep: Episode, acts: Sequence[SampleAction], i: int, lead: Sequence[SampleAction]) -> tuple[int | None, str]:
    """(turn, action) of ``ep`` at its ``i``-th action; past its last one, what it did instead where ``lead``
    (a sample with an ``i``-th action) took it: as many turns after their last shared action."""
    if i < len(acts):
        return acts[i].turn, acts[i].text
    before = acts[i - 1].turn if i else -1
    k = before + lead[i].turn - (lead[i - 1].turn if i else -1)
    if before + 1 >= ep.n_turns:
        return None, "(ended)"
    k = min(k, ep.n_turns - 1)
    return k, action_text(ep.turns[k])


def _part(a: Sequence[SampleAction], b: Sequence[SampleAction]) -> int | None:
    """The index of the first action where ``a`` and ``b`` differ; None when they are the same throughout."""
    for i in range(max(len(a), len(b))):
        if i >= len(a) or i >= len(b) or a[i].text != b[i].text:
            return i
    return None


def _divergence(eps: Sequence[Episode], acts: Sequence[Sequence[SampleAction]]) -> tuple[int | None, tuple[str, ...]]:
    if len(eps) < 2:
        return None, ()
    for i in range(max(len(a) for a in acts)):
        if len({a[i].text if i < len(a) else None for a in acts}) > 1:
            lead = next(a for a in acts if i < len(a))
            at = [_at(e, a, i, lead) for e, a in zip(eps, acts)]
            return min(k for k, _ in at if k is not None), tuple(t for _, t in at)
    return None, ()


def first_divergence(episodes: Sequence[Episode]) -> tuple[int | None, tuple[str, ...]]:
    """(the earliest turn of the first action where the samples differ, each sample's action there);
    (None, ()) if they take the same actions throughout (``sample_actions``)."""
    return _divergence(episodes, [sample_actions(e) for e in episodes])


def _partings(eps: Sequence[Episode], acts: Sequence[Sequence[SampleAction]]) -> tuple[Parting, ...]:
    if len(eps) < 2:
        return ()
    best = max(e.reward for e in eps)
    rewarded = [(e, a) for e, a in zip(eps, acts) if e.reward == best]
    if len(rewarded) == len(eps):
        return ()
    out: list[Parting] = []
    for u, ua in zip(eps, acts):
        if u.reward == best:
            continue
        # The closest best-reward sample: the latest parting (one that never parts is closest of all).
        i, r, ra = max(((_part(ra, ua), r, ra) for r, ra in rewarded),
                       key=lambda t: (t[0] is None, -1 if t[0] is None else t[0]))
        if i is None:
            out.append(Parting(r, u, None, "", "", None))
            continue
        lead = ra if i < len(ra) else ua
        (rk, rt), (uk, ut) = _at(r, ra, i, lead), _at(u, ua, i, lead)
        out.append(Parting(r, u, uk, rt, ut, rk))
    return tuple(out)


def reward_partings(episodes: Sequence[Episode]) -> tuple[Parting, ...]:
    """For each sample below the group's best reward (in sample order), where it parts from the best-reward
    sample that shares the most actions with it; () when the rewards do not spread."""
    eps = sorted(episodes, key=lambda e: (e.sample_index, e.id))
    return _partings(eps, [sample_actions(e) for e in eps])


def group_view(episodes: Sequence[Episode]) -> GroupView:
    """The group of ``episodes`` (one task's samples, in sample order)."""
    eps = sorted(episodes, key=lambda e: (e.sample_index, e.id))
    advantages = group_advantages([e.reward for e in eps])
    samples = tuple(GroupSample(e, a, tuple(roots(e.all_findings()))) for e, a in zip(eps, advantages))
    gid = eps[0].group_id or "" if eps else ""
    why = uncompared(eps)
    if why:  # nothing to line the samples up by: "the same calls throughout" would be a guess
        return GroupView(gid, samples, GROUP_NORMALIZATION, None, (), (), why)
    acts = [sample_actions(e) for e in eps]  # once per sample, for both comparisons
    turn, at = _divergence(eps, acts)
    return GroupView(gid, samples, GROUP_NORMALIZATION, turn, at, _partings(eps, acts))


def uncompared(eps: Sequence[Episode]) -> str:
    """Why the actions of ``eps`` cannot be compared, or "": a record that lacks what its env's outcome reads (a
    trainer's dump read off its mask: ``outcomes.unread``), or samples none of which holds a parsed call, an answer
    or a reply's text."""
    from ..envs.outcomes import unread

    for e in eps:
        if why := unread(e):
            return f"sample #{e.sample_index}: {why}"
    if len(eps) > 1 and not any(sample_actions(e) or any(t.generation is not None and t.generation.text
                                                         for t in e.turns) for e in eps):
        return "their records hold no parsed calls, answers nor reply texts"
    return ""


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
