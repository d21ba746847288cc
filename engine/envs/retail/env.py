"""``RetailEnv``: tau-bench's retail semantics on our own store.

One episode: the user opens, the agent calls tools (which read and mutate a
private copy of the store) or writes to the user, until the user says
``###STOP###`` or the agent transfers to a human. Then the reward: 1.0 when
the final database equals the one the task's reference actions produce
from a fresh store and every required output was said by the agent
(case-insensitive, commas ignored), else 0.0.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable, Sequence
from functools import cache
from typing import Any

from ...errors import ConfigError, EnvError
from ...records.episode import Action, Message
from ...tokens.tokenizer import Tokenizer
from ..base import StepResult
from .data import SEED, Db, db_fingerprint, fresh_db
from .policy import POLICY
from .reference import reference_reply
from .tasks import RetailTask, all_tasks, get_task
from .tools import TOOL_FUNCTIONS, TOOL_SCHEMAS, TRANSFER, run_tool
from .user import STOP, LLMUser, ScriptedUser

USERS = ("scripted", "llm")


@cache
def expected_fingerprint(task_id: str) -> str:
    """Fingerprint of the database the task's reference actions produce (once per task and process)."""
    task = get_task(task_id)
    db = fresh_db()
    for action in task.actions:
        result = run_tool(db, action.name, action.arguments)
        if result.startswith("Error"):
            # A task whose reference cannot run is a bug in the task generator.
            raise EnvError(f"retail task {task_id}: reference action {action.name} failed: {result}")
    return db_fingerprint(db)


def _normalize(text: str) -> str:
    return text.lower().replace(",", "")


def score(db: Db, task: RetailTask, agent_replies: list[str]) -> tuple[float, dict[str, Any]]:
    """(reward, reward_info) for a finished episode: database match and required outputs."""
    db_match = db_fingerprint(db) == expected_fingerprint(task.id)
    said = _normalize("\n".join(agent_replies))
    found = [o for o in task.outputs if _normalize(o) in said]
    missing = [o for o in task.outputs if _normalize(o) not in said]
    reward = 1.0 if db_match and not missing else 0.0
    return reward, {"db_match": db_match, "outputs_found": found, "outputs_missing": missing}


class RetailEnv:
    """The built-in retail env; ``user`` is ``scripted`` (deterministic) or ``llm`` (a backend plays it).

    Where the user answers with an awaitable (the ``llm`` user), ``step`` returns one (the loop awaits it).
    ``tool_functions`` is per instance so a test can swap in a failing tool.
    """

    name = "retail"
    tools: tuple[dict[str, Any], ...] = TOOL_SCHEMAS

    def __init__(self, user: str = "scripted", user_backend: Any = None, user_tokenizer: Tokenizer | None = None) -> None:
        if user not in USERS:
            raise ConfigError(f"retail user must be one of {', '.join(USERS)}, not {user!r}")
        if user == "llm" and (user_backend is None or user_tokenizer is None):
            raise ConfigError("the retail env's llm user needs a backend and a tokenizer")
        self.user_kind = user
        self.user: Any = ScriptedUser()  # ScriptedUser, LLMUser, or one a fork or a person puts in its place
        if user == "llm" and user_tokenizer is not None:
            self.user = LLMUser(user_backend, user_tokenizer)
        self.tool_functions: dict[str, Callable[..., str]] = dict(TOOL_FUNCTIONS)
        self.db: Db | None = None
        self.task: RetailTask | None = None
        self.agent_replies: list[str] = []
        self.done = False

    @property
    def tasks(self) -> list[str]:
        return [t.id for t in all_tasks()]

    def use_user(self, user: Any) -> None:
        """Put ``user`` (``reset(task) -> str``, ``step(said) -> str``) in the user's place."""
        self.user = user

    def system_prompt(self, task_id: str) -> str | None:
        return POLICY

    def reset(self, task_id: str) -> tuple[Message, ...]:
        self.task = get_task(task_id)
        self.db = fresh_db()
        self.agent_replies = []
        self.done = False
        return (Message("user", self.user.reset(self.task)),)

    def step(self, action: Action) -> StepResult | Awaitable[StepResult]:
        if self.task is None or self.db is None:
            raise EnvError("step() before reset()")
        if self.done:
            raise EnvError("the retail episode is over; reset() to start another")
        if action.is_respond:
            reply = self.user.step(self._said(action))
            if inspect.isawaitable(reply):
                return self._replied_later(reply)
            return self._user_replied(str(reply))
        return self._tool(action)

    async def _replied_later(self, reply: Awaitable[str]) -> StepResult:
        return self._user_replied(await reply)

    def _said(self, action: Action) -> str:
        text = action.text or str(action.arguments.get("content", ""))
        self.agent_replies.append(text)
        return text

    def _user_replied(self, reply: str) -> StepResult:
        obs = (Message("user", reply),)
        if STOP in reply:
            return self._finish(obs)
        return StepResult(obs, 0.0, False, {})

    def _tool(self, action: Action) -> StepResult:
        assert self.db is not None
        result = run_tool(self.db, action.name, dict(action.arguments), self.tool_functions)
        obs = (Message("tool", result, name=action.name),)
        if action.name == TRANSFER and not result.startswith("Error"):
            return self._finish(obs)
        return StepResult(obs, 0.0, False, {})

    def _finish(self, obs: tuple[Message, ...]) -> StepResult:
        assert self.db is not None and self.task is not None
        self.done = True
        reward, reward_info = score(self.db, self.task, self.agent_replies)
        return StepResult(obs, reward, True, {"reward_info": reward_info, "success": reward == 1.0})

    def reference_reply(self, task_id: str, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
        return reference_reply(get_task(task_id), history, rng, mistake_rate)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "user": self.user_kind, "n_tasks": len(all_tasks()), "data_seed": SEED}
