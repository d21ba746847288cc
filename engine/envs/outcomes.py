"""Why an episode earned its reward: the ``Outcome`` (``engine.records.outcome``) of a finished episode.

:func:`explain` asks the env that scored the episode, by its name: the retail env (``retail/outcome.py``)
and tau-bench (``taubench.outcome``) compare the agent's calls with the task's reference writes
(``toolcompare``) and replay them for the database's difference; math (``math.outcome``) lists what the
checker took from each turn; any other env gives its own reason as text.
"""

from __future__ import annotations

from dataclasses import replace

from ..errors import RollscopeError
from ..records.episode import Episode, Status
from ..records.outcome import PASSING_KINDS, Outcome


def own_reason(ep: Episode) -> str:
    """An env's own reason for the reward: what its last turn's info says, else how the episode ended."""
    info = ep.turns[-1].info if ep.turns else {}
    for key in ("reason", "reward_info", "message"):
        if info.get(key):
            return f"reward {ep.reward:g}: {info[key]}"
    return f"reward {ep.reward:g}: {ep.status.value} ({ep.reason})" if ep.reason else f"reward {ep.reward:g}"


def explain(ep: Episode) -> Outcome | None:
    """The outcome of a finished episode (None while it runs), from the env that scored it, by name."""
    if ep.status is Status.RUNNING:
        return None
    try:
        if ep.env == "retail":
            from .retail.outcome import outcome as retail

            return _unscored(ep, retail(ep))
        if ep.env.startswith("taubench:"):
            from .taubench import outcome as taubench

            return _unscored(ep, taubench(ep))
        if ep.env == "math":
            from .math import outcome as math

            return math(ep)
    except RollscopeError as e:  # the task is unknown here, tau-bench is missing: said, not raised
        return Outcome.other(f"{ep.env} cannot explain this episode: {e}")
    return Outcome.other(own_reason(ep))


def _unscored(ep: Episode, out: Outcome) -> Outcome:
    """A tool env scores an episode only when it ends it: one that ended otherwise says so."""
    if ep.status is Status.COMPLETED:
        return out
    how = f"the episode ended {ep.status.value} before the env scored it ({ep.reason})"
    if out.kind in PASSING_KINDS:
        return Outcome("other", None, None, None, (), (), out.db_diff, (), None, f"{out.text}; but {how}")
    return replace(out, text=f"{out.text}; {how}")
