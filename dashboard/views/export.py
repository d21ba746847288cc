"""Escaped HTML for the Export tab: what a selection holds before anything is written.

Pure functions of episode summaries: no Gradio, no store; every outside string
goes through ``esc`` (see ``html``). Rows carry ``data-open="<episode id>"``:
they open that episode in the Episode tab (``assets/open_episode.js``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine import EpisodeSummary

from .html import esc, fmt_num, heads, note, status_badge

NUMERIC = frozenset({"reward", "turns"})


def export_preview(count: int, rows: Sequence[EpisodeSummary], sample: str, what: str, fmt_name: str) -> str:
    """How many episodes match, the first few, and the start of the first record in the chosen format."""
    if count == 0:
        return note(f"No episodes match ({what}).", "warn")
    head = heads(("episode", "env", "task", "status", "reward", "turns", "tags"), NUMERIC)
    body = "".join(
        f'<tr data-open="{esc(r.id)}" tabindex="0"><td><code>{esc(r.id)}</code></td><td>{esc(r.env)}</td>'
        f"<td>{esc(r.task_id)}</td><td>{status_badge(r.status)}</td><td class=\"rs-num\">{esc(fmt_num(r.reward))}</td>"
        f'<td class="rs-num">{r.n_turns}</td><td>{esc(", ".join(r.tags))}</td></tr>'
        for r in rows
    )
    more = f" (the first {len(rows)} shown, in the file's order: oldest first)" if count > len(rows) else ""
    return (
        f'<div class="rs-export-preview"><div class="rs-export-count"><b>{count:,}</b> episode{"s" if count != 1 else ""} '
        f"{'match' if count != 1 else 'matches'} ({esc(what)}){more}; format <b>{esc(fmt_name)}</b>.</div>"
        f'<div class="rs-table-wrap"><table class="rs-table rs-live"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        f"</table></div>"
        + (f'<details class="rs-fold" open><summary>Start of the first record</summary><pre class="rs-raw">{esc(sample)}'
           f"</pre></details>" if sample else "")
        + "</div>"
    )
