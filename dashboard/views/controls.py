"""Escaped HTML for the form controls Launch and Step share: the table of every loop knob.

Pure functions of loop configs: no Gradio, no store; every outside string goes
through ``esc`` (see ``html``).
"""

from __future__ import annotations

from engine import LoopConfig, format_knob, knobs

from .html import esc, note


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
