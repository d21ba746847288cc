"""Reward shaping, discounted returns, group advantages, and when two rewards are the same."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..presets import LoopConfig


def same_reward(a: float, b: float) -> bool:
    """Whether two rewards are the same, up to the last bits a float sum may round differently
    (0.1 + 0.2 and 0.3 are one reward)."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def areal_shape(reward: float, scale: float = 1.0, bias: float = 0.0) -> float:
    """AReaL's per-turn shaping: map a 0/1 reward to +-1, shift by bias, scale."""
    return ((reward - 0.5) * 2.0 - bias) * scale


def discounted_returns(rewards: Sequence[float], discount: float) -> list[float]:
    """G_t = r_t + discount * G_{t+1}, accumulated backwards from the last turn."""
    out = [0.0] * len(rewards)
    acc = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[t]) + discount * acc
        out[t] = acc
    return out


def group_advantages(rewards: Sequence[float], normalize_std: bool = True, eps: float = 1e-6) -> list[float]:
    """GRPO advantages for the n samples of one task: (r - mean) / std."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    centered = [r - mean for r in rewards]
    if not normalize_std or len(rewards) < 2:
        return centered
    std = math.sqrt(sum(c * c for c in centered) / (len(rewards) - 1))
    return [c / (std + eps) for c in centered]


def episode_rewards(cfg: LoopConfig, raw: list[float]) -> tuple[list[float], list[float], float]:
    """(per-turn rewards as trained, discounted returns, the episode's reward) from the env's raw rewards."""
    shaped = [areal_shape(r, cfg.reward_scale, cfg.reward_bias) for r in raw] if cfg.shape_rewards else raw
    returns = discounted_returns(shaped, cfg.turn_discount)
    if not raw:
        return shaped, returns, 0.0
    if cfg.episode_reward == "first_return":
        return shaped, returns, returns[0]
    if cfg.episode_reward == "discounted_last":
        return shaped, returns, float(raw[-1] * cfg.turn_discount ** (len(raw) - 1))
    return shaped, returns, raw[-1]
