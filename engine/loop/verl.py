"""verl's ToolAgentLoop driven through the Stepper (``token_mode=verl``, preset ``verl-tool``).

verl's loop (``verl/experimental/agent_loop/tool_agent_loop.py``) is a state machine whose order of events
is not the other trainers': after each generation it checks ``response_length``, then
``max_assistant_turns``, then ``max_user_turns``; then hermes tool calls (from the decoded ids) take
precedence over the interaction; tool results and interaction answers are rendered on their own and cut by
the default system block; a tool round that would reach ``response_length`` is not appended; the response
is cut at ``response_length`` at the end. ``start`` and ``commit`` here are what the Stepper runs in that
mode; the token side is ``tokens/verl.py``.

On ``math`` the interaction is verl's gsm8k one (``verl/interactions/gsm8k_interaction.py``) scored by
``verl/utils/reward_score/gsm8k.py``; elsewhere it is the env's user.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, field, replace
from typing import Any

from ..envs.gsm8k import gsm8k_score
from ..presets import VERL_GSM8K_CORRECT, VERL_GSM8K_WRONG
from ..records import textsafe
from ..records.episode import RESPOND, Action, Finding, Generation, Message, Severity, Status, ToolCall, Turn
from ..tokens import chat
from ..tokens import verl as vt
from ..tokens.toolcalls import tool_names
from .turn import ENV_FAILURES, execute


def gsm8k_interaction(reply: str, ground_truth: str) -> tuple[bool, str, float]:
    """``Gsm8kInteraction.generate_response``: (ends, answer, reward) for the last assistant message."""
    response = reply if reply.startswith("#### ") else "#### " + reply
    reward = gsm8k_score(response, ground_truth, method="flexible")
    if reward == 1.0:
        return True, VERL_GSM8K_CORRECT, reward
    return False, VERL_GSM8K_WRONG, reward


@dataclass
class VerlState:
    """AgentData's counters and what the run measured once."""

    kwargs: dict[str, Any]
    schemas: list[dict[str, Any]]
    prompt_len: int = 0
    user_turns: int = 0
    assistant_turns: int = 0
    logprobs_on: bool = False
    turn_scores: list[float] = field(default_factory=list)
    tool_rewards: list[float] = field(default_factory=list)
    ground_truth: str | None = None


def _is_math(env: Any) -> bool:
    return getattr(env, "name", "") == "math" and hasattr(env, "task")


def start(s: Any) -> None:
    """``_handle_pending_state``: the dataset messages rendered once with verl's tool schemas."""
    cfg = s.config
    system = s.env.system_prompt(s.task_id)
    first = s.env.reset(s.task_id)
    s._ctx.messages[:] = ([Message("system", system)] if system else []) + list(first)
    state = VerlState(vt.chat_kwargs(cfg.apply_chat_template_kwargs), vt.verl_tool_schemas(s.tools))
    if _is_math(s.env):
        state.ground_truth = str(s.env.task(s.task_id).solutions[0])
        s.episode = s.episode.evolve(ground_truth=state.ground_truth)
    s.verl = state
    msgs = [{"role": m.role, "content": m.content} for m in s._ctx.messages]
    ids = vt.template_ids(s.tok, msgs, tools=state.schemas or None, kwargs=state.kwargs)
    s._ctx.builder.add(ids, "prompt", 0, False)
    state.prompt_len = len(ids)
    s.episode = s.episode.evolve(prompt_len=len(ids))
    if len(ids) > cfg.prompt_length:
        reason = (f"the prompt is {len(ids)} tokens, longer than prompt_length={cfg.prompt_length}: verl's dataset "
                  f"refuses it (filter_overlong_prompts); raise prompt_length (--set prompt_length={len(ids)} or more)")
        s.findings.append(Finding("truncated_episode", Severity.ERROR, reason, token_start=cfg.prompt_length,
                                  token_end=len(ids), evidence={"prompt_len": len(ids),
                                                                "prompt_length": cfg.prompt_length}))
        s._end(Status.FAILED, reason)


def budget(s: Any) -> int:
    """The server's ``max_tokens``: prompt_length + response_length - the context so far."""
    return int(s.config.prompt_length + s.config.response_length - len(s._ctx.builder))


def _response_len(s: Any) -> int:
    return int(len(s._ctx.builder) - s.verl.prompt_len)


def _mask0(s: Any, ids: list[int], kind: Any, t: int) -> None:
    s._ctx.builder.add(ids, kind, t, False, [0.0] * len(ids) if s.verl.logprobs_on else None)


async def _call_tool(s: Any, call: vt.HermesCall) -> tuple[str, str, float, ToolCall | None]:
    """``_call_tool``: (raw text, text as appended, tool reward, the call as executed)."""
    return await call_tool(s.env, tool_names(s.tools), s.config, call.name, call.arguments)


async def call_tool(env: Any, names: Any, cfg: Any, name: str, arguments: str) -> tuple[str, str, float, ToolCall | None]:
    """One call as verl's ``_call_tool`` makes it on ``env`` (whose tools are ``names``): (raw text, text as
    appended, tool reward, the call as executed; None where nothing ran)."""
    try:
        args = json.loads(arguments)
    except ValueError as e:  # cannot happen for a re-dumped value; kept as verl words any failure
        return (f"{vt.TOOL_ERROR_PREFIX}{e}",) * 2 + (0.0, None)
    if name not in names:
        text = f"{vt.TOOL_ERROR_PREFIX}{KeyError(name)}"
        return text, text, 0.0, None
    if not isinstance(args, dict):
        text = f"{vt.TOOL_ERROR_PREFIX}arguments must be a JSON object, not {type(args).__name__}"
        return text, text, 0.0, None
    executed = ToolCall(name, args)
    try:
        result = await execute(env, [Action(name, args)])
    except ENV_FAILURES as e:
        text = f"{vt.TOOL_ERROR_PREFIX}{e}"
        return text, text, 0.0, executed
    raw = "".join(m.content for m in result.observation)
    return raw, vt.truncate_tool_text(raw, cfg.max_tool_response_length, cfg.tool_response_truncate_side), \
        float(result.reward), executed


async def replay_turn(env: Any, cfg: Any, tools: Any, turn: Turn, ground_truth: str | None
                      ) -> tuple[tuple[Message, ...], float, bool]:
    """What verl's loop appends after a stored turn's reply, made again on ``env``: (observation, reward, done).

    Tool calls run one at a time as ``_call_tool`` runs them, each answer one ``tool`` message (cut as verl cuts
    it); a call that never ran (an unknown tool: its error needs no env) is answered as stored. A reply without
    calls goes to the interaction: verl's gsm8k one on math (the env still checks it, as the loop does), else
    the env's user."""
    if turn.tool_calls or turn.raw_observation:
        known = tool_names(tools)
        calls = iter(turn.tool_calls)
        unknown = len(turn.observation) - len(turn.tool_calls)  # calls that never ran: unknown tools
        msgs: list[Message] = []
        reward = 0.0
        for stored in turn.observation:
            said = stored.content[len(vt.TOOL_ERROR_PREFIX):] if stored.content.startswith(vt.TOOL_ERROR_PREFIX) else ""
            if unknown > 0 and len(said) > 1 and said[0] == said[-1] == "'" and said[1:-1] not in known:
                msgs.append(stored)  # an unknown tool: verl answers it without the env
                unknown -= 1
                reward = 0.0
                continue
            call = next(calls, None)
            if call is None:
                break
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            _, text, reward, _ = await call_tool(env, {call.name}, cfg, call.name, arguments)
            msgs.append(Message("tool", text or ""))
        return tuple(msgs), reward, False
    action = turn.action
    content = action.text if action is not None and action.text is not None else \
        str(action.arguments.get("content", "")) if action is not None else ""
    if ground_truth is not None:
        ends, answer, reward = gsm8k_interaction(content, ground_truth)
        await execute(env, [Action(RESPOND, {"content": content}, content)])
        return (Message("user", answer),), reward, ends
    result = await execute(env, [Action(RESPOND, {"content": content}, content)])
    return (Message("user", "".join(m.content for m in result.observation)),), float(result.reward), bool(result.done)


async def commit(s: Any, generation: Generation) -> Turn:
    """One generation through verl's GENERATING, then PROCESSING_TOOLS or INTERACTING."""
    cfg, st, b = s.config, s.verl, s._ctx.builder
    t = len(s.turns)
    pend = s.pending if s.pending is not None and s.pending.turn == t else None
    s.pending = None
    prompt_len = len(b)
    seg_start = len(b.segments)
    timings: dict[str, float] = {"generate_s": pend.generate_s if pend else 0.0}
    findings: list[Finding] = list(pend.found) if pend else []
    gen = generation
    ids = list(gen.token_ids) or chat.encode(s.tok, gen.text)
    lps = None
    if cfg.calculate_log_probs and gen.logprobs and len(gen.logprobs) == len(ids):
        lps = list(gen.logprobs)
        st.logprobs_on = True
    b.add(ids, "assistant", t, True, lps)
    st.assistant_turns += 1
    info: dict[str, Any] = {}
    end: tuple[Status, str] | None = None
    if _response_len(s) >= cfg.response_length:
        end = (Status.TRUNCATED, f"the response reached response_length={cfg.response_length}")
    elif cfg.max_assistant_turns and st.assistant_turns >= cfg.max_assistant_turns:
        end = (Status.TRUNCATED, f"reached max_assistant_turns={cfg.max_assistant_turns}")
    elif cfg.max_user_turns and st.user_turns >= cfg.max_user_turns:
        end = (Status.TRUNCATED, f"reached max_user_turns={cfg.max_user_turns}")
    content = str(s.tok.decode(ids, skip_special_tokens=True))
    s._ctx.messages.append(Message("assistant", content))
    calls: list[vt.HermesCall] = []
    raws: list[str] = []
    executed: list[ToolCall] = []
    action: Action | None = None
    observation: tuple[Message, ...] = ()
    reward = 0.0
    done = False
    if end is None:
        calls, drops = vt.hermes_calls(s.tok, ids)
        dropped: list[dict[str, Any]] = [{"text": d.text, "why": f"the hermes parser drops it: {d.why}"} for d in drops]
        dropped += [{"call": {"name": c.name, "arguments": c.arguments},
                     "why": f"past max_parallel_calls={cfg.max_parallel_calls}"} for c in calls[cfg.max_parallel_calls:]]
        if dropped:  # the checks name them on their tokens (checks/verl.py), from the ids
            info["dropped"] = dropped
        t_env = time.perf_counter()
        if calls:
            tool_msgs: list[Message] = []
            for call in calls[: cfg.max_parallel_calls]:
                raw, text, tool_reward, done_call = await _call_tool(s, call)
                raws.append(textsafe.clean_text(raw))
                tool_msgs.append(Message("tool", text or ""))
                st.tool_rewards.append(tool_reward)
                reward = tool_reward
                if done_call is not None:
                    executed.append(done_call)
            info["truncated"] = [len(r) for r, m in zip(raws, tool_msgs) if m.content != r
                                 and not r.startswith(vt.TOOL_ERROR_PREFIX)]
            observation = tuple(tool_msgs)
            s._ctx.messages.extend(tool_msgs)
            if executed:
                action = Action(executed[0].name, dict(executed[0].arguments))
            tool_ids = vt.template_ids(s.tok, [{"role": "tool", "content": m.content} for m in tool_msgs],
                                       kwargs=st.kwargs, remove_system_prompt=True)
            if _response_len(s) + len(tool_ids) >= cfg.response_length:
                info["refused_tokens"] = len(tool_ids)
                end = (Status.TRUNCATED, f"the tool result ({len(tool_ids)} tokens) would reach "
                                         f"response_length={cfg.response_length}: not appended")
            else:
                _mask0(s, tool_ids, "tool", t)
                st.user_turns += 1
        else:
            action = Action(RESPOND, {"content": content}, content)
            try:
                ends, answer, reward, extra = await _interact(s, content)
            except ENV_FAILURES as e:
                findings.append(Finding("env_error", Severity.ERROR, f"{type(e).__name__}: {e}", turn=t,
                                        evidence={"traceback": traceback.format_exc()}))
                end = (Status.ABORTED, f"env error: {type(e).__name__}: {e}")
            else:
                info.update(extra)
                st.user_turns += 1
                st.turn_scores.append(reward)
                observation = (Message("user", answer),)
                s._ctx.messages.extend(observation)
                _mask0(s, vt.template_ids(s.tok, [{"role": "user", "content": answer}], kwargs=st.kwargs,
                                          remove_system_prompt=True), "user", t)
                if ends:
                    done = True
                    end = (Status.COMPLETED, "the interaction ended the episode")
        timings["env_s"] = time.perf_counter() - t_env
    if end is not None:
        _final_cut(s)
    timings["total_s"] = timings["generate_s"] + timings.get("env_s", 0.0)
    info["verl"] = {"user_turns": st.user_turns, "assistant_turns": st.assistant_turns,
                    "turn_scores": list(st.turn_scores), "tool_rewards": list(st.tool_rewards)}
    turn = Turn(index=t, prompt_text=None, prompt_len=min(prompt_len, len(b)), generation=gen,
                tool_calls=tuple(executed), action=action, observation=observation, reward=reward, done=done, info=info,
                raw_observation=tuple(raws), segments=tuple(b.segments[seg_start:]), timings=timings, findings=tuple(findings))
    s.turns.append(turn)
    if end is not None:
        s._end(*end)
    if s.on_turn is not None:
        s.on_turn(s.snapshot(), turn)
    return turn


async def _interact(s: Any, content: str) -> tuple[bool, str, float, dict[str, Any]]:
    """The interaction's (ends, answer, reward, what the record keeps): gsm8k on math, else the env's user."""
    st = s.verl
    if st.ground_truth is not None:
        ends, answer, reward = gsm8k_interaction(content, st.ground_truth)
        ours = await execute(s.env, [Action(RESPOND, {"content": content}, content)])
        return ends, answer, reward, {
            "strict_score": gsm8k_score(content, st.ground_truth, "strict"),
            "ours": {"success": bool(ours.info.get("success")), "extracted": ours.info.get("extracted")}}
    result = await execute(s.env, [Action(RESPOND, {"content": content}, content)])
    answer = "".join(m.content for m in result.observation)
    return bool(result.done), answer, float(result.reward), {"env_info": dict(result.info)}


def _final_cut(s: Any) -> None:
    """``response_ids[: response_length]``: the arrays cut at prompt + response_length (a reply cut in the middle
    is named by the checks, ``response_cut_trained``)."""
    b = s._ctx.builder
    limit = s.verl.prompt_len + s.config.response_length
    if len(b) <= limit:
        return
    del b.ids[limit:], b.mask[limit:], b.logprobs[limit:], b.versions[limit:]
    b.segments[:] = _segments_within(b.segments, limit)
    for i, turn in enumerate(s.turns):  # earlier turns keep their segments: the cut reaches them too
        if turn.segments and turn.segments[-1].end > limit:
            s.turns[i] = replace(turn, segments=tuple(_segments_within(turn.segments, limit)))


def _segments_within(segments: Any, limit: int) -> list[Any]:
    """``segments`` that start before ``limit``, the last cut to end there."""
    kept = []
    for seg in segments:
        if seg.start >= limit:
            continue
        if seg.end > limit:
            seg = type(seg)(seg.start, limit, seg.kind, seg.turn, seg.trainable)
        kept.append(seg)
    return kept
