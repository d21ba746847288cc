"""Synthetic episodes, made fast, for store, render and dashboard tests and the benchmarks.

``synthetic_episodes`` builds many small but complete records (messages,
turns with tool calls, token arrays, findings, groups) without a model or an
env, so a test can fill a database with thousands of them in seconds and
check the store's answers against the records themselves.

``long_episode`` builds one big episode (tens of thousands of real token ids
of a real tokenizer, dozens of turns, findings including a
``logprob_mismatch`` with its per-token ``diff``) for the Episode view's
speed figures; ``rendered_retail_episode`` gives its turns the prompt texts a
render-based loop records.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from engine.presets import PRESETS
from engine.records.episode import (
    Action,
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
from engine.records.provenance import BackendInfo, RunConfig, SamplingParams, Source
from engine.tokens import chat

ENVS = ("math", "retail", "price")
STATUSES = (Status.COMPLETED, Status.COMPLETED, Status.COMPLETED, Status.TRUNCATED, Status.ABORTED, Status.FAILED)
SOURCES = ("live", "live", "live", "messages")
TAGS = ("bug", "keep", "weird", "review")
FINDING_KINDS = ("retokenization_drift", "mask_misaligned", "truncated_turn", "logprobs_missing")
WORDS = (
    "order", "refund", "address", "shipping", "price", "apple", "pear", "answer", "check", "total",
    "cancel", "exchange", "item", "status", "pending", "user", "wrong", "correct", "again", "tool",
)
SAMPLES_PER_GROUP = 4


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


@functools.lru_cache(maxsize=64)
def _system_prompt(env: str, chars: int) -> str:
    # The same policy text for every episode of an env, as real envs have.
    rng = random.Random(env)
    text = f"You are the {env} agent. "
    while len(text) < chars:
        text += _sentence(rng, 12) + ". "
    return text


def needle(i: int) -> str:
    """A phrase only episode ``i`` (of ``synthetic_episodes``) says, when ``i % 50 == 7``."""
    return f"zebra crossing #{i}"


def synthetic_episode(i: int, *, system_chars: int = 300, tokens_per_turn: int = 24, created_at: float = 1.7e9) -> Episode:
    """Episode number ``i`` of a deterministic family: metadata varies with ``i`` in known ways."""
    rng = random.Random(i)
    nrng = np.random.default_rng(i)
    env = ENVS[i % len(ENVS)]
    task = f"{env}-{(i // SAMPLES_PER_GROUP) % 40}"
    group = f"g{i // SAMPLES_PER_GROUP}"
    status = STATUSES[i % len(STATUSES)]
    n_turns = 1 + (i * 7) % 6
    system = _system_prompt(env, system_chars)
    first_user = f"Please help with {task}: {_sentence(rng, 8)}"
    if i % 50 == 7:
        first_user += f" ({needle(i)})"
    messages: list[Message] = [Message("system", system), Message("user", first_user)]
    turns: list[Turn] = []
    segments: list[Segment] = []
    prompt_len = 40
    pos = prompt_len
    segments.append(Segment(0, prompt_len, "prompt", 0, False))
    mask: list[int] = [0] * prompt_len
    lps: list[float] = [float("nan")] * prompt_len
    turn_rewards: list[float] = []
    for t in range(n_turns):
        text = _sentence(rng, 10)
        call = ToolCall("lookup", {"item": rng.choice(WORDS), "n": t}) if t < n_turns - 1 else None
        gen_lps = tuple(np.round(-np.abs(nrng.normal(0, 0.6, tokens_per_turn)), 4).tolist())
        gen = Generation(
            text=text, token_ids=tuple(range(1000 + t, 1000 + t + tokens_per_turn)), logprobs=gen_lps,
            finish_reason="length" if (status is Status.TRUNCATED and t == n_turns - 1) else "stop",
            latency_s=0.05 + 0.01 * t, model="synthetic-1",
        )
        obs = (Message("tool", f'{{"result": "{_sentence(rng, 5)}"}}', name="lookup"),) if call else (
            Message("user", "thanks, " + _sentence(rng, 4)),)
        findings: tuple[Finding, ...] = ()
        if i % 5 == 0 and t == 0:
            kind = FINDING_KINDS[(i // 5) % len(FINDING_KINDS)]
            sev = Severity.ERROR if kind != "truncated_turn" else Severity.WARNING
            findings = (Finding(kind, sev, f"{kind} in turn {t}", turn=t, token_start=pos + 2, token_end=pos + 5),)
        reward = 1.0 if (t == n_turns - 1 and i % 3 != 0) else 0.0
        turns.append(Turn(
            index=t, prompt_text=None, prompt_len=pos, generation=gen, tool_calls=(call,) if call else (),
            action=Action(call.name, call.arguments) if call else Action("respond", text=text),
            observation=obs, reward=reward, done=t == n_turns - 1,
            segments=(Segment(pos, pos + tokens_per_turn, "assistant", t, True),
                      Segment(pos + tokens_per_turn, pos + tokens_per_turn + 8, "tool" if call else "user", t, False)),
            timings={"total_s": 0.1 + 0.01 * t}, findings=findings,
        ))
        segments.extend(turns[-1].segments)
        mask += [1] * tokens_per_turn + [0] * 8
        lps += list(gen_lps) + [float("nan")] * 8
        pos += tokens_per_turn + 8
        messages.append(Message("assistant", text, tool_calls=(call,) if call else ()))
        messages.extend(obs)
        turn_rewards.append(reward)
    reward = round((i % 11) / 10, 2) if env == "math" else turn_rewards[-1]
    returns = [sum(turn_rewards[k:]) for k in range(n_turns)]
    ids = np.arange(pos, dtype=np.int32) % 5000
    ep_findings: tuple[Finding, ...] = ()
    if i % 10 == 3:
        ep_findings = (Finding("template_not_prefix_stable", Severity.ERROR, "earlier turn text changed", turn=0),)
    return Episode(
        id=f"ep{i:07d}", env=env, task_id=task, run_id=f"run{i // 1000}", group_id=group,
        sample_index=i % SAMPLES_PER_GROUP, preset=("tito", "slime-tau", "areal-math")[i % 3],
        config=RunConfig(PRESETS["tito"].with_(max_turns=6), SamplingParams(0.7, 0.95, 256)),
        backend=BackendInfo("scripted", "synthetic-1"), tokenizer="smollm2",
        status=status, reason={Status.ABORTED: "tool call parse error", Status.FAILED: "env error: boom"}.get(status, ""),
        reward=reward, turn_rewards=tuple(turn_rewards), returns=tuple(returns), messages=tuple(messages),
        turns=tuple(turns), tokens=TokenArrays(ids, mask, lps), prompt_len=prompt_len, segments=tuple(segments),
        findings=ep_findings, tags=tuple(t for k, t in enumerate(TAGS) if i % (7 + k) == 0),
        starred=i % 13 == 0, source=Source(SOURCES[i % len(SOURCES)]), created_at=created_at + i,
    )


def synthetic_episodes(n: int, start: int = 0, **kw: Any) -> Iterator[Episode]:
    """Episodes ``start .. start+n-1`` of the family (see ``synthetic_episode``)."""
    for i in range(start, start + n):
        yield synthetic_episode(i, **kw)


# -- one long episode ----------------------------------------------------------


def long_episode(tokenizer: Any, n_tokens: int = 32_000, n_turns: int = 60, seed: int = 0, tools: int = 0) -> Episode:
    """A ``n_tokens``-token, ``n_turns``-turn tool-use episode with real ids of ``tokenizer``.

    Every turn: a user or tool delta (mask 0), then an assistant reply with a
    tool call (mask 1, logprobs); one turn has a parse error, several carry
    findings, and a ``logprob_mismatch`` finding carries a per-token diff.
    ``tools`` JSON tool schemas (about 100 tokens each) follow the system prompt's policy text.
    """
    rng = random.Random(seed)
    im_start, im_end = tokenizer.convert_tokens_to_ids("<|im_start|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")

    def enc(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    def chunk(n_words: int) -> str:
        lines = []
        for _ in range(max(1, n_words // 12)):
            lines.append(_sentence(rng, 12) + rng.choice([".", "?", " — 日本語 ok.", ' {"k": "<b>&</b>"}']))
        return "\n".join(lines)

    system = "You are a retail agent. Follow the policy.\n" + chunk(300)
    if tools:
        schemas = []
        for k in range(tools):
            params = rng.sample(WORDS, 3)
            schemas.append({"type": "function", "function": {
                "name": f"tool_{k}_{params[0]}", "description": _sentence(rng, 14) + ".",
                "parameters": {"type": "object", "required": params[:1], "properties": {
                    w: {"type": "string", "description": _sentence(rng, 6)} for w in params}}}})
        system += "\n\n# Tools\n<tools>\n" + "\n".join(json.dumps(s) for s in schemas) + "\n</tools>"
    user0 = "I want to return my order #W123. " + chunk(40)
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float] = []
    segments: list[Segment] = []

    def add(kind: str, turn: int, trainable: bool, toks: list[int], lp: list[float] | None = None) -> Segment:
        start = len(ids)
        ids.extend(toks)
        mask.extend([int(trainable)] * len(toks))
        lps.extend(lp if lp is not None else [float("nan")] * len(toks))
        seg = Segment(start, len(ids), kind, turn, trainable)
        segments.append(seg)
        return seg

    head = [im_start] + enc("system\n" + system) + [im_end] + enc("\n") + [im_start] + enc("user\n" + user0) + [im_end]
    add("prompt", 0, False, head + enc("\n") + [im_start] + enc("assistant\n"))
    prompt_len = len(ids)
    per_turn = max(40, (n_tokens - prompt_len) // n_turns + 3)  # + the assistant header and tail
    messages = [Message("system", system), Message("user", user0)]
    turns: list[Turn] = []
    rewards: list[float] = []
    for t in range(n_turns):
        turn_segs: list[Segment] = []
        if t:
            turn_segs.append(add("gen_prompt", t, False, [im_start] + enc("assistant\n")))
        budget = max(20, int(per_turn * 0.55))
        body = chunk(budget)
        args = {"order_id": f"#W{rng.randint(100, 999)}", "items": [rng.choice(WORDS) for _ in range(3)], "note": "<i>x</i>"}
        call_text = '<tool_call>\n{"name": "get_order", "arguments": ' + str(args).replace("'", '"') + "}\n</tool_call>"
        gen_ids = enc(body + "\n" + call_text)[:budget] + [im_end]
        gen_lp = [round(-abs(rng.gauss(0, 1.2)) ** 1.5, 4) for _ in gen_ids]
        seg = add("assistant", t, True, gen_ids, gen_lp)
        turn_segs.append(seg)
        turn_segs.append(add("tail", t, False, enc("\n")))
        parse_error = "expected ',' or '}' at line 2 column 40" if t == 7 else None
        calls = () if parse_error else (ToolCall("get_order", args),)
        room = max(8, per_turn - len(gen_ids) - 12)
        obs_body = enc('{"order": "' + chunk(room) + '"}')[:room]
        obs_text = tokenizer.decode(obs_body)
        obs = (Message("tool", obs_text, name="get_order"),)
        obs_ids = [im_start] + enc("tool\n") + obs_body + [im_end] + enc("\n")
        turn_segs.append(add("tool", t, False, obs_ids))
        findings: list[Finding] = []
        if t % 9 == 4:
            findings.append(Finding("retokenization_drift", Severity.ERROR, f"re-encoding turn {t} gives other ids",
                                    turn=t, token_start=seg.start + 3, token_end=seg.start + 6,
                                    evidence={"position": seg.start + 3}))
        reward = 1.0 if t == n_turns - 1 else 0.0
        rewards.append(reward)
        text = tokenizer.decode(gen_ids, skip_special_tokens=False)
        turns.append(Turn(
            index=t, prompt_text=None, prompt_len=seg.start, generation=Generation(
                text=text, token_ids=tuple(gen_ids), logprobs=tuple(gen_lp),
                finish_reason="length" if t == 20 else "stop", latency_s=0.2 + rng.random(), model="synthetic-1"),
            tool_calls=calls, parse_error=parse_error,
            action=Action("get_order", args) if calls else Action("respond", text=text),
            observation=obs, reward=reward, done=t == n_turns - 1, segments=tuple(turn_segs),
            timings={"total_s": 0.3 + rng.random()}, findings=tuple(findings),
        ))
        messages.append(Message("assistant", body, tool_calls=calls))
        messages.extend(obs)
    n = len(ids)
    diff: list[float | None] = [None] * n
    over: list[int] = []
    for k in range(n):
        if mask[k]:
            d = round(rng.gauss(0, 0.08) + (1.3 if k % 211 == 0 else 0.0), 4)
            diff[k] = d
            if abs(d) > 0.5:
                over.append(k)
    mismatch = Finding(
        "logprob_mismatch", Severity.ERROR,
        f"{len(over)} trainable tokens differ from teacher-forced logprobs by more than 0.5",
        turn=next((s.turn for s in segments if s.start <= over[0] < s.end), None) if over else None,
        token_start=over[0] if over else None, token_end=over[-1] + 1 if over else None,
        evidence={"threshold": 0.5, "over": over[:200], "diff": diff},
    )
    returns = [sum(rewards[k:]) for k in range(n_turns)]
    return Episode(
        id=f"long{seed:04d}{n_tokens}", env="retail", task_id="retail-17", run_id="bench", group_id="gbench",
        preset="tito", config=RunConfig(PRESETS["tito"].with_(max_turns=n_turns), SamplingParams(1.0, 1.0, 1024)),
        backend=BackendInfo("scripted", "synthetic-1"), tokenizer="smollm2", status=Status.COMPLETED,
        reward=1.0, turn_rewards=tuple(rewards), returns=tuple(returns), messages=tuple(messages), turns=tuple(turns),
        tokens=TokenArrays(ids, mask, lps), prompt_len=prompt_len, segments=tuple(segments),
        findings=(mismatch,), created_at=1.7e9,
    )


def rendered_retail_episode(tok: Any, seed: int = 0, n_turns: int = 60) -> Episode:
    """``long_episode`` as a render-based loop records it: each turn's prompt text is ``tok``'s chat template's
    render of the conversation so far. Every reply thinks first (``<think>…</think>``); every tenth turn the user
    answers, the other turns a tool, so a template that drops the thinking of replies before the last user
    message (Qwen3's) rewrites the conversation there."""
    ep = long_episode(tok, n_tokens=32_000 * n_turns // 60, n_turns=n_turns, seed=seed, tools=3)
    ep = replace(ep, id=f"retail{seed:05d}", findings=())  # without the per-token logprob diff
    tools = [{"type": "function", "function": {"name": "get_order", "description": "Look an order up.",
                                               "parameters": {"type": "object", "properties": {}}}}]
    rng = random.Random(seed + 3)
    messages = list(ep.messages[:2])
    replies = [m for m in ep.messages[2:] if m.role == "assistant"]
    turns = []
    for t, turn in enumerate(ep.turns):
        prompt = chat.render(tok, messages, tools, add_generation_prompt=True)
        thought = " ".join(rng.choice(("the", "order", "refund", "policy", "check", "user")) for _ in range(40))
        content = f"<think>\n{thought}\n</think>\n\n{replies[t].content}"
        obs = (Message("user", f"ok, and what about item {t}? " + thought[:60]),) if t % 10 == 9 else turn.observation
        turns.append(replace(turn, prompt_text=prompt, generation=replace(turn.generation, text=content + "<|im_end|>"),
                             observation=obs))
        messages += [Message("assistant", content, tool_calls=replies[t].tool_calls), *obs]
    return replace(ep, turns=tuple(turns), messages=tuple(messages), tools=tuple(tools))


# -- one hostile episode ----------------------------------------------------------


def huge_episode(message_chars: int = 50_000_000, n_tokens: int = 1_000_000, vocab: int = 49_152) -> Episode:
    """Episode 5 of the family (six turns, a finding in turn 0's tokens) with turn 0's tool answer grown to
    ``message_chars`` characters and ``n_tokens`` tokens (random ids below ``vocab``, mask 0), every later
    turn shifted after it, and one more finding in the middle of that answer's tokens."""
    ep = synthetic_episode(5)
    t0 = ep.turns[0]
    answer = t0.segments[1]
    extra = n_tokens - ep.n_tokens
    line = "The order system answered at length about pears, refunds and shipping status. " * 2 + "\n"
    big = Message("tool", (line * (message_chars // len(line) + 1))[:message_chars], name="lookup")

    def moved(s: Segment) -> Segment:
        if s == answer:
            return replace(s, end=s.end + extra)
        return replace(s, start=s.start + extra, end=s.end + extra) if s.start >= answer.end else s

    turns = [replace(t0, observation=(big,), segments=tuple(moved(s) for s in t0.segments))]
    turns += [replace(t, prompt_len=t.prompt_len + extra, segments=tuple(moved(s) for s in t.segments))
              for t in ep.turns[1:]]
    messages = tuple(big if m == t0.observation[0] else m for m in ep.messages)
    tok = ep.tokens
    rng = np.random.default_rng(5)
    at = answer.end
    ids = np.concatenate([tok.ids[:at], rng.integers(0, vocab, extra, dtype=np.int32), tok.ids[at:]])
    mask = np.concatenate([tok.loss_mask[:at], np.zeros(extra, dtype=tok.loss_mask.dtype), tok.loss_mask[at:]])
    lps = np.concatenate([tok.logprobs[:at], np.full(extra, np.nan, dtype=tok.logprobs.dtype), tok.logprobs[at:]])
    inside = answer.start + (answer.end + extra - answer.start) // 2
    deep = Finding("retokenization_drift", Severity.ERROR, "re-encoding the tool answer gives other ids", turn=0,
                   token_start=inside, token_end=inside + 3)
    return ep.evolve(id="huge0005", turns=tuple(turns), messages=messages, tokens=TokenArrays(ids, mask, lps),
                     segments=tuple(moved(s) for s in ep.segments), findings=(*ep.findings, deep))
