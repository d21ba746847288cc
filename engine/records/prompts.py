"""Each turn's prompt text held once: a later turn's prompt as pieces of the text before it.

A turn's ``prompt_text`` is the whole conversation so far, rendered: in a 60-turn episode the first turns'
text is repeated 60 times. In the compact form (the JSONL export, the store's turn rows) a turn's prompt
text may be an object instead of a string::

    {"$pieces": [[0, 51234], "<|im_start|>tool\\n...", [51300, 52010], ...]}

Each piece is either a ``[start, end]`` slice of the *base* (counted in code points, as Python indexes a
string), or text as it is; the prompt is the pieces joined. The base is the previous turn's prompt text (restored) followed by the previous turn's generated
text (``generation.text``, "" without one): a prompt that extends the last one is one slice and the
appended text, and one whose template rewrote history (Qwen3 drops the ``<think>`` of earlier replies)
is the slices it kept around what changed. The first turn, and a turn whose previous turn has no prompt
text, hold theirs whole. Restoring is exact, and a plain string is always valid.
"""

from __future__ import annotations

from typing import Any

from ..errors import FormatError
from .reading import json_type

KEY = "$pieces"
DOC = ("A prompt text as pieces of the base: the previous turn's prompt text followed by its generation's text "
       "(\"\" without one). Each piece is [start, end], the base's characters start to end (counted in Unicode code "
       "points, not bytes or UTF-16 units), or text as it is; the prompt text is the pieces joined.")
_ANCHOR = 32  # characters that must agree for a slice to be taken
_MIN_SLICE = 24  # a shorter match is cheaper written out
_MAX_SEARCHES = 24  # past this many searches for where the texts agree again, the rest is written out


def base(prompt_text: str | None, generation_text: str | None) -> str | None:
    """What the next turn's prompt is cut from: this turn's prompt and its generated text (None: no prompt)."""
    if prompt_text is None:
        return None
    return prompt_text + (generation_text or "")


def _agree(a: str, i: int, b: str, j: int) -> int:
    """How many characters ``a[i:]`` and ``b[j:]`` share from their start (compared in growing chunks)."""
    limit = min(len(a) - i, len(b) - j)
    n, step = 0, 64
    while n < limit:
        step = min(step, limit - n)
        if a[i + n:i + n + step] == b[j + n:j + n + step]:
            n += step
            step *= 2
        elif step == 1:
            break
        else:
            step //= 2
    return n


def pieces(prompt: str, source: str) -> list[Any]:
    """``prompt`` as slices of ``source`` and text: the joined pieces are ``prompt``."""
    out: list[Any] = []
    i = j = lit = searches = 0
    n_src, n = len(source), len(prompt)
    while j < n:
        k = _agree(source, i, prompt, j) if i < n_src else 0
        if k >= _MIN_SLICE or (k and j + k == n and j == lit):
            if lit < j:
                out.append(prompt[lit:j])
            out.append([i, i + k])
            i, j = i + k, j + k
            lit = j
            continue
        searches += 1
        if searches > _MAX_SEARCHES or n - j < _ANCHOR or i >= n_src:
            break  # the rest is new text (what a turn appends, once the source is used up)
        # Where the texts agree again: the prompt's next characters later in the source (the source's text
        # between was dropped), or the source's next characters later in the prompt (the prompt's text
        # between is new), whichever is nearer; else on at the prompt's next line.
        p = source.find(prompt[j:j + _ANCHOR], i)
        q = prompt.find(source[i:i + _ANCHOR], j + 1) if i + _ANCHOR <= n_src else -1
        if p >= 0 and (q < 0 or p - i <= q - j):
            i = p
        elif q >= 0:
            j = q
        else:
            nl = prompt.find("\n", j + 1)
            j = n if nl < 0 else nl
    if lit < n:
        out.append(prompt[lit:])
    return out


def compact(prompt: str | None, source: str | None) -> Any:
    """A prompt text in the compact form when that is shorter, else as it is."""
    if prompt is None or not source or len(prompt) < 2 * _ANCHOR:
        return prompt
    if prompt.startswith(source):  # the common case, without a search
        out: list[Any] = [[0, len(source)]]
        if len(prompt) > len(source):
            out.append(prompt[len(source):])
    else:
        out = pieces(prompt, source)
    literal = sum(len(p) for p in out if isinstance(p, str))
    if literal + 16 * len(out) >= len(prompt):
        return prompt
    return {KEY: out}


def restore(value: Any, source: str | None, where: str = "prompt_text") -> str | None:
    """A prompt text from its stored value: a string (or null) as it is, the compact form joined; a
    ``FormatError`` naming ``where`` for pieces that do not fit ``source``."""
    if value is None or isinstance(value, str):
        return value
    if not isinstance(value, dict) or not isinstance(value.get(KEY), list):
        raise FormatError(f"must be text, null or {{\"{KEY}\": [...]}}, got {json_type(value)}", field=where)
    if source is None:
        raise FormatError("is given as pieces of the previous turn's prompt, but the previous turn has no "
                          "prompt text", field=where)
    parts = []
    for k, p in enumerate(value[KEY]):
        if isinstance(p, str):
            parts.append(p)
        elif (isinstance(p, list) and len(p) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in p)
              and 0 <= p[0] <= p[1] <= len(source)):
            parts.append(source[p[0]:p[1]])
        else:
            raise FormatError(f"piece {k} must be text or [start, end] within the previous turn's "
                              f"{len(source)} characters, got {p!r:.60}", field=where)
    return "".join(parts)


def _generation_text(turn: Any) -> str | None:
    gen = turn.get("generation") if isinstance(turn, dict) else None
    text = gen.get("text") if isinstance(gen, dict) else None
    return text if isinstance(text, str) else None


def compact_turns(turns: list[Any]) -> list[Any]:
    """A record's turn dicts with each prompt text in the compact form where that is shorter (new dicts)."""
    out = []
    source: str | None = None
    for t in turns:
        prompt = t.get("prompt_text")
        out.append({**t, "prompt_text": compact(prompt, source)} if prompt is not None and source else t)
        source = base(prompt, _generation_text(t))
    return out


def restore_turns(turns: Any, path: str = "turns") -> Any:
    """A record's turn dicts with every prompt text whole (the list itself when none is compact)."""
    if not isinstance(turns, list) or not any(isinstance(t, dict) and isinstance(t.get("prompt_text"), dict)
                                              for t in turns):
        return turns
    out = []
    source: str | None = None
    for k, t in enumerate(turns):
        if not isinstance(t, dict):
            out.append(t)
            source = None
            continue
        prompt = restore(t.get("prompt_text"), source, f"{path}.{k}.prompt_text")
        out.append({**t, "prompt_text": prompt} if prompt is not t.get("prompt_text") else t)
        source = base(prompt, _generation_text(t))
    return out
