"""Escaped HTML for the Compare tab: two episodes side by side, aligned by turn.

Pure functions of ``engine.Comparison`` (and of ``engine.TokenParting``: the token where the two part, with both
tokens' probabilities under each). Texts that differ are
shown as word-level diffs (``<del>`` on A's side, ``<ins>`` on B's); every
piece of text is escaped first, the markup is ours. Turns identical in both
fold away so the eye lands on the first divergence.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine import (
    Comparison,
    Episode,
    Message,
    PartingSide,
    TokenParting,
    Turn,
    TurnDiff,
    calls_text,
    observation_text,
    word_diff,
)

from .html import chip, esc, fmt_num, note, status_badge, text_block

CELL_FOLD_CHARS = 2500


def _diff_side(ops: Sequence[tuple[str, str]], side: str) -> str:
    """One side of a word diff: A keeps ``del`` pieces, B keeps ``ins`` pieces; both keep ``same``."""
    keep, tag = ("del", "del") if side == "a" else ("ins", "ins")
    out = []
    for op, text in ops:
        if op == "same":
            out.append(esc(text))
        elif op == keep:
            out.append(f'<{tag} class="rs-diff-{tag}">{esc(text)}</{tag}>')
    return "".join(out)


def _cell(label: str, a: str, b: str, side: str, differs: bool) -> str:
    """One field of one side: plain text when both sides agree, else that side of the word diff."""
    text = a if side == "a" else b
    if not text and not (a or b):
        return ""
    if not differs:
        body = text_block(text, "rs-text rs-cmp-text")
    else:
        inner = _diff_side(word_diff(a, b), side) if text or (a or b) else ""
        body = f'<div class="rs-text rs-cmp-text">{inner or "<span class=rs-dim>(none)</span>"}</div>'
        if len(text) > CELL_FOLD_CHARS:
            body = f'<details class="rs-fold" open><summary>{len(text):,} chars</summary>{body}</details>'
    flag = ' <span class="rs-diff-flag">differs</span>' if differs else ""
    return f'<div class="rs-cmp-field{" rs-cmp-differs" if differs else ""}"><div class="rs-cmp-label">{esc(label)}{flag}</div>{body}</div>'


IDS_SHOWN = 48  # a reply kept as ids alone shows this many of them


def _gen_text(t: Turn | None) -> str:
    g = t.generation if t is not None else None
    if g is None:
        return ""
    if g.text or not g.token_ids:
        return g.text
    ids = " ".join(str(i) for i in g.token_ids[:IDS_SHOWN]) + (" …" if len(g.token_ids) > IDS_SHOWN else "")
    return f"(no text stored: {len(g.token_ids):,} generated ids) {ids}"


def _side(d: TurnDiff, side: str) -> str:
    t = d.a if side == "a" else d.b
    if t is None:
        return '<div class="rs-cmp-side rs-cmp-missing"><div class="rs-dim">no such turn</div></div>'
    differs = set(d.differs)
    parts = [f'<div class="rs-cmp-side rs-cmp-{side}">',
             _cell("assistant", _gen_text(d.a), _gen_text(d.b), side,
                   bool(differs & {"assistant text", "generated ids"}))]
    ca, cb = calls_text(d.a), calls_text(d.b)
    if ca or cb:
        parts.append(_cell("tool calls", ca, cb, side, "tool calls" in differs))
    pa, pb = (d.a.parse_error or "") if d.a else "", (d.b.parse_error or "") if d.b else ""
    if pa or pb:
        parts.append(_cell("parse error", pa, pb, side, "parse error" in differs))
    parts.append(_cell("observation", observation_text(d.a), observation_text(d.b), side, "observation" in differs))
    parts.append("</div>")
    return "".join(parts)


def _reward(ep: Episode, i: int) -> str:
    if i >= ep.n_turns:
        return "—"
    raw = ep.turns[i].reward
    shaped = ep.turn_rewards[i] if i < len(ep.turn_rewards) else None
    if shaped is not None and not math.isclose(shaped, raw):
        return f"{fmt_num(raw)} (shaped {fmt_num(shaped)})"
    return fmt_num(raw)


def _turn(cmp: Comparison, d: TurnDiff, first: int | None) -> str:
    i = d.index
    is_first = first == i
    chips = chip("A reward", _reward(cmp.a, i)) + chip("B reward", _reward(cmp.b, i))
    if d.same:
        verdict = '<span class="rs-same">same in both</span>'
    else:
        verdict = f'<span class="rs-diff-flag">differs: {esc(", ".join(d.differs))}</span>'
    marker = '<span class="rs-chip rs-first-div">⚑ first divergence</span>' if is_first else ""
    head = f'<span class="rs-turn-no">Turn {i}</span>{marker}{chips}{verdict}'
    body = f'<div class="rs-cmp-row">{_side(d, "a")}{_side(d, "b")}</div>'
    cls = "rs-cmp-turn" + (" rs-cmp-turn-differs" if not d.same else "") + (" rs-cmp-first" if is_first else "")
    # Identical turns fold away: the replayed prefix of a fork is all of them.
    open_attr = "" if d.same else " open"
    return (f'<details class="{cls}" id="cmp-turn-{i}"{open_attr}><summary class="rs-turn-head">{head}</summary>'
            f"{body}</details>")


def _messages(ms: Sequence[Message]) -> str:
    return "\n\n".join(f"[{m.role}] {m.content}" for m in ms)


def _episode_card(ep: Episode, label: str) -> str:
    fork = (f" · fork of <a href=\"?episode={esc(ep.parent_id)}\" data-open=\"{esc(ep.parent_id)}\"><code>"
            f"{esc(ep.parent_id)}</code></a> at turn {esc(ep.fork_turn)}") if ep.parent_id else ""
    model = ep.backend.label if ep.backend is not None else ""
    return (
        f'<div class="rs-cmp-card"><div class="rs-head-line"><span class="rs-cmp-ab">{label}</span>'
        f'<a href="?episode={esc(ep.id)}" data-open="{esc(ep.id)}"><code>{esc(ep.id)}</code></a>{status_badge(ep.status.value)}'
        f"</div><div>{esc(ep.env)} · task <code>{esc(ep.task_id)}</code>{fork}</div>"
        f'<div class="rs-head-line">{chip("reward", fmt_num(ep.reward))}{chip("turns", ep.n_turns)}'
        f'{chip("tokens", f"{ep.n_tokens:,}")}{chip("preset", ep.preset or "n/a")}{chip("model", model or "n/a")}</div>'
        + (f'<div class="rs-reason rs-dim">{esc(ep.reason)}</div>' if ep.reason else "")
        + "</div>"
    )


def _rewards_table(cmp: Comparison) -> str:
    n = max(cmp.a.n_turns, cmp.b.n_turns)
    if n == 0:
        return ""
    rows = []
    for i in range(n):
        ra, rb = _reward(cmp.a, i), _reward(cmp.b, i)
        ret_a = fmt_num(cmp.a.returns[i]) if i < len(cmp.a.returns) else "—"
        ret_b = fmt_num(cmp.b.returns[i]) if i < len(cmp.b.returns) else "—"
        cls = ' class="rs-cmp-rdiff"' if ra != rb else ""
        rows.append(f'<tr{cls}><td>{i}</td><td class="rs-num">{esc(ra)}</td>'
                    f'<td class="rs-num">{esc(rb)}</td><td class="rs-num">{esc(ret_a)}</td><td class="rs-num">{esc(ret_b)}</td></tr>')
    return (
        '<details class="rs-fold rs-cmp-rewards" open><summary>Rewards per turn</summary><div class="rs-table-wrap">'
        '<table class="rs-table"><thead><tr><th>turn</th><th>A reward</th><th>B reward</th><th>A return</th>'
        f'<th>B return</th></tr></thead><tbody>{"".join(rows)}</tbody></table></div></details>'
    )


def _prob(p: float) -> str:
    return f"{p:.2f}" if p >= 0.005 else f"{p:.1e}"


def _token(text: str, token_id: int) -> str:
    """A token as its text in quotes (whitespace visible), or its id when there is no tokenizer."""
    shown = repr(text) if text else f"id {token_id}"
    return f'<code title="token id {token_id}">{esc(shown)}</code>'


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 < 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _under(side: str, c: PartingSide, own: str, other: str) -> str:
    """What one sample's distribution at the parting says of both tokens."""
    mine = (f'{own} <span class="rs-prob">{_prob(c.own_prob)}</span> <span class="rs-dim">(sampled)</span>'
            if c.own_prob is not None else f'{own} <span class="rs-dim">(its own; no logprob recorded)</span>')
    state = c.other_state
    if state == "found":
        assert c.other_rank is not None
        prob = f'<span class="rs-prob">{_prob(c.other_prob)}</span> ' if c.other_prob is not None else ""
        theirs = (f'{other} {prob}<span class="rs-dim">({_ordinal(c.other_rank)} of its top {c.top_k}'
                  f'{"" if prob else "; its logprob unknown"})</span>')
    elif state == "not_in_top_k":
        theirs = f'{other} <span class="rs-dim">not among its top {c.top_k}</span>'
    else:
        theirs = (f'{other} <span class="rs-dim">unknown: no top-K alternatives were recorded there (generated '
                  "without --top-logprobs)</span>")
    return f'<li data-side="{side}" data-state="{state}">Under {side.upper()}: {mine}, {theirs}</li>'


def render_parting(parting: TokenParting | None) -> str:
    """The token where the two episodes part: which token each wrote there, and both tokens' probabilities under each
    sample's distribution at that position (from its top K); or why there is none to weigh."""
    if parting is None or parting.position is None and not parting.why:
        return ""
    pos = "" if parting.position is None else str(parting.position)
    if not parting.generated:
        return (f'<div class="rs-cmp-parting rs-dim" data-position="{pos}" data-state="none">Token parting: '
                f"{esc(parting.why)}.</div>")
    a, b = parting.a, parting.b
    assert a is not None and b is not None
    ta, tb = _token(parting.text_a, a.own_id), _token(parting.text_b, b.own_id)
    turn = (f' (<a href="#cmp-turn-{parting.turn}">turn {parting.turn}</a>)' if parting.turn is not None else "")
    return (f'<div class="rs-cmp-parting" data-position="{pos}" data-turn="{"" if parting.turn is None else parting.turn}"'
            f' data-state="generated"><b>They part at token {pos}</b>{turn}: A generated {ta}, B generated {tb}.'
            f"<ul>{_under('a', a, ta, tb)}{_under('b', b, tb, ta)}</ul></div>")


def render_comparison(cmp: Comparison, parting: TokenParting | None = None) -> str:
    """The whole Compare view: both headers, the verdict, the token where the two part (``parting``), the rewards,
    the opening and every turn."""
    first = cmp.first_divergence
    kind = "ok" if first is None else "warn"
    parts = ['<div class="rs-compare">',
             f'<div class="rs-cmp-row">{_episode_card(cmp.a, "A")}{_episode_card(cmp.b, "B")}</div>',
             f'<div class="rs-cmp-verdict" data-first="{"" if first is None else first}">{note(cmp.summary(), kind)}</div>',
             render_parting(parting), _rewards_table(cmp)]
    oa, ob = _messages(cmp.opening_a), _messages(cmp.opening_b)
    same = cmp.opening_same
    head = ("Opening (system prompt and first observation): same in both" if same
            else "Opening (system prompt and first observation): DIFFERS")
    parts.append(
        f'<details class="rs-cmp-turn{"" if same else " rs-cmp-turn-differs rs-cmp-first"}"{"" if same else " open"}>'
        f'<summary class="rs-turn-head">{esc(head)}</summary><div class="rs-cmp-row">'
        f'<div class="rs-cmp-side">{_cell("opening", oa, ob, "a", not same)}</div>'
        f'<div class="rs-cmp-side">{_cell("opening", oa, ob, "b", not same)}</div></div></details>'
    )
    parts.extend(_turn(cmp, d, first) for d in cmp.turns)
    if not cmp.turns:
        parts.append('<div class="rs-dim">Neither episode has turns.</div>')
    parts.append("</div>")
    return "".join(parts)


def empty(message: str = "Pick two episodes: type their ids (a unique prefix is enough) and press Compare.",
          kind: str = "info") -> str:
    return note(message, kind)
