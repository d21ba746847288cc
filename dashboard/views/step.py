"""Escaped HTML for the Step tab: the conversation, its header, a pending generation, the last commit.

Pure functions of records: no Gradio, no store; every outside string goes
through ``esc`` (see ``html``). Links carrying ``data-open="<episode id>"``
open that episode in the Episode tab (``assets/open_episode.js``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine import ActionPreview, Episode, ForkReport, Generation, Message, Turn

from .html import call_block, chip, error_line, esc, fmt_num, note, status_badge, text_block, to_json

TOKEN_CHIPS = 2000  # a pending generation longer than this shows its first tokens only


def _message(m: Message, extra: str = "") -> str:
    who = f'<span class="rs-role">{esc(m.role)}</span>' + (f" · {esc(m.name)}" if m.name else "") + extra
    return (f'<div class="rs-msg rs-role-{esc(m.role if m.role in ("system", "user", "assistant", "tool") else "other")}">'
            f'<div class="rs-msg-head">{who}</div>{text_block(m.content)}</div>')


def _turn_chips(t: Turn) -> str:
    chips = [chip("reward", fmt_num(t.reward), "rs-pos" if t.reward > 0 else ""), chip("done", "yes" if t.done else "no")]
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
        parts.extend(call_block(c.name, c.arguments, raw=c.raw_arguments) for c in t.tool_calls)
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
        f"<b>{esc(ep.env)}</b> · task <code>{esc(ep.task_id)}</code>",
        chip("next turn", ep.n_turns),
        chip("preset", ep.preset or "n/a"),
        chip("policy", backend),
        chip("user", "you" if plays_user else (ep.config.user or "env")),
        chip("reward", fmt_num(ep.reward)),
        chip("tokens", f"{ep.n_tokens:,}"),
    ]
    lines = [f'<div class="rs-header rs-step-header"><div class="rs-head-line">{" ".join(bits)}</div>']
    if ep.reason:
        lines.append(f'<div class="rs-reason">{esc(ep.reason)}</div>')
    if report is not None:
        kind = "ok" if report.ok else "warn"
        lines.append(note(report.summary(), kind))
        for n in report.notes:
            lines.append(note(n, "info"))
        for d in report.divergences[:6]:
            where = "start" if d.turn < 0 else f"turn {d.turn}"
            lines.append(
                f'<details class="rs-fold rs-divergence"><summary>{esc(where)}: {esc(d.field)} differs'
                f'{" — " + esc(d.note) if d.note else ""}</summary><div class="rs-side">'
                f'<div><div class="rs-dim">stored</div><pre class="rs-json">{esc(to_json(d.stored))}</pre></div>'
                f'<div><div class="rs-dim">now</div><pre class="rs-json">{esc(to_json(d.now))}</pre></div></div></details>'
            )
    if saved_id:
        lines.append(f'<div class="rs-saved-as">saved as <a href="?episode={esc(saved_id)}" data-open="{esc(saved_id)}">'
                     f"<code>{esc(saved_id)}</code></a>"
                     + (f" (parent <code>{esc(ep.parent_id)}</code>, fork turn {ep.fork_turn})" if ep.parent_id else "")
                     + "</div>")
    lines.append("</div>")
    return "".join(lines)


def _token_chips(texts: Sequence[str], gen: Generation, special: set[int]) -> str:
    ids = gen.token_ids
    lps = gen.logprobs
    out = []
    for i, (tid, text) in enumerate(zip(ids[:TOKEN_CHIPS], texts[:TOKEN_CHIPS])):
        lp = lps[i] if lps is not None and i < len(lps) else None
        title = f"#{i} · id {tid} · logprob {fmt_num(lp)}"
        cls = "tok tok-train" + (" tok-special" if tid in special else "")
        shown = text.replace("\n", "↵\n") if text else "\u2009"
        out.append(f'<span class="{cls}" title="{esc(title)}">{esc(shown)}</span>')
    more = f'<span class="rs-dim"> … {len(ids) - TOKEN_CHIPS:,} more</span>' if len(ids) > TOKEN_CHIPS else ""
    return f'<div class="rs-tokens rs-step-tokens">{"".join(out)}{more}</div>'


def preview_block(preview: ActionPreview, needs_reply: bool) -> str:
    """What committing the text would do: the parsed tool calls, a parse error, or a message to the user."""
    if preview.parse_error is not None:
        return (error_line("parse error", preview.parse_error)
                + '<div class="rs-dim">Committing it records the parse error (the preset decides: feedback or abort).</div>')
    if preview.calls:
        return "".join(call_block(c.name, c.arguments) for c in preview.calls)
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
             '<h5 class="rs-h">Raw text</h5>', f'<pre class="rs-raw">{esc(gen.text)}</pre>']
    if texts is not None:
        parts += ['<details class="rs-fold" open><summary>Tokens (hover for id and logprob)</summary>',
                  _token_chips(texts, gen, special), "</details>"]
    parts.append("</div>")
    return "".join(parts)


def generating(turn: int, tokens: int, text: str, elapsed: float, first_token_s: float | None,
               prefill: tuple[int, int, int] | None = None) -> str:
    """A generation still arriving: how far the model has read the prompt (a local model), then the tokens so far
    and their text (a backend that does not stream shows none)."""
    chips = [chip("turn", turn), chip("tokens so far", tokens), chip("elapsed", f"{elapsed:.1f} s")]
    if first_token_s is not None:
        chips.append(chip("first token after", f"{first_token_s:.2f} s"))
    if text:
        body = f'<pre class="rs-raw">{esc(text)}</pre>'
    elif prefill is not None and first_token_s is None:
        done, total, cached = prefill
        share = done / total if total else 1.0
        reused = f", {cached:,} of them reused from earlier turns" if cached else ""
        body = (f'<div class="rs-prefill">Reading the prompt: {done:,} of {total:,} tokens{reused} '
                f'({share:.0%}, {elapsed:.1f} s)<progress max="{total}" value="{done}"></progress></div>')
    else:
        body = ('<div class="rs-dim">Waiting for the first token (a server backend shows the reply when it is whole).'
                '</div>')
    return (f'<div class="rs-pending rs-generating"><div class="rs-head-line">{"".join(chips)}</div>'
            f'<h5 class="rs-h">Generating… (Cancel stops it)</h5>{body}</div>')


def committed(turn: Turn | None, ep: Episode) -> str:
    """The result of the last commit: observation, reward, done, and the episode's state."""
    if turn is None:
        return ""
    chips = [chip("turn", turn.index), chip("reward", fmt_num(turn.reward), "rs-pos" if turn.reward > 0 else ""),
             chip("done", "yes" if turn.done else "no"), chip("episode", ep.status.value)]
    if turn.action is not None:
        chips.append(chip("action", turn.action.name))
    parts = [f'<div class="rs-committed"><div class="rs-head-line">{"".join(chips)}</div>']
    if turn.parse_error:
        parts.append(error_line("parse error", turn.parse_error))
    parts.extend(_message(m) for m in turn.observation)
    if not turn.observation:
        parts.append('<div class="rs-dim">no observation</div>')
    for f in turn.findings:
        parts.append(f'<div class="rs-finding rs-sev-{esc(f.severity.value)}"><b>{esc(f.kind)}</b>: {esc(f.message)}</div>')
    if ep.reason:
        parts.append(note(f"The episode ended: {ep.status.value} ({ep.reason}).",
                          "ok" if ep.status.value == "completed" else "warn"))
    parts.append("</div>")
    return "".join(parts)


