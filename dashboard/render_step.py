"""Escaped HTML for the Launch, Step and Export tabs.

Pure functions of records and job status: no Gradio, no store. Every string
that came from a model, an env, a user, a file or a form goes through
``_e`` (``html.escape`` with quotes) before it touches markup: ``gr.HTML``
inserts its value with ``innerHTML``.

Rows carrying ``data-open="<episode id>"`` open that episode in the Episode
tab (``OPEN_JS`` sends the id to the server).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from typing import Any

from engine import ActionPreview, Episode, ForkReport, Generation, LoopConfig, Message, Turn, format_knob, knobs

from .jobs import CANCELLED, CANCELLING, FAILED, FINISHED, PREPARING, EpisodeRow, JobStatus
from .render import text_block  # noqa: F401  (one folding text block for every view)

TABLE_ROWS = 200  # the newest finished episodes shown live; the rest are in Browse
TOKEN_CHIPS = 2000  # a pending generation longer than this shows its first tokens only

_NUMERIC = frozenset({"sample", "reward", "turns", "tokens", "findings"})
_STATUS_CLASS = {"completed": "ok", "truncated": "warn", "aborted": "bad", "failed": "bad", "running": "info",
                 "interrupted": "muted"}

# A row (or link) with data-open sends {"open": id}: the app shows it in Episode.
OPEN_JS = r"""
element.addEventListener("click", (event) => {
  const el = event.target.closest && event.target.closest("[data-open]");
  if (!el) return;
  event.preventDefault();
  trigger("click", { open: el.dataset.open });
});
element.addEventListener("keydown", (event) => {
  const el = event.target.closest && event.target.closest("[data-open]");
  if (el && event.key === "Enter") trigger("click", { open: el.dataset.open });
});
"""


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def fmt(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.4g}"


def note(text: str, kind: str = "info") -> str:
    """A one-line notice; ``kind`` is info, warn or error."""
    kind = kind if kind in ("info", "warn", "error", "ok") else "info"
    return f'<div class="rs-note rs-{kind}">{_e(text)}</div>'


def chip(label: str, value: Any, cls: str = "") -> str:
    return f'<span class="rs-chip {cls}"><span class="rs-chip-k">{_e(label)}</span> {_e(value)}</span>'


def status_badge(status: str) -> str:
    return f'<span class="rs-status rs-{_STATUS_CLASS.get(status, "muted")}">{_e(status)}</span>'


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


# -- loop settings ----------------------------------------------------------------


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
        before = f'<span class="rs-dim">was {_e(format_knob(was))}</span>' if diff else ""
        rows.append(f'<tr class="{"rs-knob-changed" if diff else ""}" data-knob="{_e(name)}"><th>{_e(name)}</th>'
                    f'<td class="rs-knob-v"><code>{_e(format_knob(value))}</code> {before}</td>'
                    f'<td class="rs-knob-doc">{_e(docs.get(name, ""))}</td></tr>')
    head = (note(error, "error") if error else
            note(f"{changed} knob{'s' if changed != 1 else ''} changed from {base_label}." if changed
                 else f"Runs with {base_label} as it is.", "warn" if changed else "info"))
    about_html = f'<div class="rs-help">{_e(about)}</div>' if about else ""
    return (f'<div class="rs-knobs">{head}{about_html}<div class="rs-table-wrap"><table class="rs-table rs-live '
            f'rs-knob-table"><thead><tr><th>knob</th><th>value</th><th>what it does</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></div>')


# -- Launch ---------------------------------------------------------------------


def progress(status: JobStatus | None) -> str:
    """The live progress bar and counts of a batch."""
    if status is None:
        return note("No batch yet: choose the settings above and press Start.")
    pct = 100.0 * status.done / status.total if status.total else 0.0
    state = status.state
    cls = {FINISHED: "ok", FAILED: "bad", CANCELLED: "muted", CANCELLING: "warn"}.get(state, "info")
    counts = " ".join(chip(k, v, f"rs-st-{_STATUS_CLASS.get(k, 'muted')}") for k, v in sorted(status.counts().items()))
    rate = f"{status.done / status.elapsed_s:.2f} ep/s" if status.elapsed_s > 0 and status.done else ""
    lines = [
        f'<div class="rs-job rs-job-{_e(state)}" data-state="{_e(state)}">',
        f'<div class="rs-job-head">{status_badge_job(state, cls)}<b>{status.done:,} / {status.total:,}</b> episodes'
        f'<span class="rs-dim"> · {status.elapsed_s:.1f} s{" · " + rate if rate else ""}</span>'
        + (f'<span class="rs-dim"> · run <code>{_e(status.run_id)}</code></span>' if status.run_id else "")
        + "</div>",
        f'<div class="rs-bar" role="progressbar" aria-valuemin="0" aria-valuemax="{status.total}" '
        f'aria-valuenow="{status.done}"><div class="rs-bar-fill rs-{cls}" style="width:{pct:.1f}%"></div></div>',
        f'<div class="rs-job-counts">{counts}'
        + (chip("mean reward", fmt(status.mean_reward)) if status.rows else "")
        + "</div>",
        f'<div class="rs-dim rs-job-plan">{_e(status.plan)}</div>',
    ]
    if state == PREPARING:
        lines.append(note("Preparing: loading the tokenizer and the backend…"))
    elif state == CANCELLING:
        lines.append(note("Cancelling: episodes in flight are being stopped…", "warn"))
    elif state == CANCELLED:
        not_run = status.total - status.done - status.interrupted
        lines.append(note(f"Cancelled: {status.done} finished episodes are stored; {status.interrupted} in flight are "
                          f"stored as interrupted; {max(0, not_run)} never started.", "warn"))
    elif state == FAILED:
        lines.append(note(f"The batch could not run: {status.error}", "error"))
    elif state == FINISHED:
        lines.append(note(f"Finished: {status.done} episodes stored. Click a row to open it, or filter Browse by "
                          f"run {status.run_id}.", "ok"))
    lines.append("</div>")
    return "".join(lines)


def status_badge_job(state: str, cls: str) -> str:
    return f'<span class="rs-status rs-{cls}">{_e(state)}</span>'


def _row(r: EpisodeRow) -> str:
    return (
        f'<tr data-open="{_e(r.id)}" tabindex="0" title="open {_e(r.id)} in Episode">'
        f'<td><code>{_e(r.id)}</code></td><td>{_e(r.task_id)}</td><td class="rs-num">{r.sample_index}</td>'
        f"<td>{status_badge(r.status)}</td><td class=\"rs-num\">{_e(fmt(r.reward))}</td>"
        f'<td class="rs-num">{r.n_turns}</td><td class="rs-num">{r.n_tokens:,}</td>'
        f'<td class="rs-num">{r.n_findings or ""}</td><td class="rs-reason">{_e(r.reason)}</td></tr>'
    )


def finished_table(rows: Sequence[EpisodeRow]) -> str:
    """The newest finished episodes first (at most ``TABLE_ROWS``)."""
    if not rows:
        return '<div class="rs-dim">Finished episodes appear here as they end.</div>'
    shown = list(rows)[-TABLE_ROWS:][::-1]
    more = f'<div class="rs-dim">showing the newest {TABLE_ROWS} of {len(rows):,}</div>' if len(rows) > TABLE_ROWS else ""
    head = "".join(f'<th class="rs-num">{h}</th>' if h in _NUMERIC else f"<th>{h}</th>"
                   for h in ("episode", "task", "sample", "status", "reward", "turns", "tokens", "findings", "reason"))
    return (f'{more}<div class="rs-table-wrap"><table class="rs-table rs-live"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(_row(r) for r in shown)}</tbody></table></div>')


# -- Step -----------------------------------------------------------------------


def _message(m: Message, extra: str = "") -> str:
    who = f'<span class="rs-role">{_e(m.role)}</span>' + (f" · {_e(m.name)}" if m.name else "") + extra
    return (f'<div class="rs-msg rs-role-{_e(m.role if m.role in ("system", "user", "assistant", "tool") else "other")}">'
            f'<div class="rs-msg-head">{who}</div>{text_block(m.content)}</div>')


def _turn_chips(t: Turn) -> str:
    chips = [chip("reward", fmt(t.reward), "rs-pos" if t.reward > 0 else ""), chip("done", "yes" if t.done else "no")]
    if t.generation is not None:
        chips.append(chip("tokens", len(t.generation.token_ids)))
        if t.generation.model == "manual":
            chips.append(chip("written", "by hand", "rs-warn"))
    if t.parse_error:
        chips.append(chip("parse error", t.parse_error[:80], "rs-neg"))
    return "".join(chips)


def conversation(ep: Episode, fork_turn: int | None = None) -> str:
    """The conversation so far, turn by turn; turns before ``fork_turn`` are marked replayed."""
    parts = ['<div class="rs-conv rs-step-conv">']
    opening = []
    for m in ep.messages:
        if m.role == "assistant":
            break
        opening.append(m)
    parts.extend(_message(m) for m in opening)
    for t in ep.turns:
        replayed = fork_turn is not None and t.index < fork_turn
        tag = '<span class="rs-chip rs-replayed">replayed from the parent</span>' if replayed else ""
        parts.append(f'<section class="rs-turn{" rs-turn-replayed" if replayed else ""}" id="step-turn-{t.index}">'
                     f'<div class="rs-turn-head"><span class="rs-turn-no">Turn {t.index}</span>{tag}{_turn_chips(t)}</div>')
        text = t.generation.text if t.generation is not None else ""
        parts.append(_message(Message("assistant", text)))
        for c in t.tool_calls:
            parts.append(f'<div class="rs-call"><span class="rs-call-k">tool call</span> '
                         f'<span class="rs-call-name">{_e(c.name)}</span><pre class="rs-json">{_e(_json(c.arguments))}</pre></div>')
        parts.extend(_message(m) for m in t.observation)
        parts.append("</section>")
    if not ep.turns:
        parts.append('<div class="rs-dim">No turns yet: press Generate.</div>')
    parts.append("</div>")
    return "".join(parts)


def step_header(ep: Episode, *, backend: str, plays_user: bool, report: ForkReport | None, saved_id: str | None) -> str:
    """Who is talking to whom, where the conversation stands, and how the fork's replay went."""
    status = ep.status.value
    bits = [
        status_badge(status),
        f"<b>{_e(ep.env)}</b> · task <code>{_e(ep.task_id)}</code>",
        chip("next turn", ep.n_turns),
        chip("preset", ep.preset or "n/a"),
        chip("policy", backend),
        chip("user", "you" if plays_user else (ep.config.user or "env")),
        chip("reward", fmt(ep.reward)),
        chip("tokens", f"{ep.n_tokens:,}"),
    ]
    lines = [f'<div class="rs-header rs-step-header"><div class="rs-head-line">{" ".join(bits)}</div>']
    if ep.reason:
        lines.append(f'<div class="rs-reason">{_e(ep.reason)}</div>')
    if report is not None:
        kind = "ok" if report.ok else "warn"
        lines.append(note(report.summary(), kind))
        for n in report.notes:
            lines.append(note(n, "info"))
        for d in report.divergences[:6]:
            where = "start" if d.turn < 0 else f"turn {d.turn}"
            lines.append(
                f'<details class="rs-fold rs-divergence"><summary>{_e(where)}: {_e(d.field)} differs'
                f'{" — " + _e(d.note) if d.note else ""}</summary><div class="rs-side">'
                f'<div><div class="rs-dim">stored</div><pre class="rs-json">{_e(_json(d.stored))}</pre></div>'
                f'<div><div class="rs-dim">now</div><pre class="rs-json">{_e(_json(d.now))}</pre></div></div></details>'
            )
    if saved_id:
        lines.append(f'<div class="rs-saved-as">saved as <a href="?episode={_e(saved_id)}" data-open="{_e(saved_id)}">'
                     f"<code>{_e(saved_id)}</code></a>"
                     + (f" (parent <code>{_e(ep.parent_id)}</code>, fork turn {ep.fork_turn})" if ep.parent_id else "")
                     + "</div>")
    lines.append("</div>")
    return "".join(lines)


def _token_chips(texts: Sequence[str], gen: Generation, special: set[int]) -> str:
    ids = gen.token_ids
    lps = gen.logprobs
    out = []
    for i, (tid, text) in enumerate(zip(ids[:TOKEN_CHIPS], texts[:TOKEN_CHIPS])):
        lp = lps[i] if lps is not None and i < len(lps) else None
        title = f"#{i} · id {tid} · logprob {fmt(lp)}"
        cls = "tok tok-train" + (" tok-special" if tid in special else "")
        shown = text.replace("\n", "↵\n") if text else "\u2009"
        out.append(f'<span class="{cls}" title="{_e(title)}">{_e(shown)}</span>')
    more = f'<span class="rs-dim"> … {len(ids) - TOKEN_CHIPS:,} more</span>' if len(ids) > TOKEN_CHIPS else ""
    return f'<div class="rs-tokens rs-step-tokens">{"".join(out)}{more}</div>'


def preview_block(preview: ActionPreview, needs_reply: bool) -> str:
    """What committing the text would do: the parsed tool calls, a parse error, or a message to the user."""
    if preview.parse_error is not None:
        return (f'<div class="rs-error"><b>parse error</b>: {_e(preview.parse_error)}</div>'
                '<div class="rs-dim">Committing it records the parse error (the preset decides: feedback or abort).</div>')
    if preview.calls:
        return "".join(
            f'<div class="rs-call"><span class="rs-call-k">tool call</span> <span class="rs-call-name">{_e(c.name)}'
            f'</span><pre class="rs-json">{_e(_json(c.arguments))}</pre></div>' for c in preview.calls)
    who = "you play the user: write the user's reply below" if needs_reply else "the env answers"
    return f'<div class="rs-dim">No tool call: a message to the user ({who}).</div>'


def pending(gen: Generation | None, texts: Sequence[str] | None, special: set[int]) -> str:
    """A generation before it is committed: its raw text and its tokens."""
    if gen is None:
        return '<div class="rs-dim">Nothing generated yet: press Generate (or write the turn yourself and Commit).</div>'
    n_lp = sum(1 for x in gen.logprobs or () if not math.isnan(x))
    chips = "".join([
        chip("finish", gen.finish_reason, "rs-warn" if gen.finish_reason != "stop" else ""),
        chip("tokens", len(gen.token_ids)), chip("logprobs", n_lp), chip("latency", f"{gen.latency_s * 1000:.0f} ms"),
        chip("model", gen.model or "n/a"),
    ])
    # What the text parses to is shown under the edit box, where it follows the edits.
    parts = [f'<div class="rs-pending"><div class="rs-head-line">{chips}</div>',
             '<h5 class="rs-h">Raw text</h5>', f'<pre class="rs-raw">{_e(gen.text)}</pre>']
    if texts is not None:
        parts += ['<details class="rs-fold" open><summary>Tokens (hover for id and logprob)</summary>',
                  _token_chips(texts, gen, special), "</details>"]
    parts.append("</div>")
    return "".join(parts)


def committed(turn: Turn | None, ep: Episode) -> str:
    """The result of the last commit: observation, reward, done, and the episode's state."""
    if turn is None:
        return ""
    chips = [chip("turn", turn.index), chip("reward", fmt(turn.reward), "rs-pos" if turn.reward > 0 else ""),
             chip("done", "yes" if turn.done else "no"), chip("episode", ep.status.value)]
    if turn.action is not None:
        chips.append(chip("action", turn.action.name))
    parts = [f'<div class="rs-committed"><div class="rs-head-line">{"".join(chips)}</div>']
    if turn.parse_error:
        parts.append(f'<div class="rs-error"><b>parse error</b>: {_e(turn.parse_error)}</div>')
    parts.extend(_message(m) for m in turn.observation)
    if not turn.observation:
        parts.append('<div class="rs-dim">no observation</div>')
    for f in turn.findings:
        parts.append(f'<div class="rs-finding rs-sev-{_e(f.severity.value)}"><b>{_e(f.kind)}</b>: {_e(f.message)}</div>')
    if ep.reason:
        parts.append(note(f"The episode ended: {ep.status.value} ({ep.reason}).",
                          "ok" if ep.status.value == "completed" else "warn"))
    parts.append("</div>")
    return "".join(parts)


# -- Export ---------------------------------------------------------------------


def export_preview(count: int, rows: Sequence[Any], sample: str, what: str, fmt_name: str) -> str:
    """How many episodes match, the first few, and the start of the first record in the chosen format."""
    if count == 0:
        return note(f"No episodes match ({what}).", "warn")
    head = "".join(f'<th class="rs-num">{h}</th>' if h in _NUMERIC else f"<th>{h}</th>"
                   for h in ("episode", "env", "task", "status", "reward", "turns", "tags"))
    body = "".join(
        f'<tr data-open="{_e(r.id)}" tabindex="0"><td><code>{_e(r.id)}</code></td><td>{_e(r.env)}</td>'
        f"<td>{_e(r.task_id)}</td><td>{status_badge(r.status)}</td><td class=\"rs-num\">{_e(fmt(r.reward))}</td>"
        f'<td class="rs-num">{r.n_turns}</td><td>{_e(", ".join(r.tags))}</td></tr>'
        for r in rows
    )
    more = f" (the first {len(rows)} shown)" if count > len(rows) else ""
    return (
        f'<div class="rs-export-preview"><div class="rs-export-count"><b>{count:,}</b> episode{"s" if count != 1 else ""} '
        f"{'match' if count != 1 else 'matches'} ({_e(what)}){more}; format <b>{_e(fmt_name)}</b>.</div>"
        f'<div class="rs-table-wrap"><table class="rs-table rs-live"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        f"</table></div>"
        + (f'<details class="rs-fold" open><summary>Start of the first record</summary><pre class="rs-raw">{_e(sample)}'
           f"</pre></details>" if sample else "")
        + "</div>"
    )
