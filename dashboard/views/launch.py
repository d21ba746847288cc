"""Escaped HTML for the Launch tab: a batch's progress and its finished episodes.

Pure functions of job status: no Gradio, no store; every outside string goes
through ``esc`` (see ``html``). Rows carry ``data-open="<episode id>"``: they
open that episode in the Episode tab (``assets/open_episode.js``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..background.jobs import CANCELLED, CANCELLING, FAILED, FINISHED, PREPARING, EpisodeRow, JobStatus
from .html import STATUS_CLASS, badge, chip, esc, fmt_num, heads, note, status_badge

TABLE_ROWS = 200  # the newest finished episodes shown live; the rest are in Browse
NUMERIC = frozenset({"sample", "reward", "turns", "tokens", "findings"})


def progress(status: JobStatus | None) -> str:
    """The live progress bar and counts of a batch."""
    if status is None:
        return note("No batch yet: choose the settings above and press Start.")
    pct = 100.0 * status.done / status.total if status.total else 0.0
    state = status.state
    cls = {FINISHED: "ok", FAILED: "bad", CANCELLED: "muted", CANCELLING: "warn"}.get(state, "info")
    counts = " ".join(chip(k, v, f"rs-st-{STATUS_CLASS.get(k, 'muted')}") for k, v in sorted(status.counts().items()))
    rate = f"{status.done / status.elapsed_s:.2f} ep/s" if status.elapsed_s > 0 and status.done else ""
    lines = [
        f'<div class="rs-job rs-job-{esc(state)}" data-state="{esc(state)}">',
        f'<div class="rs-job-head">{badge(state, cls)}<b>{status.done:,} / {status.total:,}</b> episodes'
        f'<span class="rs-dim"> · {status.elapsed_s:.1f} s{" · " + rate if rate else ""}</span>'
        + (f'<span class="rs-dim"> · run <code>{esc(status.run_id)}</code></span>' if status.run_id else "")
        + "</div>",
        f'<div class="rs-bar" role="progressbar" aria-valuemin="0" aria-valuemax="{status.total}" '
        f'aria-valuenow="{status.done}"><div class="rs-bar-fill rs-{cls}" style="width:{pct:.1f}%"></div></div>',
        f'<div class="rs-job-counts">{counts}'
        + (chip("mean reward", fmt_num(status.mean_reward)) if status.rows else "")
        + "</div>",
        f'<div class="rs-dim rs-job-plan">{esc(status.plan)}</div>',
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


def _row(r: EpisodeRow) -> str:
    return (
        f'<tr data-open="{esc(r.id)}" tabindex="0" title="open {esc(r.id)} in Episode">'
        f'<td><code>{esc(r.id)}</code></td><td>{esc(r.task_id)}</td><td class="rs-num">{r.sample_index}</td>'
        f"<td>{status_badge(r.status)}</td><td class=\"rs-num\">{esc(fmt_num(r.reward))}</td>"
        f'<td class="rs-num">{r.n_turns}</td><td class="rs-num">{r.n_tokens:,}</td>'
        f'<td class="rs-num">{r.n_findings or ""}</td><td class="rs-reason">{esc(r.reason)}</td></tr>'
    )


def finished_table(rows: Sequence[EpisodeRow]) -> str:
    """The newest finished episodes first (at most ``TABLE_ROWS``)."""
    if not rows:
        return '<div class="rs-dim">Finished episodes appear here as they end.</div>'
    shown = list(rows)[-TABLE_ROWS:][::-1]
    more = f'<div class="rs-dim">showing the newest {TABLE_ROWS} of {len(rows):,}</div>' if len(rows) > TABLE_ROWS else ""
    head = heads(("episode", "task", "sample", "status", "reward", "turns", "tokens", "findings", "reason"), NUMERIC)
    return (f'{more}<div class="rs-table-wrap"><table class="rs-table rs-live"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(_row(r) for r in shown)}</tbody></table></div>')


