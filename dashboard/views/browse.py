"""Escaped HTML for Browse's episode table: sortable headers, one row per episode.

A plain HTML table rather than ``gr.Dataframe``: the Dataframe sorts only
the rows it holds (one page), while here a header click asks the store to
sort the whole selection, and each id is a real ``?episode=ID`` link that can
be opened in a new tab or copied. ``assets/browse_table.js`` sends header and
row clicks to the server as events carrying ``{"sort": column}`` or ``{"open": id}``.

Also Browse's demo: the offer on an empty database, a build's progress, and what each demo tag shows. Pure
functions of engine records and job status: no Gradio, no store; every outside string goes through ``esc``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from engine import DEMO_PARTS, EXPORTERS, DemoPart, DemoReport, EpisodeSummary

from ..background.jobs import FAILED, DemoStatus
from .html import esc, fmt_num, heads, note
from .outcome import kind_badge

EXPORT_FORMATS = tuple(sorted(EXPORTERS))


@dataclass(frozen=True)
class Column:
    """A table column: header, the store column it sorts by (None: not sortable), CSS class, tooltip."""

    label: str
    sort: str | None
    cls: str = ""
    title: str = ""

    @property
    def name(self) -> str:
        """The name the column chooser uses: its header (``pick`` and ``star`` for the two without words)."""
        return {"": "pick", "★": "star"}.get(self.label, self.label)


COLUMNS: tuple[Column, ...] = (
    Column("", None, "c-pick", "tick rows to tag, star, export or compare them together"),
    Column("★", "starred", "c-star", "starred"),
    Column("id", "id", "c-id"),
    Column("env", "env", "c-env"),
    Column("task", "task_id", "c-task"),
    Column("status", "status", "c-status"),
    Column("reason", None, "c-reason", "why the episode ended: max turns reached, the env said done, an abort's message"),
    Column("reward", "reward", "c-reward c-num"),
    Column("outcome", "outcome", "c-outcome", "why the episode earned its reward, as the env that scored it says: "
                                              "open the episode for the calls, values and turn"),
    Column("turns", "n_turns", "c-turns c-num"),
    Column("tokens", "n_tokens", "c-tokens c-num"),
    Column("trainable", "n_trainable", "c-trainable c-num", "tokens with loss mask 1"),
    Column("findings", "n_findings", "c-findings c-num"),
    Column("diagnosis", None, "c-diag", "the root findings; what follows from them is in the episode"),
    Column("tags", None, "c-tags"),
    Column("preset", "preset", "c-preset"),
    Column("model", "model", "c-model"),
    Column("run", "run_id", "c-run"),
    Column("step", "rollout_step", "c-step c-num", "the trainer's rollout step an imported episode came from"),
    Column("group", "group_id", "c-group", "GRPO group and sample index"),
    Column("created", "created_at", "c-time"),
)
# Always shown, and sized to fit a 1440-pixel window together with the default choice: what says why.
KEY_COLUMNS = ("pick", "star", "id", "env", "task", "status", "reason", "reward", "outcome", "diagnosis")
OPTIONAL_COLUMNS = tuple(c.name for c in COLUMNS if c.name not in KEY_COLUMNS)
DEFAULT_COLUMNS = ("turns", "findings", "tags")


def shown_columns(chosen: Sequence[str] | None = None, order_by: str | None = None) -> tuple[Column, ...]:
    """The key columns, the chosen optional ones (``DEFAULT_COLUMNS`` when None) and the one the table is
    sorted by, in table order."""
    want = set(KEY_COLUMNS) | set(DEFAULT_COLUMNS if chosen is None else chosen)
    return tuple(c for c in COLUMNS if c.name in want or (order_by is not None and c.sort == order_by))


def _created(ts: float) -> str:
    return time.strftime("%m-%d %H:%M", time.localtime(ts)) if ts else ""


def _breakable(kind: str) -> str:
    """A finding kind, escaped, that a narrow cell wraps after an underscore rather than inside a word."""
    return esc(kind).replace("_", "_<wbr>")


def _diagnosis(s: EpisodeSummary, run_level: Sequence[str]) -> str:
    parts = s.diagnosis_parts()
    own = [(k, t) for k, t in parts if k not in run_level]
    text = "; ".join(t for _, t in own)
    cell = f'<span class="rs-clamp" title="{esc(text)}">{esc(text)}</span>' if text else ""
    if len(own) < len(parts):
        kinds = sorted({k for k, _ in parts if k in run_level})
        cell += (" " if cell else "") + (f'<span class="rs-run-chip" title="every episode of run {esc(s.run_id)} has it: '
                                         f'see the note above the table">run: {", ".join(map(_breakable, kinds))}</span>')
    return cell


def _cells(s: EpisodeSummary, run_level: Sequence[str], not_run: Sequence[str] = ()) -> dict[str, str]:
    findings = "0" if not_run and not s.n_findings and not s.unchecked else ""
    if s.n_findings:
        cls = "rs-bad-text" if s.n_errors else "rs-warn-text"
        findings = (f'<span class="{cls}" title="{s.n_errors} error(s), {s.n_findings - s.n_errors} warning(s)">'
                    f"{s.n_findings}</span>")
    if s.unchecked:
        findings += (f'{" " if findings else ""}<span class="rs-unchecked" title="no fidelity check ran on this '
                     'episode, so finding nothing means nothing yet: rollscope check runs them">not checked</span>')
    elif not_run:  # Store.checks_not_run: its findings are those of the checks that ran
        findings += (f' <span class="rs-unchecked rs-not-run" title="{esc(chr(10).join(not_run))}">{len(not_run)} '
                     f'check{"s" if len(not_run) != 1 else ""} not run</span>')
    group = (f'<a class="rs-group-link" href="?group={esc(s.group_id)}" title="the group\'s samples side by side">'
             f"{esc(s.group_id)}</a> #{s.sample_index}" if s.group_id else "")
    return {
        "pick": f'<input type="checkbox" class="rs-pick" data-id="{esc(s.id)}" aria-label="tick">',
        "star": '<span class="rs-star">★</span>' if s.starred else "",
        "id": f'<a class="rs-open" href="?episode={esc(s.id)}">{esc(s.id)}</a>',
        "env": esc(s.env),
        "task": f'<span class="rs-ellip" title="{esc(s.task_id)}">{esc(s.task_id)}</span>',
        "status": f'<span class="rs-pill rs-st-{esc(s.status)}">{esc(s.status)}</span>',
        "reason": f'<span class="rs-ellip" title="{esc(s.reason)}">{esc(s.reason)}</span>' if s.reason else "",
        "reward": esc(fmt_num(s.reward)),
        "outcome": kind_badge(s.outcome),
        "turns": str(s.n_turns),
        "tokens": f"{s.n_tokens:,}",
        "trainable": f"{s.n_trainable:,}",
        "findings": findings,
        "diagnosis": _diagnosis(s, run_level),
        "tags": " ".join(f'<span class="rs-tag" title="{esc(t)}">{esc(t)}</span>' for t in s.tags),
        "preset": esc(s.preset),
        "model": f'<span class="rs-ellip" title="{esc(s.model)}">{esc(s.model)}</span>',
        "run": f'<span class="rs-ellip" title="{esc(s.run_id or "")}">{esc(s.run_id or "")}</span>',
        "step": "" if s.rollout_step is None else str(s.rollout_step),
        "group": group,
        "created": esc(_created(s.created_at)),
    }


def _row(s: EpisodeSummary, columns: Sequence[Column], run_level: Sequence[str] = (), selected: bool = False,
         not_run: Sequence[str] = ()) -> str:
    cells = _cells(s, run_level, not_run)
    tds = "".join(f'<td class="{c.cls}">{cells[c.name]}</td>' for c in columns)
    mark = ' class="rs-selected"' if selected else ""
    return f'<tr data-id="{esc(s.id)}" tabindex="0"{mark}>{tds}</tr>'


def _pickbar() -> str:
    """What ticked rows can do together: the script (``browse_table.js``) counts them, enables what applies,
    and sends the action with the ticked ids."""
    formats = "".join(f'<option value="{esc(f)}"{" selected" if f == "jsonl" else ""}>{esc(f)}</option>'
                      for f in EXPORT_FORMATS)
    return (
        '<div class="rs-pickbar" role="toolbar" aria-label="ticked rows">'
        '<span class="rs-picked-n">0 ticked</span>'
        '<button type="button" class="rs-compare-picked" disabled>Compare ticked (0 of 2)</button>'
        '<input type="text" class="rs-bulk-tag" placeholder="tag" aria-label="tag for the ticked rows" maxlength="80">'
        '<button type="button" data-bulk="tag" disabled title="add this tag to every ticked row">Tag</button>'
        '<button type="button" data-bulk="untag" disabled title="remove this tag from every ticked row">Untag</button>'
        '<button type="button" data-bulk="star" disabled>★ Star</button>'
        '<button type="button" data-bulk="unstar" disabled>Unstar</button>'
        f'<select class="rs-bulk-format" aria-label="export format">{formats}</select>'
        '<button type="button" data-bulk="export" disabled title="write the ticked rows in this format and download '
        'the file">⬇ Export ticked</button>'
        '<button type="button" class="rs-unpick" disabled>Untick all</button>'
        "</div>"
    )


def render_table(rows: Sequence[EpisodeSummary], order_by: str, descending: bool, empty: str = "",
                 run_level: dict[str, tuple[int, list[str]]] | None = None, selected: str | None = None,
                 columns: Sequence[str] | None = None, not_run: dict[str, list[str]] | None = None) -> str:
    """The table of one page of episodes, with the key columns and the chosen ones (``shown_columns``); the
    header of the sort column shows its direction. Kinds every episode of a run has (``run_level``) are left
    out of the rows' diagnosis: the run's note says them once. The row of ``selected`` (the episode last
    opened) is marked. ``not_run`` (``Store.checks_not_run``): the notes of the checks that could not run on a row,
    counted beside its findings."""
    not_run = not_run or {}
    run_level = run_level or {}
    shown = shown_columns(columns, order_by)
    ths: list[str] = []
    for c in shown:
        if c.name == "pick":
            ths.append('<th class="c-pick"><input type="checkbox" class="rs-pick-all" '
                         'aria-label="tick every row of this page" title="tick every row of this page"></th>')
            continue
        if c.sort is None:
            tip = f' title="{esc(c.title)}"' if c.title else ""
            ths.append(f'<th class="{c.cls}"{tip}>{esc(c.label)}</th>')
            continue
        active = c.sort == order_by
        arrow = (" ▼" if descending else " ▲") if active else ""
        aria = ("descending" if descending else "ascending") if active else "none"
        tip = (c.title + " · " if c.title else "") + "sort by " + c.label
        ths.append(
            f'<th class="{c.cls} rs-sortable{" rs-sorted" if active else ""}" data-sort="{esc(c.sort)}" '
            f'aria-sort="{aria}" title="{esc(tip)}">{esc(c.label)}{arrow}</th>'
        )
    body = "".join(_row(s, shown, run_level.get(s.run_id or "", (0, []))[1], s.id == selected, not_run.get(s.id, ()))
                   for s in rows)
    if not rows:
        body = f'<tr class="rs-empty-row"><td colspan="{len(shown)}">{esc(empty or "No episodes.")}</td></tr>'
    return (
        _pickbar()
        + f'<div class="rs-table-wrap"><table class="rs-table"><thead><tr>{"".join(ths)}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def render_run_notes(run_level: dict[str, tuple[int, list[str]]]) -> str:
    """One note per run whose every episode has the same preset, template or source finding."""
    if not run_level:
        return ""
    items = "".join(
        f'<li>run <code>{esc(run)}</code>: {", ".join(f"<b>{esc(k)}</b>" for k in kinds)} in every one of its '
        f"{n:,} episodes (a property of its preset, template or source; left out of the rows below)</li>"
        for run, (n, kinds) in sorted(run_level.items()))
    return f'<ul class="rs-run-notes">{items}</ul>'


# -- Browse's demo -------------------------------------------------------------------------------------------------

FILTER_HINT = "choose a tag in the tags filter above to see its episodes, then open one"


def offer() -> str:
    """What the button next to it builds."""
    return ('<span class="rs-dim rs-demo-offer">or see what Rollscope finds: about 30 episodes of the scripted '
            "policy in seconds, each run tagged with what it shows (a clean batch, a history rewrite, an injected "
            "system block, missing generation prompts, a parse-error abort, a cut turn, a GRPO group without "
            "spread)</span>")


def guide(parts: Sequence[tuple[DemoPart, int]]) -> str:
    """A table of the demo's tags: how many episodes carry each, what the run is, what to look at."""
    rows = "".join(
        f'<tr data-tag="{esc(p.tag)}"><td><code>{esc(p.tag)}</code></td><td class="rs-num">{n:,}</td>'
        f"<td>{esc(p.title)}</td><td>{esc(p.look)}</td></tr>" for p, n in parts)
    return (f'<table class="rs-demo-guide"><thead><tr>{heads(["tag", "episodes", "run", "what to look at"], ["episodes"])}'
            f"</tr></thead><tbody>{rows}</tbody></table>")


def _skipped(report: DemoReport) -> str:
    return "".join(note(f"{p.run_id}: {why}", "warn") for p, why in report.skipped)


def built(report: DemoReport) -> str:
    """A finished build: what it wrote, where to look, and the guide."""
    head = (f"The demo is built: {report.n_episodes:,} episodes in {len(report.runs)} runs, in "
            f"{report.seconds:.1f} s. Each run shows one thing: {FILTER_HINT}.")
    return (f'<div class="rs-demo" data-state="finished">{note(head, "ok")}{_skipped(report)}'
            f"{guide([(r.part, r.n_episodes) for r in report.runs])}</div>")


def progress(status: DemoStatus) -> str:
    """A build as it runs (a line per part done), has failed, or has finished."""
    if status.report is not None:
        return built(status.report)
    if status.state == FAILED:
        return f'<div class="rs-demo" data-state="failed">{note(f"The demo was not built: {status.error}", "error")}</div>'
    lines = "".join(f"<li>{esc(line)}</li>" for line in status.lines)
    return (f'<div class="rs-demo" data-state="running">{note(f"Building the demo… {status.elapsed_s:.0f} s")}'
            f'<ul class="rs-demo-lines">{lines}</ul></div>')


def present(tag_counts: Sequence[tuple[str, int]]) -> str:
    """A folded guide to the demo's tags this database holds ('' when it holds none)."""
    counts = dict(tag_counts)
    parts = [(p, counts[p.tag]) for p in DEMO_PARTS if p.tag in counts]
    if not parts:
        return ""
    return (f'<details class="rs-demo rs-fold" data-state="present"><summary>This database holds the demo: '
            f"{esc(FILTER_HINT)} (what each tag shows)</summary>{guide(parts)}</details>")
