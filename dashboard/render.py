"""Escaped HTML for the Episode view: header, conversation and token view.

Pure functions of records (and, for token texts, of a tokenizer): no Gradio,
no store. Every string that came from a model, an env, a user or a file goes
through ``_e`` (``html.escape`` with quotes) before it touches markup, because
Gradio's ``gr.HTML`` inserts its value with ``innerHTML``: an unescaped
``<img onerror=...>`` in a model reply would run in the researcher's browser.

The token view is built for long episodes (tens of thousands of tokens): one
pass over the arrays, strings collected in a list and joined once, escaping
cached per distinct token text.
"""

from __future__ import annotations

import codecs
import html
import json
import math
import re
import time
from collections.abc import Iterable, Sequence
from typing import Any

from engine.records import Episode, Finding, Message, Status, Turn

# Texts longer than this (or with more lines) fold into a <details>.
FOLD_CHARS = 1200
FOLD_LINES = 24

_STATUS_CLASS = {
    Status.COMPLETED: "ok",
    Status.TRUNCATED: "warn",
    Status.ABORTED: "bad",
    Status.FAILED: "bad",
    Status.RUNNING: "info",
    Status.INTERRUPTED: "muted",
}
_CLASS_SAFE = re.compile(r"[^a-z0-9_-]")


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _cls(x: str) -> str:
    """A record value (role, kind) made safe to use inside a class name."""
    return _CLASS_SAFE.sub("-", x.lower()) or "other"


def fmt_num(x: float | None) -> str:
    """A reward or return, short: 1, -0.9829, 0.019; ``n/a`` for None/NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:.4g}"


def _fmt_seconds(s: float | None) -> str:
    if s is None:
        return "n/a"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _text_block(text: str, cls: str = "rs-text") -> str:
    """Escaped text, folded into a <details> when it is long."""
    body = f'<div class="{cls}">{_e(text)}</div>'
    n_lines = text.count("\n") + 1
    if len(text) <= FOLD_CHARS and n_lines <= FOLD_LINES:
        return body
    first = text.strip().split("\n", 1)[0]
    if len(first) > 100:
        first = first[:100] + "…"
    return (
        f'<details class="rs-fold"><summary><span class="rs-fold-first">{_e(first)}</span> '
        f'<span class="rs-dim">({n_lines} lines, {len(text):,} chars)</span></summary>{body}</details>'
    )


def _json_details(label: str, value: Any) -> str:
    return f'<details class="rs-fold"><summary>{_e(label)}</summary><pre class="rs-json">{_e(_json(value))}</pre></details>'


def _chip(label: str, value: str, cls: str = "") -> str:
    return f'<span class="rs-chip {cls}"><span class="rs-chip-k">{_e(label)}</span> {_e(value)}</span>'


# -- header ---------------------------------------------------------------


def _backend_label(backend: dict[str, Any]) -> str:
    name = str(backend.get("model") or backend.get("name") or "unknown")
    extra = [f"{k}={v}" for k, v in backend.items() if k not in ("name", "model") and v not in (None, "", {}, [])]
    return f"{name} ({', '.join(extra)})" if extra else name


def _series(prefix: str, values: Sequence[float]) -> str:
    if not values:
        return '<span class="rs-dim">none</span>'
    return "".join(
        f'<span class="rs-chip rs-num {"rs-pos" if v > 0 else "rs-neg" if v < 0 else ""}">'
        f'<span class="rs-chip-k">{prefix}{i}</span> {_e(fmt_num(v))}</span>'
        for i, v in enumerate(values)
    )


def render_header(ep: Episode) -> str:
    """The episode's identity, verdict, rewards and token counts."""
    status_cls = _STATUS_CLASS.get(ep.status, "muted")
    n_find = len(ep.all_findings())
    created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ep.created_at)) if ep.created_at else "n/a"
    rows: list[tuple[str, str]] = [
        ("env", _e(ep.env)),
        ("task", _e(ep.task_id)),
        ("preset", _e(ep.preset or "n/a")),
        ("backend", _e(_backend_label(ep.backend))),
        ("tokenizer", _e(ep.tokenizer or "smollm2 (embedded)")),
        ("reward", f'<b class="rs-big">{_e(fmt_num(ep.reward))}</b>'),
        (
            "tokens",
            f"{ep.n_tokens:,} total · prompt {ep.prompt_len:,} · response {ep.response_len:,} · "
            f'<span class="rs-train-text">trainable {ep.tokens.n_trainable:,}</span>',
        ),
        ("turns", str(ep.n_turns)),
        ("findings", f'<span class="{"rs-bad-text" if n_find else ""}">{n_find}</span>'),
        ("run", _e(ep.run_id or "n/a") + (f" · group {_e(ep.group_id)} #{ep.sample_index}" if ep.group_id else "")),
        ("created", _e(created)),
        ("source", _e(ep.source.get("kind", "live"))),
    ]
    if ep.parent_id:
        rows.append(("forked from", f"<code>{_e(ep.parent_id)}</code> at turn {_e(ep.fork_turn)}"))
    if ep.tags:
        rows.append(("tags", " ".join(f'<span class="rs-tag">{_e(t)}</span>' for t in ep.tags)))
    if ep.note:
        rows.append(("note", _e(ep.note)))
    kv = "".join(f'<div class="rs-kv-item"><dt>{k}</dt><dd>{v}</dd></div>' for k, v in rows)
    reason = f'<span class="rs-reason">{_e(ep.reason)}</span>' if ep.reason else ""
    return (
        '<div class="rs-header">'
        f'<div class="rs-head-line"><span class="rs-status rs-{status_cls}">{_e(ep.status.value)}</span>'
        f"{reason}<code class=\"rs-id\">{_e(ep.id)}</code></div>"
        f'<dl class="rs-kv">{kv}</dl>'
        f'<div class="rs-series"><span class="rs-series-k">turn rewards</span>{_series("T", ep.turn_rewards)}</div>'
        f'<div class="rs-series"><span class="rs-series-k">returns</span>{_series("T", ep.returns)}</div>'
        f'<div class="rs-more">{_json_details("loop config", ep.config)}{_json_details("backend", ep.backend)}</div>'
        "</div>"
    )


# -- conversation ---------------------------------------------------------


def _finding(f: Finding) -> str:
    where = ""
    if f.token_start is not None:
        end = f"–{f.token_end}" if f.token_end is not None and f.token_end != f.token_start + 1 else ""
        where = f' <a class="rs-jump" href="#tok-{f.token_start}" data-jump="tok-{f.token_start}">tokens {f.token_start}{end}</a>'
    evidence = _json_details("evidence", f.evidence) if f.evidence else ""
    sev = _cls(f.severity.value)
    return (
        f'<div class="rs-finding rs-sev-{sev}"><span class="rs-sev">{_e(f.severity.value)}</span> '
        f"<b>{_e(f.kind)}</b>: {_e(f.message)}{where}{evidence}</div>"
    )


def _message(m: Message) -> str:
    who = f'<span class="rs-role">{_e(m.role)}</span>' + (f" · {_e(m.name)}" if m.name else "")
    calls = "".join(
        f'<div class="rs-call"><span class="rs-call-name">{_e(c.name)}</span>'
        f'<pre class="rs-json">{_e(_json(c.arguments))}</pre></div>'
        for c in m.tool_calls
    )
    return (
        f'<div class="rs-msg rs-role-{_cls(m.role)}"><div class="rs-msg-head">{who}</div>'
        f"{_text_block(m.content)}{calls}</div>"
    )


def _turn(t: Turn) -> str:
    g = t.generation
    chips = [_chip("env reward", fmt_num(t.reward), "rs-pos" if t.reward > 0 else "")]
    chips.append(_chip("done", "yes" if t.done else "no"))
    if g is not None:
        chips.append(_chip("finish", g.finish_reason, "rs-warn" if g.finish_reason != "stop" else ""))
        chips.append(_chip("tokens", str(len(g.token_ids))))
        chips.append(_chip("latency", _fmt_seconds(g.latency_s)))
    if "total_s" in t.timings:
        chips.append(_chip("turn", _fmt_seconds(t.timings["total_s"])))
    parts = [
        f'<section class="rs-turn" id="conv-turn-{t.index}"><div class="rs-turn-head">'
        f'<span class="rs-turn-no">Turn {t.index}</span>{"".join(chips)}'
        f'<a class="rs-jump" href="#turn-{t.index}" data-jump="turn-{t.index}">tokens ↓</a></div>'
    ]
    if g is None:
        parts.append('<div class="rs-msg rs-role-assistant"><div class="rs-msg-head"><span class="rs-role">assistant</span>'
                     '</div><div class="rs-dim">no generation</div></div>')
    else:
        model = f" · {_e(g.model)}" if g.model else ""
        parts.append(
            '<div class="rs-msg rs-role-assistant"><div class="rs-msg-head"><span class="rs-role">assistant</span>'
            f" · raw generation{model}</div>"
            f"{_text_block(g.text)}</div>"
        )
    for c in t.tool_calls:
        parts.append(
            f'<div class="rs-call"><span class="rs-call-k">tool call</span> <span class="rs-call-name">{_e(c.name)}</span>'
            f'<pre class="rs-json">{_e(_json(c.arguments))}</pre></div>'
        )
    if t.parse_error:
        parts.append(f'<div class="rs-error"><b>parse error</b>: {_e(t.parse_error)}</div>')
    if t.action is not None and not t.action.is_respond and not t.tool_calls:
        parts.append(f'<div class="rs-dim">action: <code>{_e(t.action.name)}</code></div>')
    parts.extend(_message(m) for m in t.observation)
    if t.info:
        parts.append(_json_details("env info", t.info))
    parts.extend(_finding(f) for f in t.findings)
    parts.append("</section>")
    return "".join(parts)


def _initial_messages(ep: Episode) -> list[Message]:
    # The messages before the first assistant one are the episode's start
    # (system prompt, task); later ones are already in the turns.
    out: list[Message] = []
    for m in ep.messages:
        if m.role == "assistant":
            break
        out.append(m)
    return out


def render_conversation(ep: Episode) -> str:
    """The episode turn by turn: start messages, then each turn's generation, calls, observations."""
    parts = ['<div class="rs-conv">']
    if ep.findings:
        parts.append('<div class="rs-ep-findings">')
        parts.extend(_finding(f) for f in ep.findings)
        parts.append("</div>")
    parts.extend(_message(m) for m in _initial_messages(ep))
    parts.extend(_turn(t) for t in ep.turns)
    if not ep.turns:
        parts.append('<div class="rs-dim">no turns</div>')
    parts.append("</div>")
    return "".join(parts)


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


# -- token view -------------------------------------------------------------


def _finding_marks(findings: Iterable[Finding], n: int) -> tuple[dict[int, list[str]], set[int]]:
    marks: dict[int, list[str]] = {}
    starts: set[int] = set()
    for f in findings:
        if f.token_start is None or not 0 <= f.token_start < n:
            continue
        end = f.token_end if f.token_end is not None and f.token_end > f.token_start else f.token_start + 1
        starts.add(f.token_start)
        for i in range(f.token_start, min(end, n)):
            marks.setdefault(i, []).append(f.kind)
    return marks, starts


def _spans(ep: Episode) -> list[tuple[int, int, str, int | None]]:
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


LEGEND = (
    '<div class="rs-legend">'
    '<span class="rs-swatch sw-train">trainable (mask 1)</span>'
    '<span class="rs-swatch sw-ctx">context (mask 0)</span>'
    '<span class="rs-swatch sw-special">special token</span>'
    '<span class="rs-swatch sw-flag">finding</span>'
    '<span class="rs-swatch sw-nl">↵ newline</span>'
    '<span class="rs-dim">hover a token for id, logprob, mask, turn</span>'
    "</div>"
)


def render_tokens(
    ep: Episode,
    token_texts: list[str] | None,
    special_ids: set[int],
    *,
    tokenizer_error: str | None = None,
) -> str:
    """Every token of the episode as a ``<span class="tok ...">`` with a hover tooltip.

    Classes: ``tok-train`` (loss mask 1) or ``tok-ctx`` (mask 0), plus
    ``tok-special`` for special ids, ``tok-flag`` inside a finding's span and
    ``tok-partial`` for a piece of a multi-token character. The first token
    of each turn carries ``id="turn-N"`` and the first of each finding
    ``id="tok-I"``, so other views can link and scroll to them. Without
    texts (``token_texts`` None, e.g. the tokenizer did not load) the ids are
    shown instead, with a note saying why.
    """
    tok = ep.tokens
    n = len(tok)
    ids = tok.ids.tolist()
    mask = tok.loss_mask.tolist()
    lps = tok.logprobs.tolist()
    vers = tok.versions.tolist()
    notes: list[str] = []
    if token_texts is not None and len(token_texts) != n:
        notes.append(f"token texts ({len(token_texts)}) do not match the episode's {n} tokens; showing ids")
        token_texts = None
    if token_texts is None:
        why = f": {tokenizer_error}" if tokenizer_error else ""
        notes.insert(0, f"The tokenizer could not be loaded{why}. Showing token ids instead of texts.")
    marks, finding_starts = _finding_marks(ep.all_findings(), n)
    turn_seen: set[int] = set()
    esc_cache: dict[str, str] = {}
    out: list[str] = []
    push = out.append
    for start, end, kind, turn in _spans(ep):
        label = f"T{turn} {kind}" if turn is not None else kind
        if kind != "tail":  # a tail is one newline; its label would be clutter
            push(f'<span class="seg-mark seg-{_cls(kind)}" data-label="{_e(label)}"></span>')
        where = f"turn {turn} · {_e(kind)}" if turn is not None else _e(kind)
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
                    text = _e(raw).replace("\r", "␍").replace("\n", "↵\n") if raw else "◦"
                    esc_cache[raw] = text
                if not raw:
                    cls += " tok-partial"
            lp = lps[i]
            title = f"#{i} · id {tid} · logprob {'n/a' if lp != lp else f'{lp:.4f}'} · mask {mask[i]} · {where}"
            if vers[i] >= 0:
                title += f" · version {vers[i]}"
            kinds = marks.get(i)
            if kinds:
                cls += " tok-flag"
                title += " · finding: " + _e(", ".join(kinds))
            anchor = ""
            if turn is not None and turn not in turn_seen:
                turn_seen.add(turn)
                anchor = f' id="turn-{turn}"'
            if i in finding_starts:
                # Its own element: a finding may start on a turn's first token.
                push(f'<a class="tok-anchor" id="tok-{i}"></a>')
            push(f'<span class="{cls}"{anchor} title="{title}">{text}</span>')
    summary = (
        f'<div class="rs-tok-summary">{n:,} tokens · prompt {ep.prompt_len:,} · response {ep.response_len:,} · '
        f'<span class="rs-train-text">trainable {tok.n_trainable:,}</span></div>'
    )
    note_html = "".join(f'<div class="rs-note rs-warn">{_e(x)}</div>' for x in notes)
    return f'<div class="rs-tokview">{summary}{LEGEND}{note_html}<div class="rs-tokens">{"".join(out)}</div></div>'


def render_message(text: str, kind: str = "info") -> str:
    """A one-line notice (empty states, errors) for any view."""
    return f'<div class="rs-note rs-{_cls(kind)}">{_e(text)}</div>'
