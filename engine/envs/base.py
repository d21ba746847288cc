"""The env seam: reset a task, step an action, report reward and done."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..records.episode import Action, Message


@dataclass(frozen=True)
class StepResult:
    """What the env answers to one action."""

    observation: tuple[Message, ...]
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Env(Protocol):
    """A task environment. One instance serves one episode at a time."""

    name: str
    tools: tuple[dict[str, Any], ...]

    @property
    def tasks(self) -> list[str]:
        """Task ids, in a stable order (``--tasks 0:8`` slices this list)."""
        ...

    def system_prompt(self, task_id: str) -> str | None: ...

    def reset(self, task_id: str) -> tuple[Message, ...]:
        """Start the task; returns the first observation (usually a user message)."""
        ...

    def step(self, action: Action) -> StepResult | Awaitable[StepResult]:
        """Apply an action. May return an awaitable (an env whose user is a model)."""
        ...

    def reference_reply(self, task_id: str, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
        """Text a reference agent would write next (drives the scripted policy)."""
        ...

    def describe(self) -> dict[str, Any]: ...
