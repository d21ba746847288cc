"""OpenAI-style chat JSONL: ``{"messages": [...], "tools": [...], "reward": ...}`` per line.

Messages follow the chat completions API: ``role``, ``content`` (a string
or a list of ``{"type": "text", "text": ...}`` parts), assistant
``tool_calls`` (``{"id", "type": "function", "function": {"name",
"arguments"}}``, arguments a JSON string or an object) and tool messages
with ``tool_call_id`` and ``name``. Optional keys read: ``tools``,
``reward`` (number or dict, see :func:`base.reward_value`), ``id`` or
``task_id``, ``env``, ``status``.

On import the conversation is tokenized with the tokenizer the user names,
rendered whole by its template, once (``rendered_whole``): each assistant
reply, from the end of its generation prompt through the end-of-turn token,
has mask 1, the rest (the prompt, tool and user messages, generation
prompts) mask 0. A template that rewrites history (Qwen3 drops earlier
thinking) writes the conversation as it renders it, so the ids are the
record's, not a slicing's. Where a reply cannot be placed in the render,
the deltas are taken as slime's multi-turn example takes them
(``sliced_deltas``, retokenize), and a rewrite of history is the loop's
``template_not_prefix_stable`` finding. ``source.details["tokenized"]``
says which. Without a tokenizer the episode holds the messages only. Export writes the same format for SFT, with tool calls
taken from each turn's parsed calls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from ..errors import FormatError, RollscopeError, TemplateError
from ..loop.rewards import discounted_returns
from ..records import jsonbounds
from ..records.episode import (
    ROLES,
    Episode,
    Finding,
    Generation,
    Message,
    Segment,
    Severity,
    Status,
    TokenArrays,
    ToolCall,
    Turn,
)
from ..records.provenance import Source
from ..records.reading import json_type
from ..tokens import chat
from ..tokens.tokenizer import Tokenizer
from ..tokens.toolcalls import parse as parse_tool_calls
from .base import ImportContext, jsonable, read_jsonl_records, reward_value, stable_id, unstable_finding

NO_TOKENIZER_NOTE = "no tokenizer given (--tokenizer PATH_OR_ID): episodes hold messages only, no token ids"


def _content(value: Any, where: str, field: str) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        parts = [p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") in ("text", "input_text")]
        return "".join(str(p) for p in parts)
    raise FormatError(f"must be a string or a list of text parts, got {json_type(value)}", where, field)


def _tool_call(c: Any, where: str, field: str) -> ToolCall:
    """One OpenAI tool call. Arguments that are not a JSON object (a model's broken JSON, a list) are kept as written
    in ``raw_arguments``, and its turn says so (``unparsed_arguments``): the trainer trained on them as written."""
    if not isinstance(c, dict):
        raise FormatError("must be an object", where, field)
    fn: dict[str, Any] = c["function"] if isinstance(c.get("function"), dict) else c
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise FormatError("needs a function name", where, field)
    cid = c.get("id")
    if isinstance(cid, (int, float)) and not isinstance(cid, bool):
        cid = str(cid)
    elif cid is not None and not isinstance(cid, str):
        raise FormatError(f"id must be a string, got {json_type(cid)}", where, f"{field}.id")
    args = fn.get("arguments")
    if args is None:  # no arguments given: a call of a function that takes none
        return ToolCall(name=name, id=cid)
    if isinstance(args, str):
        try:
            parsed = jsonbounds.loads(args) if args.strip() else {}
        except ValueError:
            return ToolCall(name=name, id=cid, raw_arguments=args)
        return ToolCall(name=name, arguments=parsed, id=cid) if isinstance(parsed, dict) else ToolCall(
            name=name, id=cid, raw_arguments=args)
    if isinstance(args, dict):
        return ToolCall(name=name, arguments=args, id=cid)
    return ToolCall(name=name, id=cid, raw_arguments=json.dumps(args, ensure_ascii=False))


def unparsed_arguments(calls: Sequence[ToolCall]) -> str | None:
    """The parse error of a reply whose tool calls include arguments that are not a JSON object (the first such
    call), as the loop's parser words one; None when every call's arguments parsed."""
    for i, c in enumerate(calls):
        if c.raw_arguments is None:
            continue
        try:
            value = jsonbounds.loads(c.raw_arguments)
        except ValueError as e:
            return f"tool call {i + 1} ({c.name}): \"arguments\" is a string that is not JSON ({jsonbounds.describe(e)})"
        return f"tool call {i + 1} ({c.name}): \"arguments\" must be an object, got {json_type(value)}"
    return None


def parse_messages(raw: Any, where: str) -> tuple[Message, ...]:
    """OpenAI chat messages as Rollscope messages; a FormatError names the message at fault."""
    if not isinstance(raw, list):
        raise FormatError(f"must be a list, got {json_type(raw)}", where, "messages")
    out: list[Message] = []
    names: dict[str, str] = {}  # tool_call_id -> function name, for tool messages without a name
    for k, m in enumerate(raw):
        field = f"messages[{k}]"
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise FormatError("must be an object with a 'role'", where, field)
        if m["role"] not in ROLES:
            raise FormatError(f"role must be one of {', '.join(ROLES)}, got {m['role']!r:.40}", where, f"{field}.role")
        raw_calls = m.get("tool_calls")
        if raw_calls is not None and not isinstance(raw_calls, list):
            raise FormatError(f"must be a list of tool calls, got {json_type(raw_calls)}", where, f"{field}.tool_calls")
        calls = tuple(_tool_call(c, where, f"{field}.tool_calls[{j}]") for j, c in enumerate(raw_calls or ()))
        names.update({c.id: c.name for c in calls if c.id})
        name = m.get("name") or (names.get(m.get("tool_call_id", "")) if m["role"] == "tool" else None)
        out.append(Message(m["role"], _content(m.get("content"), where, f"{field}.content"), name, calls))
    return tuple(out)


def dropped_calls(raw: list[Any]) -> dict[int, Finding]:
    """A ``tool_call_dropped`` warning for each turn (by index; -1: before the first reply) whose call is not in
    the tokens: an assistant message that holds OpenAI's legacy ``function_call`` and no ``tool_calls`` (chat
    templates render ``tool_calls`` alone, so the trainer's tokens of that reply hold no call; the message is read
    as the template sees it), or a tool message answering a ``tool_call_id`` the reply before it did not make (a
    call dropped from the reply, with its answer kept). One a turn, the first."""
    out: dict[int, Finding] = {}
    turn, made = -1, None  # the reply's index, and its calls' ids (None: no reply yet, or calls without ids)
    for k, m in enumerate(raw):
        if m["role"] == "assistant":
            turn += 1
            calls = m.get("tool_calls") or []
            made = {c.get("id") for c in calls if isinstance(c, dict)} if all(
                isinstance(c, dict) and isinstance(c.get("id"), str) for c in calls) else None
            fc = m.get("function_call")
            if isinstance(fc, dict) and not calls:
                name = fc.get("name") if isinstance(fc.get("name"), str) else "?"
                out.setdefault(turn, Finding(
                    "tool_call_dropped", Severity.WARNING,
                    f"turn {turn}: messages[{k}] calls {name} in OpenAI's legacy function_call, which chat templates "
                    "do not render (they read tool_calls): the tokens of this reply hold no call; write it as "
                    "tool_calls", turn=turn, evidence={"message": k, "function_call": jsonable(fc)}))
                made = None  # its answer names no id the reply made either: said once, above
        elif m["role"] == "tool" and isinstance(m.get("tool_call_id"), str) and (turn < 0 or made is not None) \
                and m["tool_call_id"] not in (made or set()):
            where = f"turn {turn}: " if turn >= 0 else "before the first reply: "
            said = "the reply before it made no call of that id" if turn >= 0 else "no reply has called a tool yet"
            out.setdefault(turn, Finding(
                "tool_call_dropped", Severity.WARNING,
                f"{where}messages[{k}] answers tool call {m['tool_call_id']!r}, but {said} (a call dropped from "
                "the reply, its answer kept?): the tokens hold an answer to no call",
                turn=turn if turn >= 0 else None, evidence={"message": k, "tool_call_id": m["tool_call_id"]}))
    return out


Tokenized = tuple[TokenArrays, int, tuple[Segment, ...], tuple[Turn, ...]]
WHOLE, SLICED = "whole render", "sliced deltas"
"""How an import tokenized a conversation (``source.details["tokenized"]``): the checks read a rewrite of history
by the template as harmless to ids made whole, and as the wrong ids it makes of sliced deltas."""


def tokenize_conversation(tok: Tokenizer, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()
                          ) -> tuple[Tokenized, bool]:
    """Token arrays, prompt length, segments and turns of a finished conversation, and whether they are its whole
    render (``rendered_whole``), else the loop's ``retokenize`` deltas (``sliced_deltas``)."""
    whole = rendered_whole(tok, messages, tools)
    return (whole, True) if whole is not None else (sliced_deltas(tok, messages, tools), False)


def _piece_ids(tok: Tokenizer, full: str, bounds: list[int]) -> list[list[int]] | None:
    """``full`` encoded piece by piece between ``bounds`` (character offsets), where the pieces spell what encoding it
    whole gives (a boundary no token straddles); None where they do not."""
    cuts = [0, *bounds, len(full)]
    pieces = [chat.encode(tok, full[a:b]) if b > a else [] for a, b in zip(cuts, cuts[1:])]
    return pieces if [i for p in pieces for i in p] == chat.encode(tok, full) else None


def rendered_whole(tok: Tokenizer, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()
                   ) -> Tokenized | None:
    """The conversation as its template renders it whole, once (what a chat record says was said), each assistant
    reply trained from the end of its generation prompt through the template's end-of-turn token: a template that
    rewrites history (Qwen3 drops earlier thinking) writes it here as it writes the conversation, not as deltas
    sliced from renders of its prefixes would. The first reply follows its prompt rendered with the generation
    prompt; each later one the next generation prompt after the reply before it (its prefix's render may hold what
    the whole drops). None where a reply cannot be placed so (the template renders no closing, the first prompt is no
    prefix of the whole, a reply runs past what it renders to on its own, into what answered it) or a piece boundary
    splits a token."""
    asst = [k for k, m in enumerate(messages) if m.role == "assistant"]
    if not asst or asst[0] == 0:
        return None
    full = chat.render(tok, messages, tools)
    try:
        end_mark = chat.assistant_closing(tok, tools).strip()
    except TemplateError:  # a template that refuses the probe's system message, say: the deltas are still had
        return None
    if not end_mark:
        return None
    spans: list[tuple[int, int, int]] = []  # per reply: where its generation prompt starts, the reply, its end
    for k in asst:
        head = chat.render(tok, messages[:k], tools, add_generation_prompt=True)
        bare = chat.render(tok, messages[:k], tools)
        gp = head[len(bare):] if head.startswith(bare) else ""
        if not spans:
            if not full.startswith(head):
                return None
            g, start = len(head) - len(gp), len(head)
        else:
            g = full.find(gp, spans[-1][2]) if gp else -1
            if g < 0:
                return None
            start = g + len(gp)
        end = full.find(end_mark, start)
        alone = len(chat.render(tok, messages[: k + 1], tools)) - len(head)  # the reply rendered last, closing too
        if end < 0 or end + len(end_mark) - start > alone:
            return None
        spans.append((g, start, end + len(end_mark)))
    bounds = [c for g, a, e in spans for c in (g, a, e)]
    pieces = _piece_ids(tok, full, bounds)
    if pieces is None:
        return None
    b = chat.TokenBuilder()
    b.add(pieces[0] + pieces[1], "prompt", 0, False)  # up to the first reply: the first prompt, generation prompt too
    prompt_len = len(b)
    turns: list[Turn] = []
    for t, k in enumerate(asst):
        start = len(b)
        ids = pieces[3 * t + 2]
        b.add(ids, "assistant", t, True)
        first_seg = len(b.segments) - 1
        nxt = asst[t + 1] if t + 1 < len(asst) else len(messages)
        env = messages[k + 1 : nxt]
        after = pieces[3 * t + 3]  # the closing's rest, what the env answered, to the next generation prompt
        b.add(after, env[0].role if env else "tail", t, False)
        if t + 1 < len(asst):
            b.add(pieces[3 * t + 4], "gen_prompt", t + 1, False)
        turns.append(Turn(
            index=t, prompt_text=None, prompt_len=start,
            generation=Generation(text=messages[k].content, token_ids=tuple(ids), model="imported"),
            tool_calls=messages[k].tool_calls, observation=tuple(env), parse_error=unparsed_arguments(messages[k].tool_calls),
            segments=tuple(b.segments[first_seg:]),
        ))
    return TokenArrays(b.ids, b.mask, b.logprobs, b.versions), prompt_len, tuple(b.segments), tuple(turns)


def sliced_deltas(tok: Tokenizer, messages: Sequence[Message], tools: Sequence[dict[str, Any]] = ()) -> Tokenized:
    """Token arrays, prompt length, segments and turns of a finished conversation, its deltas taken as the loop's
    ``retokenize`` mode takes them; where the template rewrites history the turn carries the loop's
    ``template_not_prefix_stable`` finding."""
    b = chat.TokenBuilder()
    asst = [k for k, m in enumerate(messages) if m.role == "assistant"]
    if not asst:
        b.add(chat.encode(tok, chat.render(tok, messages, tools)), "prompt", 0, False)
        return TokenArrays(b.ids, b.mask, b.logprobs, b.versions), len(b), tuple(b.segments), ()
    b.add(chat.encode(tok, chat.render(tok, messages[: asst[0]], tools, add_generation_prompt=True)), "prompt", 0, False)
    prompt_len = len(b)
    turns: list[Turn] = []
    for t, k in enumerate(asst):
        findings: list[Finding] = []
        first_seg = len(b.segments)
        start = len(b)
        d = chat.assistant_delta(tok, messages[:k], messages[k], tools)
        if not d.stable:
            findings.append(unstable_finding(t, "assistant", d, start))
        ids = chat.encode(tok, d.text)
        b.add(ids, "assistant", t, True)
        nxt = asst[t + 1] if t + 1 < len(asst) else len(messages)
        env = messages[k + 1 : nxt]
        if env:
            e = chat.messages_delta(tok, messages[: k + 1], env, tools)
            if not e.stable:
                findings.append(unstable_finding(t, env[0].role, e, len(b)))
            b.add(chat.encode(tok, e.text), env[0].role, t, False)
        if nxt < len(messages):
            gp = chat.generation_prompt_delta(tok, messages[:nxt], tools)
            b.add(chat.encode(tok, gp.text), "gen_prompt", t + 1, False)
        turns.append(Turn(
            index=t, prompt_text=None, prompt_len=start,
            generation=Generation(text=messages[k].content, token_ids=tuple(ids), model="imported"),
            tool_calls=messages[k].tool_calls, observation=tuple(env), parse_error=unparsed_arguments(messages[k].tool_calls),
            segments=tuple(b.segments[first_seg:]), findings=tuple(findings),
        ))
    return TokenArrays(b.ids, b.mask, b.logprobs, b.versions), prompt_len, tuple(b.segments), tuple(turns)


def conversation_episode(
    *, fmt: str, eid: str, env: str, task_id: str, messages: tuple[Message, ...], tools: tuple[dict[str, Any], ...],
    reward: float, status: Status, source: Source, ctx: ImportContext, where: str, sample_index: int = 0,
    group_id: str | None = None,
) -> Episode:
    """An episode from a finished conversation, tokenized when the import has a tokenizer."""
    tok = ctx.tokenizer
    tokens, prompt_len = TokenArrays(), 0
    segments: tuple[Segment, ...] = ()
    if tok is not None:
        try:
            (tokens, prompt_len, segments, turns), whole = tokenize_conversation(tok, messages, tools)
        except RollscopeError as e:  # a template that cannot render this conversation
            raise FormatError(f"cannot tokenize the conversation: {e}", where, "messages") from None
        source = replace(source, details={**source.details, "tokenized": WHOLE if whole else SLICED})
    else:  # each assistant message a turn, the messages after it up to the next one what the env answered
        asst = [k for k, m in enumerate(messages) if m.role == "assistant"]
        turns = tuple(
            Turn(index=t, prompt_text=None, prompt_len=0,
                 generation=Generation(text=messages[k].content, model="imported"), tool_calls=messages[k].tool_calls,
                 observation=tuple(messages[k + 1: asst[t + 1] if t + 1 < len(asst) else len(messages)]),
                 parse_error=unparsed_arguments(messages[k].tool_calls))
            for t, k in enumerate(asst)
        )
    if turns:
        turns = (*turns[:-1], replace(turns[-1], reward=reward, done=True))
    turn_rewards = tuple(t.reward for t in turns)
    return Episode(
        id=eid, env=env, task_id=task_id, group_id=group_id, sample_index=sample_index,
        tokenizer=ctx.tokenizer_name, template_hash=chat.template_hash(tok) if tok is not None else "",
        status=status, reason=f"imported from {fmt}", reward=reward, turn_rewards=turn_rewards,
        returns=tuple(discounted_returns(turn_rewards, 1.0)), messages=messages, tools=tools, turns=turns,
        tokens=tokens, prompt_len=prompt_len, segments=segments, source=source, created_at=time.time(),
    )


def _tools(raw: Any, where: str) -> tuple[dict[str, Any], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise FormatError("must be a list of tool schemas", where, "tools")
    return tuple(t if "type" in t else {"type": "function", "function": t} for t in raw)


def record_id(d: dict[str, Any], path: Path, line: int, ctx: ImportContext) -> str:
    """The episode id of a chat record: its file's name, its content, and how many identical records that file held
    before it (two samples that said the same are two episodes, in one file or two), so the file re-imported with
    records added, removed or reordered finds the episodes it stored, and a folder imported whole or a file at a
    time stores the same. An episode a version that numbered records by their line stored keeps that id, found when
    its record is on the same line (``ctx.known``: set when the database holds chat episodes)."""
    key = stable_id("messages-record", d)
    seen = (path.name, key)
    k = ctx.occurrences.get(seen, 0)
    ctx.occurrences[seen] = k + 1
    if ctx.known is not None:
        legacy = stable_id("messages", line, d)
        if ctx.known(legacy):
            return legacy
    return stable_id("messages", "content", path.name, key, k)


def record_to_episode(d: dict[str, Any], where: str, path: Path, line: int, ctx: ImportContext) -> Episode:
    if "messages" not in d:
        raise FormatError("missing", where, "messages")
    messages = parse_messages(d["messages"], where)
    if not messages:
        raise FormatError("holds no messages: there is no conversation to import", where, "messages")
    dropped = dropped_calls(d["messages"])
    tools = _tools(d.get("tools"), where)
    reward = reward_value(d.get("reward"), where, key=ctx.reward_key)  # a missing one is noted below
    if d.get("reward") is None:
        ctx.note(f"{path}: records without a reward (none, or null) read as reward 0.0: nothing scored them")
    status_raw = d.get("status", "completed")
    if status_raw not in {s.value for s in Status}:
        raise FormatError(f"unknown status {status_raw!r}", where, "status")
    prompt = [m.to_dict() for m in messages if m.role != "assistant"][:2]
    task = d.get("task_id", d.get("id"))
    source = Source.imported("messages", str(path), line=line, index=line - 1,
                             **({"reward": jsonable(d["reward"])} if isinstance(d.get("reward"), dict) else {}))
    ep = conversation_episode(
        fmt="messages", eid=record_id(d, path, line, ctx), env=str(d.get("env") or ctx.env or "messages"),
        task_id=str(task) if task is not None else "p-" + stable_id("prompt", prompt)[:10],
        messages=messages, tools=tools, reward=reward, status=Status(status_raw), source=source, ctx=ctx, where=where,
    )
    if not dropped:
        return ep
    if -1 in dropped:  # an answer before the first reply: said on the first turn (a turn's findings stay its own)
        dropped.setdefault(0, replace(dropped.pop(-1), turn=0))
    return ep.evolve(turns=tuple(replace(t, findings=(*t.findings, dropped[t.index])) if t.index in dropped else t
                                 for t in ep.turns))


def read(path: Path, ctx: ImportContext) -> Iterator[Episode]:
    """Stream episodes from chat JSONL files, one line at a time."""
    if ctx.tokenizer is None:
        ctx.note(NO_TOKENIZER_NOTE)
    yield from read_jsonl_records(path, ctx, record_to_episode)


# -- export -----------------------------------------------------------------------


def to_openai(ep: Episode) -> list[dict[str, Any]]:
    """The episode's conversation as chat-completions messages, tool calls structured."""
    parser = ep.config.loop.tool_parser if ep.config.loop is not None else "hermes"
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant's calls, answered in order by tool messages
    turn = 0
    for m in ep.messages:
        if m.role == "assistant":
            calls = m.tool_calls or (ep.turns[turn].tool_calls if turn < len(ep.turns) else ())
            d: dict[str, Any] = {"role": "assistant", "content": m.content}
            if calls:
                if not m.tool_calls:  # the loop keeps the raw text; SFT wants the calls outside it
                    d["content"] = parse_tool_calls(m.content, parser if parser in ("hermes", "qwen", "llama3") else "hermes").content
                pending = [c.id or f"call_{turn}_{j}" for j, c in enumerate(calls)]
                d["tool_calls"] = [
                    {"id": cid, "type": "function", "function": {"name": c.name, "arguments": c.arguments_json()}}
                    for cid, c in zip(pending, calls)
                ]
            turn += 1
            out.append(d)
            continue
        d = {"role": m.role, "content": m.content}
        if m.name is not None:
            d["name"] = m.name
        if m.role == "tool" and pending:
            d["tool_call_id"] = pending.pop(0)
        out.append(d)
    return out


def write_stream(episodes: Iterable[Episode], f: IO[str]) -> int:
    """One chat record per episode: messages, tools, reward and where it came from."""
    n = 0
    for ep in episodes:
        row = {"id": ep.id, "env": ep.env, "task_id": ep.task_id, "status": ep.status.value, "reward": ep.reward,
               "messages": to_openai(ep)}
        if ep.tools:
            row["tools"] = list(ep.tools)
        f.write(json.dumps(row, ensure_ascii=False, allow_nan=False))
        f.write("\n")
        n += 1
    return n
