"""Sierra's tau-bench behind Rollscope's Env protocol.

``--env taubench:retail`` (or ``:airline``) wraps ``tau_bench.envs.get_env``
when the package is importable. tau-bench's own user simulator calls an LLM
through litellm; here its ``user`` is replaced by :class:`ScriptedTauUser`,
which needs no model: it opens with the task's instruction, confirms what
the agent asks to confirm and stops when the agent asks whether there is
anything else. The scripted policy plays the task's reference actions.
"""

from __future__ import annotations

import inspect
import json
import random
from collections.abc import Awaitable, Sequence
from dataclasses import replace
from typing import Any

from ..errors import ConfigError, EnvError
from ..records.episode import Action, Episode, Message
from ..records.outcome import DbChange, Outcome, OutcomeCall
from .base import StepResult
from .toolcompare import agent_calls, agent_replies, compare_tools, db_changes, is_write

DOMAINS = ("retail", "airline")
CLOSING = "Is there anything else I can help you with?"
SUCCESS_TOLERANCE = 1e-6  # tau-bench's: a reward within it of 1 is a pass (REWARD_SUCCESS_MIN, _MAX)
INSTALL_HINT = (
    "tau-bench is not installed: install Sierra's tau-bench package (it provides the `tau_bench` module), "
    "e.g. `pip install /path/to/tau-bench` from a checkout of its repository, then run again"
)


class ScriptedTauUser:
    """tau-bench's user interface (``reset``, ``step``, ``get_total_cost``) with no LLM."""

    def __init__(self) -> None:
        self.instruction = ""
        self.turns = 0

    def reset(self, instruction: str | None = None) -> str:
        self.instruction = instruction or ""
        self.turns = 0
        return self.instruction

    def step(self, content: str) -> str:
        self.turns += 1
        low = content.lower()
        if "anything else" in low:
            return "No, that's all. Thank you! ###STOP###"
        if any(w in low for w in ("confirm", "proceed", "yes/no", "shall i", "should i")):
            return "Yes, please go ahead."
        return "Okay, please continue."

    def get_total_cost(self) -> float:
        return 0.0


class _Answered:
    """tau-bench's user for one step: the reply already asked of ``user``."""

    def __init__(self, reply: str, user: Any) -> None:
        self.reply = reply
        self.user = user

    def step(self, content: str) -> str:
        return self.reply

    def get_total_cost(self) -> float:
        return float(self.user.get_total_cost())


def _dump(obj: Any) -> Any:
    """tau-bench's info objects are pydantic models; keep them as plain JSON."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "dict"):
        return obj.dict()
    if isinstance(obj, dict):
        return {k: _dump(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_dump(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class TauBenchEnv:
    """One tau-bench domain; one instance serves one episode at a time."""

    def __init__(self, domain: str, user: str = "scripted", task_split: str = "test") -> None:
        if domain not in DOMAINS:
            raise ConfigError(f"unknown tau-bench domain {domain!r}; choose one of: {', '.join(DOMAINS)}")
        if user != "scripted":
            raise ConfigError("taubench envs run with --user scripted here (tau-bench's own LLM user needs a hosted model)")
        try:
            from tau_bench.envs import get_env
            from tau_bench.types import RESPOND_ACTION_NAME
            from tau_bench.types import Action as TauAction
        except ImportError:
            raise ConfigError(INSTALL_HINT) from None
        self._TauAction = TauAction
        self._respond = RESPOND_ACTION_NAME
        kwargs: dict[str, Any] = {"user_strategy": "human", "user_model": "scripted", "task_split": task_split}
        if "task_index" in inspect.signature(get_env).parameters:
            kwargs["task_index"] = 0
        self._env = get_env(domain, **kwargs)
        self._user = ScriptedTauUser()
        self._env.user = self._user  # tau-bench's Env calls self.user.reset/step/get_total_cost
        self.domain = domain
        self.name = f"taubench:{domain}"
        self.tools = tuple(self._env.tools_info)
        self.user_kind = user
        self._task_index: int | None = None

    @property
    def tasks(self) -> list[str]:
        return [str(i) for i in range(len(self._env.tasks))]

    @property
    def user(self) -> Any:
        """The object answering as the user (tau-bench's interface)."""
        return self._user

    def use_user(self, user: Any) -> None:
        """Put ``user`` (tau-bench's user interface: reset, step, get_total_cost) in the user's place."""
        self._user = user
        self._env.user = user

    def _index(self, task_id: str) -> int:
        try:
            i = int(task_id)
        except ValueError:
            raise EnvError(f"tau-bench task ids are indices, not {task_id!r}") from None
        if not 0 <= i < len(self._env.tasks):
            raise EnvError(f"tau-bench {self.domain} has tasks 0..{len(self._env.tasks) - 1}, not {i}")
        return i

    def system_prompt(self, task_id: str) -> str | None:
        return str(self._env.wiki)

    def reset(self, task_id: str) -> tuple[Message, ...]:
        self._task_index = self._index(task_id)
        res = self._env.reset(task_index=self._task_index)
        return (Message("user", str(res.observation)),)

    def step(self, action: Action) -> StepResult | Awaitable[StepResult]:
        """One action. The user's reply to a message is asked here, before tau-bench's step, which then
        hears it: so a user that answers later (a model) can stand in for tau-bench's synchronous one."""
        if self._task_index is None:
            raise EnvError("step() before reset()")
        if not action.is_respond:
            return self._step(action, None)
        reply = self._user.step(action.text)
        if inspect.isawaitable(reply):
            return self._replied_later(action, reply)
        return self._step(action, str(reply))

    async def _replied_later(self, action: Action, reply: Awaitable[str]) -> StepResult:
        return self._step(action, str(await reply))

    def _step(self, action: Action, reply: str | None) -> StepResult:
        kwargs = {"content": action.text} if action.is_respond else dict(action.arguments)
        name = self._respond if action.is_respond else action.name
        if reply is not None:
            self._env.user = _Answered(reply, self._user)
        try:
            res = self._env.step(self._TauAction(name=name, kwargs=kwargs))
        except Exception as e:  # tau-bench is third-party code: its failures are the env's, mapped here
            raise EnvError(f"tau-bench step({name}) raised {type(e).__name__}: {e}") from e
        finally:
            self._env.user = self._user
        msg = (Message("user", str(res.observation)) if action.is_respond
               else Message("tool", str(res.observation), name=action.name))
        info = _dump(res.info) if res.info is not None else {}
        info = info if isinstance(info, dict) else {"info": info}
        if res.done:
            info["success"] = float(res.reward) >= 1.0
        return StepResult((msg,), float(res.reward), bool(res.done), info)

    def reference_plan(self, task_id: str) -> list[str]:
        """The reference agent's replies: each reference action as a tool call, then the outputs."""
        task = self._env.tasks[self._index(task_id)]
        replies = [
            tool_call_text(a.name, dict(a.kwargs)) if a.name != self._respond else str(a.kwargs.get("content", ""))
            for a in task.actions
        ]
        outputs = list(getattr(task, "outputs", []) or [])
        done = "Done." + (" " + "; ".join(outputs) + "." if outputs else "")
        replies.append(f"{done} {CLOSING}")
        return replies

    def reference_reply(self, task_id: str, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
        plan = self.reference_plan(task_id)
        k = sum(1 for m in history if m.role == "assistant")
        reply = plan[min(k, len(plan) - 1)]
        if rng.random() < mistake_rate:
            if reply.startswith("<tool_call>"):
                return reply.replace('"arguments": {', '"arguments": {{', 1)  # malformed JSON
            return "Let me think about that for a moment."
        return reply

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "user": self.user_kind, "n_tasks": len(self._env.tasks)}

    def data_after(self, task_id: str, calls: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """tau-bench's data after ``calls`` on the task's fresh data (the terminating tools left out, which end
        the episode and change nothing): what the replay of the agent's or the reference's writes gives."""
        import copy

        self._env.reset(task_index=self._index(task_id))
        stop = {*getattr(self._env, "terminate_tools", ()), "transfer_to_human_agents"}
        for name, kwargs in calls:
            if name in stop:
                continue
            try:
                self._env.step(self._TauAction(name=name, kwargs=dict(kwargs)))
            except Exception as e:  # tau-bench is third-party code: its failures are the env's, mapped here
                raise EnvError(f"tau-bench step({name}) raised {type(e).__name__}: {e}") from e
        return copy.deepcopy(self._env.data)


def _recorded_task(ep: Episode) -> tuple[list[tuple[str, dict[str, Any]]], list[str]] | None:
    """The reference actions and outputs a results file recorded with the episode (``info.task``, as
    tau-bench's run.py writes it; else ``info.reward_info.actions``), or None."""
    info = ep.source.details.get("info")
    if not isinstance(info, dict):
        return None
    task, reward_info = info.get("task"), info.get("reward_info")
    raw = task.get("actions") if isinstance(task, dict) else None
    if not isinstance(raw, list) and isinstance(reward_info, dict):
        raw = reward_info.get("actions")
    if not isinstance(raw, list):
        return None
    actions = [(a["name"], dict(a.get("kwargs") or a.get("arguments") or {}))
               for a in raw if isinstance(a, dict) and isinstance(a.get("name"), str)]
    outputs = task.get("outputs") if isinstance(task, dict) else None
    return actions, [str(o) for o in outputs] if isinstance(outputs, list) else []


def _raised(ep: Episode) -> Outcome | None:
    """The outcome of a task that raised in tau-bench's run (a results file's ``info.error``, no conversation kept):
    nothing to compare, so nothing claimed of the calls; None for any other episode."""
    info = ep.source.details.get("info")
    if ep.source.kind != "taubench" or ep.messages or not isinstance(info, dict) or "error" not in info:
        return None
    return Outcome.other(f"reward {ep.reward:g}: tau-bench's run.py kept no conversation for this task (it raised), "
                         "so there are no calls to compare with the task's")


def _as_recorded(ep: Episode, out: Outcome) -> Outcome:
    """``out`` made to agree with the reward a tau-bench results file recorded: the comparison with the task is
    Rollscope's, the reward tau-bench's own, so a passing kind stands only beside a passing reward (within
    tau-bench's tolerance of 1). A result that held no reward (null, read as 0) says so, and passes nothing; a pass
    the reward does not give is ``other``, saying both. Any other episode's ``out`` is returned as it is."""
    if ep.source.kind != "taubench":
        return out
    if "reward" in ep.source.details and ep.source.details["reward"] is None:
        why = "the result holds no reward (null, read as 0), so tau-bench's verdict is not recorded"
        if out.passed is not True:
            return replace(out, text=f"{out.text}; {why}")
    elif out.passed is True and abs(ep.reward - 1.0) > SUCCESS_TOLERANCE:
        why = f"tau-bench recorded reward {ep.reward:g}"
    else:
        return out
    return Outcome("other", None, None, None, (), (), out.db_diff, (), None, f"{out.text}; but {why}")


def outcome(ep: Episode) -> Outcome:
    """tau-bench's outcome: the agent's calls against the task's reference writes (the task the record holds,
    else the installed tau-bench's), and, where tau-bench is installed, the database diff by replaying both;
    for a results file's episode, as its recorded reward agrees (``_as_recorded``)."""
    if (raised := _raised(ep)) is not None:
        return raised
    return _as_recorded(ep, _compared(ep))


def _compared(ep: Episode) -> Outcome:
    domain = ep.env.partition(":")[2]
    try:
        env: TauBenchEnv | None = TauBenchEnv(domain)
    except ConfigError:
        env = None
    recorded = _recorded_task(ep)
    if recorded is None:
        if env is None:
            raise EnvError("the record holds no tau-bench task (info.task) and " + INSTALL_HINT)
        task = env._env.tasks[env._index(ep.task_id)]
        recorded = ([(a.name, dict(a.kwargs)) for a in task.actions], [str(o) for o in getattr(task, "outputs", [])])
    actions = [(n, a) for n, a in recorded[0] if n != "respond"]
    calls = agent_calls(ep)
    diff: tuple[DbChange, ...] = ()
    if env is not None:
        agent = [(c.name, c.arguments) for c in calls if is_write(c.name)]
        diff = db_changes(env.data_after(ep.task_id, agent), env.data_after(ep.task_id, actions))
    return compare_tools([OutcomeCall(n, a) for n, a in actions], recorded[1], calls, agent_replies(ep), diff)
