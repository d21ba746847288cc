"""Re-execute a tool-using episode with its user replayed from the record.

An episode whose user was a model or a person, or one imported from
messages or tau-bench results, cannot be re-executed with the env's own
user: that user would say something else. Here the env is reset on the
episode's task with a :class:`RecordedUser` in its user's place, which
answers with the user's recorded messages in order. The stored
conversation is then walked message by message: each assistant tool call
is executed and its output compared with the recorded ``tool`` message;
each assistant reply without calls goes to the (recorded) user. When the
env ends the episode, its reward is compared with the recorded one.

The verdict names the first divergence (a tool output, the env ending
early or not at all, the final reward) and says that the user was replayed
from the record. What the env can no longer check, because the record put
the words in the user's mouth, is the user itself.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .actions import ENV_FAILURES, execute, stored_actions
from .envs.base import Env
from .records import RESPOND, Action, Episode
from .replay import ReplayResult, TurnVerdict

STOP = "###STOP###"
RECORDED_NOTE = "the user was replayed from the record"


class RecordedUser:
    """A user that says what the record says it said: the opening, then one reply per agent message.

    Speaks both user interfaces here: the retail env's (``reset(task)``, ``step(said)``) and tau-bench's
    (``reset(instruction=...)``, ``step(content)``, ``get_total_cost()``). Past the end of the record it
    stops the conversation (``###STOP###``), as a user who has nothing more to say.
    """

    def __init__(self, opening: str, replies: list[str]) -> None:
        self.opening = opening
        self.replies = list(replies)
        self.heard: list[str] = []

    def reset(self, *args: Any, **kwargs: Any) -> str:
        self.heard = []
        return self.opening

    def step(self, content: str) -> str:
        self.heard.append(content)
        k = len(self.heard) - 1
        return self.replies[k] if k < len(self.replies) else STOP

    def get_total_cost(self) -> float:
        return 0.0


@dataclass(frozen=True)
class Step:
    """One agent turn to re-execute: its actions, the tool outputs recorded for them, the user's reply."""

    turn: int
    actions: tuple[Action, ...]
    outputs: tuple[str, ...]
    reply: str | None


def plan(ep: Episode) -> tuple[str, list[Step]]:
    """(the user's opening, the steps) of ``ep``: from its turns when they hold the actions the loop
    executed (live episodes), else from its messages (imports: each assistant message is a turn, its
    tool calls answered by the ``tool`` messages after it, a reply without calls answered by the user)."""
    msgs = [m for m in ep.messages if m.role != "system"]
    first = next((i for i, m in enumerate(msgs) if m.role != "user"), len(msgs))
    opening = "\n".join(m.content for m in msgs[:first])
    steps: list[Step] = []
    if any(t.action is not None for t in ep.turns):
        for t in ep.turns:
            acts = stored_actions(t)
            if acts is None:
                continue  # nothing reached the env (a parse error, an aborted generation)
            respond = len(acts) == 1 and acts[0].is_respond
            reply = next((m.content for m in t.observation if m.role == "user"), None) if respond else None
            steps.append(Step(t.index, tuple(acts), tuple(m.content for m in t.observation if m.role == "tool"),
                              reply))
        return opening, steps
    turn = -1
    for m in msgs[first:]:
        if m.role == "assistant":
            turn += 1
            acts = ([Action(c.name, dict(c.arguments)) for c in m.tool_calls] if m.tool_calls
                    else [Action(RESPOND, {"content": m.content}, m.content)])
            steps.append(Step(turn, tuple(acts), (), None))
        elif m.role == "tool" and steps:
            last = steps[-1]
            steps[-1] = Step(last.turn, last.actions, (*last.outputs, m.content), last.reply)
        elif m.role == "user" and steps and steps[-1].reply is None:
            last = steps[-1]
            steps[-1] = Step(last.turn, last.actions, last.outputs, m.content)
    # An agent that executes only its first call (tau-bench's tool-calling agent) records one output for a
    # message with several calls: the calls without an output never reached the env.
    return opening, [replace(s, actions=s.actions[: len(s.outputs)])
                     if s.outputs and len(s.outputs) < len(s.actions) else s for s in steps]


def recorded_user(ep: Episode) -> RecordedUser:
    """The user of ``ep`` as its record has it: the opening, then its reply to each agent message."""
    opening, steps = plan(ep)
    return RecordedUser(opening, [s.reply or "" for s in steps if len(s.actions) == 1 and s.actions[0].is_respond])


async def replay_recorded(ep: Episode, make_env: Callable[[], Env], until: int | None = None) -> ReplayResult:
    """Re-execute ``ep`` in a fresh env whose user replays the record (turns ``0..until``)."""
    env = make_env()
    use_user = getattr(env, "use_user", None)
    if use_user is None:
        return ReplayResult(ep.id, False, False, reason=f"env {ep.env!r} has no user to replay", until=until,
                            user="recorded")
    opening, steps = plan(ep)
    replies = [s.reply or STOP for s in steps if len(s.actions) == 1 and s.actions[0].is_respond]
    use_user(RecordedUser(opening, replies))
    verdicts: list[TurnVerdict] = []

    def result(ok: bool, div: TurnVerdict | None = None) -> ReplayResult:
        if div is not None:
            verdicts.append(div)
        return ReplayResult(ep.id, True, ok, tuple(verdicts), div, reason=RECORDED_NOTE, until=until,
                            user="recorded")

    try:
        env.reset(ep.task_id)
    except ENV_FAILURES as e:
        return result(False, TurnVerdict(0, False, "env_error", None, f"{type(e).__name__}: {e}", traceback.format_exc()))
    done, reward = False, 0.0
    for step in steps:
        t = step.turn
        if until is not None and t > until:
            return result(True)
        if done:
            return result(False, TurnVerdict(t, False, "done", False, True, "the env ended the episode before this turn"))
        tools = [a for a in step.actions if not a.is_respond]
        n_out = 0
        for action in step.actions:
            try:
                res = await execute(env, [action])
            except ENV_FAILURES as e:
                return result(False, TurnVerdict(t, False, "env_error", None, f"{type(e).__name__}: {e}",
                                                 traceback.format_exc()))
            if not action.is_respond:
                now = next((m.content for m in res.observation if m.role == "tool"), "")
                stored = step.outputs[n_out] if n_out < len(step.outputs) else None
                n_out += 1
                if now != stored:
                    return result(False, TurnVerdict(t, False, "observation", stored, now,
                                                     f"the output of {action.name} (call {n_out} of this turn)"))
            done, reward = res.done, res.reward
            if done:
                break
        verdicts.append(TurnVerdict(t, True, note=f"{n_out} tool output(s) as recorded" if tools else ""))
    if until is not None:
        return result(True)
    recorded = ep.turns[-1].reward if ep.turns else ep.reward  # the env's last reward, before any shaping
    if reward != recorded:
        why = "" if done else "the env did not end the episode where the record does"
        last = steps[-1].turn if steps else 0
        return result(False, TurnVerdict(last, False, "reward", recorded, reward, why))
    return result(True)
