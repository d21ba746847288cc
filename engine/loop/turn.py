"""One turn's way from text to env and back, shared by the loop, replay and fork.

``parse_reply`` reads tool calls out of a reply the way the loop's config
says; ``actions_for`` turns them (or the reply's text) into env actions;
``execute`` steps the env with them; ``ENV_FAILURES`` are the exceptions that
count as the env's own failure (an env's declared ``EnvError``, a model
playing the user that could not answer). Anything else raised inside an env
is a bug and propagates: the runner records it as ``failed``.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..envs.base import Env, StepResult
from ..errors import BackendError, EnvError
from ..presets import LoopConfig
from ..records.episode import RESPOND, Action, Message, ToolCall, Turn
from ..tokens.toolcalls import ParseResult, tool_names
from ..tokens.toolcalls import parse as parse_tool_calls

ENV_FAILURES: tuple[type[BaseException], ...] = (EnvError, BackendError)


def parse_reply(content: str, config: LoopConfig, tools: Sequence[dict[str, Any]]) -> ParseResult:
    """The tool calls in a reply, cut to ``tool_calls_per_turn``; no tools means no calls."""
    if not tools:
        return ParseResult((), None, content)
    res = parse_tool_calls(content, config.tool_parser, tool_names(tools))
    if res.error is None and config.tool_calls_per_turn and len(res.calls) > config.tool_calls_per_turn:
        res = ParseResult(res.calls[: config.tool_calls_per_turn], None, res.content, res.dropped)
    return res


def actions_for(calls: Sequence[ToolCall], respond_text: str) -> list[Action]:
    """One action per call, or a ``respond`` with the text when there is no call."""
    return [Action(c.name, c.arguments) for c in calls] or [Action(RESPOND, {"content": respond_text}, respond_text)]


def stored_actions(turn: Turn) -> list[Action] | None:
    """The actions a stored turn executed (None when nothing reached the env)."""
    if turn.action is None:
        return None
    if turn.tool_calls:
        return actions_for(turn.tool_calls, "")
    return [Action(RESPOND, dict(turn.action.arguments), turn.action.text)]


async def execute(env: Env, actions: Sequence[Action]) -> StepResult:
    """Step the env with a turn's actions in order, merging what they return; stop at done."""
    observations: list[Message] = []
    reward, done = 0.0, False
    info: dict[str, Any] = {}
    for action in actions:
        res = env.step(action)
        if inspect.isawaitable(res):
            res = await res
        observations.extend(res.observation)
        reward, done, info = res.reward, res.done, {**info, **res.info}
        if done:
            break
    return StepResult(tuple(observations), reward, done, info)


@dataclass(frozen=True)
class Difference:
    """A field of a turn whose value now differs from the stored one."""

    field: str
    stored: Any
    now: Any


def messages_dicts(ms: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in ms]


def compare_result(stored: Turn, now: StepResult) -> list[Difference]:
    """How an env's answer now differs from a stored turn's: observation, reward, done (in that order)."""
    out: list[Difference] = []
    if messages_dicts(now.observation) != messages_dicts(stored.observation):
        out.append(Difference("observation", messages_dicts(stored.observation), messages_dicts(now.observation)))
    if now.reward != stored.reward:
        out.append(Difference("reward", stored.reward, now.reward))
    if now.done != stored.done:
        out.append(Difference("done", stored.done, now.done))
    return out


def conversation_observation(config: LoopConfig, result: StepResult) -> tuple[Message, ...]:
    """What the loop appends to the conversation after a step: the env's messages, or the loop's own
    feedback where the reproduced agent writes it (AReaL's agents judge by the env's success)."""
    if config.feedback_correct is None and config.feedback_wrong is None:
        return tuple(result.observation)
    ok = bool(result.info.get("success"))
    text = config.feedback_correct if ok else config.feedback_wrong
    if text is None:
        return tuple(result.observation)
    return (Message("user", text),)
