"""Escaped HTML for Browse's demo: the offer on an empty database, a build's progress, and what each demo tag
shows.

Pure functions of engine records and job status: no Gradio, no store; every outside string goes through
``esc`` (see ``html``).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine import DEMO_PARTS, DemoPart, DemoReport

from ..jobs import FAILED, DemoStatus
from .html import esc, heads, note

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
