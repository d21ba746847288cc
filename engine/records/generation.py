"""What a backend answered to one request (a turn's ``generation``), with its ids and logprobs."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from . import alternatives
from .numbers import nan_to_none
from .reading import Fields

FinishReason = Literal["stop", "length", "abort"]
FINISH_REASONS: tuple[str, ...] = typing.get_args(FinishReason)


READ_OFF_IDS = ("it ends on no end-of-turn token and the dump records no finish reason (a stop string, which the "
                "server leaves out of the reply, would end it so too)")
"""The ``finish_detail`` of a reply whose finish reason was read off its ids, a dump recording none
(``formats.masks.mask_structure``): what its ``truncated_turn`` says."""

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
    top_ids: tuple[tuple[int, ...], ...] = ()
    """The most likely token ids at each generated position, most likely first, as many as were asked for
    (``top_logprobs`` of the sampling; a server may give fewer); empty when none were asked for."""
    top_logprobs: tuple[tuple[float, ...], ...] = ()
    """Their logprobs, in the logprob convention (null where unknown), at float32 precision."""
    entropy: tuple[float, ...] | None = None
    """The entropy (nats) of the distribution each generated token was sampled from (null where unknown);
    None when not asked for."""
    entropy_estimated: bool = False
    """Whether the entropy is estimated from a server's top K (a lower bound of it: the top K's own terms
    plus the rest of the mass at the least of their probabilities) rather than computed from the logits."""

    def __post_init__(self) -> None:
        if self.logprobs:
            object.__setattr__(self, "logprobs", _f32(self.logprobs))
        if self.entropy:
            object.__setattr__(self, "entropy", _f32(self.entropy))
        if self.top_logprobs:
            object.__setattr__(self, "top_logprobs", tuple(_f32(row) for row in self.top_logprobs))
            object.__setattr__(self, "top_ids", tuple(tuple(int(x) for x in row) for row in self.top_ids))

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
            "top_ids": [list(r) for r in self.top_ids],
            "top_logprobs": [nan_to_none(r) for r in self.top_logprobs],
            "entropy": nan_to_none(self.entropy),
            "entropy_estimated": self.entropy_estimated,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Generation:
        return cls.from_fields(Fields(d))

    @classmethod
    def from_fields(cls, f: Fields) -> Generation:
        top_ids = alternatives.read_rows(f.raw("top_ids"), f.name("top_ids"), False)
        top_lps = alternatives.read_rows(f.raw("top_logprobs"), f.name("top_logprobs"), True)
        alternatives.check_pair(top_ids, top_lps, f.name("top_logprobs"))
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
            top_ids=tuple(tuple(r) for r in top_ids),
            top_logprobs=tuple(tuple(r) for r in top_lps),
            entropy=f.logprobs_or_none("entropy"),
            entropy_estimated=f.boolean("entropy_estimated"),
        )


def _f32(values: Any) -> tuple[float, ...]:
    try:
        arr = np.asarray(values, dtype=np.float32)
    except (TypeError, ValueError):  # a None among them
        arr = np.asarray([math.nan if x is None else x for x in values], dtype=np.float32)
    return tuple(arr.tolist())
