"""The token view: every token of an episode, colored by loss mask, as escaped HTML.

Built for long episodes (tens of thousands of tokens). Each token is one
small ``<span>`` with classes only; what the hover shows (id, logprob, mask,
turn, version, the logprob-mismatch difference, findings) travels once as a
JSON ``data-meta`` attribute of the view and is read by ``assets/tokens.js`` on
hover, instead of a ``title`` on every span (which tripled the page). The
toggles (logprob heat map, mismatch heat map, special tokens) are classes on
an ancestor, so switching them is a style change in the browser, not a new
page from the server.

Every token text is escaped (``esc``), cached per distinct text.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from engine import Episode, Finding, Severity, linked, tokenizers

from .html import css_class, esc, note

# Logprob heat buckets: class lK for -logprob below each bound, l5 beyond.
LOGPROB_BOUNDS = (0.1, 0.5, 1.0, 2.0, 4.0)
# Mismatch buckets: class dK for |recomputed - rollout| below each bound, d4 beyond.
DIFF_BOUNDS = (0.05, 0.2, 0.5, 1.0)


# -- token texts ----------------------------------------------------------


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's reversible byte <-> printable character map, used by every
    # byte-level BPE vocabulary (SmolLM2, Qwen, Llama 3).
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}
_SP_BYTE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _byte_reader(tokenizer: Any) -> Any:
    """A function id -> raw bytes for byte-level or byte-fallback vocabularies, else None."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = repr(getattr(backend, "decoder", None))
    if "ByteLevel" in decoder:
        def read(i: int) -> bytes:
            piece = tokenizer.convert_ids_to_tokens(i)
            if all(c in _UNICODE_TO_BYTE for c in piece):
                return bytes(_UNICODE_TO_BYTE[c] for c in piece)
            return piece.encode("utf-8")
        return read
    if "ByteFallback" in decoder:
        def read_sp(i: int) -> bytes:
            piece = tokenizer.convert_ids_to_tokens(i)
            m = _SP_BYTE.match(piece)
            return bytes([int(m.group(1), 16)]) if m else piece.replace("▁", " ").encode("utf-8")
        return read_sp
    return None


def decode_token_texts(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """The text of each token, in order, such that the texts join to the decoded sequence.

    Each distinct id is decoded once. A token holding only part of a UTF-8
    character (byte-level BPE splits CJK and emoji across tokens) decodes
    alone to U+FFFD; for those, bytes are fed through an incremental UTF-8
    decoder so the character appears on the token that completes it and the
    earlier pieces get ``""`` (the token view marks them as partial).
    """
    ids = [int(i) for i in ids]
    uniq = sorted(set(ids))
    texts = tokenizer.batch_decode([[i] for i in uniq], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    plain = dict(zip(uniq, texts, strict=True))
    broken = {i for i, s in plain.items() if "\ufffd" in s}
    read = _byte_reader(tokenizer) if broken else None
    if read is None:
        return [plain[i] for i in ids]
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    out: list[str] = []
    for i in ids:
        if i in broken:
            out.append(decoder.decode(read(i)))
            continue
        if decoder.getstate()[0]:
            # Bytes left dangling by a cut-off character: show them as U+FFFD
            # on the token that left them, as a full decode would.
            tail = decoder.decode(b"", final=True)
            if out:
                out[-1] += tail
            decoder.reset()
        out.append(plain[i])
    if decoder.getstate()[0] and out:
        out[-1] += decoder.decode(b"", final=True)
    return out


def special_token_ids(tokenizer: Any) -> set[int]:
    """Ids the tokenizer marks special (``<|im_start|>``, ``<|im_end|>``, ...)."""
    out = {int(i) for i in getattr(tokenizer, "all_special_ids", ()) if i is not None}
    for i, tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items():
        if getattr(tok, "special", False):
            out.add(int(i))
    return out


# -- what the view shows --------------------------------------------------


def _positions(f: Finding, start: int, n: int) -> list[int]:
    """The tokens a finding located at ``start`` marks: its listed positions when it has them, else its span."""
    runs = f.evidence.get("runs")
    if isinstance(runs, list) and runs and all(isinstance(r, list) and len(r) == 2 for r in runs):
        return [p for a, b in runs for p in range(max(0, int(a)), min(int(b), n))]  # every position, uncapped
    listed = f.evidence.get("over") if f.kind == "logprob_mismatch" else f.evidence.get("positions")
    if isinstance(listed, list) and listed and all(isinstance(p, int) for p in listed):
        # A mismatch or mask finding spans first..last bad token; marking the
        # whole span would flag the good tokens between them too.
        return [p for p in listed if 0 <= p < n]
    end = f.token_end if f.token_end is not None and f.token_end > start else start + 1
    return list(range(start, min(end, n)))


def finding_marks(findings: Iterable[Finding], n: int) -> tuple[dict[int, list[str]], set[int], set[int]]:
    """Token index -> kinds of the findings marking it, the indexes where findings start, and the indexes a
    root finding marks (the rest are marked only by findings that follow from a root)."""
    marks: dict[int, list[str]] = {}
    starts: set[int] = set()
    rooted: set[int] = set()
    for f in findings:
        if f.token_start is None or not 0 <= f.token_start < n:
            continue
        starts.add(f.token_start)
        root = f.caused_by is None and f.severity is not Severity.INFO
        for i in _positions(f, f.token_start, n):
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


def _buckets(values: np.ndarray, bounds: Sequence[float]) -> list[int]:
    """Bucket index per value (``len(bounds)`` beyond the last bound), -1 for NaN."""
    b = np.digitize(values, bounds)
    return np.where(np.isnan(values), -1, b).tolist()


def _meta(ep: Episode, runs: list[tuple[int, int, str, int | None]], marks_by_run: list[list[Any]],
          diff: list[float | None] | None) -> str:
    tok = ep.tokens
    lp = np.round(tok.logprobs.astype(np.float64), 4).tolist()
    meta: dict[str, Any] = {
        "ids": tok.ids.tolist(),
        "lp": [None if x != x else x for x in lp],  # x != x: NaN, unknown
        "mask": tok.loss_mask.tolist(),
        "seg": [[s, e, k, t] for s, e, k, t in runs],
        "find": marks_by_run,
    }
    if (tok.versions >= 0).any():
        meta["ver"] = tok.versions.tolist()
    if diff is not None:
        meta["diff"] = diff
    return esc(json.dumps(meta, separators=(",", ":"), allow_nan=False))


def _legend(has_diff: bool) -> str:
    diff = '<span class="rs-swatch sw-diff d3">mismatch</span>' if has_diff else ""
    heat = "".join(f'<span class="rs-swatch sw-l{k}">{label}</span>' for k, label in enumerate(
        ("≥ -0.1", "≥ -0.5", "≥ -1", "≥ -2", "≥ -4", "< -4")))
    diff_scale = "".join(f'<span class="rs-swatch sw-d{k}">{label}</span>' for k, label in enumerate(
        ("< .05", "< .2", "< .5", "< 1", "≥ 1")))
    return (
        '<div class="rs-legend">'
        '<span class="rs-swatch sw-train">trainable (mask 1)</span>'
        '<span class="rs-swatch sw-ctx">context (mask 0)</span>'
        '<span class="rs-swatch sw-special">special token</span>'
        '<span class="rs-swatch sw-flag sw-root">root finding</span>'
        f'<span class="rs-swatch sw-flag sw-caused">follows from a root</span>{diff}'
        '<span class="rs-swatch sw-nl">↵ newline</span>'
        f'<span class="rs-heat-legend">logprob {heat}</span>'
        f'<span class="rs-diff-legend">|recomputed − rollout| {diff_scale}</span>'
        '<div class="rs-hover" aria-live="polite">hover a token for its id, logprob, mask and turn</div>'
        "</div>"
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
) -> str:
    """Every token of the episode as a ``<span class="tok ...">``; hover data in ``data-meta``.

    Classes: ``tok-train`` (loss mask 1) or ``tok-ctx`` (mask 0), plus
    ``tok-special`` for special ids, ``tok-flag`` inside a finding's span (with ``tok-root`` where a root
    finding marks it, ``tok-caused`` where only findings that follow from one do),
    ``tok-partial`` for a piece of a multi-token character, ``l0``..``l5``
    (logprob bucket, see ``LOGPROB_BOUNDS``) and ``d0``..``d4`` (mismatch
    bucket, ``DIFF_BOUNDS``). The first token of each turn carries
    ``id="turn-N"``, and an anchor ``id="tok-I"`` precedes the first token of
    each finding, so other views can link and scroll to them. Without texts
    (``token_texts`` None, e.g. the tokenizer did not load) the ids are
    shown instead, with a note saying why.
    """
    tok = ep.tokens
    n = len(tok)
    ids = tok.ids.tolist()
    mask = tok.loss_mask.tolist()
    notes: list[str] = []
    if token_texts is not None and len(token_texts) != n:
        notes.append(f"token texts ({len(token_texts)}) do not match the episode's {n} tokens; showing ids")
        token_texts = None
    if token_texts is None:
        why = f": {tokenizer_error}" if tokenizer_error else ""
        notes.insert(0, f"The tokenizer could not be loaded{why}. Showing token ids instead of texts.")
    diff, diff_note = logprob_diff(ep)
    if diff_note:
        notes.append(diff_note)
    heat = _buckets(-tok.logprobs.astype(np.float64), LOGPROB_BOUNDS)  # by surprise, -logprob
    dheat = _buckets(np.array([np.nan if d is None else abs(d) for d in diff], dtype=np.float64), DIFF_BOUNDS) if diff else None
    findings = linked(ep.all_findings())
    marks, finding_starts, rooted = finding_marks(findings, n)
    runs = spans(ep)
    esc_cache: dict[str, str] = {}
    turn_seen: set[int] = set()
    out: list[str] = []
    push = out.append
    block: int | None | str = "none yet"
    for start, end, kind, turn in runs:
        if turn != block:
            # One block per turn: the browser lays out and styles only the
            # blocks near the screen (content-visibility), which is most of
            # what a 32,000-token view costs.
            push(("</div>" if block != "none yet" else "") + '<div class="rs-tblock">')
            block = turn
        if kind != "tail":  # a tail is one newline; its label would be clutter
            label = f"T{turn} {kind}" if turn is not None else kind
            push(f'<span class="seg-mark seg-{css_class(kind)}" data-label="{esc(label)}"></span>')
        for i in range(start, end):
            tid = ids[i]
            cls = "tok tok-train" if mask[i] else "tok tok-ctx"
            if tid in special_ids:
                cls += " tok-special"
            if token_texts is None:
                text = str(tid)
                cls += " tok-id"
            else:
                raw = token_texts[i]
                text = esc_cache.get(raw)
                if text is None:
                    text = esc(raw).replace("\r", "␍").replace("\n", "↵\n") if raw else "◦"
                    esc_cache[raw] = text
                if not raw:
                    cls += " tok-partial"
            if heat[i] >= 0:
                cls += f" l{heat[i]}"
            if dheat is not None and dheat[i] >= 0:
                cls += f" d{dheat[i]}"
            if i in marks:
                cls += " tok-flag tok-root" if i in rooted else " tok-flag tok-caused"
            anchor = ""
            if turn is not None and turn not in turn_seen:
                turn_seen.add(turn)
                anchor = f' id="turn-{turn}"'
            if i in finding_starts:
                # Its own element: a finding may start on a turn's first token.
                push(f'<a class="tok-anchor" id="tok-{i}"></a>')
            push(f'<span class="{cls}"{anchor}>{text}</span>')
    if block != "none yet":
        push("</div>")
    summary = (
        f'<div class="rs-tok-summary">{n:,} tokens · prompt {ep.prompt_len:,} · response {ep.response_len:,} · '
        f'<span class="rs-train-text">trainable {tok.n_trainable:,}</span>'
        + (f" · {len(findings)} finding{'s' if len(findings) != 1 else ''}" if findings else "")
        + "</div>"
    )
    note_html = "".join(note(x, "warn") for x in notes)
    return (
        f'<div class="rs-tokview" data-meta="{_meta(ep, runs, _mark_runs(marks), diff)}">'
        f'<div class="rs-tokhead">{summary}{_legend(diff is not None)}{_turn_nav(ep)}</div>{note_html}'
        f'<div class="rs-tokens">{"".join(out)}</div></div>'
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
    (``tokenizers.for_episode``) do not judge such ids.
    """
    return tokenizers.get(tokenizers.spec_of(ep))


def token_view(ep: Episode) -> str:
    """The token view of an episode, with texts from its own tokenizer when it loads."""
    tok, error = episode_tokenizer(ep)
    if tok is None:
        return render_tokens(ep, None, set(), tokenizer_error=error)
    return render_tokens(ep, decode_token_texts(tok, ep.tokens.ids.tolist()), special_token_ids(tok))
