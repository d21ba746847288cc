"""Escaped HTML for the Runs tab: a watch's state and events, the run's alerts and its table of steps.

Pure functions of watch status and step aggregates: no Gradio, no store. Paths, run ids, kinds and
messages come from outside and go through ``esc`` (see ``html``). Rows of the step table carry
``data-step``; ``assets/run_steps.js`` sends ``{"step": N}`` to the server when one is chosen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from engine import ENTROPY_DROP, RunOverview, RunSummary, StepChange, StepStats, WatchEvent

from ..background.watching import FAILED, STOPPED, STOPPING, WATCHING, WatchStatus
from .html import badge, chip, esc, heads, note

LOG_LINES = 40
"""Events shown under a watch, newest last."""

_STATE_CLASS = {WATCHING: "info", STOPPING: "warn", STOPPED: "muted", FAILED: "bad"}
_EVENT_CLASS = {"done": "ok", "partial": "ok", "waiting": "muted", "failed": "bad"}
NUMERIC = frozenset({"step", "episodes", "reward", "min … max", "truncated", "aborted", "response tokens", "entropy",
                     "near-zero entropy"})


def _clock(ts: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts else "—"


def _relative(path: str, folder: str) -> str:
    """``path`` inside ``folder`` as a relative path (shorter to read), else as it is."""
    try:
        rel = os.path.relpath(path, folder)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def event_line(e: WatchEvent, folder: str) -> str:
    """One event as a log line: time, file (relative to the folder), what happened."""
    took = f" in {e.seconds:.1f} s" if e.state in ("done", "partial") else ""
    line = e.line().replace(e.path, _relative(e.path, folder), 1)
    return (f'<div class="rs-ev rs-ev-{_EVENT_CLASS.get(e.state, "muted")}" data-state="{esc(e.state)}">'
            f'<span class="rs-dim">{_clock(e.at)}</span> {esc(line)}{took}</div>')


def watch_status(status: WatchStatus | None, others: Sequence[WatchStatus] = ()) -> str:
    """A watch's state, counts and recent events; ``others`` are the other watches still running."""
    also = ""
    if others:
        items = ", ".join(f"<code>{esc(o.folder)}</code> (run <code>{esc(o.run_id)}</code>)" for o in others)
        also = (f'<div class="rs-dim rs-watch-others">Also watching: {items}. Type a folder and press Start to '
                "show its watch here.</div>")
    if status is None:
        return note("No watch yet: type a training run's dump folder above and press Start.") + also
    state = status.state
    cls = _STATE_CLASS.get(state, "muted")
    head = (f'<div class="rs-job-head">{badge(state, cls)}'
            f"<code>{esc(status.folder)}</code><span class=\"rs-dim\">({esc(status.fmt)}) → run</span>"
            f"<code>{esc(status.run_id)}</code></div>")
    counts = (chip("new episodes", f"{status.new:,}") + chip("file reads", f"{status.reads:,}")
              + (chip("failed", f"{status.failed:,}", "rs-st-bad") if status.failed else "")
              + chip("last look", _clock(status.last_look)))
    events = status.events[-LOG_LINES:]
    # Newest first in the markup: the log box lays it out bottom-up, so it stays scrolled to the newest.
    log = ("".join(event_line(e, status.folder) for e in reversed(events)) if events
           else '<div class="rs-dim">Nothing to read yet: new dump files show here as the trainer writes them.</div>')
    more = (f'<div class="rs-dim">the last {LOG_LINES} of {len(status.events)} events</div>'
            if len(status.events) > LOG_LINES else "")
    lines = [f'<div class="rs-job rs-watch" data-state="{esc(state)}">', head,
             f'<div class="rs-job-counts">{counts}</div>', more, f'<div class="rs-watch-log">{log}</div>']
    for spec, why in status.tokenizer_errors.items():
        lines.append(note(f"Tokenizer {spec} unavailable, token checks skipped: {why}", "warn"))
    if state == STOPPING:
        lines.append(note("Stopping after the file in hand…", "warn"))
    elif state == STOPPED:
        lines.append(note(f"Stopped. {status.new:,} new episodes from {status.reads:,} file reads are stored; a new "
                          "watch of this folder goes on where this one stopped.", "info"))
    elif state == FAILED:
        lines.append(note(f"The watch stopped on an error: {status.error}", "error"))
    lines.append("</div>")
    return "".join(lines) + also


def run_label(r: RunSummary) -> str:
    """A run as the run dropdown lists it."""
    steps = f"step {r.first_step}" if r.n_steps == 1 else f"steps {r.first_step}–{r.last_step}"
    return f"{r.run_id} · {steps} · {r.n_episodes:,} episodes"


def alerts_note(stats: Sequence[StepStats], marked: Sequence[StepChange], limit: int = 6) -> str:
    """The answer to "when did the data go wrong?": the steps where a share jumped, or that none did."""
    if not stats:
        return note("No steps yet: a run appears here once episodes with a rollout step are stored (watch its "
                    "dump folder above, or `rollscope watch DIR --format slime`).")
    if len(stats) < 2:
        return note(f"One rollout step so far (step {stats[0].step}): a change shows from the second step on, "
                    "against the step before it; this step's own shares are in the table.")
    if not marked:
        entropy = (" Nor did the entropy collapse (the share of near-zero-entropy tokens rising by 20 points, or the "
                   f"mean entropy falling to {ENTROPY_DROP:.0%} of the step before's or less)."
                   if any(s.entropy_tokens for s in stats) else "")
        unchecked, n = sum(s.unchecked for s in stats), sum(s.n for s in stats)
        caveat = (f" {unchecked:,} of the {n:,} episodes were not checked: their root errors are unknown, and a step "
                  "none of whose episodes were checked is compared on none (rollscope check runs the checks)."
                  if unchecked else "")
        return note("No jumps: at no step did the share of episodes with root errors, aborted or truncated rise "
                    f"by 20 points or more.{entropy}{caveat}", "warn" if unchecked else "ok")
    first = marked[0]
    items = "".join(f"<li>{esc(a.text())}</li>" for a in marked[:limit])
    more = f"<li>and {len(marked) - limit} more</li>" if len(marked) > limit else ""
    return (f'<div class="rs-note rs-error rs-run-alerts"><b>The data changed at step {first.step}</b> '
            f'<span class="rs-dim">(marked ⚠ in the plots and the table; click a step to see its episodes)</span>'
            f"<ul>{items}{more}</ul></div>")


def unchecked_note(unchecked: int, n: int) -> str:
    """That ``unchecked`` of ``n`` finished episodes have had no check, so their lack of root errors says nothing."""
    if not unchecked:
        return ""
    what = "not checked" if unchecked == n else f"{unchecked:,} not checked"
    return (f'<span class="rs-unchecked" title="no fidelity check ran on {unchecked:,} of these {n:,} episodes '
            f'(imported without --check): rollscope check runs them">{what}</span>')


def _root_cell(s: StepStats) -> str:
    more = unchecked_note(s.unchecked, s.n)
    if not s.with_errors:
        return more
    kinds = ", ".join(f"{k} {n}" for k, n in list(s.root_kinds.items())[:3])
    return (f'<span class="rs-bad-text">{s.with_errors:,}</span> <span class="rs-dim">({s.error_rate or 0:.0%})'
            f"{' · ' + esc(kinds) if kinds else ''}</span>" + (f" · {more}" if more else ""))


def _pct(part: int, rate: float) -> str:
    return f"{rate:.0%} <span class=\"rs-dim\">({part:,})</span>" if part else "0%"


def _entropy_cells(s: StepStats) -> str:
    """The step's mean entropy and share of near-zero-entropy tokens ("—" where it knows none)."""
    if s.near_zero_rate is None or s.entropy_mean is None:
        return '<td class="rs-num rs-dim">—</td><td class="rs-num rs-dim">—</td>'
    return (f'<td class="rs-num" title="over {s.entropy_tokens:,} generated tokens">{s.entropy_mean:.3g}</td>'
            f'<td class="rs-num">{_pct(s.near_zero_entropy, s.near_zero_rate)}</td>')


def step_table(stats: Sequence[StepStats], marked: Sequence[StepChange] = ()) -> str:
    """The run's steps, newest first; a step marked by an alert is highlighted, and each row opens Browse. A run
    that recorded entropy gets its mean (nats) and share of near-zero-entropy tokens per step."""
    if not stats:
        return ""
    flagged: dict[int, list[str]] = {}
    for a in marked:
        flagged.setdefault(a.step, []).append(a.text())
    entropy = any(s.entropy_tokens for s in stats)
    head = heads(("step", "episodes", "reward", "min … max", "truncated", "aborted", "response tokens",
                  *(("entropy", "near-zero entropy") if entropy else ()), "root errors", ""), NUMERIC)
    rows = []
    for s in reversed(stats):
        why = flagged.get(s.step)
        title = "; ".join(why) if why else f"show step {s.step}'s episodes in Browse"
        rows.append(
            f'<tr data-step="{s.step}" tabindex="0" class="{"rs-step-alert" if why else ""}" title="{esc(title)}">'
            f'<td class="rs-num">{"⚠ " if why else ""}{s.step}</td><td class="rs-num">{s.n:,}</td>'
            f'<td class="rs-num">{s.reward_mean:.4g}</td>'
            f'<td class="rs-num rs-dim">{s.reward_min:.4g} … {s.reward_max:.4g}</td>'
            f'<td class="rs-num">{_pct(s.truncated, s.truncated_rate)}</td>'
            f'<td class="rs-num">{_pct(s.aborted, s.aborted_rate)}</td>'
            f'<td class="rs-num">{s.response_tokens:,.0f}</td>{_entropy_cells(s) if entropy else ""}'
            f'<td>{_root_cell(s)}</td>'
            '<td class="rs-step-open">episodes ▸</td></tr>')
    return (f'<div class="rs-table-wrap"><table class="rs-table rs-live rs-steps"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def runs_table(runs: Sequence[RunOverview]) -> str:
    """Every run of the database, the newest first: what it ran and how it went (``Store.run_overview``)."""
    if not runs:
        return note("No runs yet: Launch one, `rollscope run`, `rollscope demo`, an import or a watch makes one.")
    head = heads(("run", "started", "status", "env", "preset", "policy", "episodes", "mean reward",
                  "root errors"), ("episodes", "mean reward", "root errors"))
    rows = []
    for r in runs:
        label = r.run_id or "(imported, no run)"
        # A share of the episodes the checks ran on; those they did not are said apart, not counted as clean.
        checked = r.n_episodes - r.unchecked
        errors = (f'<span class="rs-bad-text">{r.with_errors:,}</span> <span class="rs-dim">'
                  f"({r.with_errors / checked:.0%})</span>" if r.with_errors else "0" if checked else "")
        more = unchecked_note(r.unchecked, r.n_episodes)
        errors += (" · " if errors and more else "") + more
        rows.append(
            f'<tr data-run="{esc(r.run_id or "")}">'
            f"<td><code>{esc(label)}</code></td><td class=\"rs-dim\">{esc(_when(r.started))}</td>"
            f"<td>{esc(r.status)}</td><td>{esc(r.envs)}</td><td>{esc(r.presets)}</td><td>{esc(r.policies)}</td>"
            f'<td class="rs-num">{r.n_episodes:,}</td><td class="rs-num">{r.mean_reward:.4g}</td>'
            f'<td class="rs-num">{errors}</td></tr>')
    return (f'<div class="rs-table-wrap"><table class="rs-table rs-live rs-runs"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else ""
