"""The one agent loop, traced turn by turn.

``Stepper`` runs an episode one turn at a time (``generate`` asks the backend,
``commit`` executes a generation, possibly edited, in the env), so the same
code serves batch runs and stepping by hand. ``run_episode`` drives a Stepper
to the end.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import chat, rewards
from .backends.base import Backend, GenerationRequest, SamplingParams
from .envs.base import Env, StepResult
from .errors import BackendError, RollscopeError
from .presets import ONE_CALL, ONE_OR_MORE, LoopConfig
from .records import (
    RESPOND,
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
from .toolcalls import parse as parse_tool_calls

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


class Stepper:
    """One episode, advanced a turn at a time."""

    def __init__(
        self,
        env: Env,
        backend: Backend,
        tokenizer: Any,
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
    ) -> None:
        self.env = env
        self.backend = backend
        self.tok = tokenizer
        self.config = config
        self.task_id = task_id
        self.sampling = sampling or SamplingParams()
        self.on_turn = on_turn
        self.tools = tuple(env.tools)
        self.messages: list[Message] = []
        self.builder = chat.TokenBuilder()
        self.turns: list[Turn] = []
        self.status = Status.RUNNING
        self.reason = ""
        self.findings: list[Finding] = []
        self.pending: Pending | None = None
        self._eot_ids = chat.end_of_turn_ids(tokenizer)
        self.episode = Episode(
            id=episode_id or new_id(),
            env=env.name,
            task_id=task_id,
            run_id=run_id,
            group_id=group_id,
            sample_index=sample_index,
            preset=preset,
            config=config.to_dict() | {"sampling": self.sampling.to_dict(), "env_info": env.describe()},
            backend=backend.describe(),
            tokenizer=tokenizer_name or str(getattr(tokenizer, "name_or_path", "")),
            template_hash=chat.template_hash(tokenizer),
            tools=self.tools,
            created_at=time.time(),
        )

    # -- lifecycle -------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.status is not Status.RUNNING

    def start(self) -> Episode:
        """Reset the env and lay down the first prompt's tokens."""
        system = self.env.system_prompt(self.task_id)
        first = self.env.reset(self.task_id)
        self.messages = ([Message("system", system)] if system else []) + list(first)
        prompt = self._prompt_text()
        self.builder.add(chat.encode(self.tok, prompt), "prompt", 0, False)
        self.episode = self.episode.evolve(prompt_len=len(self.builder))
        return self.snapshot()

    def _prompt_text(self) -> str:
        text = chat.render(self.tok, self.messages, self.tools, add_generation_prompt=True)
        if self.config.one_call_instruction:
            text = text.replace(ONE_OR_MORE, ONE_CALL)
        return text

    async def generate(self) -> Generation:
        """Ask the backend for the next assistant turn; nothing is committed."""
        if self.done:
            raise RollscopeError(f"episode already ended ({self.status})")
        t = len(self.turns)
        retok = self.config.token_mode == "retokenize"
        prompt_text = self._prompt_text() if retok else None
        sampling = self.sampling
        if sampling.seed is not None:
            # A new draw each turn; the same episode seed still replays the same episode.
            sampling = dataclasses.replace(sampling, seed=sampling.seed + t)
        request = GenerationRequest(
            prompt_text=prompt_text,
            prompt_ids=None if retok else tuple(self.builder.ids),
            sampling=sampling,
            messages=tuple(self.messages),
            tools=self.tools,
            task_id=self.task_id,
            turn=t,
            sample_index=self.episode.sample_index,
        )
        t0 = time.perf_counter()
        gen = await self.backend.generate(request)
        self.pending = Pending(t, prompt_text, len(self.builder), gen, time.perf_counter() - t0)
        return gen

    def backend_failed(self, error: BackendError) -> Episode:
        """End the episode because the backend could not answer."""
        self.findings.append(Finding("backend_error", Severity.ERROR, str(error), turn=len(self.turns)))
        return self._end(Status.ABORTED, f"backend error: {error}")

    def edited(self, text: str) -> Generation:
        """A generation written or edited by a person: re-encoded, no logprobs."""
        ids = chat.encode(self.tok, text)
        eot = chat.end_of_turn_texts(self.tok)
        if eot and not text.endswith(eot[0]):
            ids.append(self.tok.convert_tokens_to_ids(eot[0]))
        return Generation(
            text=chat.decode(self.tok, ids), token_ids=tuple(ids), logprobs=None, finish_reason="stop", model="manual"
        )

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
        pend = self.pending if self.pending is not None and self.pending.turn == t else None
        prompt_text = pend.prompt_text if pend else (self._prompt_text() if self.config.token_mode == "retokenize" else None)
        prompt_len = len(self.builder)
        self.pending = None
        timings: dict[str, float] = {"generate_s": pend.generate_s if pend else 0.0}
        findings: list[Finding] = []

        content = chat.strip_end_of_turn(self.tok, generation.text)
        assistant = Message("assistant", content)
        seg_start = len(self.builder.segments)
        self._add_assistant_tokens(t, assistant, generation, findings)
        self.messages.append(assistant)

        if generation.finish_reason == "length":
            findings.append(
                Finding(
                    "truncated_turn",
                    Severity.WARNING,
                    f"generation stopped on the length limit after {len(generation.token_ids)} tokens",
                    turn=t,
                    token_start=prompt_len,
                    token_end=len(self.builder),
                )
            )

        calls: tuple[ToolCall, ...] = ()
        parse_error: str | None = None
        action: Action | None = None
        result: StepResult | None = None
        end: tuple[Status, str] | None = None

        if generation.finish_reason == "abort":
            detail = f": {generation.finish_detail}" if generation.finish_detail else ""
            end = (Status.ABORTED, f"generation aborted by the backend{detail}")
        else:
            calls, parse_error = self._parse(content)
            if parse_error is not None:
                findings.append(Finding("tool_call_parse_error", Severity.ERROR, parse_error, turn=t,
                                        token_start=prompt_len, token_end=len(self.builder)))
                if self.config.on_parse_error == "abort":
                    end = (Status.ABORTED, f"tool call parse error: {parse_error}")
                else:
                    result = StepResult(self._error_feedback(parse_error), 0.0, False, {"parse_error": parse_error})
            if end is None and result is None:
                t_env = time.perf_counter()
                action, result, env_exc = await self._step_env(content, calls)
                timings["env_s"] = time.perf_counter() - t_env
                if env_exc is not None:
                    findings.append(Finding("env_error", Severity.ERROR, env_exc[0], turn=t,
                                            evidence={"traceback": env_exc[1]}))
                    end = (Status.ABORTED, f"env error: {env_exc[0]}")

        observation = result.observation if result else ()
        reward = result.reward if result else 0.0
        env_done = result.done if result else False
        info = dict(result.info) if result else {}

        if end is None:
            if env_done and self.config.stop_on_done:
                end = (Status.COMPLETED, "env done")
            elif self.config.stop_on_success and info.get("success"):
                end = (Status.COMPLETED, "success")
            elif t + 1 >= self.config.max_turns:
                status = Status(self.config.turn_limit_status)
                end = (status, f"reached max_turns={self.config.max_turns}")
                if status is Status.TRUNCATED:
                    findings.append(Finding("truncated_episode", Severity.WARNING, end[1], turn=t))
            else:
                self._add_observation_tokens(t, generation, observation, findings)
                self.messages.extend(observation)

        timings["total_s"] = timings["generate_s"] + timings.get("env_s", 0.0)
        turn = Turn(
            index=t,
            prompt_text=prompt_text,
            prompt_len=prompt_len,
            generation=generation,
            tool_calls=calls,
            parse_error=parse_error,
            action=action,
            observation=tuple(observation),
            reward=reward,
            done=env_done,
            info=info,
            segments=tuple(self.builder.segments[seg_start:]),
            timings=timings,
            findings=tuple(findings),
        )
        self.turns.append(turn)
        if end is not None:
            self._end(*end)
        if self.on_turn is not None:
            self.on_turn(self.snapshot(), turn)
        return turn

    # -- tokens ----------------------------------------------------------

    def _add_assistant_tokens(self, t: int, assistant: Message, gen: Generation, findings: list[Finding]) -> None:
        versions = None
        if gen.weight_version is not None:
            versions = [gen.weight_version] * len(gen.token_ids)
        if self.config.token_mode == "tito":
            ids = list(gen.token_ids) or chat.encode(self.tok, gen.text)
            lps = list(gen.logprobs) if gen.logprobs is not None and len(gen.logprobs) == len(ids) else None
            self.builder.add(ids, "assistant", t, True, lps, versions if versions and len(versions) == len(ids) else None)
            return
        before = self.messages
        delta = chat.assistant_delta(self.tok, before, assistant, self.tools)
        ids = chat.encode(self.tok, delta.text)
        if not delta.stable:
            findings.append(self._unstable(t, "assistant", delta, len(ids)))
        # Re-encoded ids carry the rollout's logprobs only where they are the
        # very ids the model generated; past the first difference they are unknown.
        lps: list[float] = [math.nan] * len(ids)
        ver: list[int] = [-1] * len(ids)
        if gen.logprobs is not None:
            for i, (a, b) in enumerate(zip(ids, gen.token_ids)):
                if a != b:
                    break
                lps[i] = gen.logprobs[i]
                ver[i] = gen.weight_version if gen.weight_version is not None else -1
        self.builder.add(ids, "assistant", t, True, lps, ver)

    def _add_observation_tokens(self, t: int, gen: Generation, obs: tuple[Message, ...], findings: list[Finding]) -> None:
        kind = obs[0].role if obs else "user"
        if self.config.token_mode == "tito":
            tail = chat.tail_after_generation(self.tok, chat.decode(self.tok, gen.token_ids) if gen.token_ids else gen.text, self.tools)
            self.builder.add(chat.encode(self.tok, tail), "tail", t, False)
            msgs_text, gp_text = chat.isolated_messages_delta(self.tok, obs, self.tools)
            self.builder.add(chat.encode(self.tok, msgs_text), kind, t, False)
            if self.config.gen_prompt_tokens:
                self.builder.add(chat.encode(self.tok, gp_text), "gen_prompt", t + 1, False)
            return
        delta = chat.messages_delta(self.tok, self.messages, obs, self.tools)
        ids = chat.encode(self.tok, delta.text)
        if not delta.stable:
            findings.append(self._unstable(t, kind, delta, len(ids)))
        self.builder.add(ids, kind, t, False)
        if self.config.gen_prompt_tokens:
            gp = chat.generation_prompt_delta(self.tok, [*self.messages, *obs], self.tools)
            self.builder.add(chat.encode(self.tok, gp.text), "gen_prompt", t + 1, False)

    def _unstable(self, t: int, what: str, delta: chat.TextDelta, n_ids: int) -> Finding:
        return Finding(
            "template_not_prefix_stable",
            Severity.ERROR,
            f"rendering the {what} message of turn {t} rewrote earlier text at character {delta.diff_at}; "
            "the sliced delta (and its loss mask) is wrong",
            turn=t,
            # When the slice came out empty, point at the token where the lost text should have been.
            token_start=len(self.builder),
            token_end=len(self.builder) + max(n_ids, 1),
            evidence=delta.evidence(),
        )

    # -- parse and env ---------------------------------------------------

    def _parse(self, content: str) -> tuple[tuple[ToolCall, ...], str | None]:
        if not self.tools:
            return (), None
        res = parse_tool_calls(content, self.config.tool_parser)
        if res.error is not None:
            return (), res.error
        calls = res.calls
        if self.config.tool_calls_per_turn:
            calls = calls[: self.config.tool_calls_per_turn]
        return calls, None

    def _error_feedback(self, error: str) -> tuple[Message, ...]:
        return (Message("user", f"Error: could not parse your tool call: {error}"),)

    async def _step_env(
        self, content: str, calls: tuple[ToolCall, ...]
    ) -> tuple[Action | None, StepResult | None, tuple[str, str] | None]:
        actions = [Action(c.name, c.arguments) for c in calls] or [Action(RESPOND, {"content": content}, content)]
        observations: list[Message] = []
        reward, done, info = 0.0, False, {}
        for action in actions:
            try:
                res = self.env.step(action)
                if inspect.isawaitable(res):
                    res = await res
            except Exception as e:  # the env is third-party code; its failure ends the episode, recorded
                return actions[0], None, (f"{type(e).__name__}: {e}", traceback.format_exc())
            observations.extend(res.observation)
            reward, done, info = res.reward, res.done, {**info, **res.info}
            if done:
                break
        return actions[0], StepResult(tuple(observations), reward, done, info), None

    # -- the record ------------------------------------------------------

    def _end(self, status: Status, reason: str) -> Episode:
        self.status = status
        self.reason = reason
        return self.snapshot()

    def snapshot(self) -> Episode:
        """The episode as it stands now (status ``running`` until it ends)."""
        raw = [t.reward for t in self.turns]
        cfg = self.config
        shaped = [rewards.areal_shape(r, cfg.reward_scale, cfg.reward_bias) for r in raw] if cfg.shape_rewards else raw
        returns = rewards.discounted_returns(shaped, cfg.turn_discount)
        if cfg.shape_rewards:
            reward = returns[0] if returns else 0.0
        else:
            reward = raw[-1] if raw else 0.0
        b = self.builder
        return self.episode.evolve(
            status=self.status,
            reason=self.reason,
            reward=reward,
            turn_rewards=tuple(shaped),
            returns=tuple(returns),
            messages=tuple(self.messages),
            turns=tuple(self.turns),
            tokens=TokenArrays(b.ids, b.mask, b.logprobs, b.versions),
            segments=tuple(b.segments),
            findings=tuple(self.findings),
        )


def segments_of_turn(episode: Episode, turn: int) -> list[Segment]:
    return [s for s in episode.segments if s.turn == turn]


async def run_episode(
    env: Env,
    backend: Backend,
    tokenizer: Any,
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
