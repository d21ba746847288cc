"""The one agent loop, traced turn by turn.

``Stepper`` runs an episode one turn at a time (``generate`` asks the backend,
``commit`` executes a generation, possibly edited, in the env), so the same
code serves batch runs and stepping by hand. ``run_episode`` drives a Stepper
to the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
import traceback
import typing
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backends.base import PROMPT_AS_TEXT, Backend, GenerationRequest, SamplingParams
from ..envs.base import Env, StepResult
from ..envs.outcomes import explain
from ..errors import BackendError, RollscopeError
from ..presets import LoopConfig
from ..records import marks, numbers, textsafe
from ..records.episode import (
    Action,
    Episode,
    Finding,
    FindingKind,
    Generation,
    Message,
    Segment,
    Severity,
    Status,
    TokenArrays,
    ToolCall,
    Turn,
    with_generations,
)
from ..records.outcome import Outcome
from ..records.provenance import BackendInfo, EnvInfo, RunConfig
from ..tokens import chat, modes
from ..tokens.tokenizer import Tokenizer
from ..tokens.toolcalls import ParseResult
from . import rewards
from . import verl as verl_loop
from .turn import ENV_FAILURES, actions_for, conversation_observation, execute, parse_reply

TurnHook = Callable[[Episode, Turn], None]


def new_id() -> str:
    return uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class Pending:
    """A generation asked for but not yet committed."""

    turn: int
    prompt_text: str | None
    prompt_len: int
    generation: Generation
    generate_s: float
    found: tuple[Finding, ...] = ()
    """What asking for it showed (a server that took the prompt's ids only as text)."""


class Stepper:
    """One episode, advanced a turn at a time.

    A turn's order of events is the same in every loop reproduced: the
    reply is parsed; a reply that ends the episode (a server abort, a parse
    error under ``on_parse_error=abort``) is kept in the conversation only
    when ``keep_failed_turn`` says so; otherwise its actions go to the env;
    the env's answer (or the loop's own feedback) is appended unless the
    episode ended there and ``observe_last`` is off. What tokens each step
    adds is the token mode's business (``tokens.modes``).
    """

    def __init__(
        self,
        env: Env,
        backend: Backend,
        tokenizer: Tokenizer,
        config: LoopConfig,
        task_id: str,
        *,
        sampling: SamplingParams | None = None,
        preset: str = "",
        episode_id: str | None = None,
        run_id: str | None = None,
        group_id: str | None = None,
        sample_index: int = 0,
        tokenizer_name: str = "",
        on_turn: TurnHook | None = None,
        parent_id: str | None = None,
        fork_turn: int | None = None,
    ) -> None:
        self.env = env
        self.backend = backend
        self.tok = tokenizer
        self.config = config
        self.mode = modes.mode_for(config)
        self.task_id = task_id
        self.sampling = sampling or SamplingParams()
        self.on_turn = on_turn
        self.tools = tuple(env.tools)
        self._ctx = modes.Context(tokenizer, self.tools, config, chat.TokenBuilder(), [])
        self.turns: list[Turn] = []
        self.status = Status.RUNNING
        self.reason = ""
        self.outcome: Outcome | None = None
        self.findings: list[Finding] = []
        self.pending: Pending | None = None
        self.verl: verl_loop.VerlState | None = None  # token_mode=verl: verl's AgentData counters
        self.episode = Episode(
            id=episode_id or new_id(),
            env=env.name,
            task_id=task_id,
            run_id=run_id,
            group_id=group_id,
            sample_index=sample_index,
            preset=preset,
            config=RunConfig(loop=config, sampling=self.sampling, env=EnvInfo.of(env.describe())),
            backend=BackendInfo.of(backend.describe()),
            tokenizer=tokenizer_name or str(getattr(tokenizer, "name_or_path", "")),
            template_hash=chat.template_hash(tokenizer),
            tools=self.tools,
            created_at=time.time(),
            parent_id=parent_id,
            fork_turn=fork_turn,
        )

    # -- lifecycle -------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.status is not Status.RUNNING

    @property
    def messages(self) -> tuple[Message, ...]:
        """The conversation so far."""
        return tuple(self._ctx.messages)

    @property
    def token_ids(self) -> list[int]:
        """The episode's token ids so far (a copy)."""
        return list(self._ctx.builder.ids)

    def start(self) -> Episode:
        """Reset the env and lay down the first prompt's tokens."""
        if self.config.token_mode == "verl":
            verl_loop.start(self)
            return self.snapshot()
        system = self.env.system_prompt(self.task_id)
        first = self.env.reset(self.task_id)
        self._ctx.messages[:] = ([Message("system", system)] if system else []) + list(first)
        self.mode.start(self._ctx)
        self.episode = self.episode.evolve(prompt_len=len(self._ctx.builder))
        return self.snapshot()

    async def generate(self, on_progress: Callable[[int, str], None] | None = None,
                       on_prefill: Callable[[int, int, int], None] | None = None) -> Generation:
        """Ask the backend for the next assistant turn; nothing is committed.

        ``on_progress`` is told (tokens so far, text so far) as the reply arrives, by a backend that streams it;
        ``on_prefill`` (prompt tokens read, of how many, of them cached) as it reads the prompt, before that.
        """
        if self.done:
            raise RollscopeError(f"episode already ended ({self.status})")
        t = len(self.turns)
        prompt_text, prompt_ids = self.mode.request(self._ctx)
        sampling = self.sampling
        if sampling.seed is not None:
            # A new draw each turn; the same episode seed still replays the same episode.
            sampling = dataclasses.replace(sampling, seed=sampling.seed + t)
        if self.config.token_mode == "verl" and verl_loop.budget(self) < sampling.max_new_tokens:
            sampling = dataclasses.replace(sampling, max_new_tokens=max(1, verl_loop.budget(self)))
        request = GenerationRequest(
            prompt_text=prompt_text,
            prompt_ids=prompt_ids,
            sampling=sampling,
            messages=self.messages,
            tools=self.tools,
            task_id=self.task_id,
            turn=t,
            sample_index=self.episode.sample_index,
            on_progress=on_progress,
            on_prefill=on_prefill,
        )
        t0 = time.perf_counter()
        gen = await self.backend.generate(request)
        # What a backend learns about its server (a field it refuses) shows from this turn on.
        info = BackendInfo.of(self.backend.describe())
        if info != self.episode.backend:
            self.episode = self.episode.evolve(backend=info)
        found: tuple[Finding, ...] = ()
        as_text = info.settings.get(PROMPT_AS_TEXT) if info is not None else None
        if prompt_ids is not None and as_text:
            found = (Finding(
                "ids_reencoded", Severity.WARNING,
                f"the server takes no token ids ({as_text}): turn {t}'s prompt was sent as text and "
                "tokenized again by the server, so what the model saw need not be these ids",
                turn=t, token_start=0, token_end=len(prompt_ids), evidence={"what": "prompt"}),)
        self.pending = Pending(t, prompt_text, len(self._ctx.builder), gen, time.perf_counter() - t0, found)
        return gen

    def backend_failed(self, error: BackendError) -> Episode:
        """End the episode because the backend could not answer."""
        kind = typing.cast(FindingKind, error.kind)
        message = textsafe.clean_text(str(error))  # a server's error page may hold anything
        self.findings.append(Finding(kind, Severity.ERROR, message, turn=len(self.turns)))
        return self._end(Status.ABORTED, f"backend error: {message}")

    def edited(self, text: str) -> Generation:
        """A generation written or edited by a person: re-encoded, no logprobs."""
        ids = chat.encode(self.tok, text)
        eot = chat.end_of_turn_texts(self.tok)
        if eot and not text.endswith(eot[0]):
            ids.append(self.tok.convert_tokens_to_ids(eot[0]))
        return Generation(
            text=chat.decode(self.tok, ids), token_ids=tuple(ids), logprobs=None, finish_reason="stop", model="manual"
        )

    def content_of(self, generation: Generation) -> str:
        """The assistant message a generation becomes (its text without the end-of-turn token)."""
        return self.mode.content(self._ctx, generation)

    async def commit(self, generation: Generation | None = None) -> Turn:
        """Execute a generation (the pending one by default) in the env.

        Async because an env may be: one whose user is played by a model
        answers ``step`` with an awaitable.
        """
        if self.done:
            raise RollscopeError(f"episode already ended ({self.status})")
        t = len(self.turns)
        if generation is None:
            if self.pending is None:
                raise RollscopeError("nothing to commit: call generate() first or pass a generation")
            generation = self.pending.generation
        if self.config.token_mode == "verl":
            return await verl_loop.commit(self, generation)
        pend = self.pending if self.pending is not None and self.pending.turn == t else None
        prompt_text = pend.prompt_text if pend else self.mode.request(self._ctx)[0]
        prompt_len = len(self._ctx.builder)
        self.pending = None
        timings: dict[str, float] = {"generate_s": pend.generate_s if pend else 0.0}
        findings: list[Finding] = list(pend.found) if pend else []
        seg_start = len(self._ctx.builder.segments)
        cfg = self.config
        generation = _safe_generation(generation, t, findings)
        generation, not_finite = _finite_logprobs(generation)

        content = self.mode.content(self._ctx, generation)
        parsed = ParseResult((), None, content)
        end: tuple[Status, str] | None = None
        if generation.finish_reason == "abort":
            detail = f": {generation.finish_detail}" if generation.finish_detail else ""
            end = (Status.ABORTED, f"generation aborted by the backend{detail}")
        else:
            parsed = parse_reply(content, cfg, self.tools)
            if parsed.error is not None and cfg.on_parse_error == "abort":
                end = (Status.ABORTED, f"tool call parse error: {parsed.error}")

        calls: tuple[ToolCall, ...] = parsed.calls
        action: Action | None = None
        result: StepResult | None = None
        observation: tuple[Message, ...] = ()
        kept = end is None or cfg.keep_failed_turn
        observing = False
        try:
            if kept:
                self._ctx.messages.append(Message("assistant", content))
                self.mode.assistant(self._ctx, t, generation, findings)
            if not_finite:
                findings.extend(_logprob_findings(self._ctx.builder.segments[seg_start:] if kept else [], t, not_finite))
            if generation.finish_reason == "length":
                findings.append(Finding(
                    "truncated_turn", Severity.WARNING,
                    f"generation stopped on the length limit after {len(generation.token_ids)} tokens",
                    turn=t, token_start=prompt_len, token_end=max(len(self._ctx.builder), prompt_len + 1)))
            if parsed.error is not None:
                findings.append(Finding("tool_call_parse_error", Severity.ERROR, parsed.error, turn=t,
                                        token_start=prompt_len, token_end=max(len(self._ctx.builder), prompt_len + 1),
                                        evidence={} if kept else {"tokens": "not in the token array (the loop drops it)"}))
            for note in parsed.dropped:
                findings.append(Finding("tool_call_dropped", Severity.WARNING, note, turn=t, token_start=prompt_len,
                                        token_end=max(len(self._ctx.builder), prompt_len + 1)))
            if end is None and parsed.error is not None:
                result = StepResult((Message("user", f"Error: could not parse your tool call: {parsed.error}"),),
                                    0.0, False, {"parse_error": parsed.error})
            elif end is None:
                respond_text = parsed.content if cfg.tool_parser == "sglang-qwen25" else content
                if not self.tools:
                    respond_text = self.mode.answer(self._ctx, generation, content, prompt_len)
                actions = actions_for(calls, respond_text)
                action = actions[0]
                t_env = time.perf_counter()
                try:
                    result = await execute(self.env, actions)
                except ENV_FAILURES as e:
                    findings.append(Finding("env_error", Severity.ERROR, f"{type(e).__name__}: {e}", turn=t,
                                            evidence={"traceback": traceback.format_exc()}))
                    end = (Status.ABORTED, f"env error: {type(e).__name__}: {e}")
                timings["env_s"] = time.perf_counter() - t_env

            if result is not None:
                result = _safe_result(result, t, findings)
                bad_reward = None if numbers.is_finite(result.reward) else result.reward
                if bad_reward is not None:
                    result = dataclasses.replace(result, reward=0.0)
                observation = conversation_observation(cfg, result) if parsed.error is None else result.observation
                info = result.info
                if result.done and cfg.stop_on_done:
                    end = (Status.COMPLETED, "env done")
                elif cfg.stop_on_success and info.get("success"):
                    end = (Status.COMPLETED, "success")
                elif t + 1 >= cfg.max_turns:
                    status = Status(cfg.turn_limit_status)
                    end = (status, f"reached max_turns={cfg.max_turns}")
                    if status is Status.TRUNCATED:
                        findings.append(Finding("truncated_episode", Severity.WARNING, end[1], turn=t))
                if bad_reward is not None:
                    shown = numbers.spell(bad_reward) if isinstance(bad_reward, float) else repr(bad_reward)[:40]
                    findings.append(Finding(
                        "env_error", Severity.ERROR, f"the env returned reward {shown}, not a finite number: the "
                        "episode ends here and the turn's reward is 0; make the env's reward a finite number",
                        turn=t, evidence={"reward": shown}))
                    end = (Status.ABORTED, f"env error: reward {shown} is not a finite number")
                if end is None or cfg.observe_last:
                    observing = True
                    self.mode.observation(self._ctx, t, generation, observation, findings)
                    self._ctx.messages.extend(observation)
        except modes.Halt as h:
            findings.append(h.finding)
            end = (Status.ABORTED, h.reason)
            if observing:  # the message the mode refused is part of the conversation the env produced
                self._ctx.messages.extend(observation)

        timings["total_s"] = timings["generate_s"] + timings.get("env_s", 0.0)
        calls, action, info = _safe_calls(calls, action, dict(result.info) if result else {}, t, findings)
        turn = Turn(
            index=t,
            prompt_text=prompt_text,
            prompt_len=prompt_len,
            generation=generation,
            tool_calls=calls,
            parse_error=parsed.error,
            action=action,
            observation=observation,
            reward=result.reward if result else 0.0,
            done=result.done if result else False,
            info=info,
            segments=tuple(self._ctx.builder.segments[seg_start:]),
            timings=timings,
            findings=tuple(_safe_finding(f) for f in findings),
        )
        self.turns.append(turn)
        if end is not None:
            self._end(*end)
        if self.on_turn is not None:
            self.on_turn(self.snapshot(), turn)
        return turn

    # -- the record ------------------------------------------------------

    def _end(self, status: Status, reason: str) -> Episode:
        self.status = status
        self.reason = textsafe.clean_text(reason)
        ep = self.snapshot()
        self.outcome = explain(ep)  # why it earned its reward, from the env that scored it
        return ep.evolve(outcome=self.outcome)

    def fail(self, error: BaseException) -> Episode:
        """End the episode as ``failed`` because of a bug (ours or the env's), keeping the traceback."""
        self.findings.append(_safe_finding(Finding(
            "internal_error", Severity.ERROR, f"{type(error).__name__}: {error}", turn=len(self.turns),
            evidence={"traceback": "".join(traceback.format_exception(error))})))
        return self._end(Status.FAILED, f"{type(error).__name__}: {error}")

    def interrupt(self, reason: str) -> Episode:
        """Mark the episode ``interrupted`` (a cancelled batch, a process stopping)."""
        return self._end(Status.INTERRUPTED, reason)

    def snapshot(self) -> Episode:
        """The episode as it stands now (status ``running`` until it ends)."""
        b = self._ctx.builder
        shaped, returns, reward = rewards.episode_rewards(self.config, [t.reward for t in self.turns])
        return self.episode.evolve(
            status=self.status,
            reason=self.reason,
            reward=reward,
            turn_rewards=tuple(shaped),
            returns=tuple(returns),
            messages=self.messages,
            turns=tuple(self.turns),
            tokens=with_generations(TokenArrays(b.ids, b.mask, b.logprobs, b.versions), self.turns),
            segments=tuple(b.segments),
            findings=tuple(self.findings),
            outcome=self.outcome if self.status is not Status.RUNNING else None,
        )


def segments_of_turn(episode: Episode, turn: int) -> list[Segment]:
    return [s for s in episode.segments if s.turn == turn]


async def run_episode(
    env: Env,
    backend: Backend,
    tokenizer: Tokenizer,
    config: LoopConfig,
    task_id: str,
    **kwargs: Any,
) -> Episode:
    """Run one episode to its end. Backend failures end it as ``aborted``."""
    return await drive(Stepper(env, backend, tokenizer, config, task_id, **kwargs))


async def drive(stepper: Stepper) -> Episode:
    """Start a stepper and advance it until the episode ends."""
    stepper.start()
    while not stepper.done:
        # Yield once a turn: a backend that never suspends (the scripted
        # policy) would otherwise run a whole batch in one pass of the event
        # loop, and a cancel (Ctrl-C, the dashboard's Cancel) would wait for it.
        await asyncio.sleep(0)
        try:
            await stepper.generate()
        except BackendError as e:
            return stepper.backend_failed(e)
        await stepper.commit()
    return stepper.snapshot()


def _replaced(where: str, n: int, turn: int) -> Finding:
    return Finding("text_replaced", Severity.WARNING,
                   f"the {where} held {n} character{'s' if n != 1 else ''} UTF-8 cannot hold (lone surrogates): "
                   "replaced with U+FFFD", turn=turn, evidence={"where": where, "replaced": n})


def _safe_generation(gen: Generation, turn: int, findings: list[Finding]) -> Generation:
    """The generation with text nobody can store made safe; a finding says where."""
    (text, detail, model), n = textsafe.clean_value([gen.text, gen.finish_detail, gen.model])
    if not n:
        return gen
    findings.append(_replaced("generation", n, turn))
    return dataclasses.replace(gen, text=text, finish_detail=detail, model=model)


def _finite_logprobs(gen: Generation) -> tuple[Generation, dict[int, float]]:
    """The generation with every logprob that is not a finite number (a server's NaN, null or Infinity) made
    unknown (NaN), and those (index: value) to mark."""
    if not gen.logprobs or all(math.isfinite(x) for x in gen.logprobs):
        return gen, {}
    bad = {i: x for i, x in enumerate(gen.logprobs) if not math.isfinite(x)}
    return dataclasses.replace(gen, logprobs=tuple(math.nan if i in bad else x for i, x in enumerate(gen.logprobs))), bad


def _logprob_findings(segments: Any, turn: int, bad: dict[int, float]) -> list[Finding]:
    """``logprob_not_finite`` on the tokens of the turn's reply that had them (its assistant segment)."""
    at = {pos: x for j, x in bad.items() if (pos := marks.generation_position(segments, turn, j)) is not None}
    found = marks.findings_for(at, turn_of=lambda _: turn, where=f"the backend's answer for turn {turn}", values=at)
    for j in sorted(set(bad) - {j for j in bad if marks.generation_position(segments, turn, j) is not None}):
        found.append(Finding(
            "logprob_not_finite", Severity.WARNING, f"the backend gave generated token {j} of turn {turn} the logprob "
            f"{numbers.spell(bad[j])}, not a finite number: kept as unknown", turn=turn,
            evidence={"values": [numbers.spell(bad[j])], "generation_index": j}))
    return found


def _safe_finding(f: Finding) -> Finding:
    """A finding whose message or evidence quotes outside text (an env's exception) made safe to store."""
    (message, evidence), n = textsafe.clean_value([f.message, f.evidence])
    return dataclasses.replace(f, message=message, evidence=evidence) if n else f


def _safe_calls(calls: tuple[ToolCall, ...], action: Action | None, info: dict[str, Any], turn: int,
                findings: list[Finding]) -> tuple[tuple[ToolCall, ...], Action | None, dict[str, Any]]:
    """The parsed calls, the action and the env's info as the record keeps them: the env got them as they
    were, but a model can write ``"\\ud800"`` inside its JSON, which parses to text nobody can store."""
    n = 0
    out = []
    for c in calls:
        (name, args), k = textsafe.clean_value([c.name, c.arguments])
        n += k
        out.append(dataclasses.replace(c, name=name, arguments=args) if k else c)
    if action is not None:
        (name, args), k = textsafe.clean_value([action.name, action.arguments])
        text, m = textsafe.clean(action.text)
        n += m + (0 if calls else k)  # an action made from a call is counted with the call
        if k or m:
            action = dataclasses.replace(action, name=name, arguments=args, text=text)
    if n:
        findings.append(_replaced("tool call", n, turn))
    info, k = textsafe.clean_value(info)
    if k:
        findings.append(_replaced("env's info", k, turn))
    return tuple(out), action, info


def _safe_result(result: StepResult, turn: int, findings: list[Finding]) -> StepResult:
    """The env's answer with text nobody can store made safe; a finding says where."""
    n = 0
    msgs = []
    for m in result.observation:
        content, k = textsafe.clean(m.content)
        n += k
        msgs.append(dataclasses.replace(m, content=content) if k else m)
    if not n:
        return result
    findings.append(_replaced("env's observation", n, turn))
    return dataclasses.replace(result, observation=tuple(msgs))
