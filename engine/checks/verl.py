"""Checks of what verl's ToolAgentLoop does to the data (episodes with ``token_mode=verl``).

Each check reads the episode's own data: its ids and loss mask (the response is every token after
``prompt_len``; a run of mask 1 is a reply, a run of mask 0 after it the answer verl appended), its
``config.loop`` knobs under verl's names, the records of its turns where it has them, and the chat template
rendered again. None of them reads a flag the loop set, so a verl dump imported with its knobs is checked
the same way:

* ``im_end_newline_missing``: each answer follows the reply's ``<|im_end|>`` with no newline, where the
  template writes one (``AgentLoopBase.apply_chat_template`` renders the answer on its own);
* ``system_cut_wrong``: the answer's standalone render was cut by the length of a default system block
  measured without the chat-template kwargs and from other messages, so message tokens are lost or system
  text is left behind;
* ``think_kept``: the context keeps a reply's ``<think>`` block that the template drops from history;
* ``response_cut_trained``: the response cut at ``response_length`` in the middle of a reply, which is
  trained up to the cut;
* ``tool_result_truncated`` (info): a tool's text cut to ``max_tool_response_length`` characters;
* ``tool_call_dropped``: a call the hermes parser drops, or one past ``max_parallel_calls``;
* ``strict_score_refused``: a math answer Rollscope's checker (and verl's gsm8k interaction, which scores it
  flexibly) accepts that the strict gsm8k score of verl's reward manager refuses: ``\\boxed{}`` without
  ``#### N``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..envs.gsm8k import gsm8k_extract, gsm8k_score
from ..errors import RollscopeError
from ..presets import LoopConfig
from ..records.episode import Episode, Finding
from ..tokens import chat
from ..tokens import verl as vt
from ..tokens.tokenizer import Tokenizer
from .base import ERROR, INFO, WARNING, CheckOptions, chatml_ids, loop_config, skip
from .verl_layout import (
    Block,
    answers,
    blocks,
    chatml_messages,
    conversation,
    ground_truth,
    is_verl,
    knob,
    newline_ids,
    observation,
    raw_observations,
    tail_text,
    template_answer,
    template_kwargs,
    turn_of,
    turn_record,
)

MARKERS = {"left": "...(truncated)", "right": "(truncated)...", "middle": "...(truncated)..."}
# verl's knobs the checks read, under verl's names.
VERL_KNOBS = ("response_length", "prompt_length", "max_assistant_turns", "max_user_turns", "max_parallel_calls",
              "max_tool_response_length", "tool_response_truncate_side", "format", "calculate_log_probs",
              "apply_chat_template_kwargs")


def check_verl_knobs(ep: Episode, o: CheckOptions) -> list[Finding]:
    """A verl row that does not say which knobs its loop ran with: the checks assume verl's defaults, and say so
    once (info), with what to give instead."""
    if not is_verl(ep) or ep.config.loop is not None:
        return []
    assumed = {k: getattr(LoopConfig(), k) for k in VERL_KNOBS}
    said = ", ".join(f"{k}={v}" for k, v in assumed.items())
    return [Finding(
        "not_checked", INFO,
        f"verl's knobs: not checked: the record does not say which knobs verl's loop ran with, so the verl checks "
        f"assume verl's defaults ({said}); where the run set others, give them: rollscope import --format verl "
        "--set KNOB=VALUE (or --config FILE)", evidence={"check": "verl_knobs", "assumed": assumed})]


def check_verl_answers(ep: Episode, o: CheckOptions) -> list[Finding]:
    """``im_end_newline_missing`` and ``system_cut_wrong``: each answer as verl appended it against what the
    template gives for it after the reply."""
    tok = o.tokenizer
    if not is_verl(ep) or tok is None:
        return [] if not is_verl(ep) else [skip("im_end_newline_missing", "no tokenizer with a chat template", "tokenizer")]
    ids = ep.tokens.ids.tolist()
    kw = template_kwargs(ep)
    eot = chat.end_of_turn_ids(tok)
    nl = newline_ids(tok)
    glued: list[int] = []
    glued_turns: list[int] = []
    first_want: dict[int, list[int] | None] = {}
    cuts: list[dict[str, Any]] = []
    pairs = answers(blocks(ep))
    for reply, answer in pairs:
        msgs = observation(ep, tok, reply, answer)
        try:
            tail, want = template_answer(tok, msgs or [], kw) if msgs else (tail_text(tok, kw), None)
        except RollscopeError:
            continue
        start = answer.start
        after_eot = ids[start - 1] in eot
        tail_ids = chat.encode(tok, tail)
        if after_eot and tail_ids and tail_ids[0] in nl and ids[start] not in nl:
            glued.append(start)
            glued_turns.append(reply.turn)
            first_want[start] = want
        if want is None:
            continue
        # Where the template's answer should start: after the newline when the ids have it.
        got = ids[start : answer.end]
        if got == want[: len(got)] or (got[:1] == tail_ids[:1] and got[1:] == want[: len(got) - 1]):
            continue
        cut = _cut_of(tok, msgs or [], kw, got)
        if cut is not None:
            cuts.append({"turn": reply.turn, "start": start, **cut})
    cuts += _answers_eaten(ep, tok, kw)
    cuts.sort(key=lambda c: c["start"])
    # Said so, that the run-level rule does not count this episode against the kind (a prompt refused, a first
    # reply the episode ended on).
    out: list[Finding] = [] if pairs else [skip("im_end_newline_missing", "no answer follows a reply")]
    if glued:
        at = glued[0]
        answer_ids = first_want.get(at) or ids[at : at + 2]
        template_gives = chat.decode(tok, [ids[at - 1]]) + tail_text(tok, kw) + chat.decode(tok, answer_ids[:2])
        ids_give = chat.decode(tok, ids[at - 1 : at + 2])
        out.append(Finding(
            "im_end_newline_missing", ERROR,
            f"verl appends each answer right after the reply's end-of-turn token: the trained sequence is "
            f"{ids_give!r} where the deployed template gives {template_gives!r} ({len(glued)} place"
            f"{'s' if len(glued) != 1 else ''}, first at token {at}); the model is trained on contexts it never "
            "sees when served", turn=turn_of(ep, at), token_start=at, token_end=at + 1,
            evidence={"positions": glued[:200], "template_gives": template_gives, "ids_give": ids_give,
                      "turns": sorted(set(glued_turns))}))
    if cuts:
        c = cuts[0]
        at = c["start"]
        lost = c["kind"] == "lost"
        what = (f"{c['tokens']} tokens of the answer are lost ({c['text']!r})" if lost
                else f"{c['tokens']} tokens of the template's system block are left in it ({c['text']!r})")
        out.append(Finding(
            "system_cut_wrong", ERROR,
            f"turn {c['turn']}: verl cut the answer's standalone render by {c['cut']} tokens, the default system "
            f"block it measured without the chat-template kwargs ({knob(ep, 'apply_chat_template_kwargs')}), where "
            f"this render's block is {c['block']} "
            f"tokens: {what}" + (f"; the same in {len(cuts) - 1} more answer{'s' if len(cuts) > 2 else ''}"
                                 if len(cuts) > 1 else ""),
            turn=c["turn"], token_start=at, token_end=at + (c["tokens"] if not lost else 1),
            evidence={"cut": c["cut"], "block": c["block"], "lost" if lost else "left": c["text"],
                      "tokens": c["tokens"], "positions": [x["start"] for x in cuts][:200],
                      "kwargs": kw, "measured": len(vt.system_prompt_ids(tok))}))
    return out


def _answers_eaten(ep: Episode, tok: Tokenizer, kw: dict[str, Any]) -> list[dict[str, Any]]:
    """Answers of which the cut left nothing: the turn's record holds an answer, no mask-0 token follows its
    reply, and verl's cut of the answer's render (by the measured block) is empty, where the render's own block
    is shorter. Only a record with its turns can show it."""
    bs = blocks(ep)
    following = {id(a) for a, _ in answers(bs)}
    measured = len(vt.system_prompt_ids(tok))
    n = len(ep.tokens)
    out = []
    for r in (b for b in bs if b.trained and id(b) not in following):
        t = turn_record(ep, r.turn)
        if t is None or not t.observation:
            continue
        dicts = [{"role": m.role, "content": m.content} for m in t.observation]
        try:
            full = vt.template_ids(tok, dicts, kwargs=kw)
            _, want = template_answer(tok, list(t.observation), kw)
        except RollscopeError:
            continue
        block = len(full) - len(want)
        if full[block:] != want or measured < len(full) or block >= len(full):
            continue
        out.append({"turn": r.turn, "start": min(r.end, n - 1), "kind": "lost", "cut": measured, "block": block,
                    "tokens": len(full) - block, "text": chat.decode(tok, full[block:])})
    return out


def _cut_of(tok: Tokenizer, msgs: Sequence[Any], kw: dict[str, Any], got: list[int]) -> dict[str, Any] | None:
    """Where verl's cut fell in the answer's standalone render, when ``got`` is a cut of it: the render's own
    block length, the cut, and what the difference lost or left."""
    dicts = [{"role": m.role, "content": m.content} for m in msgs]
    try:
        full = vt.template_ids(tok, dicts, kwargs=kw)
        _, want = template_answer(tok, msgs, kw)
    except RollscopeError:
        return None
    if full[len(full) - len(want):] != want:
        return None
    block = len(full) - len(want)
    cut = next((c for c in range(len(full)) if got and full[c : c + len(got)] == got), None)
    if cut is None or cut == block:
        return None
    lo, hi = sorted((cut, block))
    return {"kind": "lost" if cut > block else "left", "cut": cut, "block": block, "tokens": hi - lo,
            "text": chat.decode(tok, full[lo:hi])}


def check_think_kept(ep: Episode, o: CheckOptions) -> list[Finding]:
    """A reply's ``<think>`` block kept in the context of later turns where the deployed template, rendering
    the same conversation, drops it from history (Qwen3 after a user turn)."""
    tok = o.tokenizer
    if not is_verl(ep) or tok is None or chatml_ids(tok) is None:
        return []
    open_id = tok.convert_tokens_to_ids("<think>")
    unk = getattr(tok, "unk_token_id", None)
    if not isinstance(open_id, int) or open_id == unk:
        return []
    ids = ep.tokens.ids.tolist()
    header = chat.encode(tok, "<|im_start|>assistant\n")
    bs = blocks(ep)
    replies = [b for b in bs if b.trained]
    if len(replies) < 2:
        return []
    kw = template_kwargs(ep)
    msgs = conversation(tok, ids, kw)
    try:
        rendered = chat.render(tok, msgs, None, False, **kw)
    except RollscopeError:
        return []
    template_replies = [p.split("<|im_end|>")[0] for p in rendered.split("<|im_start|>assistant\n")[1:]]
    first_reply = sum(1 for m in msgs if m.role == "assistant") - len(replies)
    kept: list[tuple[int, int, int]] = []  # (position of <think>, turn, index among the assistant messages)
    for k, r in enumerate(replies[:-1]):
        h = next((i for i in range(r.start - len(header), -1, -1) if ids[i : i + len(header)] == header), None)
        if h is None:
            continue
        region = ids[h + len(header) : r.end]
        if open_id not in region:
            continue
        idx = first_reply + k
        if 0 <= idx < len(template_replies) and "<think>" not in template_replies[idx]:
            kept.append((h + len(header) + region.index(open_id), r.turn, idx))
    if not kept:
        return []
    at, turn, idx = kept[0]
    end = next((i + 1 for i in range(at, len(ids)) if chat.decode(tok, [ids[i]]) == "</think>"), at + 1)
    return [Finding(
        "think_kept", WARNING,
        f"the context keeps the <think> block of {len(kept)} repl{'ies' if len(kept) != 1 else 'y'} (first turn "
        f"{turn}, token {at}) that the deployed template drops from history once a user turn follows: later "
        "turns are generated and trained on a context the model never sees when served",
        turn=turn, token_start=at, token_end=max(end, at + 1),
        evidence={"positions": [k[0] for k in kept][:200], "turns": [k[1] for k in kept],
                  "kept": chat.decode(tok, ids[at:end])[:400], "template_gives": template_replies[idx][:400]})]


def check_response_cut(ep: Episode, o: CheckOptions) -> list[Finding]:
    """A reply cut in the middle by ``response_ids[:response_length]`` and trained up to the cut."""
    if not is_verl(ep):
        return []
    limit = loop_config(ep).response_length
    n = len(ep.tokens)
    bs = blocks(ep)
    if not bs or n - ep.prompt_len != limit or not bs[-1].trained:
        return []
    last = bs[-1]
    tok = o.tokenizer
    if tok is None:  # a reply that ends exactly at the limit is whole when its last id ends the turn
        return [skip("response_cut_trained", "no tokenizer to tell a reply's end-of-turn token", "tokenizer")]
    if int(ep.tokens.ids[n - 1]) in chat.end_of_turn_ids(tok):
        return []
    t = turn_record(ep, last.turn)
    gen = list(t.generation.token_ids) if t is not None and t.generation is not None else []
    kept = n - last.start
    cut = len(gen) - kept if gen and gen[:kept] == ep.tokens.ids[last.start : n].tolist() else None
    if cut == 0:
        return []
    return [Finding(
        "response_cut_trained", WARNING,
        f"verl cuts the response at {knob(ep, 'response_length')} in the middle of turn {last.turn}'s reply: "
        f"{kept} of its tokens are kept and trained (mask 1) as if the reply stopped there"
        + (f", {cut} generated tokens after them are gone" if cut else ""),
        turn=last.turn, token_start=last.start, token_end=n,
        evidence={"response_length": limit, "cut_at": n, "kept": kept, "cut_tokens": cut})]


def check_tool_truncation(ep: Episode, o: CheckOptions) -> list[Finding]:
    """Tool results cut to ``max_tool_response_length`` characters (info: verl's knob at work, said where)."""
    if not is_verl(ep):
        return []
    cfg = loop_config(ep)
    limit, side = cfg.max_tool_response_length, cfg.tool_response_truncate_side
    marker = MARKERS.get(side, MARKERS["middle"])
    bs = blocks(ep)
    out: list[Finding] = []
    for reply, answer in answers(bs):
        t = turn_record(ep, reply.turn)
        texts = [m.content for m in t.observation if m.role == "tool"] if t is not None else \
            _tool_texts(o.tokenizer, ep.tokens.ids[answer.start : answer.end].tolist())
        raws = raw_observations(t) if t is not None else None
        answer_ids = ep.tokens.ids[answer.start : answer.end].tolist()
        full = chat.decode(o.tokenizer, answer_ids) if o.tokenizer is not None else ""
        at = 0  # where in the answer's text the next result is looked for (results come in call order)
        for i, text in enumerate(texts):
            span, at = _text_span(o.tokenizer, answer_ids, full, text, at)
            raw = raws[i] if raws is not None and i < len(raws) else None
            if raw is not None:
                if raw == text or vt.truncate_tool_text(raw, limit, side) != text:
                    continue
            elif not _looks_truncated(text, limit, side, marker):
                continue
            out.append(Finding(
                "tool_result_truncated", INFO,
                f"turn {reply.turn}: the tool's text was cut to {knob(ep, 'max_tool_response_length')} characters "
                f"({knob(ep, 'tool_response_truncate_side')}: {marker!r})" + (f" from {len(raw)}" if raw is not None else
                                           "; the record does not hold the raw length"),
                turn=reply.turn, token_start=answer.start + span[0] if span else answer.start,
                token_end=answer.start + span[1] if span else answer.end,
                evidence={"raw_length": len(raw) if raw is not None else None, "kept": limit, "side": side,
                          "marker": marker, "call": i}))
    return out


def _text_span(tok: Tokenizer | None, ids: list[int], full: str, text: str,
               after: int) -> tuple[tuple[int, int] | None, int]:
    """([start, end) of the tokens that spell ``text`` in ``ids``, whose decoding is ``full``, looking from
    character ``after`` on; where the next search starts). None when the text is not found there."""
    c = full.find(text, after) if tok is not None and text else -1
    if c < 0:
        return None, after
    assert tok is not None
    a = chat.token_at_char(tok, ids, full, c)
    b = chat.token_at_char(tok, ids, full, c + len(text) - 1)
    return ((a, b + 1) if a is not None and b is not None else None), c + len(text)


def _tool_texts(tok: Tokenizer | None, ids: list[int]) -> list[str]:
    """The tool results in an answer's ids, for a record without its turns: ``tool`` messages, or the
    ``<tool_response>`` blocks a template writes as a user turn."""
    msgs = chatml_messages(tok, ids) if tok is not None else None
    out = []
    for m in msgs or []:
        c = m.content
        if m.role == "tool":
            out.append(c)
        elif c.startswith("<tool_response>\n") and c.endswith("\n</tool_response>"):
            out += c[len("<tool_response>\n") : -len("\n</tool_response>")].split("\n</tool_response>\n<tool_response>\n")
    return out


def _looks_truncated(text: str, limit: int, side: str, marker: str) -> bool:
    if side == "left":
        return text.endswith(marker) and len(text) == limit + len(marker)
    if side == "right":
        return text.startswith(marker) and len(text) == limit + len(marker)
    half = limit // 2
    return len(text) == 2 * half + len(marker) and text[half : half + len(marker)] == marker


def check_dropped_calls(ep: Episode, o: CheckOptions) -> list[Finding]:
    """A tool call in a reply verl parsed that never ran: dropped by the hermes parser, or past
    ``max_parallel_calls``; one finding per turn, on the first dropped call's tokens."""
    tok = o.tokenizer
    if not is_verl(ep) or tok is None:
        return []
    cfg = loop_config(ep)
    ids = ep.tokens.ids.tolist()
    bs = blocks(ep)
    replies = [b for b in bs if b.trained]
    # A turn where the loop recorded the drop itself (another parser's, or a record from before the checks named
    # it) is not said twice. Only the turns' findings: the episode's are this check's own from an earlier run.
    said = {t.index for t in ep.turns for f in t.findings if f.kind == "tool_call_dropped"}
    out: list[Finding] = []
    for r in replies:
        if r.turn in said:
            continue
        followed = any(a is r for a, _ in answers(bs))
        if not followed and not _parsed_last(ep, len(replies)):
            continue
        t = turn_record(ep, r.turn)
        gen = list(t.generation.token_ids) if t is not None and t.generation is not None and \
            t.generation.token_ids else ids[r.start : r.end]
        calls, drops = vt.hermes_calls(tok, gen)
        dropped: list[dict[str, Any]] = [{"text": d.text, "why": f"the hermes parser drops it: {d.why}", "block": i}
                                         for i, d in _drop_blocks(tok, gen, drops)]
        dropped += [{"call": {"name": c.name, "arguments": c.arguments}, "block": i,
                     "why": f"past {knob(ep, 'max_parallel_calls')}"}
                    for i, c in _call_blocks(tok, gen, calls)[cfg.max_parallel_calls:]]
        if not dropped:
            continue
        dropped.sort(key=lambda d: d["block"])
        span = _block_span(tok, ids, r, dropped[0]["block"])
        whys = "; ".join(f"{d['call']['name'] if 'call' in d else 'a block'}: {d['why']}" for d in dropped)
        out.append(Finding("tool_call_dropped", WARNING,
                           f"turn {r.turn}: {len(dropped)} tool call{'s' if len(dropped) != 1 else ''} never ran "
                           f"({whys})", turn=r.turn, token_start=span[0], token_end=span[1],
                           evidence={"dropped": dropped}))
    return out


def _parsed_last(ep: Episode, n_replies: int) -> bool:
    """Whether verl parsed the last reply for calls: it checks the length and the turn limits first."""
    cfg = loop_config(ep)
    if len(ep.tokens) - ep.prompt_len >= cfg.response_length:
        return False
    if cfg.max_assistant_turns and n_replies >= cfg.max_assistant_turns:
        return False
    answers = sum(1 for b in blocks(ep) if not b.trained)
    return not (cfg.max_user_turns and answers >= cfg.max_user_turns)


def _call_blocks(tok: Tokenizer, gen: list[int], calls: list[vt.HermesCall]) -> list[tuple[int, vt.HermesCall]]:
    """Each parsed call with the index of its ``<tool_call>`` block."""
    text = str(tok.decode(gen))
    out, k = [], 0
    blocks_ = vt.TOOL_CALL_RE.findall(text)
    for i, block in enumerate(blocks_):
        if k < len(calls) and _is_call(block):
            out.append((i, calls[k]))
            k += 1
    return out


def _drop_blocks(tok: Tokenizer, gen: list[int], drops: list[vt.HermesDrop]) -> list[tuple[int, vt.HermesDrop]]:
    text = str(tok.decode(gen))
    out, k = [], 0
    for i, block in enumerate(vt.TOOL_CALL_RE.findall(text)):
        if k < len(drops) and block == drops[k].text and not _is_call(block):
            out.append((i, drops[k]))
            k += 1
    return out


def _is_call(block: str) -> bool:
    import json

    try:
        obj = json.loads(block)
    except ValueError:
        return False
    return isinstance(obj, dict) and "name" in obj and "arguments" in obj and isinstance(obj["name"], str)


def _block_span(tok: Tokenizer, ids: list[int], r: Block, index: int) -> tuple[int, int]:
    """[start, end) of the ``index``-th ``<tool_call>`` ... ``</tool_call>`` in the reply's tokens."""
    open_id, close_id = tok.convert_tokens_to_ids("<tool_call>"), tok.convert_tokens_to_ids("</tool_call>")
    unk = getattr(tok, "unk_token_id", None)
    if isinstance(open_id, int) and open_id != unk:
        opens = [i for i in range(r.start, r.end) if ids[i] == open_id]
        if index < len(opens):
            s = opens[index]
            e = next((i + 1 for i in range(s, r.end) if ids[i] == close_id), r.end)
            return s, e
    return r.start, r.end


def check_strict_score(ep: Episode, o: CheckOptions) -> list[Finding]:
    """A math answer Rollscope's checker accepts that verl's strict gsm8k score refuses (no ``#### N``)."""
    gt = ground_truth(ep)
    tok = o.tokenizer
    if is_verl(ep) and gt is None and not ep.tools:
        return [skip("strict_score_refused", "the record holds no ground truth to score a math answer against")]
    if not is_verl(ep) or gt is None or tok is None:
        return []
    from ..envs.math import check_answer  # math_verify loads only for math episodes

    ids = ep.tokens.ids.tolist()
    out: list[Finding] = []
    for r in (b for b in blocks(ep) if b.trained):
        text = str(tok.decode(ids[r.start : r.end], skip_special_tokens=True))
        ok, extracted = check_answer(text, (gt,))
        if not ok or gsm8k_score(text, gt, "strict") == 1.0:
            continue
        char = text.rfind("\\boxed")
        at = r.start
        if char >= 0:
            full = chat.decode(tok, ids[r.start : r.end])
            pos = chat.token_at_char(tok, ids[r.start : r.end], full, full.rfind("\\boxed"))
            at = r.start + (pos or 0)
        # What verl's gsm8k interaction scores (flexible, on '#### ' + the reply), and so what the episode shows.
        flexible = gsm8k_extract("#### " + text if not text.startswith("#### ") else text, "flexible")
        t = turn_record(ep, r.turn)
        said = ("verl's gsm8k interaction (flexible score) accepted it"
                + (f", reward {t.reward:g}" if t is not None else "") if flexible == gt
                else "Rollscope's math checker accepts it")
        out.append(Finding(
            "strict_score_refused", WARNING,
            f"turn {r.turn}: the answer {extracted!r} is right and {said}; verl's reward manager on gsm8k data "
            f"(strict score: the last '#### N' in the last 300 characters of the response) would give 0 "
            f"(found {gsm8k_extract(text, 'strict')!r})",
            turn=r.turn, token_start=at, token_end=at + 1,
            evidence={"ground_truth": gt, "extracted": extracted, "strict": gsm8k_extract(text, "strict"),
                      "flexible": flexible}))
    return out


VERL_CHECKS = (check_verl_knobs, check_verl_answers, check_think_kept, check_response_cut, check_tool_truncation,
               check_dropped_calls, check_strict_score)
