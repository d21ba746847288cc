"""Retail episodes with mistakes planted at known turns, run through the real loop (scripted reference agent,
real tokenizer and chat template): for the outcome's queries and views.

``planted`` replaces reference replies where ``plant(reply, history)`` says; ``outcome_run`` is a small run of
them with every tool-env outcome kind, a GRPO group with reward spread and two rollout steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from engine.backends.base import SamplingParams
from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.envs.retail import RetailEnv
from engine.envs.retail.data import base_db
from engine.envs.retail.kinds import ANYTHING_ELSE
from engine.envs.retail.reference import tool_call_text
from engine.envs.retail.tasks import get_task
from engine.envs.retail.tools import CANCEL_REASONS
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Action, Episode

Plant = Callable[[str, list[Any]], "str | None"]
Runner = Callable[[Coroutine[Any, Any, Episode]], Episode]
RUN_ID = "planted-run"
GROUP_TASK = "cancel-00"
GROUP_ID = f"{RUN_ID}:{GROUP_TASK}"


def planted(tok: Any, task_id: str, plant: Plant, run: Runner = asyncio.run, preset: str = "slime-tau",
            **kw: Any) -> tuple[Episode, list[int]]:
    """A retail episode of the reference agent under ``preset``, where ``plant(reply, history)`` may replace one
    reply; returns (episode, the turns where a reply was replaced). ``kw`` goes to the loop (run_id, group_id,
    ...)."""
    env = RetailEnv()
    at: list[int] = []

    def reference(tid: str, history: list[Any], rng: Any, rate: float) -> str:
        reply = env.reference_reply(tid, history, rng, 0.0)
        instead = plant(reply, history)
        if instead is None:
            return reply
        at.append(sum(m.role == "assistant" for m in history))
        return instead

    backend = ScriptedBackend(reference, tok, mistake_rate=0.0)
    ep = run(run_episode(RetailEnv(), backend, tok, PRESETS[preset], task_id, preset=preset, **kw))
    return ep, at


def write_of(task_id: str) -> Action:
    """The task's one reference write."""
    return next(a for a in get_task(task_id).actions if not a.name.startswith(("get_", "find_")))


def slip(task_id: str, **changes: Any) -> tuple[Action, Plant]:
    """The task's write with ``changes`` to its arguments, and the plant that makes it instead of the reference's."""
    ref = write_of(task_id)
    wrong = Action(ref.name, {**ref.arguments, **changes})
    return wrong, lambda r, h: tool_call_text(wrong) if r == tool_call_text(ref) else None


def never_written(task_id: str) -> Plant:
    ref = write_of(task_id)
    return lambda r, h: ANYTHING_ELSE if r == tool_call_text(ref) else None


def extra_write(task_id: str) -> Plant:
    """A change of the user's zip before the last reply: a write the reference lacks."""
    task = get_task(task_id)
    user = base_db()["users"][task.user_id]
    extra = Action("modify_user_address", {"user_id": task.user_id, **{**user["address"], "zip": "99999"}})
    last = task.script[-1].text

    def plant(reply: str, history: list[Any]) -> str | None:
        done = any(m.role == "assistant" and '"modify_user_address"' in m.content for m in history)
        return tool_call_text(extra) if reply == last and not done else None

    return plant


def silent_last(task_id: str) -> Plant:
    last = get_task(task_id).script[-1].text
    return lambda r, h: ANYTHING_ELSE if r == last else None


def math_episode(tok: Any, replies: list[str], max_new_tokens: int = 256, preset: str = "tito") -> tuple[Episode, str]:
    """A math episode of the first task whose replies are ``replies`` in turn (the last one repeated), and the
    task's reference answer."""
    task_id = MathEnv().tasks[0]

    def reference(tid: str, history: list[Any], rng: Any, rate: float) -> str:
        return replies[min(sum(m.role == "assistant" for m in history), len(replies) - 1)]

    config = replace(PRESETS[preset], max_turns=len(replies), stop_on_success=False)
    ep = asyncio.run(run_episode(MathEnv(), ScriptedBackend(reference, tok), tok, config, task_id,
                                 sampling=SamplingParams(max_new_tokens=max_new_tokens)))
    return ep, MathEnv().task(task_id).solutions[0]


@dataclass(frozen=True)
class Planted:
    episode: Episode
    kind: str  # the outcome kind planted
    turns: tuple[int, ...]  # where replies were replaced
    step: int  # its rollout step


def outcome_run(tok: Any, run: Runner = asyncio.run) -> list[Planted]:
    """Seven episodes of run ``RUN_ID``. Rollout step 0: a GRPO group of ``GROUP_TASK`` (sample 0 the reference,
    then a wrong reason, the cancel never made, a write the reference lacks). Step 1: an order address changed
    to a wrong street and zip, a tracking number never said, and a clean return."""
    other = next(r for r in CANCEL_REASONS if r != write_of(GROUP_TASK).arguments["reason"])
    addr = write_of("modify_order_address-00").arguments
    plan: list[tuple[int, str, str, Plant, dict[str, Any]]] = [
        (0, "success", GROUP_TASK, lambda r, h: None, {}),
        (0, "wrong_arguments", GROUP_TASK, slip(GROUP_TASK, reason=other)[1], {}),
        (0, "not_called", GROUP_TASK, never_written(GROUP_TASK), {}),
        (0, "extra_write", GROUP_TASK, extra_write(GROUP_TASK), {}),
        (1, "wrong_arguments", "modify_order_address-00",
         slip("modify_order_address-00", address1="4" + addr["address1"][1:], zip=addr["zip"][:3] + "45")[1], {}),
        (1, "missing_output", "tracking-00", silent_last("tracking-00"), {}),
        (1, "success", "return-00", lambda r, h: None, {}),
    ]
    out: list[Planted] = []
    for i, (step, kind, task_id, plant, _) in enumerate(plan):
        group = {"group_id": GROUP_ID, "sample_index": i} if task_id == GROUP_TASK else {}
        ep, at = planted(tok, task_id, plant, run, run_id=RUN_ID, **group)
        # As a trainer's dump says it: the rollout step in the source's details.
        ep = ep.evolve(source=replace(ep.source, details={**ep.source.details, "rollout_step": step}),
                       created_at=ep.created_at + i)
        out.append(Planted(ep, kind, tuple(at), step))
    return out
