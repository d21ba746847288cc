"""verl's episodes read off their own data: the response's replies and the answers appended after them (runs
of the loss mask), the knobs under verl's names, the records verl's loop leaves on a turn, and what the chat
template gives for each piece, with the chat-template kwargs. ``check_verl_rendering`` holds the ids against a
loop that keeps verl's replies and writes the rest as the template does; ``checks/verl.py`` names the traps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import RollscopeError
from ..records.episode import Episode, Finding, Message, Turn
from ..records.episode import raw_observations as turn_raw_observations
from ..tokens import chat
from ..tokens import verl as vt
from ..tokens.tokenizer import Tokenizer
from .base import ERROR, CheckOptions, chatml_ids, first_diff, id_evidence, loop_config, skip

_DUMMY = "\u2063RSVERL\u2063"


def is_verl(ep: Episode) -> bool:
    """Laid out by verl's agent loop: the verl-tool preset's episodes, and rows verl's ``AgentLoopOutput`` wrote
    (their knobs, where the row does not carry Rollscope's config, are verl's defaults)."""
    return ep.config.token_mode == "verl" or (ep.source.kind == "verl"
                                              and ep.source.details.get("shape") == "AgentLoopOutput")


def knob(ep: Episode, name: str) -> str:
    """``name=value`` of one of verl's knobs as a finding says it, marked as assumed when the record does not hold
    the knobs it ran with (an ``AgentLoopOutput`` row imported without ``--set``/``--config``)."""
    said = f"{name}={getattr(loop_config(ep), name)}"
    return said if ep.config.loop is not None else f"{said} (verl's default, assumed: the record does not say)"


def raw_observations(turn: Turn) -> list[str] | None:
    """The env's raw output of each tool call the turn ran, before verl's truncation (None when not recorded)."""
    return list(turn_raw_observations(turn)) or None


def ground_truth(ep: Episode) -> str | None:
    """The math task's reference answer as verl compares it (a string), where the record holds it."""
    return ep.ground_truth


def template_kwargs(ep: Episode) -> dict[str, Any]:
    try:
        return vt.chat_kwargs(loop_config(ep).apply_chat_template_kwargs)
    except RollscopeError:
        return {}


@dataclass(frozen=True)
class Block:
    """A run of one mask value in the response: a reply (trained) or the answer appended after one."""

    start: int
    end: int
    trained: bool
    turn: int


def blocks(ep: Episode) -> list[Block]:
    """The response's runs of equal mask, each with its turn (the segments' where they say, else counted)."""
    mask = ep.tokens.loss_mask
    n = len(mask)
    out: list[Block] = []
    replies = -1
    i = ep.prompt_len
    while i < n:
        turn = next((s.turn for s in ep.segments if s.start <= i < s.end), None)
        j = i
        # A run of one mask value; where segments say so, a new turn starts a new block (two replies with no
        # answer between them: verl's cut ate the whole answer).
        while j < n and mask[j] == mask[i] and (j == i or not ep.segments
                                                 or next((s.turn for s in ep.segments if s.start == j), turn) == turn):
            j += 1
        trained = bool(mask[i])
        replies += trained
        out.append(Block(i, j, trained, turn if turn is not None else max(replies, 0)))
        i = j
    return out


def answers(bs: Sequence[Block]) -> list[tuple[Block, Block]]:
    """(reply, the answer appended after it) pairs."""
    return [(a, b) for a, b in zip(bs, bs[1:], strict=False) if a.trained and not b.trained]


def turn_record(ep: Episode, index: int) -> Turn | None:
    return next((t for t in ep.turns if t.index == index), None)


def newline_ids(tok: Tokenizer) -> set[int]:
    return set(chat.encode(tok, "\n"))


# -- what the template gives ------------------------------------------------------------------------------


def _closing(tok: Tokenizer, kw: dict[str, Any]) -> str:
    """What the template writes after an assistant message's content (``<|im_end|>\\n`` for ChatML)."""
    text = chat.render(tok, _base(), None, False, **kw)
    return text[text.rfind(_DUMMY) + len(_DUMMY):]


def _base() -> list[Any]:
    return [Message("user", "U"), Message("assistant", _DUMMY)]


def template_answer(tok: Tokenizer, messages: Sequence[Any], kw: dict[str, Any]) -> tuple[str, list[int]]:
    """(the text the template writes between a reply's end-of-turn token and these messages, the messages' ids
    with the next generation prompt) as the template renders them after a reply, with the chat-template
    kwargs."""
    base = _base()
    with_msgs = chat.render(tok, [*base, *messages], None, False, **kw)
    with_gp = chat.render(tok, [*base, *messages], None, True, **kw)
    closing = _closing(tok, kw)
    after = with_msgs[with_msgs.rfind(_DUMMY) + len(_DUMMY):]
    if not after.startswith(closing) or not with_gp.startswith(with_msgs):
        raise RollscopeError("the chat template changes a reply's closing when messages follow it")
    return tail_text(tok, kw), chat.encode(tok, after[len(closing):] + with_gp[len(with_msgs):])


def generation_prompt_rest(tok: Tokenizer, kw: dict[str, Any]) -> list[int]:
    """The ids the generation prompt (with the kwargs) writes after ``<|im_start|>assistant\\n``: Qwen3's empty
    think block with ``enable_thinking`` off; template text, never trained."""
    try:
        with_gp = chat.render(tok, [Message("user", "U")], None, True, **kw)
        without = chat.render(tok, [Message("user", "U")], None, False, **kw)
    except RollscopeError:
        return []
    gp = with_gp[len(without):] if with_gp.startswith(without) else ""
    head = "<|im_start|>assistant\n"
    return chat.encode(tok, gp[len(head):]) if gp.startswith(head) else []


def past_template_rest(ep: Episode, tok: Tokenizer, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` (assistant replies read off the ids, each from its header's end), each started past the template
    text a generation prompt may write after the header (Qwen3's empty think block with ``enable_thinking`` off):
    the loop's kwargs' rest (``template_kwargs``), always for verl's layout, which puts it in the prompt; otherwise
    where the record holds it untrained and without a logprob the model would have given it, the kwargs' rest or,
    when the record names none, the thinking-off one (a trainer's dump that does not say how it rendered)."""
    kw = template_kwargs(ep)
    verl = is_verl(ep)
    rests = [generation_prompt_rest(tok, kw)]
    if not verl and "enable_thinking" not in kw:
        rests.append(generation_prompt_rest(tok, {**kw, "enable_thinking": False}))
    rests = [r for r in rests if r]
    if not rests:
        return spans
    ids, mask, lps = ep.tokens.ids, ep.tokens.loss_mask, ep.tokens.logprobs
    out = []
    for s, e in spans:
        for rest in rests:
            k = len(rest)
            if s + k <= e and ids[s : s + k].tolist() == rest and (verl or (
                    not mask[s : s + k].any() and bool(np.all(np.isnan(lps[s : s + k]) | (lps[s : s + k] == 0.0))))):
                s += k
                break
        out.append((s, e))
    return out


def observation(ep: Episode, tok: Tokenizer, reply: Block, answer: Block) -> list[Any] | None:
    """The messages an answer block holds: the turn's record where it has them, else read off the ChatML ids."""
    t = turn_record(ep, reply.turn)
    if t is not None and t.observation:
        return [m for m in t.observation]
    return chatml_messages(tok, ep.tokens.ids[answer.start : answer.end].tolist())


def chatml_messages(tok: Tokenizer, ids: Sequence[int]) -> list[Any] | None:
    """The closed ``<|im_start|>role\\ncontent<|im_end|>`` messages in ``ids`` (None when not ChatML)."""
    marks = chatml_ids(tok)
    if marks is None:
        return None
    text = chat.decode(tok, ids)
    out = []
    for part in text.split("<|im_start|>")[1:]:
        if "<|im_end|>" not in part or "\n" not in part:
            continue
        role, _, content = part.split("<|im_end|>")[0].partition("\n")
        if role in ("user", "tool", "system"):
            out.append(Message(role, content))  # type: ignore[arg-type]
    return out or None


def tail_text(tok: Tokenizer, kw: dict[str, Any]) -> str:
    """What the template writes after a reply's end-of-turn token (``\\n`` for ChatML)."""
    closing = _closing(tok, kw)
    for eot in chat.end_of_turn_texts(tok):
        if closing.startswith(eot):
            return closing[len(eot):]
    return closing


def turn_of(ep: Episode, pos: int) -> int | None:
    for b in blocks(ep):
        if b.start <= pos < b.end:
            return b.turn
    return None


def conversation(tok: Tokenizer, ids: Sequence[int], kw: dict[str, Any]) -> list[Any]:
    """Every ChatML message in ``ids``, assistant replies included (the last, open one too, unless it holds only
    what the generation prompt writes with the kwargs: Qwen3's empty think block with ``enable_thinking`` off)."""
    out = []
    parts = chat.decode(tok, ids).split("<|im_start|>")[1:]
    for part in parts:
        role, _, content = part.split("<|im_end|>")[0].partition("\n")
        if role in ("system", "user", "assistant", "tool"):
            out.append(Message(role, content))  # type: ignore[arg-type]
    # An open last message is the next generation prompt, not a reply (a reply ends with <|im_end|>).
    if out and out[-1].role == "assistant" and parts and "<|im_end|>" not in parts[-1] \
            and out[-1].content in ("", chat.decode(tok, generation_prompt_rest(tok, kw))):
        out.pop()
    return out


# -- the rendering check ---------------------------------------------------------------------------------


def verl_expected_ids(ep: Episode, tok: Tokenizer) -> list[int] | None:
    """The ids a loop that keeps verl's replies and renders the rest as the template does would hold: the prompt
    rendered with verl's tool schemas and the kwargs, each reply's ids, and after each the template's closing
    and the answer with the next generation prompt; cut at ``response_length`` as verl cuts. None when the
    answers cannot be read."""
    kw = template_kwargs(ep)
    ids = ep.tokens.ids.tolist()
    first = next((i for i, m in enumerate(ep.messages) if m.role == "assistant"), len(ep.messages))
    try:
        schemas = vt.verl_tool_schemas(ep.tools) if ep.tools else None
        want = vt.template_ids(tok, [{"role": m.role, "content": m.content} for m in ep.messages[:first]],
                               tools=schemas, kwargs=kw)
    except RollscopeError:
        want = ids[: ep.prompt_len]
    bs = blocks(ep)
    following = dict((id(a), b) for a, b in answers(bs))
    for b in bs:
        if not b.trained:
            continue
        want += ids[b.start : b.end]
        answer = following.get(id(b))
        if answer is None:
            continue
        msgs = observation(ep, tok, b, answer)
        if not msgs:
            return None
        try:
            tail, answer_ids = template_answer(tok, msgs, kw)
        except RollscopeError:
            return None
        want += chat.encode(tok, tail) + answer_ids
    return want[: ep.prompt_len + loop_config(ep).response_length]


def check_verl_rendering(ep: Episode, o: CheckOptions) -> list[Finding]:
    """``tokens_not_rendering`` for verl: the ids against :func:`verl_expected_ids`."""
    tok = o.tokenizer
    if tok is None:
        return [skip("tokens_not_rendering", "no tokenizer with a chat template", "tokenizer")]
    want = verl_expected_ids(ep, tok)
    if want is None:
        return [skip("tokens_not_rendering", "the answers verl appended cannot be read off the record")]
    ids = ep.tokens.ids.tolist()
    at = first_diff(ids, want)
    if at is None:
        return []
    if at < ep.prompt_len and not ep.source.live:
        return [skip("tokens_not_rendering", f"the record's prompt is not what its messages render to (from token "
                      f"{at}): it was rendered from inputs the record does not hold")]
    start = min(at, len(ids) - 1)
    return [Finding("tokens_not_rendering", ERROR,
                    f"token ids differ from the generated replies with the template's text between them from "
                    f"position {at} ({len(ids)} ids vs {len(want)} expected)",
                    turn=turn_of(ep, start), token_start=start, token_end=start + 1,
                    evidence=id_evidence(tok, ids, want, at, o.context))]
