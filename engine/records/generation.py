"""What a backend answered to one request (a turn's ``generation``), with its ids and logprobs."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from .numbers import nan_to_none
from .reading import Fields

FinishReason = Literal["stop", "length", "abort"]
FINISH_REASONS: tuple[str, ...] = typing.get_args(FinishReason)


@dataclass(frozen=True)
class Generation:
    """The raw answer of a backend to one request."""

    text: str
    """What the backend returned, decoded, end-of-turn token included when generated."""
    token_ids: tuple[int, ...] = ()
    """The generated ids, as the backend reported them (empty when it gave text only)."""
    logprobs: tuple[float, ...] | None = None
    """One rollout logprob per generated id (None when the backend gave none; NaN where unknown), at float32
    precision: that of the episode's arrays and of the trainers' tensors (a server's float64 is rounded)."""
    finish_reason: FinishReason = "stop"
    """stop, length (cut by max_new_tokens) or abort."""
    latency_s: float = 0.0
    """Seconds the request took."""
    prompt_tokens: int = 0
    """Prompt length in tokens, as the backend counted it."""
    cached_tokens: int = 0
    """Prompt tokens the server served from its prefix cache."""
    weight_version: int | None = None
    """The policy version that generated it, if the server reports one."""
    model: str = ""
    """The model that answered (``manual`` for text a person wrote, ``imported`` for an import)."""
    finish_detail: str = ""
    """What the server said beyond the reason (an abort's message)."""

    def __post_init__(self) -> None:
        if self.logprobs:
            try:
                arr = np.asarray(self.logprobs, dtype=np.float32)
            except (TypeError, ValueError):  # a None among them
                arr = np.asarray([math.nan if x is None else x for x in self.logprobs], dtype=np.float32)
            object.__setattr__(self, "logprobs", tuple(arr.tolist()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Generation):
            return NotImplemented
        a, b = self.to_dict(), other.to_dict()
        return a == b

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "logprobs": nan_to_none(self.logprobs),
            "finish_reason": self.finish_reason,
            "latency_s": self.latency_s,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "weight_version": self.weight_version,
            "model": self.model,
            "finish_detail": self.finish_detail,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Generation:
        return cls.from_fields(Fields(d))

    @classmethod
    def from_fields(cls, f: Fields) -> Generation:
        return cls(
            text=f.text("text"),
            token_ids=f.ints("token_ids"),
            logprobs=f.logprobs_or_none("logprobs"),
            finish_reason=typing.cast(FinishReason, f.choice("finish_reason", FINISH_REASONS)),
            latency_s=f.number("latency_s"),
            prompt_tokens=f.integer("prompt_tokens"),
            cached_tokens=f.integer("cached_tokens"),
            weight_version=f.int_or_none("weight_version"),
            model=f.text("model"),
            finish_detail=f.text("finish_detail"),
        )
