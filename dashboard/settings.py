"""What the Launch and Step forms' loop-settings table shows (no Gradio, so it is tested without a browser).

The rules behind the forms (default preset, sampling bounds, tokenizer,
who plays the user, run and fork plans) are the engine's
(``engine.planning``), shared with the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine import AUTO, ENVS, ConfigError, LoopConfig, apply_settings, get_preset, preset_name


@dataclass(frozen=True)
class LoopView:
    """What the loop-settings table shows for a form."""

    base: LoopConfig  # the preset's (or parent's) config
    label: str  # what the base is, in words
    effective: LoopConfig | None  # the base with the settings applied; None when they do not parse
    error: str | None = None
    preset: str | None = None


def describe_loop(preset: Any, env: Any, settings: Any) -> LoopView:
    """The loop-settings table's content for a Launch or Step form."""
    env_name = str(env or "") if str(env or "") in ENVS else "math"
    try:
        name = preset_name(preset, env_name)
    except ConfigError as e:
        return LoopView(LoopConfig(), "the defaults", None, str(e))
    base = get_preset(name)
    label = f"preset {name}" + (f" (the usual one for {env_name})" if str(preset or AUTO) == AUTO else "")
    try:
        return LoopView(base, label, apply_settings(base, str(settings or "")), None, name)
    except ConfigError as e:
        return LoopView(base, label, None, str(e), name)
