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


def unread(ep: Episode) -> str:
    """What the env's outcome reads that the record does not hold ("" when it holds it): a trainer's dump keeps the
    tokens, and an import reads its turns off the loss mask, so its replies have no text without a tokenizer, and no
    tool calls or env answers at all. Read as missing, they would say "never called" or "never answered"."""
    if ep.env not in ("retail", "math") and not ep.env.startswith("taubench:"):
        return ""
    gens = [t.generation for t in ep.turns if t.generation is not None and t.generation.token_ids]
    replies = any(m.role == "assistant" for m in ep.messages)  # an import of messages holds its calls there
    if ep.env != "math" and gens and not any(t.observation for t in ep.turns) and not replies:
        return ("its record holds no tool calls parsed from the replies nor what the env answered (a trainer's dump "
                "keeps the tokens alone), so there are no calls to compare with the task's")
    if gens and not any(g.text for g in gens) and not replies and not any("correct" in t.info for t in ep.turns):
        if ep.tokenizer:  # decoded, and nothing came of it
            return "its replies decode to no text"
        return ("its replies are token ids without their text (imported without a tokenizer: `rollscope import "
                "--tokenizer NAME` decodes them)")
    return ""


def explain(ep: Episode) -> Outcome | None:
    """The outcome of a finished episode (None while it runs), from the env that scored it, by name; ``other``,
    saying why, when the record lacks what the env reads (``unread``)."""
    if ep.status is Status.RUNNING:
        return None
    if why := unread(ep):
        return Outcome.other(f"reward {ep.reward:g}: {ep.env} cannot explain this episode: {why}")
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
