"""Checks against the chat template: history rewrites, ids that are not a render, missing generation
prompts, injected system blocks, and the ChatML markup of records that hold no conversation."""

from __future__ import annotations

from ..errors import RollscopeError
from ..records.episode import Episode, Finding, Message, Status
from ..tokens import chat
from ..tokens.tokenizer import Tokenizer
from .base import (
    ERROR,
    INFO,
    CheckOptions,
    chatml_ids,
    first_diff,
    id_evidence,
    keeps_ids,
    loop_config,
    render_for,
    skip,
    turn_at,
)
from .verl_layout import check_verl_rendering, is_verl


def _message_turns(ep: Episode) -> list[int]:
    """Turn index each message belongs to (initial messages: turn 0)."""
    out, turn, seen_assistant = [], 0, False
    for m in ep.messages:
        if m.role == "assistant":
            turn = turn + 1 if seen_assistant else 0
            seen_assistant = True
        out.append(turn)
    return out


def check_template(ep: Episode, o: CheckOptions) -> list[Finding]:
    tok = o.tokenizer
    if tok is None:
        return [skip("template_not_prefix_stable", "no tokenizer with a chat template", "tokenizer")]
    if len(ep.messages) < 2:
        return [skip("template_not_prefix_stable", "the episode has no conversation to re-render")]
    msgs = list(ep.messages)
    turns = _message_turns(ep)
    already = {f.turn for t in ep.turns for f in t.findings if f.kind == "template_not_prefix_stable"}
    # verl never re-renders history either (its <think>: think_kept); a chat record tokenized whole is the render
    whole = ep.source.details.get("tokenized") == "whole render"
    harmless = keeps_ids(ep) or is_verl(ep) or whole
    out: list[Finding] = []
    prev = render_for(ep, tok, msgs[:1], False)
    for k in range(1, len(msgs)):
        curr = render_for(ep, tok, msgs[: k + 1], False)
        d = chat.text_delta(prev, curr)
        before, prev = prev, curr
        if d.stable or turns[k] in already:
            continue
        # Where the message the rewrite came with lies (its sliced tokens are the wrong ones); when the slice
        # lost them entirely, the rewritten token, where the episode's ids spell the earlier render.
        same = [sg for sg in ep.segments if sg.turn == turns[k] and sg.kind == msgs[k].role]
        at = None if same else chat.token_at_char(tok, ep.tokens.ids.tolist(), before, d.diff_at or 0)
        span = (same[0].start, same[0].end) if same else (at, at + 1) if at is not None else (None, None)
        out.append(
            Finding(
                "template_not_prefix_stable",
                INFO if harmless else ERROR,
                f"adding message {k} ({msgs[k].role}) rewrote earlier rendered text at character {d.diff_at}"
                + ("; harmless here: the ids are the conversation rendered whole, once" if whole else
                   "; harmless here: the loop keeps the generated ids" if harmless else "; sliced text deltas are wrong"),
                turn=turns[k],
                token_start=span[0],
                token_end=span[1],
                evidence=d.evidence(),
            )
        )
    return out


def tito_expected_ids(ep: Episode, tok: Tokenizer) -> list[int]:
    """The ids a token-in-token-out loop builds from this trace's records.

    The first prompt rendered with its generation prompt, then per turn the
    generated ids and, between turns (and after the last one of an episode
    saved before its end), the template's closing after them and the env
    messages rendered in isolation with the next generation prompt.
    """
    msgs = list(ep.messages)
    cfg = loop_config(ep)
    first = next((i for i, m in enumerate(msgs) if m.role == "assistant"), len(msgs))
    ids = chat.encode(tok, render_for(ep, tok, msgs[:first], True))
    for i, t in enumerate(ep.turns):
        g = t.generation
        if g is None:
            break
        ids += list(g.token_ids) or chat.encode(tok, g.text)
        last = i == len(ep.turns) - 1
        # An episode saved before its end (by hand, or cut off) went on past its last turn: the observation and
        # the next generation prompt are laid down, waiting for a reply.
        goes_on = not t.done and bool(t.observation) and ep.status in (Status.RUNNING, Status.INTERRUPTED)
        if not last or goes_on or (cfg.observe_last and t.observation and t.action is not None):
            gen_text = chat.decode(tok, g.token_ids) if g.token_ids else g.text
            ids += chat.encode(tok, chat.tail_after_generation(tok, gen_text, ep.tools))
            m, gp = chat.isolated_messages_delta(tok, t.observation, ep.tools)
            ids += chat.encode(tok, m) + chat.encode(tok, gp)
    return ids


def _rendered_candidates(ep: Episode, tok: Tokenizer) -> list[list[int]]:
    """Token arrays a correct render-and-slice loop may have produced."""
    full = chat.encode(tok, render_for(ep, tok, ep.messages, False))
    out = [full]
    if ep.messages[-1].role != "assistant":
        out.append(chat.encode(tok, render_for(ep, tok, ep.messages, True)))
        return out
    final = ep.messages[-1]
    if not final.tool_calls and len(ep.messages) > 1:
        # The last reply as it was generated: after the prompt's generation prompt, not as the template
        # re-renders a finished reply (Qwen3 adds an empty <think> block there).
        head = render_for(ep, tok, ep.messages[:-1], True)
        out.append(chat.encode(tok, head + final.content + chat.assistant_closing(tok, ep.tools)))
    tail = chat.encode(tok, chat.assistant_closing(tok, ep.tools))
    eot = chat.end_of_turn_ids(tok)
    # A token-in-token-out array ends on the generated end-of-turn token, before the template's newline.
    for cand in list(out):
        for cut in range(1, len(tail) + 1):
            if cand[-cut:] == tail[-cut:] and cand[-cut - 1 : -cut] and cand[-cut - 1] in eot:
                out.append(cand[:-cut])
    # A reply cut by the length limit has no end-of-turn token at all.
    last = ep.turns[-1].generation if ep.turns else None
    if last is not None and last.finish_reason == "length" and tail and full[-len(tail) :] == tail:
        out.append(full[: -len(tail)])
    return out


def check_rendering(ep: Episode, o: CheckOptions) -> list[Finding]:
    tok = o.tokenizer
    if tok is None:
        return [skip("tokens_not_rendering", "no tokenizer with a chat template", "tokenizer")]
    if not len(ep.tokens):
        return [skip("tokens_not_rendering", "the episode has no tokens")]
    if not ep.messages:  # a trainer's row of ids alone (AReaL's per-turn sequences, a bare slime dump)
        return [skip("tokens_not_rendering", "the record holds no conversation to render: only the chat markup is "
                     "checked"), *check_chat_markup(ep, o)]
    if ep.tokens.n_trainable and not any(m.role == "assistant" for m in ep.messages):
        return [skip("tokens_not_rendering", "the record holds the prompt but not the conversation after it: "
                      "nothing to render the response from; only the chat markup is checked"),
                *check_chat_markup(ep, o)]
    if is_verl(ep):
        return check_verl_rendering(ep, o)
    ids = ep.tokens.ids.tolist()
    header = _assistant_header(tok)
    keeps = keeps_ids(ep) and bool(ep.turns) and all(t.generation is not None for t in ep.turns)
    if keeps:
        # Generated ids are kept as they are, so the reference is not a render of
        # the whole conversation but the generated ids plus template deltas.
        want = tito_expected_ids(ep, tok)
        what = "the generated ids and the template's deltas between them"
    else:
        candidates = _rendered_candidates(ep, tok)
        if any(ids == c for c in candidates):
            return []
        # A missing header explains the difference from any of the candidates equally well.
        candidates.sort(key=lambda c: not _missing_headers(ids, c, header))
        want = candidates[0] if _missing_headers(ids, candidates[0], header) else \
            max(candidates, key=lambda c: first_diff(ids, c) or 0)
        what = "the tokenization of the rendered conversation"
    at = first_diff(ids, want)
    if at is None or _in_cut_character(ep, tok, ids, at):
        return []  # (a reply cut inside a character: no text holds its last bytes; retokenization_drift says so)
    if at < ep.prompt_len and not ep.source.live:
        # An imported record's prompt was rendered from inputs it does not hold (tools, a system prompt):
        # what its messages render to says nothing about its ids.
        return [skip("tokens_not_rendering", f"the record's prompt is not what its messages render to (from token "
                      f"{at}): it was rendered from inputs the record does not hold, such as tools"),
                *check_chat_markup(ep, o)]
    if keeps and at == len(want) and _closes_cut_reply(ep, tok, ids[at:]):
        return []  # the template's closing after a last reply cut short; check_mask says if it is trained
    blocks = injected_system_blocks(ep, tok)
    if blocks and _without(ids, blocks) == want:
        return []  # the injected system blocks are the whole difference; check_injected_system names them
    missing = _missing_headers(ids, want, header)
    if missing:
        first = min(missing[0], len(ids) - 1)
        return [Finding(
            "generation_prompt_missing", ERROR,
            f"the assistant header before {len(missing)} turn{'s' if len(missing) != 1 else ''} is missing from "
            f"the tokens (first at {missing[0]}): the trainer sees each reply glued to the message before it",
            turn=turn_at(ep, first), token_start=first, token_end=first + 1,
            evidence=id_evidence(tok, ids, want, missing[0], o.context) | {"positions": missing[:50]})]
    start = min(at, len(ids) - 1)
    nl = set(chat.encode(tok, "\n"))
    glued = 0 < at < len(ids) and at + 1 < len(want) and ids[at - 1] in chat.end_of_turn_ids(tok) \
        and want[at] in nl and ids[at] == want[at + 1]
    return [
        Finding(
            "tokens_not_rendering",
            ERROR,
            f"token ids differ from {what} from position {at} ({len(ids)} ids vs {len(want)} expected)"
            + (": the newline the template writes after the end-of-turn token is missing, so the next message is "
               "glued to it" if glued else ""),
            turn=turn_at(ep, start),
            token_start=start,
            token_end=start + 1,
            evidence=id_evidence(tok, ids, want, at, o.context),
        )
    ]


def check_chat_markup(ep: Episode, o: CheckOptions) -> list[Finding]:
    """What the token stream alone shows of a ChatML conversation, for records without the conversation
    (slime dumps): a trained reply that no assistant header opens, and ``<|im_end|>`` without the newline the
    template writes after it."""
    tok = o.tokenizer
    marks = chatml_ids(tok)
    if tok is None or marks is None:
        return []
    start_id, end_id = marks
    ids = ep.tokens.ids.tolist()
    mask = ep.tokens.loss_mask
    nl = set(chat.encode(tok, "\n"))
    out: list[Finding] = []
    glued = [i + 1 for i in range(len(ids) - 1) if ids[i] == end_id and ids[i + 1] not in nl]
    if glued:
        at = glued[0]
        out.append(Finding("tokens_not_rendering", ERROR,
                           f"<|im_end|> is followed by another token than the template's newline at {len(glued)} "
                           f"place{'s' if len(glued) != 1 else ''}, first at {at}: the ids are not a render of any "
                           "conversation", turn=turn_at(ep, at), token_start=at, token_end=at + 1,
                           evidence={"positions": glued[:200]}))
    # A trained run right after a closed message, with no assistant header between: the header is missing.
    starts = [i for i in range(max(1, ep.prompt_len), len(ids)) if mask[i] and not mask[i - 1]]
    # (A run that opens on the newline after <|im_end|> or on a header is a mask matter, not a missing header.)
    bare = [s for s in starts if ids[s] not in nl and ids[s] != start_id
            and (ids[s - 1] == end_id or (ids[s - 1] in nl and s >= 2 and ids[s - 2] == end_id))
            and _closes(ids, s, start_id, end_id)]
    if bare:
        at = bare[0]
        out.append(Finding("generation_prompt_missing", ERROR,
                           f"{len(bare)} trained repl{'ies start' if len(bare) != 1 else 'y starts'} right after a closed "
                           f"message with no assistant header, first at {at}: the trainer sees each reply glued to the "
                           "message before it", turn=turn_at(ep, at), token_start=at, token_end=at + 1,
                           evidence={"positions": bare[:50]}))
    return out


def _closes(ids: list[int], s: int, start_id: int, end_id: int) -> bool:
    """Whether the text from ``s`` closes on <|im_end|> before another message opens: a reply does; text glued on
    that runs into the next message (a raw tool answer) does not."""
    e = s
    while e < len(ids) and ids[e] not in (start_id, end_id):
        e += 1
    return e < len(ids) and ids[e] == end_id


def _in_cut_character(ep: Episode, tok: Tokenizer, ids: list[int], at: int) -> bool:
    """Whether ``at`` falls in the tail of a reply the length limit cut inside a character: its last ids are bytes of
    a character never finished, which its text (and so any render of the conversation) cannot hold."""
    for t in ep.turns:
        seg = next((s for s in t.segments if s.kind == "assistant"), None)
        if t.generation is not None and t.generation.finish_reason == "length" and seg is not None \
                and seg.start <= at < seg.end:
            tail = chat.decode(tok, ids[at:seg.end])
            return bool(tail) and set(tail) <= {"\ufffd"}  # nothing from ``at`` on but the unfinished character
    return False


def _closes_cut_reply(ep: Episode, tok: Tokenizer, rest: list[int]) -> bool:
    last = ep.turns[-1].generation if ep.turns else None
    if last is None or not last.token_ids or int(last.token_ids[-1]) in chat.end_of_turn_ids(tok):
        return False
    closing = chat.encode(tok, chat.assistant_closing(tok, ep.tools))
    return bool(rest) and closing[: len(rest)] == rest


def _assistant_header(tok: Tokenizer) -> list[int]:
    try:
        return chat.encode(tok, chat.generation_prompt_delta(tok, [Message("user", "U")]).text)
    except RollscopeError:
        return []


def _missing_headers(ids: list[int], want: list[int], header: list[int]) -> list[int]:
    """Positions in ``ids`` where ``want`` has an assistant header that ``ids`` lacks, when those
    headers are the whole difference (an empty list otherwise)."""
    if not header:
        return []
    h = len(header)
    i = j = 0
    out: list[int] = []
    while i < len(ids) and j < len(want):
        if ids[i] == want[j]:
            i += 1
            j += 1
        elif want[j : j + h] == header:
            out.append(i)
            j += h
        else:
            return []
    if want[j:] == header and i == len(ids):
        j += h  # a header the reference adds at the very end is not a loss
    return out if i == len(ids) and j == len(want) else []


def _system_header(tok: Tokenizer) -> list[int]:
    return chat.encode(tok, "<|im_start|>system") if chatml_ids(tok) is not None else []


def injected_system_blocks(ep: Episode, tok: Tokenizer | None) -> list[tuple[int, int]]:
    """[start, end) of every system block after the first prompt: ``<|im_start|>system ... <|im_end|>``
    plus the newline after it. A trainer's row of ids alone (no messages: AReaL's per-turn sequences, whose prompt is
    the whole conversation before the turn) is looked at past its first message (a BOS token may come before it), and
    a block there is injected only where it is the template's own default system block, rendered again: without the
    messages, a system message the loop wrote is not told from one the template added."""
    if tok is None:
        return []
    header = _system_header(tok)
    if not header:
        return []
    marks = chatml_ids(tok)
    assert marks is not None  # the header exists only for ChatML tokenizers
    end_id = marks[1]
    nl = set(chat.encode(tok, "\n"))
    ids = ep.tokens.ids.tolist()
    out, h, i = [], len(header), max(ep.prompt_len, 1)
    default: list[int] | None = None
    if not ep.messages:
        default = _default_system_block(tok)
        first = ids.index(marks[0]) if marks[0] in ids else len(ids)
        i = ids.index(end_id, first) + 1 if end_id in ids[first:] else len(ids)
        if not default:
            return []
    while i < len(ids):
        if ids[i] == header[0] and ids[i : i + h] == header:
            e = i + h
            while e < len(ids) and ids[e] != end_id:
                e += 1
            e = min(e + 1, len(ids))
            if e < len(ids) and ids[e] in nl:
                e += 1
            if default is None or ids[i:e] == default:
                out.append((i, e))
            i = e
        else:
            i += 1
    return out


_DEFAULT_BLOCKS: dict[int, tuple[Tokenizer, list[int]]] = {}


def _default_system_block(tok: Tokenizer) -> list[int]:
    """The ids of the system block the template writes on its own before a lone user message, with its newline
    ([] when it writes none, or cannot render); once a tokenizer (and template)."""
    key = hash((id(tok), getattr(tok, "chat_template", None)))
    held = _DEFAULT_BLOCKS.get(key)
    if held is not None and held[0] is tok:
        return held[1]
    try:
        text = chat.render(tok, [Message("user", "x")])
    except RollscopeError:
        text = ""
    at = text.find("<|im_start|>system")
    end = text.find("<|im_end|>", at) + len("<|im_end|>")
    block = chat.encode(tok, text[at : end + (text[end : end + 1] == "\n")]) \
        if at >= 0 and end >= len("<|im_end|>") else []
    if len(_DEFAULT_BLOCKS) > 16:
        _DEFAULT_BLOCKS.clear()
    _DEFAULT_BLOCKS[key] = (tok, block)
    return block


def _without(ids: list[int], spans: list[tuple[int, int]]) -> list[int]:
    out, prev = [], 0
    for s, e in spans:
        out.extend(ids[prev:s])
        prev = e
    return out + ids[prev:]


def check_injected_system(ep: Episode, o: CheckOptions) -> list[Finding]:
    """A system block in the middle of the trajectory: a message rendered on its own by a template that
    adds a default system prompt (AReaL's realhf feedback: ``template([user feedback])``)."""
    tok = o.tokenizer
    blocks = injected_system_blocks(ep, tok)
    if tok is None or not blocks:
        return []
    s, e = blocks[0]
    text = chat.decode(tok, ep.tokens.ids[s:e].tolist())
    return [Finding(
        "system_block_injected", ERROR,
        f"{len(blocks)} system block{'s' if len(blocks) != 1 else ''} in the middle of the trajectory, first at "
        f"token {s}: a message was rendered on its own and the chat template added its default system prompt",
        turn=turn_at(ep, s), token_start=s, token_end=e,
        evidence={"positions": [b[0] for b in blocks][:50], "text": text[:400]})]
