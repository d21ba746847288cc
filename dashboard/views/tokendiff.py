"""Escaped HTML for a token diff (``engine.TokenDiff``): what differs, where first, how much per segment kind,
and each differing run with a few equal tokens around it.

Each token is a ``span.tok`` whose title says its position, id, loss mask and logprob on each side:
``td-a`` only A has it, ``td-b`` only B has it, ``td-chg`` A's and B's differ (A's struck, B's after it),
``td-mask`` / ``td-lp`` the same token with another loss mask / logprob. Equal context tokens are dim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine import TD_CHANGED, TD_ONLY_A, TD_ONLY_B, TokenDiff, TokenDiffRow

from .html import chip, esc, note

MAX_RUNS = 80
CONTEXT = 3


def _lp(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.4f}"


def _title(d: TokenDiff, r: TokenDiffRow) -> str:
    bits = []
    for side, ep, pos in (("A", d.a, r.a), ("B", d.b, r.b)):
        if pos is None:
            bits.append(f"{side}: -")
            continue
        t = ep.tokens
        bits.append(f"{side}[{pos}] id {int(t.ids[pos])} mask {int(t.loss_mask[pos])} logprob {_lp(float(t.logprobs[pos]))}")
    bits.append(f"{d.kind_of(r)}, turn {d.turn_of(r)}")
    return " · ".join(bits)


def _tok(text: str, cls: str, title: str, r: TokenDiffRow) -> str:
    shown = text.replace("\n", "↵\n") if text else "∅"
    pos = "".join(f' data-{k}="{v}"' for k, v in (("a", r.a), ("b", r.b)) if v is not None)
    return f'<span class="tok {cls}"{pos} title="{esc(title)}">{esc(shown)}</span>'


def _row(d: TokenDiff, r: TokenDiffRow, texts_a: Sequence[str], texts_b: Sequence[str]) -> str:
    title = _title(d, r)
    ta = texts_a[r.a] if r.a is not None else ""
    tb = texts_b[r.b] if r.b is not None else ""
    if r.op == TD_ONLY_A:
        return _tok(ta, "td-a", title, r)
    if r.op == TD_ONLY_B:
        return _tok(tb, "td-b", title, r)
    if r.op == TD_CHANGED:
        return _tok(ta, "td-chg td-a", title, r) + _tok(tb, "td-chg td-b", title, r)
    cls = " ".join(c for c, on in (("td-mask", r.mask_differs), ("td-lp", r.logprob_differs)) if on) or "td-same"
    return _tok(ta, cls, title, r)


def _counts(d: TokenDiff) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in ("segment kind", "positions", "only A", "only B", "ids", "mask",
                                                  "logprob"))
    rows = []
    for k, c in sorted(d.counts.items(), key=lambda kv: (-kv[1].differing, kv[0])):
        cells = [c.rows, c.only_a, c.only_b, c.ids, c.mask, c.logprob]
        rows.append(f'<tr class="{"td-differs" if c.differing else ""}" data-kind="{esc(k)}"><td>{esc(k)}</td>'
                    + "".join(f"<td>{v:,}</td>" for v in cells) + "</tr>")
    return f'<table class="rs-table td-counts"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def render(d: TokenDiff, texts_a: Sequence[str], texts_b: Sequence[str], label_b: str, ending: str = "") -> str:
    """The whole token diff of A against ``label_b`` (another episode, or A laid down another way; ``ending``: how
    that B ended otherwise than A, ``tokendiff.laid_down_ending``)."""
    how = "token text (the tokenizers differ)" if d.by_text else "token id"
    parts = [f'<div class="rs-tokdiff" data-runs="{len(d.hunks)}">',
             f'<div class="rs-head-line">{chip("A", d.a.id)}{chip("B", label_b)}{chip("aligned by", how)}'
             f'{chip("positions", f"{len(d.rows):,}")}{chip("differ", f"{d.n_differing:,}")}'
             f'{chip("runs", len(d.hunks))}</div>']
    if ending:
        parts.append(f'<div class="td-ending">{note(ending + ".", "warn")}</div>'
                     '<div class="td-ending-how rs-dim">Other knobs for the loop that lays A down: <code>rollscope diff '
                     'A --preset NAME --set KNOB=VALUE</code>.</div>')
    first = d.first
    if first is None:
        parts.append(note("The token arrays agree: the same ids, loss mask and logprobs everywhere.", "ok"))
        parts.append("</div>")
        return "".join(parts)
    where = " / ".join(f"{s}[{p}]" for s, p in (("A", first.a), ("B", first.b)) if p is not None)
    parts.append(f'<div class="td-first" data-a="{"" if first.a is None else first.a}" '
                 f'data-b="{"" if first.b is None else first.b}">'
                 + note(f"First difference at {where}, turn {d.turn_of(first)}, {d.kind_of(first)}: {d.what(first)}.",
                        "warn") + "</div>")
    parts.append(_counts(d))
    parts.append('<div class="td-legend rs-dim"><span class="tok td-a">only A</span> <span class="tok td-b">only B'
                 '</span> <span class="tok td-mask">loss mask differs</span> <span class="tok td-lp">logprob '
                 'differs</span> · ↵ is a newline; hover a token for its id, mask and logprob on each side</div>')
    for n, h in enumerate(d.hunks[:MAX_RUNS]):
        lo, hi = max(0, h.start - CONTEXT), min(len(d.rows), h.end + CONTEXT)
        rows = d.rows[h.start : h.end]
        pa = [r.a for r in rows if r.a is not None]
        pb = [r.b for r in rows if r.b is not None]
        span = " · ".join(f"{s}[{min(p)}:{max(p) + 1}]" for s, p in (("A", pa), ("B", pb)) if p)
        whats = "; ".join(sorted({d.what(r) for r in rows}))
        body = "".join(_row(d, r, texts_a, texts_b) for r in d.rows[lo:hi])
        parts.append(f'<div class="td-run" data-run="{n}" data-kind="{esc(d.kind_of(rows[0]))}">'
                     f'<div class="td-run-head">{esc(span)} · turn {esc(d.turn_of(rows[0]))} · '
                     f'{esc(d.kind_of(rows[0]))} · {esc(whats)}</div><div class="td-toks">{body}</div></div>')
    if len(d.hunks) > MAX_RUNS:
        parts.append(note(f"{len(d.hunks) - MAX_RUNS} more runs: `rollscope diff` lists them all (--all).", "info"))
    parts.append("</div>")
    return "".join(parts)


def empty(message: str = "Token diff: press Token diff to align A's tokens with B's, or with A's own conversation "
                         "laid down by another preset.", kind: str = "info") -> str:
    return note(message, kind)
