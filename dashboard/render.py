"""Escaped HTML for the Episode view: header, findings, turn timeline (and, re-exported, the token view).

Pure functions of records: no Gradio, no store. Every string that came from
a model, an env, a user or a file goes through ``_e`` (``html.escape`` with
quotes) before it touches markup, because Gradio's ``gr.HTML`` inserts its
value with ``innerHTML``: an unescaped ``<img onerror=...>`` in a model reply
would run in the researcher's browser.

Links between views carry ``data-jump="<element id>"`` (``turn-N`` and
``tok-I`` in the token view, ``conv-turn-N`` in the timeline); the views'
script (``TOKEN_JS``) scrolls to the target. ``data-fork="N"`` asks to fork
the episode at turn N.
"""

from __future__ import annotations

import html
import json
import math
import re
import time
from collections.abc import Sequence
from typing import Any

from engine import (
    BackendInfo,
    Episode,
    Finding,
    Message,
    Severity,
    Status,
    Turn,
    consequences,
    diagnosis_line,
    link_findings,
    roots,
)

from .render_tokens import (  # noqa: F401  (re-exported: the token view is part of this API)
    TOKEN_JS,
    decode_token_texts,
    logprob_diff,
    render_tokens,
    special_token_ids,
)

# Texts longer than this (or with more lines) fold into a <details>.
FOLD_CHARS = 1200
FOLD_LINES = 24
# Evidence lists and strings are cut to this in the findings list.
EVIDENCE_ITEMS = 12
EVIDENCE_CHARS = 400

_STATUS_CLASS = {
    Status.COMPLETED: "ok",
    Status.TRUNCATED: "warn",
    Status.ABORTED: "bad",
    Status.FAILED: "bad",
    Status.RUNNING: "info",
    Status.INTERRUPTED: "muted",
}
_SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}
_CLASS_SAFE = re.compile(r"[^a-z0-9_-]")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _cls(x: str) -> str:
    """A record value (role, kind) made safe to use inside a class name."""
    return _CLASS_SAFE.sub("-", x.lower()) or "other"


def fmt_num(x: float | None) -> str:
    """A reward or return, short: 1, -0.9829, 0.019; ``n/a`` for None/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.4g}"


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def text_block(text: str, cls: str = "rs-text") -> str:
    """Escaped text, folded into a <details> when it is long."""
    if not text:
        return '<div class="rs-dim rs-empty">(empty)</div>'
    body = f'<div class="{cls}">{_e(text)}</div>'
    n_lines = text.count("\n") + 1
    if len(text) <= FOLD_CHARS and n_lines <= FOLD_LINES:
        return body
    first = text.strip().split("\n", 1)[0]
    if len(first) > 100:
        first = first[:100] + "…"
    return (
        f'<details class="rs-fold"><summary><span class="rs-fold-first">{_e(first)}</span> '
        f'<span class="rs-dim">({n_lines} lines, {len(text):,} chars)</span></summary>{body}</details>'
    )


def _json_details(label: str, value: Any) -> str:
    return f'<details class="rs-fold"><summary>{_e(label)}</summary><pre class="rs-json">{_e(_json(value))}</pre></details>'


def _chip(label: str, value: str, cls: str = "") -> str:
    return f'<span class="rs-chip {cls}"><span class="rs-chip-k">{_e(label)}</span> {_e(value)}</span>'


def _jump(target: str, label: str, cls: str = "rs-jump") -> str:
    return f'<a class="{cls}" href="#{_e(target)}" data-jump="{_e(target)}">{label}</a>'


# -- header ---------------------------------------------------------------


def _backend_label(info: BackendInfo | None) -> str:
    if info is None:
        return "unknown"
    backend = {k: v for k, v in info.to_dict().items() if k != "settings"} | info.settings
    name = info.label
    extra = [f"{k}={v}" for k, v in backend.items() if k not in ("name", "model") and v not in (None, "", {}, [])]
    return f"{name} ({', '.join(extra)})" if extra else name


SERIES_CHIPS = 16  # more values than this fold behind a one-line summary


def _series(prefix: str, values: Sequence[float]) -> str:
    if not values:
        return '<span class="rs-dim">none</span>'
    chips = "".join(
        f'<span class="rs-chip rs-num {"rs-pos" if v > 0 else "rs-neg" if v < 0 else ""}">'
        f'<span class="rs-chip-k">{prefix}{i}</span> {_e(fmt_num(v))}</span>'
        for i, v in enumerate(values)
    )
    if len(values) <= SERIES_CHIPS:
        return chips
    nonzero = [i for i, v in enumerate(values) if v]
    where = (", ".join(f"{prefix}{i}" for i in nonzero[:6]) + (" …" if len(nonzero) > 6 else "")) if nonzero else "none"
    summary = (f"{len(values)} values · first {fmt_num(values[0])} · last {fmt_num(values[-1])} · "
               f"min {fmt_num(min(values))} · max {fmt_num(max(values))} · non-zero at {where}")
    return f'<details class="rs-fold rs-series-fold"><summary>{_e(summary)}</summary>{chips}</details>'


def _sampling(ep: Episode) -> str:
    sampling = ep.config.sampling.to_dict() if ep.config.sampling is not None else {}
    shown = [(k, v) for k, v in sampling.items() if v not in (None, "", [], {})]
    if not shown:
        return '<span class="rs-dim">n/a</span>'
    return " ".join(_chip(k, str(v)) for k, v in shown)


def _errors(n: int) -> str:
    return f" ({n} error{'s' if n != 1 else ''})" if n else ""


def render_header(ep: Episode) -> str:
    """The episode's identity, verdict, sampling, rewards and token counts."""
    status_cls = _STATUS_CLASS.get(ep.status, "muted")
    found = ep.all_findings()
    n_err = sum(1 for f in found if f.severity is Severity.ERROR)
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ep.created_at)) if ep.created_at else "n/a"
    rows: list[tuple[str, str]] = [
        ("env", _e(ep.env)),
        ("task", _e(ep.task_id)),
        ("preset", _e(ep.preset or "n/a")),
        ("backend / model", _e(_backend_label(ep.backend))),
        ("tokenizer", _e(ep.tokenizer or "smollm2 (embedded)")),
        ("reward", f'<b class="rs-big">{_e(fmt_num(ep.reward))}</b>'),
        (
            "tokens",
            f"{ep.n_tokens:,} total · prompt {ep.prompt_len:,} · response {ep.response_len:,} · "
            f'<span class="rs-train-text">trainable {ep.tokens.n_trainable:,}</span>',
        ),
        ("turns", str(ep.n_turns)),
        ("findings", f'<span class="{"rs-bad-text" if n_err else ""}">{len(found)}{_errors(n_err)}</span>'),
        ("run", _e(ep.run_id or "n/a") + (f" · group {_e(ep.group_id)} #{ep.sample_index}" if ep.group_id else "")),
        ("created", _e(created)),
        ("source", _e(ep.source.kind)),
    ]
    if ep.parent_id:
        rows.append(("forked from", f'<a href="?episode={_e(ep.parent_id)}"><code>{_e(ep.parent_id)}</code></a>'
                                    f" at turn {_e(ep.fork_turn)}"))
    if ep.tags:
        rows.append(("tags", " ".join(f'<span class="rs-tag">{_e(t)}</span>' for t in ep.tags)))
    if ep.note:
        rows.append(("note", f'<span class="rs-note-text">{_e(ep.note)}</span>'))
    kv = "".join(f'<div class="rs-kv-item"><dt>{k}</dt><dd>{v}</dd></div>' for k, v in rows)
    reason = f'<span class="rs-reason">{_e(ep.reason)}</span>' if ep.reason else ""
    star = '<span class="rs-star" title="starred">★</span>' if ep.starred else ""
    return (
        '<div class="rs-header">'
        f'<div class="rs-head-line">{star}<span class="rs-status rs-{status_cls}">{_e(ep.status.value)}</span>'
        f'{reason}<a class="rs-id" href="?episode={_e(ep.id)}" title="link to this episode">'
        f"<code>{_e(ep.id)}</code></a></div>"
        f'<dl class="rs-kv">{kv}</dl>'
        f'<div class="rs-series"><span class="rs-series-k">sampling</span>{_sampling(ep)}</div>'
        f'<div class="rs-series"><span class="rs-series-k">turn rewards</span>{_series("T", ep.turn_rewards)}</div>'
        f'<div class="rs-series"><span class="rs-series-k">returns</span>{_series("T", ep.returns)}</div>'
        f'<div class="rs-more">{_json_details("run config", ep.config.to_dict())}'
        f'{_json_details("backend", None if ep.backend is None else ep.backend.to_dict())}</div>'
        "</div>"
    )


# -- findings ---------------------------------------------------------------


def _preview(value: Any, key: str = "") -> Any:
    """Evidence cut to a readable size: long lists and strings shortened, the per-token diff summarized."""
    if key == "diff" and isinstance(value, list):
        known = sum(1 for d in value if d is not None)
        return f"[{known:,} per-token values: hover the token view or turn on its mismatch heat map]"
    if isinstance(value, dict):
        return {k: _preview(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        head = [_preview(v) for v in value[:EVIDENCE_ITEMS]]
        return head + ([f"… {len(value) - EVIDENCE_ITEMS:,} more"] if len(value) > EVIDENCE_ITEMS else [])
    if isinstance(value, str) and len(value) > EVIDENCE_CHARS:
        return value[:EVIDENCE_CHARS] + f"… ({len(value):,} chars)"
    return value


def _finding_links(f: Finding) -> str:
    links = []
    if f.token_start is not None:
        end = f"–{f.token_end - 1}" if f.token_end is not None and f.token_end > f.token_start + 1 else ""
        links.append(_jump(f"tok-{f.token_start}", f"tokens {f.token_start}{end} ↗"))
    if f.turn is not None:
        links.append(_jump(f"conv-turn-{f.turn}", f"turn {_e(f.turn)}"))
    return " ".join(links)


def _finding(f: Finding, with_evidence: bool = True) -> str:
    evidence = _json_details("evidence", _preview(f.evidence)) if f.evidence and with_evidence else ""
    sev = _cls(f.severity.value)
    return (
        f'<div class="rs-finding rs-sev-{sev}"><span class="rs-sev">{_e(f.severity.value)}</span> '
        f'<b>{_e(f.kind)}</b>: {_e(f.message)} <span class="rs-links">{_finding_links(f)}</span>{evidence}</div>'
    )


def render_findings(ep: Episode, run_level: tuple[int, list[str]] | None = None) -> str:
    """The episode's findings grouped by root: its diagnosis, then each root (errors first) with the findings
    that follow from it folded under it, then what could not be checked. Each links to its tokens and turn.
    ``run_level`` (episode count, kinds) names kinds every episode of its run has: they come last, as the run's."""
    found = list(ep.all_findings())
    if not found:
        return '<div class="rs-findings"><div class="rs-note rs-info">No findings recorded for this episode (run `rollscope check` to run the fidelity checks).</div></div>'
    if found and not all(f.id for f in found):
        found = link_findings(found)  # records written before findings had ids
    counts: dict[str, int] = {}
    for f in found:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    summary = ", ".join(f"{n} {sev}{'s' if n != 1 and sev != 'info' else ''}" for sev, n in counts.items())
    n_run, run_kinds = run_level or (0, [])
    parts = []
    line = diagnosis_line(found, leave_out=run_kinds)
    if line:
        parts.append(f'<div class="rs-diagnosis"><b>Diagnosis</b>: {_e(line)}</div>')
    own = [r for r in roots(found) if r.kind not in run_kinds]
    of_run = [r for r in roots(found) if r.kind in run_kinds]
    for r in [*own, *of_run]:
        if r is (of_run[0] if of_run else None):
            parts.append(f'<div class="rs-run-note">Every one of the {n_run:,} episodes of run <code>{_e(ep.run_id)}'
                         "</code> has the findings below: they describe its preset, template or source.</div>")
        follow = consequences(found, r)
        inner = ""
        if follow:
            inner = (f'<details class="rs-caused"><summary>{len(follow)} finding{"s" if len(follow) != 1 else ""} '
                     f'follow from it</summary>{"".join(_finding(f) for f in follow)}</details>')
        parts.append(f'<div class="rs-root" data-finding="{_e(r.id)}">{_finding(r)}{inner}</div>')
    rest = [f for f in found if f.severity is Severity.INFO]
    parts.extend(_finding(f) for f in rest)
    return (
        f'<div class="rs-findings"><div class="rs-findings-head"><b>{len(found)} finding{"s" if len(found) != 1 else ""}'
        f"</b> · {_e(summary)}</div>{''.join(parts)}</div>"
    )


# -- timeline ---------------------------------------------------------------


def _message(m: Message) -> str:
    who = f'<span class="rs-role">{_e(m.role)}</span>' + (f" · {_e(m.name)}" if m.name else "")
    calls = "".join(
        f'<div class="rs-call"><span class="rs-call-name">{_e(c.name)}</span>'
        f'<pre class="rs-json">{_e(_json(c.arguments))}</pre></div>'
        for c in m.tool_calls
    )
    return (
        f'<div class="rs-msg rs-role-{_cls(m.role)}"><div class="rs-msg-head">{who}</div>'
        f"{text_block(m.content)}{calls}</div>"
    )


def _turn(t: Turn, episode_findings: Sequence[Finding]) -> str:
    g = t.generation
    own = [*t.findings, *(f for f in episode_findings if f.turn == t.index)]
    chips = [_chip("env reward", fmt_num(t.reward), "rs-pos" if t.reward > 0 else "rs-neg" if t.reward < 0 else "")]
    chips.append(_chip("done", "yes" if t.done else "no"))
    if g is not None:
        chips.append(_chip("finish", g.finish_reason, "rs-warn" if g.finish_reason != "stop" else ""))
        chips.append(_chip("tokens", str(len(g.token_ids))))
        chips.append(_chip("latency", _fmt_seconds(g.latency_s)))
    if "total_s" in t.timings:
        chips.append(_chip("turn", _fmt_seconds(t.timings["total_s"])))
    if own:
        worst = min(own, key=lambda f: _SEVERITY_ORDER.get(f.severity, 3)).severity.value
        chips.append(f'<span class="rs-chip rs-flag rs-sev-{_cls(worst)}">⚑ {len(own)} finding{"s" if len(own) != 1 else ""}</span>')
    head = (
        f'<div class="rs-turn-head">{_jump(f"turn-{t.index}", f"Turn {t.index}", "rs-turn-no")}{"".join(chips)}'
        f'<span class="rs-turn-links">{_jump(f"turn-{t.index}", "tokens ↓")}'
        f'<a class="rs-fork" href="#" data-fork="{t.index}" title="fork this episode at turn {t.index}: '
        f'replay the turns before it, then continue in Step">fork here</a></span></div>'
    )
    parts = [f'<section class="rs-turn{" rs-turn-flagged" if own else ""}" id="conv-turn-{t.index}">{head}']
    if g is None:
        parts.append('<div class="rs-msg rs-role-assistant"><div class="rs-msg-head"><span class="rs-role">assistant</span>'
                     '</div><div class="rs-dim">no generation</div></div>')
    else:
        model = f" · {_e(g.model)}" if g.model else ""
        parts.append(
            '<div class="rs-msg rs-role-assistant"><div class="rs-msg-head"><span class="rs-role">assistant</span>'
            f" · raw generation{model}</div>{text_block(g.text)}</div>"
        )
    for c in t.tool_calls:
        parts.append(
            f'<div class="rs-call"><span class="rs-call-k">tool call</span> <span class="rs-call-name">{_e(c.name)}</span>'
            f'<pre class="rs-json">{_e(_json(c.arguments))}</pre></div>'
        )
    if t.parse_error:
        parts.append(f'<div class="rs-error"><b>parse error</b>: {_e(t.parse_error)}</div>')
    if t.action is not None and not t.action.is_respond and not t.tool_calls:
        parts.append(f'<div class="rs-dim">action: <code>{_e(t.action.name)}</code></div>')
    parts.extend(_message(m) for m in t.observation)
    if t.info:
        parts.append(_json_details("env info", t.info))
    parts.extend(_finding(f, with_evidence=False) for f in own)
    parts.append("</section>")
    return "".join(parts)


def _initial_messages(ep: Episode) -> list[Message]:
    # The messages before the first assistant one are the episode's start
    # (system prompt, task); later ones are already in the turns.
    out: list[Message] = []
    for m in ep.messages:
        if m.role == "assistant" and ep.turns:
            break
        out.append(m)
    return out


def render_conversation(ep: Episode) -> str:
    """The turn timeline: opening messages, then each turn's generation, tool call or parse error, observation."""
    located = [f for f in ep.findings if f.turn is not None]
    parts = ['<div class="rs-conv">']
    loose = [f for f in ep.findings if f.turn is None]
    if loose:
        parts.append('<div class="rs-ep-findings">')
        parts.extend(_finding(f, with_evidence=False) for f in loose)
        parts.append("</div>")
    parts.extend(_message(m) for m in _initial_messages(ep))
    parts.extend(_turn(t, located) for t in ep.turns)
    if not ep.turns:
        parts.append('<div class="rs-dim">no turns</div>')
    parts.append("</div>")
    return "".join(parts)


render_timeline = render_conversation


def render_message(text: str, kind: str = "info") -> str:
    """A one-line notice (empty states, errors) for any view."""
    return f'<div class="rs-note rs-{_cls(kind)}">{_e(text)}</div>'
