"""Stepping by hand and forking: a Stepper a person drives, fresh or resumed from a stored episode.

``HandStepper`` wraps the loop's ``Stepper`` with what a person needs:
``generate`` (nothing committed), ``preview`` of what a text would do,
``commit`` of the generated or edited text, optionally with the user's
reply written by the person, and ``to_save``, the episode as it should be
stored (checks run, fork provenance kept).

``fork(parent, k, ...)`` resets the env the parent ran in and re-executes
the parent's stored generations for turns ``0..k-1`` through the very same
loop, comparing every observation, reward and done flag (and the token
prefix) with what was stored; then the person continues from turn ``k``.
Where the replay differs, the fork says so (``ForkReport``) and the saved
fork carries the divergences as findings: a continuation from a state the
parent never was in is not the experiment the researcher meant.

Who answers as the user (the env's simulated user, a model, a person, the
record) lives in ``engine.loop.users``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..backends.base import Backend, SamplingParams
from ..checks import CheckOptions, with_checks
from ..envs.base import Env, StepResult
from ..errors import ConfigError, RollscopeError
from ..presets import PRESETS, LoopConfig, default_preset
from ..records.episode import Episode, Finding, Generation, Message, Severity, Status, ToolCall, Turn
from ..tokens import chat
from ..tokens.tokenizer import Tokenizer
from .replay import env_for
from .stepper import Stepper
from .turn import compare_result, parse_reply
from .users import (
    FORK_USERS,
    STOP,
    USER_MODES,
    ForkUser,
    HumanUser,
    can_play_user,
    check_new_user,
    model_user,
    play_user,
)
from .verdicts import TurnVerdict

# -- what a text would do ------------------------------------------------------


@dataclass(frozen=True)
class ActionPreview:
    """What committing a text would do, worked out without touching the env."""

    content: str  # the text without the end-of-turn marker
    calls: tuple[ToolCall, ...] = ()
    parse_error: str | None = None

    @property
    def respond(self) -> bool:
        """True when the text goes to the user (no tool call, no parse error)."""
        return not self.calls and self.parse_error is None


def preview_action(tokenizer: Tokenizer, config: LoopConfig, tools: tuple[dict[str, Any], ...], text: str) -> ActionPreview:
    """Parse a text the way the loop will when it is committed (same parser, same call limit)."""
    content = chat.strip_end_of_turn(tokenizer, text)
    res = parse_reply(content, config, tools)
    return ActionPreview(content, tuple(res.calls) if res.error is None else (), res.error)


# -- the fork's verdict ----------------------------------------------------------


@dataclass(frozen=True)
class ForkReport:
    """How replaying the parent's first ``turn`` turns went."""

    parent_id: str
    turn: int
    replayed: int = 0
    divergences: tuple[TurnVerdict, ...] = ()
    notes: tuple[str, ...] = ()
    ended: str = ""  # why the episode ended during the replay ("" when it can go on)

    @property
    def ok(self) -> bool:
        return not self.divergences and not self.ended

    def summary(self) -> str:
        head = f"forked {self.parent_id} at turn {self.turn}: replayed {self.replayed} turn{'s' if self.replayed != 1 else ''}"
        if not self.divergences:
            head += ", every observation, reward and done flag as stored"
        else:
            first = self.divergences[0]
            head += (f"; the replay DIFFERS from the stored episode at {_where(first)} ({first.field}"
                     f"{', and ' + str(len(self.divergences) - 1) + ' more' if len(self.divergences) > 1 else ''})")
        if self.ended:
            head += f"; the episode ended during the replay ({self.ended})"
        return head

    def findings(self) -> tuple[Finding, ...]:
        """The divergences as findings for the saved fork."""
        return tuple(
            Finding(
                "fork_replay_diverged", Severity.WARNING,
                f"replaying parent {self.parent_id} for this fork: {v.field} differs at {_where(v)}"
                + (f" ({v.note})" if v.note else ""),
                turn=v.turn if v.turn >= 0 else None,
                evidence={"stored": v.stored, "now": v.now},
            )
            for v in self.divergences
        )


def _where(v: TurnVerdict) -> str:
    if v.field == "tokens":
        return "the token prefix"
    return "the start" if v.turn < 0 else f"turn {v.turn}"


def _msgs(ms: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in ms]


def _opening(ep: Episode) -> tuple[str | None, list[Message]]:
    """(system prompt, first observation) of a stored episode: the messages before its first turn."""
    msgs = list(ep.messages)
    system = msgs[0].content if msgs and msgs[0].role == "system" else None
    first: list[Message] = []
    for m in msgs[1 if system is not None else 0:]:
        if m.role == "assistant":
            break
        first.append(m)
    return system, first


def _prefix_end(ep: Episode, turn: int) -> int:
    """Where turn ``turn``'s own tokens start in ``ep``: its assistant segment (or the end)."""
    starts = [s.start for s in ep.segments if s.turn >= turn and s.kind == "assistant"]
    return min(starts) if starts else len(ep.tokens)


# -- the hand-driven stepper -------------------------------------------------------


class HandStepper:
    """A ``Stepper`` driven by a person: generate, look, edit, commit, save.

    ``generate`` asks the backend and remembers the generation; ``commit``
    executes the text: the generation itself when the text is unchanged
    (its ids and logprobs kept), else the text as a person's
    (``Stepper.edited``: re-encoded, no logprobs).
    """

    def __init__(self, stepper: Stepper, tokenizer: Tokenizer, user: HumanUser | ForkUser | None = None,
                 report: ForkReport | None = None) -> None:
        self.stepper = stepper
        self.tok = tokenizer
        self.user = user
        self.report = report
        self.generated: Generation | None = None
        self.edited_turns: list[int] = []

    @property
    def done(self) -> bool:
        return self.stepper.done

    @property
    def turn(self) -> int:
        """The index of the next turn."""
        return len(self.stepper.turns)

    @property
    def plays_user(self) -> bool:
        """Whether a person may have to write the user's replies."""
        return self.user is not None and self.user.kind == "human"

    def episode(self) -> Episode:
        return self.stepper.snapshot()

    async def generate(self, on_progress: Callable[[int, str], None] | None = None,
                       on_prefill: Callable[[int, int, int], None] | None = None) -> Generation:
        """Ask the backend for the next assistant turn; nothing is committed. The hooks as in ``Stepper``."""
        self.generated = await self.stepper.generate(on_progress, on_prefill)
        return self.generated

    def text_of(self, generation: Generation) -> str:
        """The generation's text as a person edits it: without the end-of-turn marker."""
        return chat.strip_end_of_turn(self.tok, generation.text)

    def preview(self, text: str) -> ActionPreview:
        return preview_action(self.tok, self.stepper.config, self.stepper.tools, text)

    def needs_user_reply(self, text: str) -> bool:
        """True when committing ``text`` sends a message to a user the person plays (and no recorded reply
        of a fork answers it)."""
        if self.user is None or self.user.kind != "human":
            return False
        preview = self.preview(text)
        return preview.respond and self.user.needs_person(preview.content)

    def generation_for(self, text: str) -> Generation:
        """The generation to commit for ``text``: the generated one if unchanged, else the person's."""
        g = self.generated
        if g is not None and text == self.text_of(g):
            return g
        return self.stepper.edited(text)

    async def commit(self, text: str, user_reply: str | None = None) -> Turn:
        """Execute ``text`` in the env; ``user_reply`` is the user's answer when the person plays the user."""
        if self.done:
            raise RollscopeError(f"the episode already ended ({self.stepper.status}: {self.stepper.reason})")
        if not text.strip():
            raise ConfigError("nothing to commit: generate a turn or write one")
        if self.needs_user_reply(text):
            if not (user_reply or "").strip():
                raise ConfigError("this turn is a message to the user, and you play the user: write the user's reply")
            assert self.user is not None
            self.user.say(user_reply or "")
        generation = self.generation_for(text)
        if generation is not self.generated:
            self.edited_turns.append(self.turn)
        self.generated = None
        return await self.stepper.commit(generation)

    def to_save(self, tokenizer: Tokenizer | None = None) -> Episode:
        """The episode as it should be stored: checks run, fork provenance and divergences attached.

        An episode saved before it ended is stored ``interrupted`` (it is
        not running anywhere once this process stops), with a reason that
        says so; saving again after more turns replaces it.
        """
        ep = self.stepper.snapshot()
        if ep.status is Status.RUNNING:
            ep = ep.evolve(status=Status.INTERRUPTED, reason=f"stepped by hand; saved after {ep.n_turns} turns, before the end")
        ep = with_checks(ep, CheckOptions(tokenizer=tokenizer if tokenizer is not None else self.tok))
        extra: list[Finding] = list(self.report.findings()) if self.report is not None else []
        if self.edited_turns:
            turns = ", ".join(str(t) for t in self.edited_turns)
            extra.append(Finding("edited_by_hand", Severity.INFO,
                                 f"turn{'s' if len(self.edited_turns) > 1 else ''} {turns} written or edited by a person "
                                 "(re-encoded, no logprobs)", evidence={"turns": list(self.edited_turns)}))
        source = replace(ep.source, by_hand=True, user_by_hand=ep.source.user_by_hand or self.plays_user)
        return ep.evolve(findings=ep.findings + tuple(extra), source=source)


def start(
    env: Env,
    backend: Backend,
    tokenizer: Tokenizer,
    config: LoopConfig,
    task_id: str,
    *,
    user: str = "scripted",
    user_backend: Backend | None = None,
    user_tokenizer: Tokenizer | None = None,
    sampling: SamplingParams | None = None,
    preset: str = "",
    tokenizer_name: str = "",
) -> HandStepper:
    """A fresh conversation on ``task_id``, started (the first prompt laid down). ``user`` (``USER_MODES``)
    plays the env's user; a model user is ``user_backend``, rendering with ``user_tokenizer`` (by default
    the policy's tokenizer)."""
    check_new_user(user)
    if task_id not in env.tasks:
        raise ConfigError(f"the {env.name} env has no task {task_id!r}")
    human = play_user(env) if user == "human" else None
    if user == "llm":
        if not can_play_user(env) or not hasattr(env, "use_user"):
            raise ConfigError(f"the {env.name} env has no user a model can play (only envs with a simulated user do)")
        env.use_user(model_user(env.name, user_backend, user_tokenizer or tokenizer))
        env.user_kind = "llm"  # type: ignore[attr-defined]
    stepper = Stepper(env, backend, tokenizer, config, task_id, sampling=sampling, preset=preset,
                      tokenizer_name=tokenizer_name)
    stepper.start()
    return HandStepper(stepper, tokenizer, human)


def user_played_by(parent: Episode) -> str | None:
    """Who played the parent's user when it was not the env's scripted user: ``llm`` or ``human``."""
    user = parent.config.user
    return user if user in ("llm", "human") else None


def parent_env(parent: Episode, doing: str = "fork") -> tuple[Callable[[], Env], str | None]:
    """(constructor of the env the parent ran in, who played its user if not the scripted user); a ConfigError that
    says what cannot be done (``doing``) without it.

    A parent whose user was a model or a person, or one imported with an env it names, can still be
    forked: its recorded user replies are replayed, and the chosen user answers after.
    """
    played_by = user_played_by(parent)
    if played_by is not None or (not parent.source.live and parent.config.env is None):
        from ..envs import ENVS, env_factory

        if parent.env not in ENVS:
            raise ConfigError(f"cannot {doing} {parent.id}: it names env {parent.env!r}, which is not one of "
                              f"{', '.join(ENVS)} (import it with --env)")
        try:
            return env_factory(parent.env), played_by or "record"
        except RollscopeError as e:
            raise ConfigError(f"cannot rebuild env {parent.env!r} to {doing} {parent.id}: {e}") from None
    make = env_for(parent)
    if isinstance(make, str):
        raise ConfigError(f"cannot {doing} {parent.id}: {make}")
    return make, None


def parent_loop(parent: Episode) -> LoopConfig:
    """The loop config a fork of ``parent`` runs under (before knobs it is given): the parent's, or where its record
    holds none (an import), the loop's defaults with the turn limit of the preset its env is usually run with
    (``default_preset``), or the parent's own turns where it had more: the record does not say what limit it ran
    under, and the loop's default (5) would end a fork of a longer conversation early."""
    if parent.config.loop is not None:
        return parent.config.loop
    usual = PRESETS[default_preset(parent.env)].max_turns
    return LoopConfig(max_turns=max(usual, parent.n_turns))


def _record_text(message: Message, actions: tuple[Any, ...]) -> str:
    """An imported assistant message as the text a model would have written: its words, then its tool
    calls as ``<tool_call>`` blocks (the ones the record shows executed)."""
    blocks = [f'<tool_call>\n{json.dumps({"name": a.name, "arguments": a.arguments}, ensure_ascii=False)}\n</tool_call>'
              for a in actions if not a.is_respond]
    return "\n".join(([message.content] if message.content else []) + blocks)


def _install_user(env: Env, user: ForkUser) -> None:
    use = getattr(env, "use_user", None)
    if use is None:
        raise ConfigError(f"the {env.name} env has no user to replay or play")
    use(user)
    if hasattr(env, "user_kind"):
        env.user_kind = user.kind  # so the episode records who played the user after the fork


async def fork(
    parent: Episode,
    turn: int,
    backend: Backend,
    tokenizer: Tokenizer,
    *,
    make_env: Callable[[], Env] | None = None,
    user: str = "scripted",
    then: str = "human",
    user_backend: Backend | None = None,
    user_tokenizer: Tokenizer | None = None,
    config: LoopConfig | None = None,
    sampling: SamplingParams | None = None,
    tokenizer_name: str | None = None,
    reencode: bool = False,
) -> HandStepper:
    """A new conversation that replays ``parent``'s turns ``0..turn-1``, then goes on by hand.

    ``make_env`` defaults to the env the parent's record names. ``user`` (``FORK_USERS``) says who
    answers as the user from turn ``turn`` on: the env's simulated user, a model (``user_backend`` with
    ``user_tokenizer``, by default the policy's tokenizer), a person, or the recorded user while the
    conversation still matches the record, then ``then`` (``USER_MODES``). Where the parent's user was a model
    or a person, or the parent was imported, the replayed turns get the recorded replies. ``config``
    defaults to the parent's loop config, ``sampling`` to its sampling parameters. The returned
    stepper's ``report`` says whether the replay matched the record. ``reencode`` replays each generation
    from its text, encoded by ``tokenizer`` (the parent's ids belong to another tokenizer).
    """
    from .replay import plan as record_plan

    if user not in FORK_USERS:
        raise ConfigError(f"user must be one of {', '.join(FORK_USERS)}, not {user!r}")
    if then not in USER_MODES:
        raise ConfigError(f"after the recorded user, the user must be one of {', '.join(USER_MODES)}, not {then!r}")
    after = then if user == "recorded" else user
    if after == "llm" and user_backend is None:
        raise ConfigError("a model plays the user: choose the user model (its server, or the embedded model)")
    if not 0 <= turn <= parent.n_turns:
        raise ConfigError(f"episode {parent.id} has turns 0 to {parent.n_turns - 1}; cannot fork at turn {turn}")
    notes: list[str] = []
    if make_env is None:
        make_env, _ = parent_env(parent)
    # Decided from the record whatever env the caller built: only the record knows that user's replies.
    played_by = user_played_by(parent)
    imported = not parent.source.live
    opening, steps = record_plan(parent)
    by_turn = {s.turn: s for s in steps}

    def respond(step: Any) -> bool:
        return len(step.actions) == 1 and step.actions[0].is_respond

    env = make_env()
    fork_user: ForkUser | None = None
    # An env with no user (math: its feedback is the env's own) has no replies to replay, whoever made the parent.
    has_user = getattr(env, "use_user", None) is not None
    if (played_by is not None or imported) and has_user or user != "scripted":
        inner = (model_user(env.name, user_backend, user_tokenizer or tokenizer) if after == "llm"
                 else getattr(env, "user", None))
        if after == "human" and not can_play_user(env):
            raise ConfigError(f"the {env.name} env has no user a person can play (only envs with a simulated user do)")
        prefix = [s.reply or STOP for s in steps if s.turn < turn and respond(s)]
        later = [(s.actions[0].text, s.reply) for s in steps
                 if s.turn >= turn and respond(s) and s.reply is not None] if user == "recorded" else []
        recorded_opening = opening if (played_by is not None or imported) else None
        fork_user = ForkUser(inner, after, prefix, later, recorded_opening)
        _install_user(env, fork_user)
        who = {"llm": "a model", "human": "a person"}.get(played_by or "", "the record")
        if played_by is not None or imported:
            notes.append(f"the parent's user was {'imported with it' if imported else 'played by ' + who}: its "
                         "replies are replayed from the record up to the fork")
        who_after = {"scripted": "the env's simulated user", "llm": "a model", "human": "you"}[after]
        notes.append(f"the recorded user answers while the conversation matches the record, then {who_after}"
                     if user == "recorded" else
                     {"scripted": "the env's simulated user answers from the fork on",
                      "llm": "a model plays the user from the fork on",
                      "human": "you play the user from the fork on"}[after])
    base = parent_loop(parent)
    config = base if config is None else config
    if parent.config.loop is None:
        limit = (f"max_turns={config.max_turns} (the {default_preset(parent.env)} preset's limit, or the parent's "
                 "turns where more); --set max_turns=N changes it" if config.max_turns == base.max_turns
                 else f"max_turns={config.max_turns} as set")
        notes.append(f"the parent's record holds no loop settings: the fork runs the loop's defaults with {limit}")
    if sampling is None:
        sampling = parent.config.sampling or SamplingParams()
    stepper = Stepper(env, backend, tokenizer, config, parent.task_id, sampling=sampling, preset=parent.preset,
                      tokenizer_name=parent.tokenizer if tokenizer_name is None else tokenizer_name,
                      parent_id=parent.id, fork_turn=turn)
    divergences: list[TurnVerdict] = []

    system, first = _opening(parent)
    now_system = env.system_prompt(parent.task_id)
    stepper.start()
    now_first = [m for m in stepper.messages if m.role != "system"]
    if (now_system or None) != system:
        divergences.append(TurnVerdict(-1, False, "system_prompt", system, now_system))
    if _msgs(now_first) != _msgs(first):
        divergences.append(TurnVerdict(-1, False, "first_observation", _msgs(first), _msgs(now_first)))

    replayed = 0
    ended = ""
    said = [m for m in parent.messages if m.role == "assistant"]
    for k in range(min(turn, parent.n_turns)):
        if stepper.done:
            ended = f"{stepper.status}: {stepper.reason}"
            break
        if imported:
            step = by_turn.get(k)
            if step is None or k >= len(said):
                ended = f"turn {k} of the parent has no message to replay"
                break
            generation = replace(stepper.edited(_record_text(said[k], step.actions)), model="imported")
            now = await stepper.commit(generation)
            got = [m.content for m in now.observation if m.role == "tool"]
            if step.outputs and got[: len(step.outputs)] != list(step.outputs):
                divergences.append(TurnVerdict(k, False, "observation", list(step.outputs), got))
        else:
            stored = parent.turns[k]
            if stored.generation is None:
                ended = f"turn {stored.index} of the parent has no generation to replay"
                break
            generation = stored.generation
            if reencode:
                generation = replace(stepper.edited(stepper.content_of(generation)), model=generation.model,
                                     finish_reason=generation.finish_reason)
            now = await stepper.commit(generation)
            divergences.extend(_compare_turn(stored, now))
        replayed += 1
    if stepper.done and not ended:
        ended = f"{stepper.status}: {stepper.reason}"
    if fork_user is not None:
        fork_user.prefix.clear()  # a recorded reply the replay did not use must not answer a later turn

    if not imported and not reencode:
        # Loops that add a turn's generation prompt with its reply (slime) have not laid it down yet.
        ours = stepper.token_ids
        end = min(_prefix_end(parent, turn), len(ours))
        ours = ours[:end]
        theirs = parent.tokens.ids[:end].tolist()
        if ours != theirs:
            at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
            divergences.append(TurnVerdict(
                -1, False, "tokens", theirs[at:at + 8], ours[at:at + 8],
                f"the token prefix differs at position {at} (a different tokenizer or chat template?)"))

    report = ForkReport(parent.id, turn, replayed, tuple(divergences), tuple(notes), ended)
    return HandStepper(stepper, tokenizer, fork_user, report)


def _compare_turn(stored: Turn, now: Turn) -> list[TurnVerdict]:
    out = [TurnVerdict(stored.index, False, d.field, d.stored, d.now)
           for d in compare_result(stored, StepResult(now.observation, now.reward, now.done))]
    if (stored.parse_error is None) != (now.parse_error is None):
        out.append(TurnVerdict(stored.index, False, "parse_error", stored.parse_error, now.parse_error))
    return out


__all__ = [
    "FORK_USERS", "ActionPreview", "ForkReport", "ForkUser", "HandStepper", "HumanUser", "STOP", "USER_MODES",
    "can_play_user", "fork", "model_user",
    "parent_env", "play_user", "preview_action", "start", "user_played_by",
]
