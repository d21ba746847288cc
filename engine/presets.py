"""LoopConfig, the loop's orthogonal knobs, and the named presets."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .errors import ConfigError

ONE_OR_MORE = "You may call one or more functions to assist with the user query."
ONE_CALL = "You may call one function at a time to assist with the user query."


@dataclass(frozen=True)
class LoopConfig:
    """How the loop turns a conversation into training data.

    token_mode          ``tito`` keeps generated ids; ``retokenize`` renders and re-encodes.
    max_turns           assistant turns at most.
    turn_limit_status   status when max_turns runs out: ``truncated`` or ``completed``
                        (a fixed-turn workflow ends normally there).
    stop_on_done        end when the env says done.
    stop_on_success     end when the env reports success (``info["success"]``).
    on_parse_error      ``abort`` ends the episode; ``feedback`` sends the error back.
    tool_calls_per_turn 1 executes the first call only; 0 executes all of them.
    one_call_instruction rewrite the template's "one or more functions" sentence.
    tool_parser         ``hermes`` or ``llama3``.
    gen_prompt_tokens   put the assistant header of turns after the first into the
                        tokens (masked 0); False reproduces loops that dropped them.
    shape_rewards       apply AReaL's ``((r - 0.5) * 2 - bias) * scale`` per turn.
    reward_scale, reward_bias, turn_discount   shaping and return parameters.
    """

    token_mode: str = "tito"
    max_turns: int = 5
    turn_limit_status: str = "truncated"
    stop_on_done: bool = True
    stop_on_success: bool = True
    on_parse_error: str = "feedback"
    tool_calls_per_turn: int = 0
    one_call_instruction: bool = False
    tool_parser: str = "hermes"
    gen_prompt_tokens: bool = True
    shape_rewards: bool = False
    reward_scale: float = 1.0
    reward_bias: float = 0.0
    turn_discount: float = 1.0

    def __post_init__(self) -> None:
        choices = {
            "token_mode": ("tito", "retokenize"),
            "turn_limit_status": ("truncated", "completed"),
            "on_parse_error": ("abort", "feedback"),
            "tool_parser": ("hermes", "qwen", "llama3"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if self.max_turns < 1:
            raise ConfigError(f"max_turns must be at least 1, not {self.max_turns}")
        if self.tool_calls_per_turn < 0:
            raise ConfigError("tool_calls_per_turn must be 0 (all) or a positive number")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoopConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})

    def with_(self, **changes: Any) -> LoopConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


PRESETS: dict[str, LoopConfig] = {
    # AReaL's multi-turn math agent: a fixed number of answer/feedback rounds,
    # tokens in and out, per-turn shaped rewards and discounted returns.
    "areal-math": LoopConfig(
        token_mode="tito",
        max_turns=5,
        turn_limit_status="completed",
        stop_on_success=False,
        on_parse_error="feedback",
        shape_rewards=True,
        turn_discount=0.9,
    ),
    # Token in, token out: generated ids are never re-encoded.
    "tito": LoopConfig(token_mode="tito", max_turns=20, stop_on_success=True, on_parse_error="feedback"),
    # slime's tau-bench example: render, slice, re-encode; abort on any failure.
    "slime-tau": LoopConfig(
        token_mode="retokenize",
        max_turns=30,
        turn_limit_status="truncated",
        stop_on_success=False,
        on_parse_error="abort",
        tool_calls_per_turn=1,
        one_call_instruction=True,
    ),
}


def get_preset(name: str) -> LoopConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise ConfigError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}") from None
