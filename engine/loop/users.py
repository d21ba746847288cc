"""Who plays the user of a conversation stepped by hand or forked: the env's simulated user, a model,
a person, or the record.

``HumanUser`` lets a person play the user of an env that has one (the
retail env, tau-bench's envs): it stands in for the env's simulated user,
and each reply is handed over before the agent message that prompts it is
committed. ``ForkUser`` answers with the record's replies for a fork's
replayed turns (and, by choice, while the conversation still matches the
record), then hands over to the chosen user. ``model_user`` builds a user a
model plays.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable
from typing import Any, cast

from ..backends.base import Backend
from ..envs.base import Env
from ..errors import ConfigError, EnvError
from ..tokens.tokenizer import Tokenizer

# Envs whose simulated user hands over its turn with this marker end the conversation.
STOP = "###STOP###"
USER_MODES = ("scripted", "llm", "human")
"""Who plays the user of a new conversation: the env's simulated user, a model, or a person."""
FORK_USERS = ("scripted", "llm", "human", "recorded")
"""Who answers as the user after a fork's turn: the env's simulated user, a model, a person, or the recorded
user while the conversation still matches the record (then ``then``: one of ``USER_MODES``)."""


# -- the user, played by a person ----------------------------------------------


class HumanUser:
    """Stands in for an env's simulated user; a person writes each reply.

    The env asks ``step(agent_text)`` for the reply to an agent message; the
    reply must have been handed over with ``say`` first (the dashboard asks
    for it before committing a message to the user).
    """

    kind = "human"

    def __init__(self) -> None:
        self.replies: deque[str] = deque()
        self.task: Any = None

    def reset(self, task: Any = None, instruction: str | None = None) -> str:
        """Start the conversation with the task's own opening (tau-bench's: its instruction), so forks and
        replays line up."""
        self.task = task
        self.replies.clear()
        return str(task.opening) if task is not None else str(instruction or "")

    def say(self, reply: str) -> None:
        """Hand over the user's reply to the next agent message."""
        self.replies.append(reply)

    def step(self, agent_text: str) -> str:
        if not self.replies:
            # Raised inside env.step, this ends the episode as aborted: callers check first.
            raise EnvError("no user reply was written for this agent message")
        return self.replies.popleft()

    def needs_person(self, agent_text: str) -> bool:
        return True


def _norm(text: str) -> str:
    return " ".join(text.split())


class ForkUser:
    """The user of a fork: the record's replies for the replayed turns, then the chosen user.

    ``prefix``: the recorded replies to the agent's messages before the fork's turn (what a model or a
    person said, or an imported record's user). ``later``: (agent message, recorded reply) pairs after it,
    used while the agent says what the record says (the recorded user). ``after`` answers once the record
    has nothing to say: ``scripted`` (the env's simulated user ``inner``, which hears every agent message
    of the replay so that its state follows the conversation), ``llm`` (a model user ``inner``, which is
    given every replayed turn so that it carries on the recorded conversation) or ``human`` (a person
    writes each reply with ``say``). ``opening``: the recorded opening, when the env's user would not say it.
    """

    def __init__(self, inner: Any, after: str, prefix: list[str], later: list[tuple[str, str]],
                 opening: str | None) -> None:
        if after not in USER_MODES:
            raise ConfigError(f"after the record, the user must be one of {', '.join(USER_MODES)}, not {after!r}")
        self.inner = inner
        self.after = after
        self.kind = after
        self.prefix: deque[str] = deque(prefix)
        self.later: deque[tuple[str, str]] = deque(later)
        self.opening = opening
        self.replies: deque[str] = deque()  # what the person wrote, as HumanUser keeps it

    def reset(self, *args: Any, **kwargs: Any) -> str:
        said = self.inner.reset(*args, **kwargs) if self.after != "human" else ""
        if self.opening is None and self.after == "human":
            return str(args[0].opening) if args and hasattr(args[0], "opening") else str(kwargs.get("instruction", ""))
        if self.opening is not None and self.after == "llm":
            self.inner.reopen(self.opening)
        return self.opening if self.opening is not None else str(said)

    def say(self, reply: str) -> None:
        self.replies.append(reply)

    def recorded_reply(self, agent_text: str) -> str | None:
        """The recorded reply to ``agent_text`` if the conversation still matches the record."""
        if self.later and _norm(self.later[0][0]) == _norm(agent_text):
            return self.later[0][1]
        return None

    def needs_person(self, agent_text: str) -> bool:
        return self.after == "human" and not self.prefix and self.recorded_reply(agent_text) is None

    def _heard(self, agent_text: str, reply: str) -> str:
        """The recorded ``reply``; the chosen user follows the conversation it is part of."""
        if self.after == "scripted":
            self.inner.step(agent_text)  # its state follows the conversation; the record says the words
        elif self.after == "llm":
            self.inner.follow(agent_text, reply)
        return reply

    def step(self, agent_text: str) -> str | Awaitable[str]:
        """The reply to ``agent_text``; a model user's is an awaitable (the env awaits it)."""
        if self.prefix:
            return self._heard(agent_text, self.prefix.popleft())
        recorded = self.recorded_reply(agent_text)
        if recorded is not None:
            self.later.popleft()
            return self._heard(agent_text, recorded)
        self.later.clear()  # the conversation left the record: the chosen user answers from here on
        if self.after == "scripted":
            return str(self.inner.step(agent_text))
        if self.after == "llm":
            return cast(Awaitable[str], self.inner.step(agent_text))
        if not self.replies:
            raise EnvError("no user reply was written for this agent message")
        return self.replies.popleft()

    def get_total_cost(self) -> float:  # tau-bench's user interface
        return 0.0


def check_new_user(user: str) -> str:
    """``user`` if it can play the user of a new conversation (``USER_MODES``); a ConfigError that says why
    it cannot."""
    if user.partition(">")[0] == "recorded":
        raise ConfigError("the recorded user is for forks: a new conversation has no record to replay")
    if user not in USER_MODES:
        raise ConfigError(f"user must be one of {', '.join(USER_MODES)}, not {user!r}")
    return user


def can_play_user(env: Env) -> bool:
    """Whether a person can play this env's user (it has a swappable simulated user)."""
    user = getattr(env, "user", None)
    return hasattr(env, "user_kind") and callable(getattr(user, "reset", None)) and callable(getattr(user, "step", None))


def play_user(env: Env) -> HumanUser:
    """Replace the env's simulated user with a ``HumanUser``; returns it (call before ``reset``)."""
    if not can_play_user(env):
        raise ConfigError(f"the {env.name} env has no user a person can play (only envs with a simulated user do)")
    human = HumanUser()
    use = getattr(env, "use_user", None)
    if use is not None:
        use(human)
    else:
        env.user = human  # type: ignore[attr-defined]
    env.user_kind = human.kind  # type: ignore[attr-defined]  # so the episode records who played the user
    return human



def model_user(env_name: str, backend: Backend | None, tokenizer: Tokenizer) -> Any:
    """A user played by ``backend`` (rendering with ``tokenizer``), with the customer prompt of ``env_name``."""
    from ..envs.retail.user import CUSTOMER_SYSTEM, USER_SYSTEM, LLMUser

    if backend is None:
        raise ConfigError("a model plays the user: give the backend that plays it")
    system = CUSTOMER_SYSTEM.replace("{business}", "an airline") if env_name == "taubench:airline" else USER_SYSTEM
    return LLMUser(backend, tokenizer, system=system)


__all__ = ["FORK_USERS", "STOP", "USER_MODES", "ForkUser", "HumanUser", "can_play_user", "check_new_user", "model_user", "play_user"]
