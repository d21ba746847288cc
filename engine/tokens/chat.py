"""Chat-template rendering, token deltas and loss masks.

Two ways to turn a growing conversation into one token array, as the
trainers do it:

* ``retokenize`` (slime's tau-bench example): render the whole conversation
  with the chat template after every message, take the new text as
  ``curr[len(prev):]`` and encode it. Only right when the template is
  prefix-stable; :func:`text_delta` reports where it is not instead of
  silently slicing.
* ``tito`` (token in, token out): keep the ids the model generated; only the
  env's messages are encoded, rendered in isolation after a fixed dummy
  conversation so that the rest of the history is never re-rendered.

All functions here are pure functions of a tokenizer and messages.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import TemplateError
from ..records.episode import Message, Segment, SegmentKind
from .tokenizer import Tokenizer

# A string no real message contains; it marks where message content sits in a
# rendered dummy conversation so the template's own text around it is known.
SENTINEL = "\u2063RSSENTINEL\u2063"
_BASE = (
    Message("system", "S"),
    Message("user", "U"),
    Message("assistant", SENTINEL),
)


def template_hash(tokenizer: Tokenizer) -> str:
    """Short hash of the tokenizer's chat template (identifies it across runs)."""
    tpl = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(tpl, dict):
        tpl = "\n".join(f"{k}:{v}" for k, v in sorted(tpl.items()))
    return hashlib.sha256(tpl.encode()).hexdigest()[:16]


def render(
    tokenizer: Tokenizer,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    **template_kwargs: Any,
) -> str:
    """Render messages with the tokenizer's chat template, as text."""
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateError(
            f"tokenizer {getattr(tokenizer, 'name_or_path', '?')!r} has no chat template; "
            "pick one that has, or set tokenizer.chat_template"
        )
    try:
        out = tokenizer.apply_chat_template(
            [m.to_template() for m in messages],
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **template_kwargs,
        )
    except TemplateError:
        raise
    except Exception as e:  # jinja raises its own exception types for template bugs
        raise TemplateError(f"the chat template failed to render {len(messages)} messages: {e}") from e
    return str(out)


def encode(tokenizer: Tokenizer, text: str) -> list[int]:
    """Encode text as the template's continuation: no BOS/EOS added."""
    if not text:
        return []
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    return str(tokenizer.decode(list(ids), skip_special_tokens=False))


@dataclass(frozen=True)
class TextDelta:
    """The text a later render adds to an earlier one.

    ``stable`` is False when ``curr`` does not start with ``prev`` (the
    template rewrote history); ``diff_at`` is then the first differing
    character and ``text`` is what the naive slice ``curr[len(prev):]``
    gives, which is what a trainer that assumes stability would train on.
    """

    text: str
    stable: bool
    diff_at: int | None = None
    prev_excerpt: str = ""
    curr_excerpt: str = ""

    def evidence(self) -> dict[str, Any]:
        return {"diff_at": self.diff_at, "before": self.prev_excerpt, "after": self.curr_excerpt}


def text_delta(prev: str, curr: str, context: int = 60) -> TextDelta:
    if curr.startswith(prev):
        return TextDelta(curr[len(prev) :], True)
    n = min(len(prev), len(curr))
    i = next((k for k in range(n) if prev[k] != curr[k]), n)
    lo = max(0, i - context)
    return TextDelta(
        curr[len(prev) :],
        False,
        i,
        prev[lo : i + context],
        curr[lo : i + context],
    )


def token_at_char(tokenizer: Tokenizer, ids: Sequence[int], text: str, char: int) -> int | None:
    """The position in ``ids`` of the token whose decoded text holds character ``char`` of ``text``: where a
    rewrite of ``text`` at ``char`` lands in a token array that spells it.

    The ids are aligned with ``text`` from the start when they spell it up to ``char``, else from the end when
    they end with ``text[char:]`` (a prompt rendered with tools before the conversation rendered without them, as
    slime's deltas are); None when they do neither.
    """
    if not 0 <= char < len(text) or not ids:
        return None
    ids = list(ids)

    def fewest(longer: Callable[[int], bool], lo: int, hi: int) -> int:
        while lo < hi:
            mid = (lo + hi) // 2
            if longer(mid):
                hi = mid
            else:
                lo = mid + 1
        return lo

    # From the start: the fewest leading ids whose decoding reaches past ``char``.
    k = fewest(lambda m: len(decode(tokenizer, ids[:m])) > char, 1, len(ids) + 1)
    if k <= len(ids) and decode(tokenizer, ids[:k])[: char + 1] == text[: char + 1]:
        return k - 1
    # From the end: the fewest trailing ids whose decoding holds ``text[char:]``.
    tail = text[char:]
    k = fewest(lambda m: len(decode(tokenizer, ids[len(ids) - m:])) >= len(tail), 1, len(ids) + 1)
    if k <= len(ids) and decode(tokenizer, ids[len(ids) - k:]).endswith(tail):
        return len(ids) - k
    return None


def strip_end_of_turn(tokenizer: Tokenizer, text: str) -> str:
    """Remove a trailing end-of-turn token's text from generated text."""
    for tok in end_of_turn_texts(tokenizer):
        if text.endswith(tok):
            return text[: len(text) - len(tok)]
    return text


# The closing depends only on the template (and tools); it is asked for every turn.
_CLOSING_CACHE: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
_EOT_CACHE: weakref.WeakKeyDictionary[Any, tuple[list[str], set[int]]] = weakref.WeakKeyDictionary()


def _end_of_turn(tokenizer: Tokenizer) -> tuple[list[str], set[int]]:
    # get_vocab() copies a 150k-entry dict on every call; look each token up once.
    try:
        return _EOT_CACHE[tokenizer]
    except (KeyError, TypeError):
        pass
    texts: list[str] = []
    ids: set[int] = set()
    unk = getattr(tokenizer, "unk_token_id", None)
    for t in (getattr(tokenizer, "eos_token", None), "<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
        if not t or t in texts:
            continue
        i = tokenizer.convert_tokens_to_ids(t)
        if isinstance(i, int) and i != unk:
            texts.append(t)
            ids.add(i)
    try:
        _EOT_CACHE[tokenizer] = (texts, ids)
    except TypeError:
        pass
    return texts, ids


def end_of_turn_texts(tokenizer: Tokenizer) -> list[str]:
    """Texts of the tokens that end an assistant turn (eos, ``<|im_end|>``...)."""
    return list(_end_of_turn(tokenizer)[0])


def end_of_turn_ids(tokenizer: Tokenizer) -> set[int]:
    return set(_end_of_turn(tokenizer)[1])


# -- retokenize mode (render and slice) ---------------------------------------


def generation_prompt_delta(tokenizer: Tokenizer, messages: Sequence[Message], tools: Any = None) -> TextDelta:
    """The assistant header the template adds with ``add_generation_prompt``."""
    return text_delta(
        render(tokenizer, messages, tools, add_generation_prompt=False),
        render(tokenizer, messages, tools, add_generation_prompt=True),
    )


def assistant_delta(tokenizer: Tokenizer, before: Sequence[Message], assistant: Message, tools: Any = None) -> TextDelta:
    """Text the assistant message adds after the generation prompt."""
    return text_delta(
        render(tokenizer, before, tools, add_generation_prompt=True),
        render(tokenizer, [*before, assistant], tools, add_generation_prompt=False),
    )


def messages_delta(tokenizer: Tokenizer, before: Sequence[Message], new: Sequence[Message], tools: Any = None) -> TextDelta:
    """Text that env messages (tool results, user replies) add to the render."""
    return text_delta(
        render(tokenizer, before, tools, add_generation_prompt=False),
        render(tokenizer, [*before, *new], tools, add_generation_prompt=False),
    )


# -- tito mode (render only the new messages) ---------------------------------


def assistant_closing(tokenizer: Tokenizer, tools: Any = None) -> str:
    """What the template writes after an assistant message's content.

    For ChatML templates this is ``<|im_end|>\\n``; the model generates the
    ``<|im_end|>`` and the newline is template text it never produced.
    """
    key = json.dumps(list(tools) if tools else [], sort_keys=True, default=str)
    try:
        per_tok = _CLOSING_CACHE.setdefault(tokenizer, {})
    except TypeError:
        per_tok = {}
    if key in per_tok:
        return per_tok[key]
    text = render(tokenizer, _BASE, tools, add_generation_prompt=False)
    at = text.rfind(SENTINEL)
    if at < 0:
        raise TemplateError("the chat template does not render assistant content verbatim")
    per_tok[key] = text[at + len(SENTINEL) :]
    return per_tok[key]


def tail_after_generation(tokenizer: Tokenizer, generated_text: str, tools: Any = None) -> str:
    """Template text to append after generated text so the tokens match a render.

    If the model stopped on its end-of-turn token, only the rest of the
    closing (the newline) is missing; if it was cut off, the whole closing is.
    """
    closing = assistant_closing(tokenizer, tools)
    for eot in end_of_turn_texts(tokenizer):
        if generated_text.endswith(eot) and closing.startswith(eot):
            return closing[len(eot) :]
    return closing


def isolated_messages_delta(
    tokenizer: Tokenizer, new: Sequence[Message], tools: Any = None
) -> tuple[str, str]:
    """(messages text, generation prompt text) for env messages rendered alone.

    The messages are rendered after a fixed dummy conversation that ends with
    an assistant turn, so the result does not depend on (and never rewrites)
    the real history. Only the text after the dummy reply's closing is
    taken: templates such as Qwen3's render the reply itself differently once
    a user message follows it, but not what comes after it.
    """
    closing = assistant_closing(tokenizer, tools)
    with_msgs = render(tokenizer, [*_BASE, *new], tools, add_generation_prompt=False)
    with_gp = render(tokenizer, [*_BASE, *new], tools, add_generation_prompt=True)
    after = with_msgs[with_msgs.rfind(SENTINEL) + len(SENTINEL) :]
    gp = text_delta(with_msgs, with_gp)
    if not after.startswith(closing) or not gp.stable:
        raise TemplateError(
            "the chat template changes an assistant message's closing when messages follow it, "
            "so tito mode cannot compute env-message tokens with it"
        )
    return after[len(closing) :], gp.text


# -- the token array ----------------------------------------------------------


class TokenBuilder:
    """Accumulates the episode's token array segment by segment."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.segments: list[Segment] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add(
        self,
        ids: Sequence[int],
        kind: SegmentKind,
        turn: int,
        trainable: bool,
        logprobs: Sequence[float] | None = None,
        versions: Sequence[int] | None = None,
    ) -> Segment:
        start = len(self.ids)
        n = len(ids)
        self.ids.extend(int(x) for x in ids)
        self.mask.extend([1 if trainable else 0] * n)
        if logprobs is None:
            self.logprobs.extend([float("nan")] * n)
        else:
            if len(logprobs) != n:
                raise ValueError(f"{len(logprobs)} logprobs for {n} tokens")
            self.logprobs.extend(float(x) for x in logprobs)
        if versions is None:
            self.versions.extend([-1] * n)
        else:
            self.versions.extend(int(v) for v in versions)
        seg = Segment(start, start + n, kind, turn, trainable)
        if n:
            self.segments.append(seg)
        return seg


# -- slime's token deltas ---------------------------------------------------------


class DeltaRefused(TemplateError):
    """slime's ``token_delta.py`` gives up on this conversation (it raises ``ValueError``)."""

    def __init__(self, message: str, delta: TextDelta | None = None, before: str = "") -> None:
        super().__init__(message)
        self.delta = delta
        self.before = before
        """The earlier render the delta's ``diff_at`` counts in."""


@dataclass(frozen=True)
class SlimeDelta:
    """Tokens and loss mask the last message adds, as slime computes them.

    ``masked`` is how many leading tokens carry mask 0 (the generation prompt
    when it is included, all of them for a non-assistant message);
    ``standalone`` is True when a user message was rendered on its own
    because the template rewrote the history before it.
    """

    ids: list[int]
    masked: int
    text: str
    standalone: bool = False
    rewrite: TextDelta | None = None


class RenderMemo:
    """Renders (without tools) of the prefixes of one growing conversation, each made once.

    slime renders the same prefix several times a turn (a reply delta's
    ``curr`` is the next delta's ``prev``). A prefix is known by its length
    and its last message object; a conversation that is only appended to
    gets the very texts a fresh render would give.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._texts: dict[tuple[int, bool], tuple[Any, str]] = {}

    def render(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        key = (len(messages), add_generation_prompt)
        last = messages[-1] if messages else None
        hit = self._texts.get(key)
        if hit is not None and hit[0] is last:
            return hit[1]
        text = render(self.tokenizer, messages, None, add_generation_prompt=add_generation_prompt)
        self._texts[key] = (last, text)
        return text


def slime_delta(tokenizer: Tokenizer, messages: Sequence[Message], include_generation_prompt: bool = False,
                memo: RenderMemo | None = None) -> SlimeDelta:
    """What slime's ``get_token_delta`` returns for the last message (rendered without tools).

    Raises :class:`DeltaRefused` with slime's own message where it raises.
    ``memo`` renders each prefix of a growing conversation once.
    """
    if not messages:
        raise DeltaRefused("Cannot calculate a token delta for an empty conversation")
    memo = memo if memo is not None else RenderMemo(tokenizer)
    curr = memo.render(messages, False)
    prev = memo.render(messages[:-1], False)
    if messages[-1].role == "assistant":
        gp = memo.render(messages[:-1], True)
        if not gp.startswith(prev):
            raise DeltaRefused("Adding the assistant generation prompt rewrote the rendered conversation",
                               text_delta(prev, gp), prev)
        if not curr.startswith(gp):
            raise DeltaRefused("The assistant response does not extend its generation prompt", text_delta(gp, curr), gp)
        if not include_generation_prompt:
            text = curr[len(gp) :]
            return SlimeDelta(encode(tokenizer, text), 0, text)
        text = curr[len(prev) :]
        ids = encode(tokenizer, text)
        # The prefix is counted on the header encoded alone, though the ids were
        # encoded together: a merge across the boundary shifts the mask, as in slime.
        return SlimeDelta(ids, min(len(encode(tokenizer, gp[len(prev) :])), len(ids)), text)
    if curr.startswith(prev):
        return _masked(tokenizer, curr[len(prev) :])
    rewrite = text_delta(prev, curr)
    if messages[-1].role == "user":
        text = render(tokenizer, messages[-1:], None, add_generation_prompt=False)
        if not curr.endswith(text):
            raise DeltaRefused("The latest user message is not a standalone suffix of the rendered conversation", rewrite,
                               prev)
        out = _masked(tokenizer, text)
        return SlimeDelta(out.ids, out.masked, text, True, rewrite)
    raise DeltaRefused("The chat template rewrote history while calculating a non-user token delta", rewrite, prev)


def _masked(tokenizer: Tokenizer, text: str) -> SlimeDelta:
    ids = encode(tokenizer, text)
    return SlimeDelta(ids, len(ids), text)


def slime_seed_delta(tokenizer: Tokenizer, messages: Sequence[Message]) -> tuple[list[int], TextDelta]:
    """The seed agent's ``_get_token_delta``: slice after the generation prompt (assistant) or after the
    previous render (others), without tools, never raising. The generation prompt of a later turn
    therefore lands in no delta at all."""
    curr = render(tokenizer, messages, None, add_generation_prompt=False)
    prev = render(tokenizer, messages[:-1], None, add_generation_prompt=messages[-1].role == "assistant")
    delta = text_delta(prev, curr)
    return encode(tokenizer, delta.text), delta
