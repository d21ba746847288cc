"""Escaped HTML for "Why this reward": an episode's ``Outcome`` (computed by the env that scored it) in one panel.

The kind and its sentence; the reference's call beside the agent's, argument by argument, the differing values
marked (the agent's amber, the reference's green); outputs never said; where the final database differs from
the reference's; for math, what the checker took from each turn. Links to the deciding turn are the Episode
tab's own: ``data-jump`` scrolls the timeline (``conv-turn-N``) or the token view (``turn-N``), and the href
is the turn's deep link. Also the outcome kind as Browse's cell. Pure functions of records: no Gradio, no
store; the kinds' wording, pass or fail and the scored turn are the engine's (``engine.kind_label``,
``kind_passed``, ``Outcome.scored_turns``). Every outside string goes through ``esc`` and is cut to the display
limits (``limits.cut``), and each list to a number of rows, so a record of any size sends a bounded panel.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engine import DbChange, Episode, MathAnswer, Outcome, OutcomeCall, Status, kind_label, kind_passed

from .episode import deep_link
from .html import esc, fmt_num, jump
from .limits import cut, cut_note

VALUE_CHARS = 300  # an argument or database value, a math answer, an output never said is cut to this
KEY_CHARS = 120  # an argument key, a tool name, a table, key or field is cut to this
TEXT_CHARS = 2_000  # the outcome's sentence (another env's own reason may be long) is cut to this
ARG_ROWS = 30  # arguments shown (differing first); past this the rest are counted, not sent
DB_ROWS = 8  # database differences shown before the rest fold
FOLD_ROWS = 200  # rows a fold holds at most (database differences, math turns); the rest are counted
ANSWER_ROWS = 6  # math turns shown before the rest fold
OUTPUTS = 20  # outputs never said shown; the rest are counted
_PILL = {True: "rs-oc-pass", False: "rs-oc-fail", None: "rs-oc-neutral"}


def kind_badge(kind: str | None) -> str:
    """An outcome kind as a pill: green for the kinds that earned the reward, red for those that say why it
    was not, grey for another env's own reason (``engine.kind_passed``); '' for none."""
    if not kind:
        return ""
    return (f'<span class="rs-oc-kind {_PILL[kind_passed(kind)]}" data-kind="{esc(kind)}">'
            f"{esc(kind_label(kind))}</span>")


def _short(text: str, limit: int = KEY_CHARS) -> str:
    """``text`` cut to ``limit`` characters, escaped, "…" where cut."""
    kept, more = cut(text, limit=limit)
    return esc(kept) + ("…" if more else "")


def _bounded(v: Any, limit: int, depth: int = 0) -> Any:
    """A copy of ``v`` small enough to serialize before cutting: strings cut past ``limit`` characters, lists
    and objects past ``limit`` items, nesting past eight levels."""
    if isinstance(v, str):
        return v[:limit + 1]
    if depth > 8:
        return "…"
    if isinstance(v, dict):
        return {str(k)[:limit]: _bounded(x, limit, depth + 1) for k, x in list(v.items())[:limit]}
    if isinstance(v, (list, tuple)):
        return [_bounded(x, limit, depth + 1) for x in v[:limit]]
    return v


def _value(v: Any, limit: int = VALUE_CHARS) -> str:
    """A value as JSON, escaped and cut to ``limit`` characters ("…" where cut); a huge value is never
    serialized whole."""
    text = json.dumps(_bounded(v, limit), ensure_ascii=False, default=str)
    kept, more = cut(text, limit=limit)
    return esc(kept) + ("…" if more else "")


def _turn_links(ep: Episode, turn: int) -> str:
    return (jump(f"conv-turn-{turn}", f"turn {turn} ↓", "rs-jump rs-oc-turn", href=deep_link(ep.id, turn))
            + " " + jump(f"turn-{turn}", f"tokens of turn {turn}", "rs-jump rs-oc-tokens",
                         href=deep_link(ep.id, turn)))


_ABSENT = object()


def _calls(o: Outcome) -> str:
    """The expected and the taken call side by side, one row per argument, the differing ones marked; the tool
    once above both when the two calls use the same one."""
    exp, taken = o.expected, o.taken
    if exp is None and taken is None:
        return ""
    differ = set(o.differing_arguments)
    keys = list(dict.fromkeys([*(exp.arguments if exp else {}), *(taken.arguments if taken else {})]))

    def code(c: OutcomeCall) -> str:
        return f'<code class="rs-call-name">{_short(c.name).replace("_", "_<wbr>")}</code>'  # breaks at words

    def name(c: OutcomeCall | None, missing: str) -> str:
        if c is None:
            return f'<span class="rs-dim">{esc(missing)}</span>'
        return f'<mark class="{"rs-oc-diff" if c is taken else "rs-oc-want"}">{code(c)}</mark>' if o.other_tool \
            else code(c)

    def cell(c: OutcomeCall | None, k: str) -> str:
        if c is None:
            return "<td></td>"
        v = c.arguments.get(k, _ABSENT)
        shown = '<span class="rs-dim">(absent)</span>' if v is _ABSENT else _value(v)
        cls = "rs-oc-diff" if c is taken else "rs-oc-want"
        return f'<td class="rs-oc-val"><mark class="{cls}">{shown}</mark></td>' if k in differ \
            else f'<td class="rs-oc-val">{shown}</td>'

    def row(k: str) -> str:
        mark = ' class="rs-oc-differs"' if k in differ else ""
        return (f'<tr data-arg="{_short(k)}"{mark}><th title="{_short(k, 400)}">{_short(k).replace("_", "_<wbr>")}'
                f"</th>{cell(exp, k)}{cell(taken, k)}</tr>")

    one = exp is not None and taken is not None and not o.other_tool  # one tool: named once, above both
    tool = (f'<div class="rs-oc-tool">call {code(exp)}</div>' if one and exp is not None else "")
    head = ("<tr><th></th><th>expected (reference)</th><th>taken (agent)</th></tr>" if one else
            f'<tr><th></th><th>expected (reference)<br>{name(exp, "none")}</th>'
            f'<th>taken (agent)<br>{name(taken, "never called")}</th></tr>')
    # Both calls there: the differing arguments first, the rest folded; one call alone: all of it.
    shown = [k for k in keys if k in differ] if exp is not None and taken is not None else keys
    rest = [k for k in keys if k not in shown]
    unsent = max(0, len(shown) - ARG_ROWS) + max(0, len(rest) - max(0, ARG_ROWS - len(shown)))
    shown, rest = shown[:ARG_ROWS], rest[:max(0, ARG_ROWS - len(shown))]
    same = "".join(f'<span class="rs-oc-same-arg" data-arg="{_short(k)}"><b>{_short(k)}</b> '
                   f'<span class="rs-oc-val">{_value(exp.arguments.get(k) if exp else None)}</span></span>'
                   for k in rest)
    fold = (f'<details class="rs-oc-same"><summary>{len(rest)} more argument{"s" if len(rest) != 1 else ""}, the '
            f"same in both</summary>{same}</details>" if rest else "")
    more = (f'<div class="rs-dim rs-oc-unsent">… {unsent:,} more arguments not sent to the browser '
            "(`rollscope explain` prints them)</div>" if unsent else "")
    return (f'{tool}<table class="rs-oc-calls"><thead>{head}</thead><tbody>{"".join(row(k) for k in shown)}'
            f"</tbody></table>{fold}{more}")


def _db(changes: Sequence[DbChange], open_: bool) -> str:
    """The final database's differences from the reference's; folded (``open_`` False) where the calls above
    already say what went wrong."""
    if not changes:
        return ""

    def row(c: DbChange) -> str:
        return (f"<tr><td>{_short(c.table)}</td><td><code>{_short(c.key)}</code></td>"
                f"<td><code>{_short(c.field or '(record)')}</code></td>"
                f'<td class="rs-oc-val"><mark class="rs-oc-diff">{_value(c.got)}</mark></td>'
                f'<td class="rs-oc-val"><mark class="rs-oc-want">{_value(c.expected)}</mark></td></tr>')

    head = "<tr><th>table</th><th>key</th><th>field</th><th>got</th><th>expected</th></tr>"
    first = "".join(row(c) for c in changes[:DB_ROWS])
    rest = changes[DB_ROWS:]
    more = (f'<details class="rs-fold"><summary>{len(rest)} more</summary><table class="rs-oc-db"><tbody>'
            f'{"".join(row(c) for c in rest[:FOLD_ROWS])}</tbody></table>{_unsent(len(rest) - FOLD_ROWS)}</details>'
            if rest else "")
    return (f'<details class="rs-oc-part rs-oc-dbdiff"{" open" if open_ else ""}><summary class="rs-oc-k">The '
            f'database vs the reference\'s: {len(changes)} difference{"s" if len(changes) != 1 else ""}</summary>'
            f'<table class="rs-oc-db"><thead>{head}</thead><tbody>{first}</tbody></table>{more}</details>')


def _unsent(n: int) -> str:
    return f'<div class="rs-dim rs-oc-unsent">… {n:,} more rows not sent (`rollscope explain` prints them)</div>' \
        if n > 0 else ""


def _answers(ep: Episode, o: Outcome) -> str:
    """Math: per turn, the answer the checker extracted, its verdict and how the reply ended; past
    ``ANSWER_ROWS`` turns, those with a right answer and the scored one stay in view and the rest fold."""
    if not o.answers and o.reference_answer is None:
        return ""
    scored = set(o.scored_turns)

    def row(a: MathAnswer) -> str:
        got = ('<span class="rs-dim">none</span>' if a.extracted is None
               else f"<code>{_short(a.extracted, VALUE_CHARS)}</code>")
        verdict = '<span class="rs-oc-yes">right</span>' if a.correct else '<span class="rs-oc-no">wrong</span>'
        link = jump(f"conv-turn-{a.turn}", f"turn {a.turn} ↓", "rs-jump rs-oc-turn", href=deep_link(ep.id, a.turn))
        return (f'<tr data-turn="{a.turn}"><td>{link}{" (scored)" if a.turn in scored and not o.every_turn else ""}</td><td>{got}</td>'
                f"<td>{verdict}</td><td>{_short(a.finish_reason)}</td></tr>")

    # In view: the scored turn, then right answers, then the earliest turns, ANSWER_ROWS in all; the rest fold. Where
    # every turn is scored: the outcome's turn (the first wrong one), then the others in order.
    ranked = sorted(range(len(o.answers)), key=lambda i: (
        o.answers[i].turn != o.turn, i) if o.every_turn else (o.answers[i].turn not in scored, not o.answers[i].correct, i))
    wanted = set(ranked[:ANSWER_ROWS])
    keep = [a for i, a in enumerate(o.answers) if i in wanted]
    rest = [a for i, a in enumerate(o.answers) if i not in wanted]
    fold = (f'<details class="rs-oc-same"><summary>{len(rest)} more turn{"s" if len(rest) != 1 else ""}</summary>'
            f'<table class="rs-oc-db"><tbody>{"".join(row(a) for a in rest[:FOLD_ROWS])}</tbody></table>'
            f"{_unsent(len(rest) - FOLD_ROWS)}</details>" if rest else "")
    ref = ("" if o.reference_answer is None else
           f' <span class="rs-oc-ref">(reference <code>{_short(o.reference_answer, VALUE_CHARS)}</code>)</span>')
    return (f'<table class="rs-oc-db rs-oc-answers"><thead><tr><th>turn</th><th>extracted answer{ref}</th>'
            f'<th>verdict</th><th>finish</th></tr></thead><tbody>{"".join(row(a) for a in keep)}</tbody></table>{fold}')


def render_outcome(ep: Episode) -> str:
    """The "Why this reward" panel of ``ep``; an episode without an outcome says why it has none."""
    head = (f'<div class="rs-oc-head"><h4 class="rs-h">Why this reward</h4>'
            f'<b class="rs-big">{esc(fmt_num(ep.reward))}</b>')
    o = ep.outcome
    if o is None:
        why = ("the episode is still running: its env gives the outcome when it ends" if ep.status is Status.RUNNING
               else "this record has none (its env gave no outcome)")
        return (f'<div class="rs-outcome" data-kind="">{head}</div>'
                f'<div class="rs-oc-none rs-dim">No outcome: {esc(why)}.</div></div>')
    turn = f'<span class="rs-oc-at">at {_turn_links(ep, o.turn)}</span>' if o.turn is not None else ""
    text, cut_off = cut(o.text, limit=TEXT_CHARS)
    said = f'<div class="rs-oc-text">{esc(text)}{esc(" " + cut_note(cut_off)) if cut_off else ""}</div>'
    if o.expected is not None and o.taken is not None:  # the table below says it: the sentence folds
        said = f'<details class="rs-oc-words"><summary>in words</summary>{said}</details>'
    parts = [f'<div class="rs-outcome" data-kind="{esc(o.kind)}" data-turn="{"" if o.turn is None else o.turn}">'
             f"{head}{kind_badge(o.kind)}{turn}</div>", _calls(o), said]
    if o.missing_outputs:
        more = len(o.missing_outputs) - OUTPUTS
        parts.append('<div class="rs-oc-part"><span class="rs-oc-k">Outputs never said:</span> '
                     + " ".join(f'<mark class="rs-oc-diff rs-oc-output">{_short(m, VALUE_CHARS)}</mark>'
                                for m in o.missing_outputs[:OUTPUTS])
                     + (f' <span class="rs-dim">and {more:,} more</span>' if more > 0 else "") + "</div>")
    parts.append(_db(o.db_diff, open_=o.expected is None and o.taken is None))
    parts.append(_answers(ep, o))
    parts.append("</div>")
    return "".join(parts)
