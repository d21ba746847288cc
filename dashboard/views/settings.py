"""The loop-settings table of Launch and Step: what it shows for a form (``describe_loop``) and its HTML
(``knob_table``).

Pure functions of loop configs: no Gradio, no store, so they are tested without a browser; every outside string
goes through ``esc`` (see ``html``). The rules behind the forms (default preset, sampling bounds, tokenizer, who
plays the user, run and fork plans) are the engine's (``engine.launch.plan``), shared with the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine import AUTO, ENVS, ConfigError, LoopConfig, apply_settings, format_knob, get_preset, knobs, preset_name

from .html import esc, note


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


def knob_table(base: LoopConfig, base_label: str, effective: LoopConfig | None, error: str | None = None,
               about: str = "") -> str:
    """Every knob of the loop config a Launch or Step would run with: its value, the base's value where a
    setting changed it, and what it does. ``error`` (a setting that does not parse) is shown above."""
    shown = effective or base
    docs = {k["name"]: k["doc"] for k in knobs()}
    rows = []
    changed = 0
    for name, value in shown.to_dict().items():
        was = getattr(base, name)
        diff = value != was
        changed += diff
        before = f'<span class="rs-dim">was {esc(format_knob(was))}</span>' if diff else ""
        rows.append(f'<tr class="{"rs-knob-changed" if diff else ""}" data-knob="{esc(name)}"><th>{esc(name)}</th>'
                    f'<td class="rs-knob-v"><code>{esc(format_knob(value))}</code> {before}</td>'
                    f'<td class="rs-knob-doc">{esc(docs.get(name, ""))}</td></tr>')
    head = (note(error, "error") if error else
            note(f"{changed} knob{'s' if changed != 1 else ''} changed from {base_label}." if changed
                 else f"Runs with {base_label} as it is.", "warn" if changed else "info"))
    about_html = f'<div class="rs-help">{esc(about)}</div>' if about else ""
    return (f'<div class="rs-knobs">{head}{about_html}<div class="rs-table-wrap"><table class="rs-table rs-live '
            f'rs-knob-table"><thead><tr><th>knob</th><th>value</th><th>what it does</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></div>')
