from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RESPOND_ACTION_NAME = "respond"


@dataclass
class Action:
    name: str
    kwargs: dict[str, Any]


@dataclass
class Task:
    user_id: str
    instruction: str
    actions: list[Action]
    outputs: list[str] = field(default_factory=list)


@dataclass
class EnvResetResponse:
    observation: str
    info: dict[str, Any]


@dataclass
class EnvResponse:
    observation: str
    reward: float
    done: bool
    info: dict[str, Any]
