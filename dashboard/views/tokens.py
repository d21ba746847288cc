"""The token view: every token of an episode, colored by loss mask, drawn in the browser from compact data.

Built for long episodes (a hundred thousand tokens and more). The server
sends no span per token: the view is a header (counts, legend, turn links)
and one JSON ``data-meta`` attribute holding the tokens compactly (ids, each
distinct text once, an index per token into the few distinct class strings,
runs of loss mask and of known logprobs, segments, turn starts, finding
marks, and the blocks the tokens are drawn in). ``assets/tokens.js`` lays out
an empty block of the right estimated height for each, draws the tokens of
the blocks near the screen as ``<span>`` elements and empties those that
leave it, so the page holds a few thousand spans whatever the episode's
length. Long context (a run of ordinary tokens in a ``prompt`` or ``system``
segment: the system prompt, tool schemas) is folded behind one control that
unfolds it. The hover reads the same data; the toggles (logprob heat map,
mismatch heat map, entropy heat map, special tokens) are classes on an
ancestor, so switching them is a style change in the browser, not a new page
from the server.

Where the episode recorded them, each generated token's entropy (``ent``,
heat classes ``e0``..``e5``) and its top K alternatives (``alt``, their
texts in ``aid``/``atx``) come along; the hover lists the alternatives with
their probabilities, the sampled one marked. At most
``limits.ALTERNATIVES_SENT`` alternatives are sent: past it, those of the
highest-entropy tokens (``altcut`` counts the tokens whose were not).

An episode past the display limits (``limits.TOKENS_DRAWN``) opens folded:
only the tokens of a few windows (its ends, around its findings) are
decoded and sent, with a note saying what was left out; the script marks
each gap where it lies (``token_payload``'s ``win``).

Which class each token gets is decided here (``token_classes``); the
browser only looks it up. Token texts reach the page inside the escaped
attribute and are set as text by the script, never parsed as markup.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from engine import Episode, Finding, Severity, linked, tokenizer_spec, try_tokenizer

from .alternatives import ENTROPY_BOUNDS, alternatives_sent, entropy_legend
from .html import SEVERITY_ORDER, esc, note
from .limits import TOKENS_DRAWN, see_whole, token_windows
from .token_texts import decode_token_texts, special_token_ids

Windows = list[tuple[int, int]] | None
"""The [start, end) runs of tokens a folded view sends (``limits.token_windows``), or None: every token."""

# Logprob heat buckets: class lK for -logprob below each bound, l5 beyond.
LOGPROB_BOUNDS = (0.1, 0.5, 1.0, 2.0, 4.0)
# Mismatch buckets: class dK for |recomputed - rollout| below each bound, d4 beyond.
DIFF_BOUNDS = (0.05, 0.2, 0.5, 1.0)
# Blocks: the browser draws and drops tokens a block at a time. A block ends at a turn's start, at a fold's
# edges, and at the first line end after BLOCK_TOKENS tokens (mid-line only in a line past BLOCK_MAX).
BLOCK_TOKENS = 256
BLOCK_MAX = 1024
# Folds: in a segment of these kinds, a run of this many tokens between special tokens folds, all but
# FOLD_KEEP tokens at each end of it.
FOLD_KINDS = ("prompt", "system")
FOLD_MIN = 256
FOLD_KEEP = 24


# -- what the view shows --------------------------------------------------


def _within(a: int, b: int, n: int, windows: Windows) -> list[range]:
    """The positions of [a, b) inside [0, n) and the ``windows``, as ranges."""
    a, b = max(0, a), min(b, n)
    if windows is None:
        return [range(a, b)] if a < b else []
    return [range(max(a, x), min(b, y)) for x, y in windows if max(a, x) < min(b, y)]


def _positions(f: Finding, start: int, n: int, windows: Windows = None) -> list[int]:
    """The tokens a finding located at ``start`` marks (those in ``windows``): its listed positions when it has
    them, else its span."""
    runs = f.evidence.get("runs")
    if isinstance(runs, list) and runs and all(isinstance(r, list) and len(r) == 2 for r in runs):
        # every position, uncapped
        return [p for a, b in runs for r in _within(int(a), int(b), n, windows) for p in r]
    listed = f.evidence.get("over") if f.kind == "logprob_mismatch" else f.evidence.get("positions")
    if isinstance(listed, list) and listed and all(isinstance(p, int) for p in listed):
        # A mismatch or mask finding spans first..last bad token; marking the
        # whole span would flag the good tokens between them too.
        return [p for p in listed if _within(p, p + 1, n, windows)]
    end = f.token_end if f.token_end is not None and f.token_end > start else start + 1
    return [p for r in _within(start, end, n, windows) for p in r]


def finding_marks(findings: Iterable[Finding], n: int,
                  windows: Windows = None) -> tuple[dict[int, list[str]], set[int], set[int]]:
    """Token index -> kinds of the findings marking it, the indexes where findings start, and the indexes a
    root finding marks (the rest are marked only by findings that follow from a root); of a folded view,
    only the tokens in its ``windows``."""
    marks: dict[int, list[str]] = {}
    starts: set[int] = set()
    rooted: set[int] = set()
    for f in findings:
        if f.token_start is None or not 0 <= f.token_start < n:
            continue
        if _within(f.token_start, f.token_start + 1, n, windows):
            starts.add(f.token_start)
        root = f.caused_by is None and f.severity is not Severity.INFO
        for i in _positions(f, f.token_start, n, windows):
            marks.setdefault(i, []).append(f.kind if root else f"{f.kind} (follows {f.caused_by})")
            if root:
                rooted.add(i)
    return marks, starts, rooted


def spans(ep: Episode) -> list[tuple[int, int, str, int | None]]:
    """(start, end, kind, turn) runs covering every token exactly once, in order."""
    n = len(ep.tokens)
    out: list[tuple[int, int, str, int | None]] = []
    pos = 0
    for s in sorted(ep.segments, key=lambda s: (s.start, s.end)):
        start, end = max(s.start, pos), min(s.end, n)
        if start >= end:
            continue
        if start > pos:
            out.append((pos, start, "unsegmented", None))
        out.append((start, end, s.kind, s.turn))
        pos = end
    if pos < n:
        out.append((pos, n, "unsegmented", None))
    return out


def logprob_diff(ep: Episode) -> tuple[list[float | None] | None, str | None]:
    """The per-token recomputed-minus-rollout logprob difference of a ``logprob_mismatch`` finding.

    Returns (diff, None), (None, None) when no finding carries one, or
    (None, why) when the stored diff does not fit the episode.
    """
    found = [f for f in ep.all_findings() if f.kind == "logprob_mismatch" and isinstance(f.evidence.get("diff"), list)]
    if not found:
        return None, None
    diff = found[-1].evidence["diff"]
    if len(diff) != len(ep.tokens):
        return None, f"the logprob-mismatch diff has {len(diff)} values for {len(ep.tokens)} tokens; not shown"
    return [None if d is None else float(d) for d in diff], None


def _buckets(values: np.ndarray, bounds: Sequence[float]) -> np.ndarray:
    """Bucket index per value (``len(bounds)`` beyond the last bound), -1 for NaN."""
    b = np.digitize(values, bounds)
    return np.where(np.isnan(values), -1, b)


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """The [start, end) runs where ``flags`` is true."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True))


def _sparse(values: np.ndarray) -> list[list[Any]]:
    """[start, [values]] for each run of known (finite) values, rounded to 4 decimals."""
    return [[a, np.round(values[a:b], 4).tolist()] for a, b in _runs(np.isfinite(values))]


def token_classes(ep: Episode, token_texts: list[str] | None, special_ids: set[int],
                  diff: np.ndarray | None = None,
                  found: tuple[dict[int, list[str]], set[int], set[int]] | None = None,
                  sel: np.ndarray | None = None) -> tuple[list[str], list[int]]:
    """(the distinct class strings, each token's index into them); of the tokens at ``sel`` (sorted positions,
    a folded view's) when given, ``token_texts`` theirs and ``found`` marking at least them.

    Classes: ``tok-train`` (loss mask 1) or ``tok-ctx`` (mask 0), plus ``tok-special`` for special ids,
    ``tok-flag`` where a finding marks the token (with ``tok-root`` where a root finding marks it,
    ``tok-caused`` where only findings that follow from one do), ``tok-partial`` for a piece of a
    multi-token character, ``tok-id`` when ids are shown instead of texts, ``l0``..``l5`` (logprob
    bucket, see ``LOGPROB_BOUNDS``), ``d0``..``d4`` (mismatch bucket, ``DIFF_BOUNDS``) and ``e0``..``e5``
    (entropy bucket, ``ENTROPY_BOUNDS``).
    ``diff`` is the per-token logprob mismatch (NaN where unknown); ``found`` is ``finding_marks`` of the
    episode's findings, when the caller has it.
    """
    tok = ep.tokens

    def pick(values: np.ndarray) -> np.ndarray:
        return values if sel is None else values[sel]

    ids = pick(tok.ids).astype(np.int64)
    n = len(ids)
    mask = (pick(tok.loss_mask) != 0).astype(np.int64)
    special = np.isin(ids, np.fromiter(special_ids, dtype=np.int64, count=len(special_ids))).astype(np.int64)
    if token_texts is None:
        text = np.full(n, 2, dtype=np.int64)
    else:
        text = np.fromiter((t == "" for t in token_texts), dtype=np.int64, count=n)
    heat = _buckets(-pick(tok.logprobs).astype(np.float64), LOGPROB_BOUNDS) + 1  # by surprise, -logprob
    dheat = np.zeros(n, dtype=np.int64)
    if diff is not None:
        dheat = _buckets(np.abs(pick(diff)), DIFF_BOUNDS) + 1
    eheat = _buckets(pick(tok.entropy).astype(np.float64), ENTROPY_BOUNDS) + 1
    marks, _, rooted = found or finding_marks(linked(ep.all_findings()), len(tok))

    def local(positions: Iterable[int]) -> np.ndarray:
        at = np.fromiter(positions, dtype=np.int64)
        if sel is None:
            return at
        k = np.searchsorted(sel, at).clip(0, max(n - 1, 0))
        return k[sel[k] == at] if n else k[:0]

    flag = np.zeros(n, dtype=np.int64)
    if marks:
        flag[local(marks)] = 2
        if rooted:
            flag[local(rooted)] = 1
    key = mask + 2 * special + 4 * text + 12 * heat + 84 * dheat + 588 * flag + 1764 * eheat
    codes, index = np.unique(key, return_inverse=True)
    names = []
    for k in codes.tolist():
        cls = "tok tok-train" if k % 2 else "tok tok-ctx"
        cls += " tok-special" if k // 2 % 2 else ""
        cls += ("", " tok-partial", " tok-id")[k // 4 % 3]
        cls += f" l{k // 12 % 7 - 1}" if k // 12 % 7 else ""
        cls += f" d{k // 84 % 7 - 1}" if k // 84 % 7 else ""
        cls += ("", " tok-flag tok-root", " tok-flag tok-caused")[k // 588 % 3]
        cls += f" e{k // 1764 - 1}" if k // 1764 else ""
        names.append(cls)
    return names, index.reshape(-1).tolist()


def folds(ep: Episode, runs: list[tuple[int, int, str, int | None]], special_ids: set[int]) -> list[list[Any]]:
    """[start, end, label] of the long context folded by default: in ``FOLD_KINDS`` segments, each run of
    at least ``FOLD_MIN`` tokens between special tokens (a system prompt, a block of tool schemas), less
    ``FOLD_KEEP`` tokens at each end, so where it starts and ends stays in view."""
    ids = ep.tokens.ids
    specials = np.fromiter(special_ids, dtype=np.int64, count=len(special_ids))
    out: list[list[Any]] = []
    for start, end, kind, turn in runs:
        if kind not in FOLD_KINDS or end - start < FOLD_MIN:
            continue
        ordinary = ~np.isin(ids[start:end].astype(np.int64), specials)
        for a, b in _runs(ordinary):
            if b - a >= FOLD_MIN:
                label = f"T{turn} {kind}" if turn is not None else kind
                out.append([start + a + FOLD_KEEP, start + b - FOLD_KEEP, label])
    return out


def blocks(n: int, cuts: Iterable[int], line_ends: np.ndarray) -> list[list[int]]:
    """[start, end] (and a third item, 1, for a block that goes on with the line of the one before) of the
    blocks the view draws: every token in one, a block boundary at each of ``cuts``, the rest cut at the
    first line end (``line_ends``: tokens whose text holds a newline) after ``BLOCK_TOKENS`` tokens."""
    ends = np.flatnonzero(line_ends)
    out: list[list[int]] = []
    bounds = sorted({0, n, *(c for c in cuts if 0 < c < n)})
    for a, b in zip(bounds, bounds[1:], strict=False):
        pos, cont = a, False
        while pos < b:
            stop = b
            if b - pos > BLOCK_TOKENS:
                k = int(np.searchsorted(ends, pos + BLOCK_TOKENS - 1))
                line_end = int(ends[k]) + 1 if k < len(ends) else b
                stop = line_end if line_end - pos <= BLOCK_MAX else pos + BLOCK_MAX
                if b - stop < BLOCK_TOKENS // 8:
                    stop = b  # no sliver of a block at the end
            out.append([pos, stop, 1] if cont else [pos, stop])
            cont = stop < b and not line_ends[stop - 1]
            pos = stop
    return out


def _clip(runs: Sequence[Sequence[Any]], windows: Windows) -> list[list[Any]]:
    """``runs`` ([start, end, ...], sorted, disjoint) cut to the ``windows``."""
    if windows is None:
        return [list(r) for r in runs]
    starts = [r[0] for r in runs]
    out: list[list[Any]] = []
    for x, y in windows:
        k = max(bisect.bisect_right(starts, x) - 1, 0)
        while k < len(runs) and runs[k][0] < y:
            a, b = max(runs[k][0], x), min(runs[k][1], y)
            if a < b:
                out.append([a, b, *runs[k][2:]])
            k += 1
    return out


def token_payload(ep: Episode, token_texts: list[str] | None, special_ids: set[int],
                  diff: list[float | None] | None = None, windows: Windows = None,
                  texts_of: Callable[[list[int]], list[str]] | None = None) -> dict[str, Any]:
    """What the browser draws the view from and the hover reads (see the module's docstring):

    ``n`` tokens; ``ids``; ``vid``/``vtx`` the distinct ids and their texts and ``over`` [position, text]
    where a token's text is not its id's (absent when ids are shown); ``cls``/``c`` the class strings and
    each token's index into them (``token_classes``); ``mask`` runs of loss mask 1; ``lp`` (and ``diff``)
    [start, values] runs of known values; ``ver`` [start, end, version] runs; ``seg`` [start, end, kind,
    turn] runs covering every token once; ``turns`` [turn, first token]; ``find`` [start, end, kinds]
    runs of finding marks and ``starts`` where findings start; ``blocks`` and ``fold`` as ``blocks`` and
    ``folds`` say. Where the episode has them: ``ent`` [start, values] runs of known entropies, ``est`` 1 when
    they are estimates, ``alt`` and ``altcut`` as ``alternatives_sent`` gives them (positions are the
    episode's), ``aid``/``atx`` the alternatives' ids and texts (``texts_of`` decodes them; none without it).

    A folded view (``windows``, see ``limits.token_windows``) sends the tokens of its windows only, and says
    which in ``win`` [start, end]: ``ids``, ``c`` and ``token_texts`` hold those tokens in order, and
    ``mask``, ``lp``, ``diff`` and ``ver`` count positions among them; every other position is the
    episode's. ``blocks`` cover the windows only, and nothing is folded as long context.
    """
    tok = ep.tokens
    n = len(tok)
    sel = None if windows is None else np.concatenate([np.arange(a, b) for a, b in windows])
    m = n if sel is None else len(sel)  # the tokens sent
    ids = (tok.ids if sel is None else tok.ids[sel]).tolist()
    runs = spans(ep)
    found = finding_marks(linked(ep.all_findings()), n, windows)
    marks, starts, _ = found
    diffs = None if diff is None else np.array([np.nan if d is None else d for d in diff], dtype=np.float64)
    names, index = token_classes(ep, token_texts, special_ids, diffs, found, sel)
    meta: dict[str, Any] = {"n": n, "ids": ids}
    line_ends = np.zeros(m, dtype=bool)  # of the tokens sent
    if token_texts is not None:
        vocab: dict[int, str] = {}
        over: list[list[Any]] = []
        for k, (tid, text) in enumerate(zip(ids, token_texts, strict=True)):
            if vocab.setdefault(tid, text) != text:
                over.append([k if sel is None else int(sel[k]), text, k])
        meta |= {"vid": list(vocab), "vtx": list(vocab.values()), "over": [o[:2] for o in over]}
        broken = {tid for tid, text in vocab.items() if "\n" in text}
        line_ends = np.isin(np.asarray(ids, dtype=np.int64), np.fromiter(broken, dtype=np.int64, count=len(broken)))
        for _, text, k in over:
            line_ends[k] = "\n" in text
    turns: dict[int, int] = {}
    for start, _, _, turn in runs:
        if turn is not None:
            turns.setdefault(turn, start)
    fold = folds(ep, runs, special_ids) if windows is None else []
    cuts = [*turns.values(), *(x for f in fold for x in f[:2])]
    if sel is None:
        drawn = blocks(n, cuts, line_ends)
    else:  # blocks of the tokens sent, cut at each window's start, then placed back at their positions
        edges = np.cumsum([0, *(b - a for a, b in windows)])
        inside = np.searchsorted(sel, cuts)
        local = [*edges[1:-1].tolist(), *(int(k) for k, c in zip(inside, cuts, strict=True) if k < m and sel[k] == c)]
        drawn = [[int(sel[a]), int(sel[b - 1]) + 1, *rest] for a, b, *rest in blocks(m, local, line_ends)]
    values = tok.logprobs if sel is None else tok.logprobs[sel]
    meta |= {
        "cls": names, "c": index,
        "mask": [list(r) for r in _runs((tok.loss_mask if sel is None else tok.loss_mask[sel]) != 0)],
        "lp": _sparse(values.astype(np.float64)),
        "seg": _clip(runs, windows),
        "turns": [[t, i] for t, i in turns.items()],
        "find": _mark_runs(marks),
        "starts": sorted(starts),
        "blocks": drawn,
        "fold": fold,
    }
    if windows is not None:
        meta["win"] = [list(w) for w in windows]
    v = tok.versions if sel is None else tok.versions[sel]
    if (v >= 0).any():
        meta["ver"] = [[a, b, int(v[a])] for known in _runs(v >= 0) for a, b in _same(v, *known)]
    if diffs is not None:
        meta["diff"] = _sparse(diffs if sel is None else diffs[sel])
    entropy = (tok.entropy if sel is None else tok.entropy[sel]).astype(np.float64)
    if np.isfinite(entropy).any():
        meta["ent"] = _sparse(entropy)
        meta["est"] = int(tok.entropy_estimated)
    alt, left = alternatives_sent(ep, sel)
    if alt:
        meta["alt"], meta["altcut"] = alt, left
        if texts_of is not None:
            uniq = sorted({i for row in alt for i in row[1]})
            meta["aid"], meta["atx"] = uniq, texts_of(uniq)
    return meta


def _same(values: np.ndarray, start: int, end: int) -> list[tuple[int, int]]:
    """The runs of equal values in values[start:end]."""
    cuts = (np.flatnonzero(np.diff(values[start:end])) + start + 1).tolist()
    edges = [start, *cuts, end]
    return list(zip(edges, edges[1:], strict=False))


def _legend(has_diff: bool, entropy: str = "", alternatives: bool = False) -> str:
    diff = '<span class="rs-swatch sw-diff d3">mismatch</span>' if has_diff else ""
    heat = "".join(f'<span class="rs-swatch sw-l{k}">{label}</span>' for k, label in enumerate(
        ("≥ -0.1", "≥ -0.5", "≥ -1", "≥ -2", "≥ -4", "< -4")))
    diff_scale = "".join(f'<span class="rs-swatch sw-d{k}">{label}</span>' for k, label in enumerate(
        ("< .05", "< .2", "< .5", "< 1", "≥ 1")))
    # The hover's second line lists the top K where the episode has them; its room is kept, so hovering
    # moves nothing.
    alts = '<div class="rs-hover-alts"></div>' if alternatives else ""
    return (
        '<div class="rs-legend">'
        '<span class="rs-swatch sw-train">trainable (mask 1)</span>'
        '<span class="rs-swatch sw-ctx">context (mask 0)</span>'
        '<span class="rs-swatch sw-special">special token</span>'
        '<span class="rs-swatch sw-flag sw-root">root finding</span>'
        f'<span class="rs-swatch sw-flag sw-caused">follows from a root</span>{diff}'
        '<span class="rs-swatch sw-nl">↵ newline</span>'
        f'<span class="rs-heat-legend">logprob {heat}</span>'
        f'<span class="rs-diff-legend">|recomputed − rollout| {diff_scale}</span>{entropy}'
        '<div class="rs-hover" aria-live="polite">hover a token for its id, logprob, mask and turn</div>'
        f"{alts}</div>"
    )


def _turn_nav(ep: Episode) -> str:
    if not ep.turns:
        return ""
    flagged = {t.index for t in ep.turns if t.findings} | {f.turn for f in ep.findings if f.turn is not None}
    links = "".join(
        f'<a href="#turn-{t.index}" data-jump="turn-{t.index}" class="{"rs-has-finding" if t.index in flagged else ""}"'
        f' title="turn {t.index}{" (has findings)" if t.index in flagged else ""}">{t.index}</a>'
        for t in ep.turns
    )
    return f'<div class="rs-turnnav"><span class="rs-dim">jump to turn</span>{links}</div>'


def render_tokens(
    ep: Episode,
    token_texts: list[str] | None,
    special_ids: set[int],
    *,
    tokenizer_error: str | None = None,
    windows: Windows = None,
    texts_of: Callable[[list[int]], list[str]] | None = None,
) -> str:
    """The token view of ``ep``: its header and, in ``data-meta``, the tokens (``token_payload``); folded to
    ``windows`` (``token_texts`` are theirs) with a note saying what was left out and how to see it.

    The browser draws each token as a ``<span class="tok ...">`` (``token_classes``); the first token of
    each turn carries ``id="turn-N"`` and an anchor ``id="tok-I"`` precedes the first token of each
    finding, so other views can link to them (``data-jump``); the script draws a target's block before
    scrolling to it. Without texts (``token_texts`` None, e.g. the tokenizer did not load) the ids are
    shown instead, with a note saying why.
    """
    tok = ep.tokens
    n = len(tok)
    sent = n if windows is None else sum(b - a for a, b in windows)
    notes: list[str] = []
    if token_texts is not None and len(token_texts) != sent:
        notes.append(f"token texts ({len(token_texts)}) do not match the {sent} tokens shown; showing ids")
        token_texts = None
    if token_texts is None:
        why = f": {tokenizer_error}" if tokenizer_error else ""
        notes.insert(0, f"The tokenizer could not be loaded{why}. Showing token ids instead of texts.")
    diff, diff_note = logprob_diff(ep)
    if diff_note:
        notes.append(diff_note)
    n_found = sum(1 for f in ep.all_findings() if f.severity.value != "info")  # as ls and the header count them
    meta = token_payload(ep, token_texts, special_ids, diff, windows, texts_of)
    folded = sum(b - a for a, b, _ in meta["fold"])
    summary = (
        f'<div class="rs-tok-summary">{n:,} tokens · prompt {ep.prompt_len:,} · response {ep.response_len:,} · '
        f'<span class="rs-train-text">trainable {tok.n_trainable:,}</span>'
        + (f" · {n_found} finding{'s' if n_found != 1 else ''}" if n_found else "")
        + (f' · <span class="rs-dim">{folded:,} tokens of long context folded</span>' if folded else "")
        + "</div>"
    )
    note_html = "".join(note(x, "warn") for x in notes) + (_folded_note(ep, windows) if windows else "")
    data = esc(json.dumps(meta, separators=(",", ":"), ensure_ascii=False, allow_nan=False))
    return (
        f'<div class="rs-tokview{" rs-tokview-folded" if windows else ""}" data-episode="{esc(ep.id)}" '
        f'data-entropy="{int("ent" in meta)}" data-meta="{data}">'
        f'<div class="rs-tokhead">{summary}{_legend(diff is not None, entropy_legend(ep), "alt" in meta)}'
        f'{_turn_nav(ep)}</div>{note_html}'
        '<div class="rs-tokens"></div></div>'
    )


def _mark_runs(marks: dict[int, list[str]]) -> list[list[Any]]:
    """[start, end, kinds] runs of consecutive tokens with the same finding kinds, for the hover text."""
    out: list[list[Any]] = []
    for i in sorted(marks):
        kinds = ", ".join(marks[i])
        if out and out[-1][1] == i and out[-1][2] == kinds:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1, kinds])
    return out


def episode_tokenizer(ep: Episode) -> tuple[Any, str | None]:
    """(the tokenizer an episode's ids are shown with, None), or (None, why); loaded once per process.

    An import that names no tokenizer is shown with the embedded one, and the views say so; the checks
    (``engine.episode_tokenizer``) do not judge such ids.
    """
    return try_tokenizer(tokenizer_spec(ep))


def _finding_starts(ep: Episode) -> list[int]:
    """Where the episode's findings start, errors first: the order a folded view sends their tokens in."""
    found = sorted(ep.all_findings(), key=lambda f: SEVERITY_ORDER.get(f.severity, 3))
    return [f.token_start for f in found if f.token_start is not None]


def _folded_note(ep: Episode, windows: list[tuple[int, int]]) -> str:
    n, sent = len(ep.tokens), sum(b - a for a, b in windows)
    starts = [s for s in _finding_starts(ep) if 0 <= s < n]
    shown = sum(1 for s in starts if any(a <= s < b for a, b in windows))
    left = (f"; the tokens of {len(starts) - shown:,} more finding{'s' if len(starts) - shown != 1 else ''} are "
            "not sent (their links say so)") if shown < len(starts) else ""
    return (
        f'<div class="rs-note rs-warn rs-tok-folded"><b>Token view folded</b>: this episode has {n:,} tokens, over '
        f"the {TOKENS_DRAWN:,} the token view draws. Sent: the first and last tokens and those around "
        f"{shown:,} finding{'s' if shown != 1 else ''}' first tokens, {sent:,} in all, in {len(windows)} "
        f"part{'s' if len(windows) != 1 else ''}{esc(left)}; the other {n - sent:,} tokens are left out, each gap "
        f"marked where it lies. To see every token: {esc(see_whole(ep.id, tokens=True))}.</div>"
    )


def token_view(ep: Episode) -> str:
    """The token view of an episode, with texts from its own tokenizer when it loads; folded (only some tokens
    sent, see ``limits.token_windows``) when the episode has more than ``TOKENS_DRAWN`` tokens."""
    windows = token_windows(len(ep.tokens), _finding_starts(ep))
    tok, error = episode_tokenizer(ep)
    if tok is None:
        return render_tokens(ep, None, set(), tokenizer_error=error, windows=windows)
    ids = ep.tokens.ids if windows is None else np.concatenate([ep.tokens.ids[a:b] for a, b in windows])

    def texts_of(alt_ids: list[int]) -> list[str]:  # each alternative alone, as the model would have said it
        return [str(x) for x in tok.batch_decode([[i] for i in alt_ids], skip_special_tokens=False,
                                                 clean_up_tokenization_spaces=False)]

    return render_tokens(ep, decode_token_texts(tok, ids.tolist()), special_token_ids(tok), windows=windows,
                         texts_of=texts_of)
