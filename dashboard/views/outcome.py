"""Escaped HTML for "Why this reward": an episode's ``Outcome`` (computed by the env that scored it) in one panel.

The kind and its sentence; the reference's call beside the agent's, argument by argument, the differing values
marked (the agent's amber, the reference's green); outputs never said; where the final database differs from the reference's; for math, what the checker
took from each turn. Links to the deciding turn are the Episode tab's own: ``data-jump`` scrolls the timeline
(``conv-turn-N``) or the token view (``turn-N``), and the href is the turn's deep link. Also the outcome kind
as Browse's cell. Pure functions of records: no Gradio, no store; every outside string goes through ``esc``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from engine import PASSING_KINDS, DbChange, Episode, MathAnswer, Outcome, OutcomeCall, Status

from .episode import deep_link
from .html import esc, fmt_num, jump
from .limits import cut

VALUE_CHARS = 300  # an argument or database value is cut to this
DB_ROWS = 8  # database differences shown before the rest fold
ANSWER_ROWS = 6  # math turns shown before the rest fold
KIND_LABELS = {
    "success": "success", "not_called": "not called", "wrong_arguments": "wrong arguments",
    "extra_write": "extra write", "missing_output": "missing output", "correct": "correct",
    "wrong_answer": "wrong answer", "no_boxed": "no \\boxed{}", "cut_by_length": "cut by length",
    "right_answer_not_scored": "right answer not scored", "other": "other",
}


def kind_badge(kind: str | None) -> str:
    """An outcome kind as a pill: green for the kinds that earned the reward, red for the rest ('' for none)."""
    if not kind:
        return ""
    cls = "rs-oc-pass" if kind in PASSING_KINDS else "rs-oc-fail"
    return f'<span class="rs-oc-kind {cls}" data-kind="{esc(kind)}">{esc(KIND_LABELS.get(kind, kind))}</span>'


def _value(v: Any) -> str:
    text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False, default=str)
    kept, more = cut(text, limit=VALUE_CHARS)
    return esc(json.dumps(kept, ensure_ascii=False) if isinstance(v, str) else kept) + ("…" if more else "")


def _turn_links(ep: Episode, turn: int) -> str:
    return (jump(f"conv-turn-{turn}", f"turn {turn} ↓", "rs-jump rs-oc-turn", href=deep_link(ep.id, turn))
            + " " + jump(f"turn-{turn}", "its tokens", "rs-jump rs-oc-tokens", href=deep_link(ep.id, turn)))


_ABSENT = object()


def _calls(o: Outcome) -> str:
    """The expected and the taken call side by side, one row per argument, the differing ones marked."""
    exp, taken = o.expected, o.taken
    if exp is None and taken is None:
        return ""
    differ = set(o.differing_arguments)
    keys = list(dict.fromkeys([*(exp.arguments if exp else {}), *(taken.arguments if taken else {})]))

    def name(c: OutcomeCall | None, missing: str) -> str:
        if c is None:
            return f'<span class="rs-dim">{esc(missing)}</span>'
        other = taken if c is exp else exp
        code = f'<code class="rs-call-name">{esc(c.name).replace("_", "_<wbr>")}</code>'  # breaks at words
        if other is not None and other.name != c.name:
            return f'<mark class="{"rs-oc-diff" if c is taken else "rs-oc-want"}">{code}</mark>'
        return code

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
        return f'<tr data-arg="{esc(k)}"{mark}><th>{esc(k)}</th>{cell(exp, k)}{cell(taken, k)}</tr>'

    head = (f'<tr><th></th><th>expected (reference)<br>{name(exp, "none")}</th>'
            f'<th>taken (agent)<br>{name(taken, "never called")}</th></tr>')
    # Both calls there: the differing arguments first, the rest folded; one call alone: all of it.
    shown = [k for k in keys if k in differ] if exp is not None and taken is not None else keys
    rest = [k for k in keys if k not in shown]
    same = "".join(f'<span class="rs-oc-same-arg" data-arg="{esc(k)}"><b>{esc(k)}</b> '
                   f'<span class="rs-oc-val">{_value(exp.arguments.get(k) if exp else None)}</span></span>'
                   for k in rest)
    fold = (f'<details class="rs-oc-same"><summary>{len(rest)} more argument{"s" if len(rest) != 1 else ""}, the '
            f"same in both</summary>{same}</details>" if rest else "")
    return (f'<table class="rs-oc-calls"><thead>{head}</thead><tbody>{"".join(row(k) for k in shown)}</tbody>'
            f"</table>{fold}")


def _db(changes: Sequence[DbChange], open_: bool) -> str:
    """The final database's differences from the reference's; folded (``open_`` False) where the calls above
    already say what went wrong."""
    if not changes:
        return ""

    def row(c: DbChange) -> str:
        return (f"<tr><td>{esc(c.table)}</td><td><code>{esc(c.key)}</code></td><td><code>{esc(c.field or '(record)')}"
                f'</code></td><td class="rs-oc-val"><mark class="rs-oc-diff">{_value(c.got)}</mark></td>'
                f'<td class="rs-oc-val"><mark class="rs-oc-want">{_value(c.expected)}</mark></td></tr>')

    head = "<tr><th>table</th><th>key</th><th>field</th><th>got</th><th>expected</th></tr>"
    first = "".join(row(c) for c in changes[:DB_ROWS])
    rest = changes[DB_ROWS:]
    more = (f'<details class="rs-fold"><summary>{len(rest)} more</summary><table class="rs-oc-db"><tbody>'
            f'{"".join(row(c) for c in rest)}</tbody></table></details>' if rest else "")
    return (f'<details class="rs-oc-part rs-oc-dbdiff"{" open" if open_ else ""}><summary class="rs-oc-k">the '
            f'database vs the reference\'s: {len(changes)} difference{"s" if len(changes) != 1 else ""}</summary>'
            f'<table class="rs-oc-db"><thead>{head}</thead><tbody>{first}</tbody></table>{more}</details>')


def _answers(ep: Episode, o: Outcome) -> str:
    """Math: per turn, the answer the checker extracted, its verdict and how the reply ended; past
    ``ANSWER_ROWS`` turns, those with a right answer and the scored one stay in view and the rest fold."""
    if not o.answers and o.reference_answer is None:
        return ""
    scored = o.answers[-1] if o.answers else None

    def row(a: MathAnswer) -> str:
        got = '<span class="rs-dim">none</span>' if a.extracted is None else f"<code>{esc(a.extracted)}</code>"
        verdict = '<span class="rs-oc-yes">right</span>' if a.correct else '<span class="rs-oc-no">wrong</span>'
        link = jump(f"conv-turn-{a.turn}", f"turn {a.turn} ↓", "rs-jump rs-oc-turn", href=deep_link(ep.id, a.turn))
        return (f'<tr data-turn="{a.turn}"><td>{link}{" (scored)" if a is scored else ""}</td><td>{got}</td>'
                f"<td>{verdict}</td><td>{esc(a.finish_reason)}</td></tr>")

    keep = list(o.answers)
    if len(keep) > ANSWER_ROWS:
        wanted = {id(a) for a in keep if a.correct or a is scored}
        for a in keep:
            if len(wanted) >= ANSWER_ROWS:
                break
            wanted.add(id(a))
        keep = [a for a in o.answers if id(a) in wanted]
    rest = [a for a in o.answers if a not in keep]
    fold = (f'<details class="rs-oc-same"><summary>{len(rest)} more turn{"s" if len(rest) != 1 else ""}</summary>'
            f'<table class="rs-oc-db"><tbody>{"".join(row(a) for a in rest)}</tbody></table></details>' if rest else "")
    ref = "" if o.reference_answer is None else f' <span class="rs-oc-ref">(reference <code>{esc(o.reference_answer)}</code>)</span>'
    return (f'<table class="rs-oc-db rs-oc-answers"><thead><tr><th>turn</th><th>extracted answer{ref}</th>'
            f'<th>verdict</th><th>finish</th></tr></thead><tbody>{"".join(row(a) for a in keep)}</tbody></table>{fold}')


def render_outcome(ep: Episode) -> str:
    """The "Why this reward" panel of ``ep``; an episode without an outcome says why it has none."""
    head = f'<div class="rs-oc-head"><h4 class="rs-h">Why this reward</h4><b class="rs-big">{esc(fmt_num(ep.reward))}</b>'
    o = ep.outcome
    if o is None:
        why = ("the episode is still running: its env gives the outcome when it ends" if ep.status is Status.RUNNING
               else "this record has none (its env gave no outcome)")
        return (f'<div class="rs-outcome" data-kind="">{head}</div>'
                f'<div class="rs-oc-none rs-dim">No outcome: {esc(why)}.</div></div>')
    turn = f'<span class="rs-oc-at">at {_turn_links(ep, o.turn)}</span>' if o.turn is not None else ""
    parts = [f'<div class="rs-outcome" data-kind="{esc(o.kind)}" data-turn="{"" if o.turn is None else o.turn}">'
             f"{head}{kind_badge(o.kind)}{turn}</div>",
             f'<div class="rs-oc-text">{esc(o.text)}</div>', _calls(o)]
    if o.missing_outputs:
        parts.append('<div class="rs-oc-part"><span class="rs-oc-k">outputs never said</span> '
                     + " ".join(f'<mark class="rs-oc-diff rs-oc-output">{esc(m)}</mark>' for m in o.missing_outputs)
                     + "</div>")
    parts.append(_db(o.db_diff, open_=o.expected is None and o.taken is None))
    parts.append(_answers(ep, o))
    parts.append("</div>")
    return "".join(parts)
