"""Escaped HTML for the Episode tab: header, findings and turn timeline (the token view is ``tokens``).

Pure functions of records: no Gradio, no store; every outside string goes
through ``esc`` (see ``html``).

Links between views carry ``data-jump="<element id>"`` (``turn-N`` and
``tok-I`` in the token view, ``conv-turn-N`` in the timeline); the views'
script (``assets/tokens.js``) scrolls to the target. ``data-fork="N"`` asks
to fork the episode at turn N (``assets/fork_link.js``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from engine import (
    BackendInfo,
    Episode,
    Finding,
    Message,
    Severity,
    Turn,
    consequences,
    diagnosis,
    link_findings,
    opening_messages,
    roots,
)

from .html import (
    SEVERITY_ORDER,
    call_block,
    chip,
    css_class,
    error_line,
    esc,
    fmt_num,
    fmt_seconds,
    json_details,
    jump,
    note,
    status_badge,
    text_block,
)
from .limits import Budget, see_whole

# Evidence lists and strings are cut to this in the findings list.
EVIDENCE_ITEMS = 12
EVIDENCE_CHARS = 400


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
        f'<span class="rs-chip-k">{prefix}{i}</span> {esc(fmt_num(v))}</span>'
        for i, v in enumerate(values)
    )
    if len(values) <= SERIES_CHIPS:
        return chips
    nonzero = [i for i, v in enumerate(values) if v]
    where = (", ".join(f"{prefix}{i}" for i in nonzero[:6]) + (" …" if len(nonzero) > 6 else "")) if nonzero else "none"
    summary = (f"{len(values)} values · first {fmt_num(values[0])} · last {fmt_num(values[-1])} · "
               f"min {fmt_num(min(values))} · max {fmt_num(max(values))} · non-zero at {where}")
    return f'<details class="rs-fold rs-series-fold"><summary>{esc(summary)}</summary>{chips}</details>'


def _sampling(ep: Episode) -> str:
    sampling = ep.config.sampling.to_dict() if ep.config.sampling is not None else {}
    shown = [(k, v) for k, v in sampling.items() if v not in (None, "", [], {})]
    if not shown:
        return '<span class="rs-dim">n/a</span>'
    return " ".join(chip(k, str(v)) for k, v in shown)


def _errors(n: int) -> str:
    return f" ({n} error{'s' if n != 1 else ''})" if n else ""


def render_header(ep: Episode) -> str:
    """The episode's identity, verdict, sampling, rewards and token counts."""
    every = ep.all_findings()
    found = [f for f in every if f.severity is not Severity.INFO]  # as ls and Browse count them
    n_err = sum(1 for f in found if f.severity is Severity.ERROR)
    notes = len(every) - len(found)
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ep.created_at)) if ep.created_at else "n/a"
    rows: list[tuple[str, str]] = [
        ("env", esc(ep.env)),
        ("task", esc(ep.task_id)),
        ("preset", esc(ep.preset or "n/a")),
        ("backend / model", esc(_backend_label(ep.backend))),
        ("tokenizer", esc(ep.tokenizer or "none recorded (texts shown with the embedded SmolLM2)")),
        ("reward", f'<b class="rs-big">{esc(fmt_num(ep.reward))}</b>'),
        (
            "tokens",
            f"{ep.n_tokens:,} total · prompt {ep.prompt_len:,} · response {ep.response_len:,} · "
            f'<span class="rs-train-text">trainable {ep.tokens.n_trainable:,}</span>',
        ),
        ("turns", str(ep.n_turns)),
        ("findings", f'<span class="{"rs-bad-text" if n_err else ""}">{len(found)}{_errors(n_err)}</span>'
                     + (f' · {notes} note{"s" if notes != 1 else ""}' if notes else "")
                     + ("" if ep.checked else ' · <span class="rs-dim">not checked</span>')
                     + _not_run(ep.checks_not_run if ep.checked else ())),
        ("run", esc(ep.run_id or "n/a") + (f" · group {esc(ep.group_id)} #{ep.sample_index}" if ep.group_id else "")),
        ("created", esc(created)),
        ("source", esc(ep.source.kind)),
    ]
    if ep.parent_id:
        rows.append(("forked from", f'<a href="?episode={esc(ep.parent_id)}"><code>{esc(ep.parent_id)}</code></a>'
                                    f" at turn {esc(ep.fork_turn)}"))
    if ep.tags:
        rows.append(("tags", " ".join(f'<span class="rs-tag">{esc(t)}</span>' for t in ep.tags)))
    if ep.note:
        rows.append(("note", f'<span class="rs-note-text">{esc(ep.note)}</span>'))
    kv = "".join(f'<div class="rs-kv-item"><dt>{k}</dt><dd>{v}</dd></div>' for k, v in rows)
    reason = f'<span class="rs-reason">{esc(ep.reason)}</span>' if ep.reason else ""
    star = '<span class="rs-star" title="starred">★</span>' if ep.starred else ""
    return (
        '<div class="rs-header">'
        f'<div class="rs-head-line">{star}{status_badge(ep.status.value)}'
        f'{reason}<a class="rs-id" href="?episode={esc(ep.id)}" title="link to this episode">'
        f"<code>{esc(ep.id)}</code></a></div>"
        f'<dl class="rs-kv">{kv}</dl>'
        '<details class="rs-header-more"><summary>sampling, rewards per turn, returns, run config, backend</summary>'
        f'<div class="rs-series"><span class="rs-series-k">sampling</span>{_sampling(ep)}</div>'
        f'<div class="rs-series"><span class="rs-series-k">turn rewards</span>{_series("T", ep.turn_rewards)}</div>'
        f'<div class="rs-series"><span class="rs-series-k">returns</span>{_series("T", ep.returns)}</div>'
        f'<div class="rs-more">{json_details("run config", ep.config.to_dict())}'
        f'{json_details("backend", None if ep.backend is None else ep.backend.to_dict())}</div>'
        "</details></div>"
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


def deep_link(episode_id: str, turn: int | None = None, token: int | None = None) -> str:
    """``?episode=ID&turn=K&token=N``: the dashboard opens there, playback at turn K, token N marked."""
    return f"?episode={episode_id}" + (f"&turn={turn}" if turn is not None else "") + (
        f"&token={token}" if token is not None else "")


def _finding_links(f: Finding, episode_id: str = "") -> str:
    links = []
    if f.token_start is not None:
        end = f"–{f.token_end - 1}" if f.token_end is not None and f.token_end > f.token_start + 1 else ""
        href = deep_link(episode_id, f.turn, f.token_start) if episode_id else None
        links.append(jump(f"tok-{f.token_start}", f"tokens {f.token_start}{end} ↗", href=href))
    if f.turn is not None:
        links.append(jump(f"conv-turn-{f.turn}", f"turn {esc(f.turn)}"))
    return " ".join(links)


def finding_block(f: Finding, with_evidence: bool = True, episode_id: str = "") -> str:
    """One finding: severity, kind, message, links to its tokens and turn, and (folded) its evidence."""
    evidence = json_details("evidence", _preview(f.evidence)) if f.evidence and with_evidence else ""
    sev = css_class(f.severity.value)
    return (
        f'<div class="rs-finding rs-sev-{sev}"><span class="rs-sev">{esc(f.severity.value)}</span> '
        f'<b>{esc(f.kind)}</b>: {esc(f.message)} <span class="rs-links">{_finding_links(f, episode_id)}</span>{evidence}</div>'
    )


def _not_run(notes: Sequence[str]) -> str:
    """" · N checks not run", titled with their notes, as ``ls`` and Browse say it beside the count (none: "")."""
    if not notes:
        return ""
    return (f' · <span class="rs-unchecked" title="{esc(chr(10).join(notes))}">{len(notes)} '
            f'check{"s" if len(notes) != 1 else ""} not run (no tokenizer or model given)</span>')


def render_findings(ep: Episode, run_level: tuple[int, list[str]] | None = None) -> str:
    """The episode's findings grouped by root: its diagnosis, then each root (errors first) with the findings
    that follow from it folded under it, then what could not be checked. Each links to its tokens and turn.
    ``run_level`` (episode count, kinds) names kinds every episode of its run has: they come last, as the run's."""
    found = list(ep.all_findings())
    if not found:
        said = (note(f"Checked: no findings (checks v{ep.checked}).", "ok") if ep.checked else
                note("Not checked: no fidelity checks ran on this episode (an import without --check); "
                     "`rollscope check` runs them."))
        return f'<div class="rs-findings" data-checked="{esc(ep.checked or "")}">{said}</div>'
    if found and not all(f.id for f in found):
        found = link_findings(found)  # records written before findings had ids
    # Counted as ls, Browse and the header count them: errors and warnings are the findings, notes said apart.
    counts: dict[str, int] = {}
    for f in found:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    n_notes = counts.pop("info", 0)
    n_found = sum(counts.values())
    summary = ", ".join(f"{counts[sev]} {sev}{'s' if counts[sev] != 1 else ''}" for sev in ("error", "warning")
                        if counts.get(sev))
    summary += (" · " if summary else "") + (f"{n_notes} note{'s' if n_notes != 1 else ''}" if n_notes else "")
    n_run, run_kinds = run_level or (0, [])
    parts = []
    line = diagnosis(found, leave_out=run_kinds)
    if line:
        # Red for an error among its roots, amber for warnings alone, as the findings below are.
        worst = "" if any(r.severity is Severity.ERROR for r in roots(found) if r.kind not in run_kinds) else " rs-warn"
        parts.append(f'<div class="rs-diagnosis{worst}"><b>Diagnosis</b>: {esc(line)}</div>')
    own = [r for r in roots(found) if r.kind not in run_kinds]
    of_run = [r for r in roots(found) if r.kind in run_kinds]
    for r in [*own, *of_run]:
        if r is (of_run[0] if of_run else None):
            parts.append(f'<div class="rs-run-note">Every one of the {n_run:,} episodes of run <code>{esc(ep.run_id)}'
                         "</code> has the findings below: they describe its preset, template or source.</div>")
        follow = consequences(found, r)
        inner = ""
        if follow:
            inner = (f'<details class="rs-caused"><summary>{len(follow)} finding{"s" if len(follow) != 1 else ""} '
                     f'follow from it</summary>{"".join(finding_block(f, episode_id=ep.id) for f in follow)}</details>')
        parts.append(f'<div class="rs-root" data-finding="{esc(r.id)}">{finding_block(r, episode_id=ep.id)}{inner}</div>')
    rest = [f for f in found if f.severity is Severity.INFO]
    parts.extend(finding_block(f, episode_id=ep.id) for f in rest)
    return (
        f'<div class="rs-findings"><div class="rs-findings-head"><b>{n_found} finding{"s" if n_found != 1 else ""}'
        f"</b>{' · ' + esc(summary) if summary else ''}{_not_run(ep.checks_not_run if ep.checked else ())}</div>"
        f"{''.join(parts)}</div>"
    )


# -- timeline ---------------------------------------------------------------


def message_block(m: Message, budget: Budget | None = None) -> str:
    """One chat message: its role (and name), its text, its tool calls; cut to the display limits (``budget``
    is the view's, see ``limits``)."""
    who = f'<span class="rs-role">{esc(m.role)}</span>' + (f" · {esc(m.name)}" if m.name else "")
    calls = "".join(call_block(c.name, c.arguments, None, budget, c.raw_arguments) for c in m.tool_calls)
    return (
        f'<div class="rs-msg rs-role-{css_class(m.role)}"><div class="rs-msg-head">{who}</div>'
        f"{text_block(m.content, budget=budget)}{calls}</div>"
    )


def _turn(t: Turn, episode_findings: Sequence[Finding], budget: Budget, live: bool = True) -> str:
    g = t.generation
    own = [*t.findings, *(f for f in episode_findings if f.turn == t.index)]
    chips = [chip("env reward", fmt_num(t.reward), "rs-pos" if t.reward > 0 else "rs-neg" if t.reward < 0 else "")]
    chips.append(chip("done", "yes" if t.done else "no"))
    if g is not None:
        chips.append(chip("finish", g.finish_reason, "rs-warn" if g.finish_reason != "stop" else ""))
        chips.append(chip("tokens", str(len(g.token_ids))))
        if live:  # an import's generations were not timed here: no latency to show
            chips.append(chip("latency", fmt_seconds(g.latency_s)))
    if "total_s" in t.timings and live:
        chips.append(chip("turn", fmt_seconds(t.timings["total_s"])))
    if own:
        worst = min(own, key=lambda f: SEVERITY_ORDER.get(f.severity, 3)).severity.value
        chips.append(f'<span class="rs-chip rs-flag rs-sev-{css_class(worst)}">⚑ {len(own)} finding{"s" if len(own) != 1 else ""}</span>')
    head = (
        f'<div class="rs-turn-head">{jump(f"turn-{t.index}", f"Turn {t.index}", "rs-turn-no")}{"".join(chips)}'
        f'<span class="rs-turn-links">{jump(f"turn-{t.index}", "tokens ↓")}'
        f'<a class="rs-fork" href="#" data-fork="{t.index}" title="fork this episode at turn {t.index}: '
        f'replay the turns before it, then continue in Step">fork here</a></span></div>'
    )
    parts = [f'<section class="rs-turn{" rs-turn-flagged" if own else ""}" id="conv-turn-{t.index}">{head}']
    if g is None:
        parts.append('<div class="rs-msg rs-role-assistant"><div class="rs-msg-head"><span class="rs-role">assistant</span>'
                     '</div><div class="rs-dim">no generation</div></div>')
    else:
        model = f" · {esc(g.model)}" if g.model else ""
        text = text_block(g.text, budget=budget) if g.text or not g.token_ids else (
            f'<div class="rs-dim">no text stored: {len(g.token_ids):,} generated token ids, decoded in the token view '
            "and playback</div>")
        parts.append(
            '<div class="rs-msg rs-role-assistant"><div class="rs-msg-head"><span class="rs-role">assistant</span>'
            f" · raw generation{model}</div>{text}</div>"
        )
    parts.extend(call_block(c.name, c.arguments, budget=budget, raw=c.raw_arguments) for c in t.tool_calls)
    if t.parse_error:
        parts.append(error_line("parse error", t.parse_error))
    if t.action is not None and not t.action.is_respond and not t.tool_calls:
        parts.append(f'<div class="rs-dim">action: <code>{esc(t.action.name)}</code></div>')
    parts.extend(message_block(m, budget) for m in t.observation)
    if t.raw_observation:
        parts.append(json_details("raw tool output, before truncation", list(t.raw_observation), budget))
    if t.info:
        parts.append(json_details("env info", t.info, budget))
    parts.extend(finding_block(f, with_evidence=False) for f in own)
    parts.append("</section>")
    return "".join(parts)


def render_conversation(ep: Episode) -> str:
    """The turn timeline: opening messages, then each turn's generation, tool call or parse error, observation;
    its texts within one ``Budget`` (``limits``), a note first when it cut any."""
    budget = Budget()
    located = [f for f in ep.findings if f.turn is not None]
    parts = ['<div class="rs-conv">']
    loose = [f for f in ep.findings if f.turn is None]
    if loose:
        parts.append('<div class="rs-ep-findings">')
        parts.extend(finding_block(f, with_evidence=False) for f in loose)
        parts.append("</div>")
    parts.extend(message_block(m, budget) for m in opening_messages(ep))
    parts.extend(_turn(t, located, budget, ep.source.live) for t in ep.turns)
    if not ep.turns:
        parts.append('<div class="rs-dim">no turns</div>')
    parts.append("</div>")
    if budget.cut:
        parts.insert(1, note(f"{budget.cut:,} characters of this episode's texts are not sent to the browser (over "
                             f"the display limits): each cut text ends with how much it left out; "
                             f"{see_whole(ep.id)}.", "warn"))
    return "".join(parts)

