"""The rules the CLI and the dashboard share: what a run, a hand-stepped conversation or a fork starts from.

Both front ends hand over what a person typed (strings and numbers, or
None for an empty box) and get back checked engine values, or a
``ConfigError`` whose sentence says what to fix. The rules live here once:
the default preset of an env, the bounds of the sampling parameters, which
tokenizer a policy uses, who plays the user, how a fork continues its
parent. Planning a run is quick (except for a user played by a model,
whose model loads then); ``BackendSettings.open()`` does the slow part
(the tokenizer, a local policy model).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ..backends import tokenizers
from ..backends.base import Backend, SamplingParams
from ..envs import ENVS, env_factory, parse_tasks
from ..envs.base import Env
from ..errors import ConfigError
from ..loop.fork import HandStepper, fork, parent_env, parent_loop
from ..loop.fork import start as start_by_hand
from ..loop.users import check_new_user
from ..presets import PRESETS, LoopConfig, apply_settings, default_preset, get_preset, load_config_file
from ..records.episode import Episode
from ..store import Store
from ..tokens.tokenizer import Tokenizer
from .batch import BatchSpec
from .policies import POLICIES, make_backend

AUTO = "auto"  # the preset an env is usually run with
PRESET_CHOICES = (AUTO, *PRESETS)
REACH_TIMEOUT_S = 3.0
MAX_EPISODES = 100_000  # one dashboard batch at most; the CLI takes any number
USERS = ("scripted", "llm", "human")


def number(value: Any, what: str, *, lo: float | None = None, hi: float | None = None, whole: bool = False,
           default: float | None = None, lo_open: bool = False) -> float:
    """A number a person gave (text or a number; None or "" for the default), checked against its bounds."""
    if value is None or value == "":
        if default is None:
            raise ConfigError(f"{what}: give a number")
        return default
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what}: {value!r} is not a number") from None
    if math.isnan(x) or math.isinf(x):
        raise ConfigError(f"{what}: give a finite number")
    if whole and x != int(x):
        raise ConfigError(f"{what}: give a whole number, not {x:g}")
    if lo is not None and (x <= lo if lo_open else x < lo):
        raise ConfigError(f"{what} must be {'above' if lo_open else 'at least'} {lo:g}, not {x:g}")
    if hi is not None and x > hi:
        raise ConfigError(f"{what} must be at most {hi:g}, not {x:g}")
    return x


def check_reachable(url: str, timeout: float = REACH_TIMEOUT_S) -> None:
    """ConfigError unless an HTTP server answers at ``url`` (any status counts: it is up)."""
    try:
        httpx.get(url, timeout=timeout)
    except httpx.InvalidURL as e:
        raise ConfigError(f"{url!r} is not a URL: {e}") from None
    except httpx.UnsupportedProtocol:
        raise ConfigError(f"the URL must start with http:// or https://, not {url!r}") from None
    except httpx.TimeoutException:
        raise ConfigError(f"no answer from {url} within {timeout:g} s: is the server up and the address right?") from None
    except httpx.HTTPError as e:
        raise ConfigError(f"cannot reach {url} ({type(e).__name__}: {e}): is the server running?") from None


MAX_TOP_LOGPROBS = 20
"""The most alternatives a generated token may record (OpenAI's API allows 20)."""


@dataclass(frozen=True)
class BackendSettings:
    """Which policy answers, and how it samples."""

    policy: str = "scripted"
    model: str = ""
    url: str = ""
    api_mode: str = "completions"
    tokenizer: str = ""
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    mistake_rate: float = 0.2
    seed: int = 0
    timeout: float = 60.0
    """HTTP policies: seconds one try may take, the whole answer included."""
    retries: int = 3
    """HTTP policies: tries after the first when the server does not answer or answers 5xx."""
    top_logprobs: int = 0
    """The most likely tokens recorded at each generated position, with their logprobs and the entropy (0: none)."""

    @classmethod
    def parse(cls, policy: Any, model: Any, url: Any, api_mode: Any, tokenizer: Any, temperature: Any, top_p: Any,
              max_new_tokens: Any, mistake_rate: Any, seed: Any, timeout: Any = None,
              retries: Any = None, top_logprobs: Any = None) -> BackendSettings:
        """Settings from what a person gave; ConfigError names the value that is wrong."""
        policy = str(policy or "").strip()
        if policy not in POLICIES:
            raise ConfigError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")
        url = str(url or "").strip()
        model = str(model or "").strip()
        if policy in ("sglang", "openai") and not url:
            raise ConfigError(f"the {policy} policy needs the server's URL, e.g. http://127.0.0.1:30000")
        if policy == "openai" and not model:
            raise ConfigError("the openai policy needs the served model's name")
        top_k = int(number(top_logprobs, "top logprobs", lo=0, hi=MAX_TOP_LOGPROBS, whole=True, default=0))
        if top_k and policy == "scripted":
            raise ConfigError("the scripted policy writes its replies from a script, with no distribution to record: "
                              "top logprobs needs the local, sglang or openai policy (or 0)")
        api_mode = str(api_mode or "completions")
        if api_mode not in ("completions", "chat"):
            raise ConfigError(f"API must be completions or chat, not {api_mode!r}")
        return cls(
            policy=policy, model=model, url=url, api_mode=api_mode, tokenizer=str(tokenizer or "").strip(),
            temperature=number(temperature, "temperature", lo=0.0, hi=10.0, default=1.0),
            top_p=number(top_p, "top_p", lo=0.0, hi=1.0, lo_open=True, default=1.0),
            max_new_tokens=int(number(max_new_tokens, "max new tokens", lo=1, hi=65536, whole=True, default=256)),
            mistake_rate=number(mistake_rate, "mistake rate", lo=0.0, hi=1.0, default=0.0),
            seed=int(number(seed, "seed", whole=True, default=0)),
            timeout=number(timeout, "timeout (seconds)", lo=0.0, lo_open=True, hi=3600.0, default=60.0),
            retries=int(number(retries, "retries", lo=0, hi=20, whole=True, default=3)),
            top_logprobs=top_k,
        )

    @property
    def tokenizer_spec(self) -> str | None:
        """What to load: the given tokenizer; a local model's own; else the embedded one (None)."""
        if self.tokenizer:
            return self.tokenizer
        if self.policy == "local" and self.model:
            return self.model  # a person's model brings its own tokenizer and template
        return None

    @property
    def tokenizer_name(self) -> str:
        return tokenizers.tokenizer_name(self.tokenizer_spec)

    def sampling(self, seed: int | None = None) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens,
                              seed=seed, top_logprobs=self.top_logprobs)

    def preflight(self) -> None:
        """The quick checks worth a network round trip: is the server there at all."""
        if self.policy in ("sglang", "openai"):
            check_reachable(self.url)

    def build(self, make_env: Callable[[], Env] | None, tokenizer: Tokenizer) -> Backend:
        """The backend (slow for ``local``: it loads the model)."""
        return make_backend(
            self.policy, make_env, tokenizer, model=self.model or None, url=self.url or None, api_mode=self.api_mode,
            tokenizer_name=self.tokenizer_name, mistake_rate=self.mistake_rate, seed=self.seed,
            timeout=self.timeout, retries=self.retries,
        )

    def open(self, make_env: Callable[[], Env] | None) -> tuple[Any, Backend]:
        """(tokenizer, backend): the slow part, once the plan is checked."""
        tokenizer = tokenizers.load_tokenizer(self.tokenizer_spec)
        return tokenizer, self.build(make_env, tokenizer)

    def describe(self) -> str:
        where = f" {self.model}" if self.model else ""
        where += f" @ {self.url}" if self.url else ""
        extra = f", mistake rate {self.mistake_rate:g}" if self.policy == "scripted" else ""
        if self.policy in ("sglang", "openai"):
            extra += f", timeout {self.timeout:g}s, {self.retries} retries"
        if self.top_logprobs:
            extra += f", top {self.top_logprobs} logprobs"
        return (f"{self.policy}{where} (T={self.temperature:g}, top_p={self.top_p:g}, "
                f"max {self.max_new_tokens} new tokens{extra})")


@dataclass(frozen=True)
class UserSettings:
    """Who plays the user of an env that has one: its scripted user, a model, or a person (Step only)."""

    kind: str = "scripted"
    model: str | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in USERS:
            raise ConfigError(f"unknown user {self.kind!r}; choose one of: {', '.join(USERS)}")
        if self.kind != "llm" and (self.model or self.url):
            raise ConfigError("a user model or URL is for --user llm")

    def open_model(self) -> tuple[Backend, Any]:
        """(backend, tokenizer) of the model that plays the user: an sglang server at ``url``, or a local
        model (``model``; by default the embedded one), loaded here (slow)."""
        tok = tokenizers.load_tokenizer(self.model)
        return make_backend("sglang" if self.url else "local", None, tok, model=self.model, url=self.url), tok

    def env_factory(self, env: str, problems: str | None = None) -> Callable[[], Env]:
        """The env's constructor with this user; a model-played user loads its model here (slow)."""
        if self.kind != "llm":
            return env_factory(env, problems, user=self.kind)
        backend, tok = self.open_model()
        return env_factory(env, problems, user="llm", user_backend=backend, user_tokenizer=tok)


def check_env(env: Any, problems: str | None = None) -> tuple[str, Callable[[], Env]]:
    """(env name, constructor); ConfigError for an unknown env or one that cannot be built here."""
    name = str(env or "").strip()
    if name not in ENVS:
        raise ConfigError(f"unknown env {name!r}; choose one of: {', '.join(ENVS)}")
    return name, env_factory(name, problems)


def preset_name(preset: Any, env: str) -> str:
    """The preset named (``auto``, None or "": the env's usual one). ConfigError for an unknown name."""
    name = str(preset or AUTO)
    if name == AUTO:
        name = default_preset(env)
    get_preset(name)
    return name


def loop_config(preset: Any, env: str, settings: Any = "", config_file: str | Path | None = None) -> tuple[str, LoopConfig]:
    """(preset name, its config with knob changes applied).

    ``settings`` is text, one ``knob = value`` a line, or a mapping of knob to value (``--set``).
    ``config_file`` (``--config``) names the preset and its knobs instead of ``preset``.
    """
    if config_file:
        if preset not in (None, "", AUTO):
            raise ConfigError("give a preset or a config file, not both")
        name, base = load_config_file(config_file)
    else:
        name = preset_name(preset, env)
        base = get_preset(name)
    if isinstance(settings, dict):
        return name, base.with_settings(settings)
    return name, apply_settings(base, str(settings or ""))


@dataclass(frozen=True)
class RunPlan:
    """A checked batch: everything ``run_batch`` needs except the slow parts (tokenizer, backend)."""

    env: str
    make_env: Callable[[], Env]
    tasks: tuple[str, ...]
    samples: int
    preset: str
    config: LoopConfig
    backend: BackendSettings
    concurrency: int
    extra: dict[str, Any] = field(default_factory=dict)
    run_name: str | None = None
    tags: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return len(self.tasks) * self.samples

    def spec(self) -> BatchSpec:
        return BatchSpec(
            env=self.env, tasks=self.tasks, samples=self.samples, preset=self.preset, config=self.config,
            sampling=self.backend.sampling(), policy=self.backend.policy, concurrency=self.concurrency,
            seed=self.backend.seed, tokenizer=self.backend.tokenizer_name, extra=dict(self.extra),
            run_id=self.run_name, tags=self.tags,
        )

    def describe(self) -> str:
        return (f"{self.env} · {len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''} × {self.samples} "
                f"sample{'s' if self.samples != 1 else ''} = {self.total} episodes · preset {self.preset} "
                f"(max {self.config.max_turns} turns) · {self.backend.describe()} · concurrency {self.concurrency}")


def plan_run(env: Any, tasks: Any, samples: Any, preset: Any, settings: Any, concurrency: Any,
             backend: BackendSettings, *, config_file: str | Path | None = None, problems: str | None = None,
             user: UserSettings | None = None, max_episodes: int | None = MAX_EPISODES, preflight: bool = True,
             extra: dict[str, Any] | None = None, run_name: Any = None, tags: Any = None) -> RunPlan:
    """Check a batch; ConfigError says what is wrong (env, task range, numbers, a knob, an unreachable URL, a run
    name or tag that cannot be one).

    ``run_name`` names the run (else a fresh id); ``tags`` (a sequence, or text split at commas) are given to
    every episode.

    ``preflight`` asks the policy's server whether it is up before anything starts (the dashboard does;
    the CLI records each episode's failure instead).
    """
    name, make_env = check_env(env, problems)
    task_ids = tuple(parse_tasks(str(tasks if tasks is not None else ""), make_env().tasks))
    if not task_ids:
        raise ConfigError("no tasks selected")
    n = int(number(samples, "samples per task", lo=1, hi=10_000, whole=True, default=1))
    chosen, config = loop_config(preset, name, settings, config_file)
    conc = int(number(concurrency, "concurrency", lo=1, hi=256, whole=True, default=4))
    if max_episodes is not None and len(task_ids) * n > max_episodes:
        raise ConfigError(f"{len(task_ids) * n:,} episodes is more than one batch should be ({max_episodes:,}); "
                          "split it, or use `rollscope run`")
    if preflight:
        backend.preflight()
    if user is not None and user.kind != "scripted":
        make_env = user.env_factory(name, problems)
    return RunPlan(name, make_env, task_ids, n, chosen, config, backend, conc, dict(extra or {}),
                   _run_name(run_name), _tags(tags))


RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,79}")


def _run_name(value: Any) -> str | None:
    name = str(value or "").strip()
    if not name:
        return None
    if not RUN_NAME.fullmatch(name):
        raise ConfigError(f"run name {name!r}: use letters, digits and . _ : - (at most 80), starting with a letter "
                          "or digit")
    return name


def _tags(value: Any) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value or ())
    tags = tuple(dict.fromkeys(str(t).strip() for t in items if str(t).strip()))
    long = [t for t in tags if len(t) > 80]
    if long:
        raise ConfigError(f"tag {long[0][:40]!r}…: a tag is at most 80 characters")
    return tags


@dataclass
class HandStart:
    """A conversation to step by hand, ready to start on an event loop (``start()`` is a coroutine)."""

    tokenizer: Tokenizer
    backend_label: str
    start: Callable[[], Coroutine[Any, Any, HandStepper]]


def _user_model(user: str, user_model: UserSettings | None) -> tuple[Backend | None, Any]:
    """(backend, tokenizer) of the model that plays the user when ``user`` is ``llm``; (None, None) else."""
    if user != "llm":
        return None, None
    settings = user_model or UserSettings("llm")
    if settings.url:
        check_reachable(settings.url)
    return settings.open_model()


def plan_step(env: Any, task: Any, preset: Any, settings: Any, user: str, backend: BackendSettings,
              user_model: UserSettings | None = None) -> HandStart:
    """A fresh conversation on one task of an env; ``settings`` changes the preset's knobs; ``user_model``
    says which model plays the user when ``user`` is ``llm``."""
    check_new_user(user)
    name, make_env = check_env(env)
    tasks = parse_tasks(str(task or ""), make_env().tasks) if str(task or "").strip() else []
    if len(tasks) != 1:
        raise ConfigError("choose one task: its index (e.g. 3) or its id")
    chosen, config = loop_config(preset, name, settings)
    backend.preflight()
    tokenizer, policy = backend.open(make_env)
    user_backend, user_tokenizer = _user_model(user, user_model)

    async def start() -> HandStepper:
        return start_by_hand(make_env(), policy, tokenizer, config, tasks[0], user=user, user_backend=user_backend,
                             user_tokenizer=user_tokenizer, sampling=backend.sampling(seed=backend.seed),
                             preset=chosen, tokenizer_name=backend.tokenizer_name)

    return HandStart(tokenizer, backend.describe(), start)


@dataclass(frozen=True)
class ForkSetup:
    """What a fork of a stored episode starts from, checked: the parent, the turn, the loop knobs, the env, the
    parent's tokenizer, and who answers as the user after the fork (``who``, and ``then`` after the recorded one)."""

    parent: Episode
    turn: int
    config: LoopConfig
    make_env: Callable[[], Env]
    tokenizer: Tokenizer
    who: str
    then: str
    user_backend: Backend | None
    user_tokenizer: Any


def fork_setup(store: Store, episode_id: Any, turn: Any, user: str, settings: Any, backend: BackendSettings,
               user_model: UserSettings | None = None) -> ForkSetup:
    """The checked start of a fork (``plan_fork``); the policy is not built yet."""
    eid = str(episode_id or "").strip()
    if not eid:
        raise ConfigError("give the id of the episode to fork")
    who, _, then = str(user or "scripted").partition(">")
    then = then or "human"
    if then != "human" and who != "recorded":
        raise ConfigError(f"user {user!r}: only the recorded user hands over to another (recorded>{then})")
    parent: Episode = store.get_episode(store.resolve_id(eid))
    try:
        k = int(turn)
    except (TypeError, ValueError):
        raise ConfigError(f"fork turn: {turn!r} is not a turn number") from None
    config = apply_settings(parent_loop(parent), str(settings or ""))
    make_env, _ = parent_env(parent)
    backend.preflight()
    # The fork continues the parent's token sequence: it must use the parent's tokenizer.
    tokenizer = tokenizers.load_tokenizer(tokenizers.tokenizer_spec(parent))
    user_backend, user_tokenizer = _user_model(then if who == "recorded" else who, user_model)
    return ForkSetup(parent, k, config, make_env, tokenizer, who, then, user_backend, user_tokenizer)


def plan_fork(store: Store, episode_id: Any, turn: Any, user: str, settings: Any,
              backend: BackendSettings, user_model: UserSettings | None = None) -> HandStart:
    """A fork of a stored or imported episode at ``turn``: its turns before it replayed (with the user's
    recorded replies where only the record knows them), the rest by hand, under the parent's loop config
    with the knob changes of ``settings`` and the form's sampling (``backend``: temperature, top-p, max new tokens),
    its seed the fork's own made from the form's (``fork_seed``: the parent's would sample the parent again), which
    the fork's record keeps. ``user`` (``fork.FORK_USERS``) answers after the fork; written
    ``recorded>scripted`` or ``recorded>llm``, the recorded user hands over to that user instead of the
    person. ``user_model`` says which model plays the user where one does."""
    f = fork_setup(store, episode_id, turn, user, settings, backend, user_model)
    seed = fork_seed(f.parent.id, backend.seed, 0)  # as `rollscope fork --seed`'s first sample
    own = dataclasses.replace(backend, seed=seed)  # the scripted policy's mistakes follow its seed too
    policy = own.build(f.make_env, f.tokenizer)
    return HandStart(f.tokenizer, own.describe(), lambda: start_fork(f, policy, own, seed))


def fork_seed(parent_id: str, seed: int, i: int) -> int:
    """The seed of fork ``i`` of ``parent_id`` under ``--seed``: not the parent's own (a fork sampled with the parent's
    seed is the parent again), nor another fork's shifted by a turn (a model's seed goes up by one a turn)."""
    return int.from_bytes(hashlib.sha256(f"{parent_id}|{seed}|{i}".encode()).digest()[:4], "big") & 0x7FFFFFFF


async def start_fork(f: ForkSetup, policy: Backend, backend: BackendSettings, seed: int) -> HandStepper:
    """The fork ``f`` started on ``policy``, sampling with ``backend``'s parameters and ``seed``."""
    return await fork(f.parent, f.turn, policy, f.tokenizer, make_env=f.make_env, user=f.who, then=f.then,
                      user_backend=f.user_backend, user_tokenizer=f.user_tokenizer, config=f.config,
                      sampling=backend.sampling(seed=seed))
