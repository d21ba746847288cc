"""The views' HTML toolkit: escaping, numbers, chips, notes, badges, folding text, tool calls.

Every view builds its markup from these. Every string that came from a model,
an env, a user, a file or a form goes through ``esc`` (``html.escape`` with
quotes) before it touches markup, because Gradio's ``gr.HTML`` inserts its
value with ``innerHTML``: an unescaped ``<img onerror=...>`` in a model reply
would run in the researcher's browser.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Collection, Sequence
from typing import Any

from engine import Severity

from .limits import Budget, cut, cut_note

# Texts longer than this (or with more lines) fold into a <details>.
FOLD_CHARS = 1200
FOLD_LINES = 24

STATUS_CLASS = {"completed": "ok", "truncated": "warn", "aborted": "bad", "failed": "bad", "running": "info",
                "interrupted": "muted"}
"""An episode status (its value) to the class suffix its badge and counts are colored with."""
SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
NOTE_KINDS = ("info", "warn", "error", "ok")
_CLASS_SAFE = re.compile(r"[^a-z0-9_-]")


def esc(x: Any) -> str:
    """``str(x)`` escaped for markup, quotes included (safe in text and in attribute values)."""
    return html.escape(str(x), quote=True)


def css_class(x: str) -> str:
    """A record value (role, kind, severity) made safe to use inside a class name."""
    return _CLASS_SAFE.sub("-", x.lower()) or "other"


def fmt_num(x: float | None) -> str:
    """A reward or return, short: 1, -0.9829, 0.019; ``n/a`` for None/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.4g}"


def fmt_seconds(s: float | None) -> str:
    """A duration: milliseconds below a second, else seconds; ``n/a`` for None."""
    if s is None:
        return "n/a"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def to_json(value: Any) -> str:
    """``value`` as indented JSON text (not yet escaped)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _cut_tail(more: int) -> str:
    return f'<span class="rs-cut">{esc(cut_note(more))}</span>' if more else ""


def text_block(text: str, cls: str = "rs-text", budget: Budget | None = None) -> str:
    """Escaped text, folded into a <details> when it is long, cut to the display limits (``limits.cut``:
    ``budget`` is the view's) with "… N more characters" where it stops."""
    if not text:
        return '<div class="rs-dim rs-empty">(empty)</div>'
    kept, more = cut(text, budget)
    body = f'<div class="{cls}">{esc(kept)}{_cut_tail(more)}</div>'
    n_lines = text.count("\n") + 1
    if len(text) <= FOLD_CHARS and n_lines <= FOLD_LINES:
        return body
    first = kept[:4000].strip().split("\n", 1)[0]
    if len(first) > 100:
        first = first[:100] + "…"
    return (
        f'<details class="rs-fold"><summary><span class="rs-fold-first">{esc(first)}</span> '
        f'<span class="rs-dim">({n_lines} lines, {len(text):,} chars)</span></summary>{body}</details>'
    )


def json_details(label: str, value: Any, budget: Budget | None = None) -> str:
    """``value`` as JSON, folded under ``label``, cut to the display limits (see ``text_block``)."""
    kept, more = cut(to_json(value), budget)
    return (f'<details class="rs-fold"><summary>{esc(label)}</summary><pre class="rs-json">{esc(kept)}{_cut_tail(more)}'
            "</pre></details>")


def chip(label: str, value: Any, cls: str = "") -> str:
    """A small labelled value: ``label value``."""
    return f'<span class="rs-chip {cls}"><span class="rs-chip-k">{esc(label)}</span> {esc(value)}</span>'


def note(text: str, kind: str = "info") -> str:
    """A one-line notice (empty states, errors) for any view; ``kind`` is info, warn, error or ok."""
    kind = kind if kind in NOTE_KINDS else "info"
    return f'<div class="rs-note rs-{kind}">{esc(text)}</div>'


def badge(label: str, cls: str) -> str:
    """A status-like badge: ``label`` colored by ``cls`` (ok, warn, bad, info, muted)."""
    return f'<span class="rs-status rs-{cls}">{esc(label)}</span>'


def status_badge(status: str) -> str:
    """An episode status (its value) as a badge in its color."""
    return badge(status, STATUS_CLASS.get(status, "muted"))


def jump(target: str, label: str, cls: str = "rs-jump", href: str | None = None) -> str:
    """A link that scrolls to the element with id ``target`` (``data-jump``, see assets/tokens.js);
    ``label`` is markup. ``href`` is where the link leads when copied or opened apart (a deep link)."""
    return f'<a class="{cls}" href="{esc(href or "#" + target)}" data-jump="{esc(target)}">{label}</a>'


def call_block(name: str, arguments: Any, kind: str | None = "tool call", budget: Budget | None = None,
               raw: str | None = None) -> str:
    """A tool call (or action) with its arguments as JSON, cut to the display limits (see ``text_block``);
    ``kind`` labels it (None: no label). ``raw``: arguments that are not a JSON object, shown as the model wrote
    them (``ToolCall.raw_arguments``) and said to be so."""
    label = f'<span class="rs-call-k">{esc(kind)}</span> ' if kind else ""
    kept, more = cut(to_json(arguments) if raw is None else raw, budget)
    unparsed = ' <span class="rs-warn-text">arguments not a JSON object, as written</span>' if raw is not None else ""
    return (f'<div class="rs-call">{label}<span class="rs-call-name">{esc(name)}</span>{unparsed}'
            f'<pre class="rs-json">{esc(kept)}{_cut_tail(more)}</pre></div>')


def error_line(what: str, text: str) -> str:
    """An error said on one line: ``what``: ``text`` (cut to ``TEXT_CHARS``)."""
    kept, more = cut(text)
    return f'<div class="rs-error"><b>{esc(what)}</b>: {esc(kept)}{_cut_tail(more)}</div>'



def heads(labels: Sequence[str], numeric: Collection[str] = ()) -> str:
    """A table's header cells; the columns named in ``numeric`` are right-aligned (``rs-num``)."""
    return "".join(f'<th class="rs-num">{esc(h)}</th>' if h in numeric else f"<th>{esc(h)}</th>" for h in labels)
