"""Re-execute a stored episode against its env and say what changed.

The env is reset on the same task and fed the stored actions one by one; each observation, reward and done flag
is compared with what was stored. A difference does not stop the replay: it goes on to the end, where the episode's
reward, made of the replayed env's rewards by the loop's rule, is compared with the record's (``recorded_reward``,
``replayed_reward``, ``reward_reproduced``; two rewards are one when ``same_reward`` says so; a record whose reward
does not follow from its own env rewards diverges on ``episode_reward``). What stops it: a differing system prompt or opening message (before
any turn), the env failing, or the env ending the episode before the record does. The reward the env gives where
it has not ended an episode the record ended is no final one, and stays unknown. This tells a policy problem from
an env problem: an env that is nondeterministic, whose data changed since the run, or whose reward function
drifted. verl's loop answers as it does (``verl.replay_turn``).

Each differing tool output is one :class:`TurnVerdict` naming the tool, with its structural diff (``outputdiff``);
``divergence`` is the first. A verdict's ``causes`` are its changes in words that are the same for every episode
the same change hit, for grouping many replays (``analysis/replays.py``); ``headline`` and ``summary`` are the
one line the dashboard and the CLI print.

``replay_recorded`` re-executes a tool-using episode with its user replayed
from the record. An episode whose user was a model or a person, or one
imported from messages or tau-bench results, cannot be re-executed with the
env's own user: that user would say something else. Here the env is reset on
the episode's task with a :class:`RecordedUser` in its user's place, which
answers with the user's recorded messages in order. The stored conversation
is then walked message by message: each assistant tool call is executed and
its output compared with the recorded ``tool`` message; each assistant reply
without calls goes to the (recorded) user. What the env can no longer check,
because the record put the words in the user's mouth, is the user itself.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..envs.base import Env, StepResult
from ..envs.outcomes import unread
from ..presets import LoopConfig
from ..records.episode import RESPOND, Action, Episode, Message
from . import verl
from .rewards import episode_rewards, same_reward
from .turn import ENV_FAILURES, conversation_observation, execute, messages_dicts, stored_actions
from .verdicts import ReplayResult, TurnVerdict, _differing


def _msgs(ms: tuple[Message, ...] | list[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in ms]


def nondeterminism(env: Env) -> str | None:
    """Why an env cannot reproduce a run exactly, or None if it can."""
    desc = env.describe() if hasattr(env, "describe") else {}
    if desc.get("user") == "llm":
        return "a model plays the user, so its replies differ from run to run"
    if desc.get("user") == "human":
        return "a person played the user; their replies cannot be replayed"
    return None


def _initial(ep: Episode) -> tuple[str | None, list[Message]]:
    msgs = list(ep.messages)
    system = msgs[0].content if msgs and msgs[0].role == "system" else None
    rest = msgs[1:] if system is not None else msgs
    first: list[Message] = []
    for m in rest:
        if m.role == "assistant":
            break
        first.append(m)
    return system, first


def observation_verdicts(turn: int, stored: Sequence[Message], now: Sequence[Message]) -> list[TurnVerdict]:
    """How an env's messages now differ from the stored ones: one verdict per differing tool output when the
    two hold the same messages in the same roles, else one on the whole observation."""
    a, b = messages_dicts(stored), messages_dicts(now)
    if a == b:
        return []
    if len(a) == len(b) and all(x.role == y.role and x.name == y.name for x, y in zip(stored, now, strict=True)):
        out: list[TurnVerdict] = []
        calls = 0
        for x, y, dx, dy in zip(stored, now, a, b, strict=True):
            calls += x.role == "tool"
            if dx == dy:
                continue
            if x.role == "tool" and {k: v for k, v in dx.items() if k != "content"} == \
                    {k: v for k, v in dy.items() if k != "content"}:
                out.append(_differing(turn, "observation", x.content, y.content,
                                      f"the output of {x.name or 'a tool'} (call {calls} of this turn)", x.name or ""))
            else:
                return [_differing(turn, "observation", a, b)]
        return out
    return [_differing(turn, "observation", a, b)]


def rule(cfg: LoopConfig) -> str:
    """How a loop makes an episode's reward of its env's rewards, in words (``rewards.episode_rewards``)."""
    shaped = (f"each turn's shaped as AReaL does (scale {cfg.reward_scale:g}, bias {cfg.reward_bias:g}), "
              if cfg.shape_rewards else "")
    made = {"first_return": f"the first turn's return, discount {cfg.turn_discount:g}",
            "discounted_last": f"the last turn's, discounted by {cfg.turn_discount:g} a turn"}.get(
                cfg.episode_reward, "the last turn's")
    return shaped + ("then " if shaped else "") + made


async def replay(ep: Episode, make_env: Callable[[], Env], until: int | None = None) -> ReplayResult:
    """Re-execute ``ep``'s stored actions (turns ``0..until``) in a fresh env.

    A differing observation or reward does not stop it: the stored actions go on to the end, and the
    episode's reward is compared with the record's. A differing system prompt or opening message stops it
    before any turn, and the env failing, or ending the episode before the record does, stops it there.
    The replayed reward is the episode's as the loop makes it (``rewards.episode_rewards``: AReaL's shaping, a
    discount, the first turn's return) of the env's rewards of this replay, the loop's own at a turn that reached no
    env, up to where the env ended the episode (or raised again as stored), or to the record's end where neither
    ended it; else it is unknown. So a record whose reward does not follow from its env's rewards by the rule it
    ran with does not reproduce."""
    env = make_env()
    why = nondeterminism(env)
    if why is not None:
        return ReplayResult(ep.id, False, False, reason=why, until=until)
    verdicts: list[TurnVerdict] = []
    recorded = ep.reward if until is None else None
    replayed: float | None = None
    config = ep.config.loop or LoopConfig()
    raw: list[float] = []  # each turn's reward as this replay gives it

    def episode_reward() -> float:
        return episode_rewards(config, raw)[2]

    def result() -> ReplayResult:
        if recorded is not None and replayed is not None and not same_reward(recorded, replayed) and \
                not any(v.field == "reward" for v in verdicts):  # a differing turn reward explains it
            verdicts.append(_differing(
                len(raw) - 1, "episode_reward", recorded, replayed,
                f"the record's reward does not follow from the env's rewards by its loop's rule: {rule(config)}"))
        first = next((v for v in verdicts if not v.ok), None)
        return ReplayResult(ep.id, True, first is None, tuple(verdicts), first, until=until,
                            recorded_reward=recorded, replayed_reward=replayed if until is None else None)

    system, first = _initial(ep)
    try:
        now_system = env.system_prompt(ep.task_id)
        now_first = list(env.reset(ep.task_id))
    except ENV_FAILURES as e:  # the env's own failure is the finding; a bug propagates
        verdicts.append(TurnVerdict(0, False, "env_error", None, f"{type(e).__name__}: {e}", traceback.format_exc()))
        return result()
    if (now_system or None) != system:
        verdicts.append(_differing(0, "system_prompt", system, now_system))
        return result()
    if _msgs(now_first) != _msgs(first):
        verdicts.append(_differing(0, "first_observation", _msgs(first), _msgs(now_first)))
        return result()

    for turn in ep.turns:
        if until is not None and turn.index > until:
            break
        actions = stored_actions(turn)
        if actions is None:
            # Nothing reached the env (a parse error, an aborted generation): the
            # loop's own feedback is not the env's to reproduce.
            verdicts.append(TurnVerdict(turn.index, True, note="no env action in this turn"))
            raw.append(turn.reward)
            continue
        stored_error = next((f.message for f in turn.findings if f.kind == "env_error"), None)
        try:
            res = (StepResult(*await verl.replay_turn(env, config, ep.tools, turn, ep.ground_truth))
                   if config.token_mode == "verl" else await execute(env, actions))
        except ENV_FAILURES as e:
            now = f"{type(e).__name__}: {e}"
            if stored_error == now:  # the record ended here too, with the turn's reward as stored
                verdicts.append(TurnVerdict(turn.index, True, note=f"the env raised again, as stored: {now}"))
                raw.append(turn.reward)
                replayed = episode_reward()
            else:
                verdicts.append(TurnVerdict(turn.index, False, "env_error", stored_error, now, traceback.format_exc()))
            return result()
        if stored_error is not None:
            verdicts.append(TurnVerdict(turn.index, False, "env_error", stored_error, None))
            return result()
        seen = res.observation if config.token_mode == "verl" else conversation_observation(config, res)
        found = observation_verdicts(turn.index, turn.observation, seen)
        if not same_reward(res.reward, turn.reward):
            found.append(_differing(turn.index, "reward", turn.reward, res.reward))
        if res.done != turn.done:
            found.append(_differing(turn.index, "done", turn.done, res.done,
                                    "the env ended the episode before the record does" if res.done
                                    else "the env did not end the episode where the record does"))
        verdicts.extend(found or [TurnVerdict(turn.index, True)])
        raw.append(res.reward)
        if res.done:
            replayed = episode_reward()
            return result()
    if ep.turns and not ep.turns[-1].done:
        replayed = episode_reward()  # neither the env nor the record ended the episode: both stopped at one place
    return result()


def env_for(ep: Episode) -> Callable[[], Env] | str:
    """A constructor of the env ``ep`` ran in, from its record, or why there is none."""
    from ..envs import env_factory
    from ..errors import RollscopeError

    info = ep.config.env
    if ep.config.user == "llm":
        return "a model played the user, so its replies differ from run to run"
    if ep.config.user == "human":
        return "a person played the user; their replies cannot be replayed"
    if info is None:
        return (f"imported from {ep.source.kind}: the record names env {ep.env!r} but not how it was made (its "
                "problems, its data), so it is not rebuilt")
    problems = info.details.get("problems")
    try:
        return env_factory(ep.env, problems if problems and problems != "builtin" else None)
    except RollscopeError as e:
        return f"cannot rebuild env {ep.env!r}: {e}"


USER_ENVS = ("retail", "taubench:retail", "taubench:airline")
"""Envs with a user, whose episodes can be re-executed with the user replayed from the record."""


def needs_recorded_user(ep: Episode) -> bool:
    """Whether ``ep`` is re-executed with its user replayed from the record: a tool env's episode whose user
    was a model or a person, or one imported (its turns hold no actions to re-execute)."""
    return ep.env in USER_ENVS and (ep.config.user in ("llm", "human") or not ep.source.live)


async def replay_stored(ep: Episode, until: int | None = None) -> ReplayResult:
    """Re-execute a stored episode in the env its record names; with its user replayed from the record
    where the env's own user would say something else (:func:`needs_recorded_user`); not one whose record lacks the
    actions (``outcomes.unread``), whose empty replies would diverge at once."""
    if until is not None and until >= len(ep.turns) - 1:
        until = None  # at or past the last turn: the whole episode, its reward compared
    if lacks := unread(ep):
        return ReplayResult(ep.id, False, False, reason=f"its record lacks the actions: {lacks}", until=until)
    if not ep.source.live and not ep.turns and not any(m.role == "assistant" for m in ep.messages):
        # nothing ran to replay (a tau-bench task that raised before its first reply): not "reproduced"
        return ReplayResult(ep.id, False, False, reason=f"its record holds no turn to replay ({ep.status.value}: "
                                                        f"{ep.reason})", until=until)
    if needs_recorded_user(ep):
        from ..envs import env_factory
        from ..errors import RollscopeError

        try:
            make_env = env_factory(ep.env, user="scripted")
        except RollscopeError as e:
            return ReplayResult(ep.id, False, False, reason=f"cannot rebuild env {ep.env!r}: {e}", until=until)
        return await replay_recorded(ep, make_env, until)
    make = env_for(ep)
    if isinstance(make, str):
        return ReplayResult(ep.id, False, False, reason=make, until=until)
    return await replay(ep, make, until)


STOP = "###STOP###"
RECORDED_NOTE = "the user was replayed from the record"


class RecordedUser:
    """A user that says what the record says it said: the opening, then one reply per agent message.

    Speaks both user interfaces here: the retail env's (``reset(task)``, ``step(said)``) and tau-bench's
    (``reset(instruction=...)``, ``step(content)``, ``get_total_cost()``). Past the end of the record it
    stops the conversation (``###STOP###``), as a user who has nothing more to say.
    """

    def __init__(self, opening: str, replies: list[str]) -> None:
        self.opening = opening
        self.replies = list(replies)
        self.heard: list[str] = []

    def reset(self, *args: Any, **kwargs: Any) -> str:
        self.heard = []
        return self.opening

    def step(self, content: str) -> str:
        self.heard.append(content)
        k = len(self.heard) - 1
        return self.replies[k] if k < len(self.replies) else STOP

    def get_total_cost(self) -> float:
        return 0.0


@dataclass(frozen=True)
class Step:
    """One agent turn to re-execute: its actions, the tool outputs recorded for them, the user's reply."""

    turn: int
    actions: tuple[Action, ...]
    outputs: tuple[str, ...]
    reply: str | None


def plan(ep: Episode) -> tuple[str, list[Step]]:
    """(the user's opening, the steps) of ``ep``: from its turns when they hold the actions the loop
    executed (live episodes), else from its messages (imports: each assistant message is a turn, its
    tool calls answered by the ``tool`` messages after it, a reply without calls answered by the user)."""
    msgs = [m for m in ep.messages if m.role != "system"]
    first = next((i for i, m in enumerate(msgs) if m.role != "user"), len(msgs))
    opening = "\n".join(m.content for m in msgs[:first])
    steps: list[Step] = []
    if any(t.action is not None for t in ep.turns):
        for t in ep.turns:
            acts = stored_actions(t)
            if acts is None:
                continue  # nothing reached the env (a parse error, an aborted generation)
            respond = len(acts) == 1 and acts[0].is_respond
            reply = next((m.content for m in t.observation if m.role == "user"), None) if respond else None
            steps.append(Step(t.index, tuple(acts), tuple(m.content for m in t.observation if m.role == "tool"),
                              reply))
        return opening, steps
    turn = -1
    for m in msgs[first:]:
        if m.role == "assistant":
            turn += 1
            acts = ([Action(c.name, dict(c.arguments)) for c in m.tool_calls] if m.tool_calls
                    else [Action(RESPOND, {"content": m.content}, m.content)])
            steps.append(Step(turn, tuple(acts), (), None))
        elif m.role == "tool" and steps:
            last = steps[-1]
            steps[-1] = Step(last.turn, last.actions, (*last.outputs, m.content), last.reply)
        elif m.role == "user" and steps and steps[-1].reply is None:
            last = steps[-1]
            steps[-1] = Step(last.turn, last.actions, last.outputs, m.content)
    # An agent that executes only its first call (tau-bench's tool-calling agent) records one output for a
    # message with several calls: the calls without an output never reached the env.
    return opening, [replace(s, actions=s.actions[: len(s.outputs)])
                     if s.outputs and len(s.outputs) < len(s.actions) else s for s in steps]


def recorded_user(ep: Episode) -> RecordedUser:
    """The user of ``ep`` as its record has it: the opening, then its reply to each agent message."""
    opening, steps = plan(ep)
    return RecordedUser(opening, [s.reply or "" for s in steps if len(s.actions) == 1 and s.actions[0].is_respond])


async def replay_recorded(ep: Episode, make_env: Callable[[], Env], until: int | None = None) -> ReplayResult:
    """Re-execute ``ep`` in a fresh env whose user replays the record (turns ``0..until``).

    A tool output that differs from the record's is noted and the replay goes on, since the recorded user
    says the same whatever the agent heard; at the end the env's reward is compared with the record's.
    The env ending the episode early, or failing, stops it. Where the env has not ended the episode at the
    end of a record that says it ended, the env's reward is not a final one: unknown, and a divergence on
    ``done`` only if it differs from the record's anyway (an imported record cut short by a step limit says
    it ended, without the env's word)."""
    env = make_env()
    use_user = getattr(env, "use_user", None)
    if use_user is None:
        return ReplayResult(ep.id, False, False, reason=f"env {ep.env!r} has no user to replay", until=until,
                            user="recorded")
    opening, steps = plan(ep)
    replies = [s.reply or STOP for s in steps if len(s.actions) == 1 and s.actions[0].is_respond]
    use_user(RecordedUser(opening, replies))
    verdicts: list[TurnVerdict] = []
    recorded: float = ep.turns[-1].reward if ep.turns else ep.reward  # the env's last reward, before any shaping

    def result(replayed: float | None) -> ReplayResult:
        first = next((v for v in verdicts if not v.ok), None)
        whole = until is None
        return ReplayResult(ep.id, True, first is None, tuple(verdicts), first, reason=RECORDED_NOTE, until=until,
                            user="recorded", recorded_reward=recorded if whole else None,
                            replayed_reward=replayed if whole else None)

    try:
        env.reset(ep.task_id)
    except ENV_FAILURES as e:
        verdicts.append(TurnVerdict(0, False, "env_error", None, f"{type(e).__name__}: {e}", traceback.format_exc()))
        return result(None)
    done, reward = False, 0.0
    for step in steps:
        t = step.turn
        if until is not None and t > until:
            return result(None)
        if done:
            verdicts.append(TurnVerdict(t, False, "done", False, True, "the env ended the episode before this turn"))
            return result(reward)
        tools = [a for a in step.actions if not a.is_respond]
        n_out = 0
        found: list[TurnVerdict] = []
        for action in step.actions:
            try:
                res = await execute(env, [action])
            except ENV_FAILURES as e:
                verdicts.extend(found)
                verdicts.append(TurnVerdict(t, False, "env_error", None, f"{type(e).__name__}: {e}",
                                            traceback.format_exc()))
                return result(None)
            if not action.is_respond:
                now = next((m.content for m in res.observation if m.role == "tool"), "")
                stored = step.outputs[n_out] if n_out < len(step.outputs) else None
                n_out += 1
                if now != stored:
                    found.append(_differing(t, "observation", stored, now,
                                            f"the output of {action.name} (call {n_out} of this turn)", action.name))
            done, reward = res.done, res.reward
            if done:
                break
        verdicts.extend(found or [TurnVerdict(t, True, note=f"{n_out} tool output(s) as recorded" if tools else "")])
    if until is not None:
        return result(None)
    last = steps[-1].turn if steps else 0
    record_done = ep.turns[-1].done if ep.turns else True
    if not done and record_done:
        if not same_reward(reward, recorded):
            verdicts.append(TurnVerdict(last, False, "done", True, False,
                                        f"the env did not end the episode where the record does (its reward "
                                        f"there {reward:g}, the record's {recorded:g})"))
        return result(None)
    if not same_reward(reward, recorded):  # the env's final reward, or its last where neither ended the episode
        verdicts.append(_differing(last, "reward", recorded, reward))
    return result(reward)
