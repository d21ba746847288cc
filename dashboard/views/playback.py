"""Escaped HTML for the Episode tab's playback: one turn as the model met it, and re-execution verdicts.

Pure functions of records (and a tokenizer, to decode prompt ids): no
Gradio, no store; every outside string goes through ``esc`` (see ``html``).
Where turn k lies, what its prompt was, the rewards and findings up to it are
the engine's questions (``turn_span``, ``prompt_at``, ``reward_so_far``,
``findings_up_to``); this module shows the answers.

The card for turn k carries the token positions the playback script needs
to mark the Episode tab's token view (``data-gs``/``data-ge``: the turn's
generated tokens, ``data-cut``: where later turns begin), so a step sends a
small card and the big token view is only restyled in the browser.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from engine import (
    Episode,
    PromptView,
    ReplayResult,
    RewardSoFar,
    Turn,
    TurnEntropy,
    TurnSpan,
    TurnVerdict,
    common_prefix,
    findings_up_to,
    reward_so_far,
    rewrites_at,
    turn_span,
)

# The timeline's own message and finding blocks, so a turn looks the same in
# playback as in the timeline below it.
from .alternatives import forks_block
from .episode import finding_block, message_block
from .html import badge, call_block, chip, error_line, esc, fmt_num, json_details, note, text_block, to_json
from .limits import PROMPT_CHARS, Budget, cut_note

VALUE_CHARS = 600  # stored/now values in a verdict longer than this fold


# -- what the record lacks ------------------------------------------------------


def missing(ep: Episode) -> list[str]:
    """What an episode's record does not carry, said once above the turn (imports carry less)."""
    out: list[str] = []
    kind = ep.source.kind
    if not ep.messages:
        out.append("no chat messages stored: the conversation is what each turn's tokens show")
    if ep.turns and all(t.action is None and t.parse_error is None and not t.observation for t in ep.turns):
        out.append("no parsed actions and no env answers stored"
                   + (f" (imported from {kind}: turns are the runs of loss-mask 1 tokens)" if kind != "live" else ""))
    if kind != "live" and not ep.tokenizer:
        out.append(f"imported from {kind} without a tokenizer name: texts are decoded with the embedded "
                   "SmolLM2 tokenizer and are wrong if another one made these ids")
    return out


# -- the card -----------------------------------------------------------------


def _h(title: str, extra: str = "") -> str:
    return f'<h5 class="rs-pb-h">{esc(title)}{extra}</h5>'


def _reward_chips(r: RewardSoFar, k: int) -> str:
    def cls(x: float) -> str:
        return "rs-pos" if x > 0 else "rs-neg" if x < 0 else ""

    parts = [chip(f"env reward at T{k}", fmt_num(r.turn), cls(r.turn)),
             chip(f"env reward so far (Σ T0–T{k})", fmt_num(r.total), cls(r.total))]
    if r.shaped_turn is not None and r.shaped_total is not None:
        parts.append(chip(f"shaped at T{k}", fmt_num(r.shaped_turn), cls(r.shaped_turn)))
        parts.append(chip("shaped so far", fmt_num(r.shaped_total), cls(r.shaped_total)))
    if r.ret is not None:
        parts.append(chip(f"return G{k}", fmt_num(r.ret), cls(r.ret)))
    parts.append(chip("episode reward", fmt_num(r.final), cls(r.final)))
    return "".join(parts)


def _prompt_block(p: PromptView, previous: str | None, t: Turn, span: TurnSpan, k: int) -> str:
    chips = [chip("tokens", f"{p.n_tokens:,}")]
    g = t.generation
    if g is not None and g.prompt_tokens and g.prompt_tokens != p.n_tokens:
        chips.append(chip("backend counted", f"{g.prompt_tokens:,}", "rs-warn"))
    if g is not None and g.cached_tokens:
        chips.append(chip("cached", f"{g.cached_tokens:,}"))
    notes: list[str] = []
    if p.text is None:
        return (_h(f"Prompt at turn {k}") + "".join(chips)
                + note(p.note or "prompt not available", "warn"))
    shared = 0
    if previous is not None and k > 0:
        shared = common_prefix(previous, p.text)
        rewritten = rewrites_at(previous, p.text)
        if rewritten is not None:
            notes.append(note(
                f"this prompt rewrites the previous turn's prompt from character {rewritten:,} on (the chat "
                "template is not prefix-stable): the highlighted text replaces earlier text", "warn"))
        chips.append(chip(f"new since T{k - 1}", f"{len(p.text) - shared:,} chars"))
    if p.tokens_differ_at is not None:
        notes.append(note(
            f"the episode's tokens [0, {p.n_tokens:,}) decode to a different text from character "
            f"{p.tokens_differ_at:,}: the trainer's tokens are not what the model was sent", "warn"))
    # Past the display limit only the prompt's end is sent: where this turn's new text is.
    skip = max(len(p.text) - PROMPT_CHARS, 0)
    head = (f'<span class="rs-cut">{esc(cut_note(skip).replace("more", "earlier", 1))}</span>\n' if skip else "")
    if previous is not None and k > 0:
        # What the previous turn's prompt already held reads dimmer than what this turn added.
        body = (f'{head}<span class="rs-pb-old">{esc(p.text[skip:max(shared, skip)])}</span>'
                f'<span class="rs-pb-new">{esc(p.text[max(shared, skip):])}</span>')
    else:
        body = head + esc(p.text[skip:])  # turn 0: nothing is "new since" anything
    jump = (f'<a class="rs-jump" href="#" data-pb-tok="{span.gen_start}">its tokens and the turn\'s generation '
            "in the token view ↓</a>")
    return (
        _h(f"Prompt the model received at turn {k}")
        + f'<div class="rs-pb-chips">{"".join(chips)} {jump}</div>'
        + f'<div class="rs-pb-source rs-dim">{esc(p.note)}</div>{"".join(notes)}'
        # column-reverse keeps the box scrolled to its end, where a turn's new text is.
        + f'<div class="rs-pb-promptbox"><pre class="rs-pb-prompt">{body}</pre></div>'
    )


def _generation_block(t: Turn, decoded: str | None, budget: Budget) -> str:
    g = t.generation
    if g is None:
        return _h("Generated") + '<div class="rs-dim">no generation stored for this turn</div>'
    chips = [chip("tokens", f"{len(g.token_ids):,}"),
             chip("finish", g.finish_reason, "rs-warn" if g.finish_reason != "stop" else "")]
    if g.latency_s:
        chips.append(chip("latency", f"{g.latency_s * 1000:.1f} ms" if g.latency_s < 1 else f"{g.latency_s:.2f} s"))
    if g.logprobs is None:
        chips.append(chip("logprobs", "none stored"))
    if g.weight_version is not None:
        chips.append(chip("weights", str(g.weight_version)))
    if g.model:
        chips.append(chip("model", g.model))
    detail = f'<div class="rs-dim">{esc(g.finish_detail)}</div>' if g.finish_detail else ""
    if g.text:
        text = text_block(g.text, "rs-text rs-pb-gen", budget)
    elif decoded:
        text = ('<div class="rs-pb-source rs-dim">no text stored: decoded from the generated ids</div>'
                + text_block(decoded, "rs-text rs-pb-gen", budget))
    else:
        text = '<div class="rs-dim">no text stored: the ids are in the token view</div>'
    return _h("Generated (raw)") + f'<div class="rs-pb-chips">{"".join(chips)}</div>{detail}{text}'


def _action_block(t: Turn, budget: Budget) -> str:
    parts = [call_block(c.name, c.arguments, budget=budget, raw=c.raw_arguments) for c in t.tool_calls]
    if t.parse_error:
        parts.append(error_line("parse error", t.parse_error))
    a = t.action
    if a is not None and a.is_respond and not t.tool_calls:
        parts.append('<div class="rs-call"><span class="rs-call-k">respond</span> (text to the user)</div>'
                     + text_block(a.text, budget=budget))
    elif a is not None and not t.tool_calls:
        parts.append(call_block(a.name, a.arguments, "action", budget))
    if not parts:
        said = ("no action reached the env (the generation was cut off)" if t.generation is not None and
                t.generation.finish_reason != "stop" else "no parsed action stored for this turn")
        parts.append(f'<div class="rs-dim">{esc(said)}</div>')
    return _h("Parsed action") + "".join(parts)


def _env_block(t: Turn, budget: Budget, live: bool = True) -> str:
    chips = chip("reward", fmt_num(t.reward)) + chip("done", "yes" if t.done else "no")
    body = "".join(message_block(m, budget) for m in t.observation) or '<div class="rs-dim">no observation stored</div>'
    info = json_details("env info", t.info, budget) if t.info else ""
    if t.raw_observation:
        info = json_details("raw tool output, before truncation", list(t.raw_observation), budget) + info
    # With no action (a parse error in feedback mode) the observation is the loop's own reply, not the env's. An
    # import records no action: what followed the reply is the record's messages, whoever wrote them.
    title = ("Env answered" if t.action is not None or not t.observation else
             "Loop's feedback (the env was not called)" if live else "What followed (the record's messages)")
    return _h(title) + f'<div class="rs-pb-chips">{chips}</div>{body}{info}'


def _findings_block(ep: Episode, k: int) -> str:
    found, nowhere = findings_up_to(ep, k)
    at_k = sum(1 for f in found if f.turn == k)
    head = _h(f"Findings up to turn {k}", f' <span class="rs-dim">({len(found)}; {at_k} at this turn)</span>')
    if not found and not nowhere:
        return head + f'<div class="rs-dim">{"none so far" if ep.checked else "none: no fidelity checks ran"}</div>'
    items = "".join(
        f'<div class="{"rs-pb-now" if f.turn == k else "rs-pb-earlier"}">'
        f'<span class="rs-pb-fturn">T{esc(f.turn if f.turn is not None else "?")}</span>{finding_block(f, with_evidence=False)}</div>'
        for f in reversed(found)  # newest first: what this turn added is what the researcher stepped to see
    )
    loose = (f'<div class="rs-dim rs-pb-loose">{len(nowhere)} episode-wide finding{"s" if len(nowhere) != 1 else ""} '
             "located at no turn (see the findings list above)</div>") if nowhere else ""
    return head + f'<div class="rs-pb-findings">{items}</div>{loose}'


def _verdict_chip(v: TurnVerdict | None, latest: ReplayResult | None) -> str:
    if latest is None:
        return ""
    if not latest.reproducible:
        return chip("re-executed", "not reproducible", "rs-warn")
    if v is None:
        return chip("re-executed", "not reached")
    return chip("re-executed", "ok") if v.ok else chip("re-executed", f"diverged on {v.what}", "rs-pb-bad")


def render_turn(ep: Episode, k: int, prompt: PromptView, previous_prompt: str | None = None,
                latest: ReplayResult | None = None, decoded_generation: str | None = None,
                follow: bool = True, entropy: TurnEntropy | None = None, texts: dict[int, str] | None = None) -> str:
    """The playback card of turn ``k``: prompt, generation and its forks, action, env answer, rewards and findings
    so far.

    ``previous_prompt`` (turn k-1's) marks what is new in this one;
    ``decoded_generation`` stands in for a generation stored without text;
    ``follow`` asks the playback script to scroll the timeline and token view to the turn;
    ``entropy`` is the turn's (``engine.turn_entropy``), its forks' ids shown with ``texts`` (``fork_ids``).
    Its texts are cut to the display limits (``limits``: one ``Budget`` for the card, the prompt's end).
    """
    budget = Budget()
    t = ep.turns[k]
    span = turn_span(ep, k)
    n = ep.n_turns
    verdict = next((v for v in latest.turns if v.turn == t.index), None) if latest is not None else None
    lacks = missing(ep)
    gaps = ('<div class="rs-note rs-info rs-pb-lacks"><b>This record does not carry everything:</b><ul>'
            + "".join(f"<li>{esc(m)}</li>" for m in lacks) + "</ul></div>") if lacks else ""
    return (
        f'<div class="rs-pb-card" data-episode="{esc(ep.id)}" data-k="{k}" data-n="{n}" data-gs="{span.gen_start}" '
        f'data-ge="{span.gen_end}" data-cut="{span.cut}" data-p="{span.prompt_len}" data-follow="{int(follow)}">'
        f'<div class="rs-pb-head"><span class="rs-pb-turn">Turn {t.index}</span>'
        f'<span class="rs-dim">of {n} (T0–T{n - 1})</span>{_reward_chips(reward_so_far(ep, k), k)}'
        f"{_verdict_chip(verdict, latest)}</div>{gaps}"
        '<div class="rs-pb-grid">'
        f'<div class="rs-pb-col">{_prompt_block(prompt, previous_prompt, t, span, k)}</div>'
        f'<div class="rs-pb-col">{_generation_block(t, decoded_generation, budget)}'
        f'{forks_block(ep, entropy, texts or {}) if entropy is not None else ""}{_action_block(t, budget)}'
        f"{_env_block(t, budget, ep.source.live)}"
        f"{_findings_block(ep, k)}</div>"
        "</div></div>"
    )


def render_no_turns(ep: Episode | None, message: str = "") -> str:
    """The card when there is nothing to play back."""
    if ep is None:
        return note(message or "Open an episode to play it back turn by turn.", "info")
    return note(message or f"Episode {ep.id} has no turns to play back.", "info")


# -- re-execution -----------------------------------------------------------------


def _value(x: Any, other: Any) -> str:
    """A stored or re-executed value, with the part that differs from ``other`` marked."""
    if x is None:
        return '<span class="rs-dim">none</span>'
    a = x if isinstance(x, str) else to_json(x)
    b = other if isinstance(other, str) else ("" if other is None else to_json(other))
    at = common_prefix(a, b) if a != b else len(a)
    # The common tail too (closing brackets, the rest of a sentence), never overlapping the head.
    end = len(a) - min(common_prefix(a[::-1], b[::-1]), len(a) - at, len(b) - at) if a != b else len(a)
    head, mid, tail = a[:at], a[at:end], a[end:]
    body = (f'<pre class="rs-json rs-pb-val">{esc(head)}<mark>{esc(mid)}</mark>{esc(tail)}</pre>' if a != b
            else f'<pre class="rs-json rs-pb-val">{esc(a)}</pre>')
    if len(a) <= VALUE_CHARS:
        return body
    return (f'<details class="rs-fold"><summary>{len(a):,} chars, differs from character {at:,}</summary>'
            f"{body}</details>")


def _changes(v: TurnVerdict) -> str:
    """A differing turn's two cells: what changed path by path (the engine's words), or, for a verdict stored
    before diffs were kept, the stored and current values with the differing part marked."""
    if not v.paths:
        return f"<td>{_value(v.stored, v.now)}</td><td>{_value(v.now, v.stored)}</td>"
    items = "".join(f'<li data-change="{esc(c.change)}">{esc(c.describe())}</li>' for c in v.diff)
    return f'<td colspan="2"><ul class="rs-pb-diff">{items}</ul></td>'


def _kind_badge(res: ReplayResult) -> str:
    cls = {"reproduced": "ok", "not_reproducible": "muted"}.get(res.kind, "bad")
    label = {"reproduced": "reproduced", "not_reproducible": "not reproducible"}.get(res.kind, "diverged")
    return badge(label, cls)


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "n/a"


def render_verdict(res: ReplayResult, fresh_run: bool = False) -> str:
    """One re-execution: its verdict, the up-front reason when it cannot reproduce, and the per-turn table."""
    when = "just now" if fresh_run else f"at {_when(res.created_at)}"
    head = (f'<div class="rs-pb-vhead">{_kind_badge(res)}<b>{esc(res.headline())}</b>'
            f'<span class="rs-dim">re-executed {esc(when)}'
            f'{esc(f" · turns 0–{res.until}") if res.until is not None else ""}</span></div>')
    if not res.reproducible:
        return head + note(f"Not reproducible, so not compared: {res.reason}", "warn")
    first = res.divergence_index
    rows = []
    for i, v in enumerate(res.turns):
        bad = not v.ok
        mark = '<span class="rs-pb-first">⚑ first divergence</span> ' if i == first else ""
        rows.append(
            f'<tr class="{"rs-pb-div" if bad else "rs-pb-ok"}">'
            f'<td class="c-num"><a href="#" data-pb-turn="{v.turn}" title="play back turn {v.turn}">T{v.turn}</a></td>'
            f'<td>{mark}{"diverged" if bad else "ok"}</td><td>{esc(v.what)}</td>'
            f"{_changes(v) if bad else '<td></td><td></td>'}"
            f'<td class="rs-pb-vnote">{esc(v.note.splitlines()[0] if v.note and bad else v.note)}</td></tr>'
        )
    if not rows:
        rows.append('<tr><td colspan="6" class="rs-dim">no turns compared</td></tr>')
    table = ('<div class="rs-pb-vtable"><table class="rs-table"><thead><tr><th>turn</th><th>verdict</th>'
             "<th>what</th><th>stored</th><th>now</th><th>note</th></tr></thead>"
             f"<tbody>{''.join(rows)}</tbody></table></div>")
    return head + table


def render_replays(stored: Sequence[dict[str, Any]], fresh_run: bool = False, error: str = "") -> str:
    """The newest re-execution in full and earlier ones listed (``stored``: ``Store.replays``, newest first)."""
    parts = ['<div class="rs-pb-replay">']
    if error:
        parts.append(note(error, "error"))
    if not stored:
        parts.append('<div class="rs-dim">Not re-executed yet. "Re-execute" resets the env on the same task, '
                     "feeds it the stored actions and compares every observation, reward and done flag.</div>")
        return "".join(parts) + "</div>"
    results = [ReplayResult.from_dict(d) for d in stored]
    parts.append(render_verdict(results[0], fresh_run))
    if len(results) > 1:
        items = "".join(f'<li>{_kind_badge(r)} <span class="rs-dim">{esc(_when(r.created_at))}</span> '
                        f"{esc(r.headline())}</li>" for r in results[1:])
        parts.append(f'<details class="rs-fold rs-pb-earlier-runs"><summary>{len(results) - 1} earlier '
                     f're-execution{"s" if len(results) > 2 else ""}</summary><ul>{items}</ul></details>')
    return "".join(parts) + "</div>"
