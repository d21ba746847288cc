"""Launch and Step settings as typed values, checked before anything slow starts.

The form controls hand over strings and floats (or None for an empty
number box); these functions turn them into engine values and turn every
mistake a person can make into a ``ConfigError`` with a sentence that says
what to fix. No Gradio here, so the checks are tested without a browser.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from engine.backends.base import Backend, SamplingParams
from engine.envs.base import Env
from engine.errors import ConfigError
from engine.factory import ENVS, POLICIES, env_factory, make_backend, parse_tasks
from engine.presets import PRESETS, LoopConfig, apply_settings, get_preset

AUTO = "auto"  # the preset an env is usually run with
REACH_TIMEOUT_S = 3.0


def default_preset(env: str) -> str:
    """The preset the CLI picks for an env: AReaL's math loop, slime's tau-bench loop for tool envs."""
    return "areal-math" if env == "math" else "slime-tau"


def _number(value: Any, what: str, *, lo: float | None = None, hi: float | None = None, whole: bool = False,
            default: float | None = None, lo_open: bool = False) -> float:
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

    @classmethod
    def parse(cls, policy: Any, model: Any, url: Any, api_mode: Any, tokenizer: Any, temperature: Any, top_p: Any,
              max_new_tokens: Any, mistake_rate: Any, seed: Any) -> BackendSettings:
        """Settings from the form's values; ConfigError names the field that is wrong."""
        policy = str(policy or "").strip()
        if policy not in POLICIES:
            raise ConfigError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")
        url = str(url or "").strip()
        model = str(model or "").strip()
        if policy in ("sglang", "openai") and not url:
            raise ConfigError(f"the {policy} policy needs the server's URL, e.g. http://127.0.0.1:30000")
        if policy == "openai" and not model:
            raise ConfigError("the openai policy needs the served model's name")
        api_mode = str(api_mode or "completions")
        if api_mode not in ("completions", "chat"):
            raise ConfigError(f"API must be completions or chat, not {api_mode!r}")
        return cls(
            policy=policy, model=model, url=url, api_mode=api_mode, tokenizer=str(tokenizer or "").strip(),
            temperature=_number(temperature, "temperature", lo=0.0, hi=10.0, default=1.0),
            top_p=_number(top_p, "top_p", lo=0.0, hi=1.0, lo_open=True, default=1.0),
            max_new_tokens=int(_number(max_new_tokens, "max new tokens", lo=1, hi=65536, whole=True, default=256)),
            mistake_rate=_number(mistake_rate, "mistake rate", lo=0.0, hi=1.0, default=0.0),
            seed=int(_number(seed, "seed", whole=True, default=0)),
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
        return self.tokenizer_spec or "smollm2"

    def sampling(self, seed: int | None = None) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens,
                              seed=seed)

    def preflight(self) -> None:
        """The quick checks worth a network round trip: is the server there at all."""
        if self.policy in ("sglang", "openai"):
            check_reachable(self.url)

    def build(self, make_env: Callable[[], Env] | None, tokenizer: Any) -> Backend:
        """The backend (slow for ``local``: it loads the model)."""
        return make_backend(
            self.policy, make_env, tokenizer, model=self.model or None, url=self.url or None, api_mode=self.api_mode,
            tokenizer_name=self.tokenizer_name, mistake_rate=self.mistake_rate, seed=self.seed,
        )

    def describe(self) -> str:
        where = f" {self.model}" if self.model else ""
        where += f" @ {self.url}" if self.url else ""
        extra = f", mistake rate {self.mistake_rate:g}" if self.policy == "scripted" else ""
        return (f"{self.policy}{where} (T={self.temperature:g}, top_p={self.top_p:g}, "
                f"max {self.max_new_tokens} new tokens{extra})")


def check_env(env: Any) -> tuple[str, Callable[[], Env]]:
    """(env name, constructor); ConfigError for an unknown env or one that cannot be built here."""
    name = str(env or "").strip()
    if name not in ENVS:
        raise ConfigError(f"unknown env {name!r}; choose one of: {', '.join(ENVS)}")
    return name, env_factory(name)


def preset_name(preset: Any, env: str) -> str:
    """The preset a form names; ``auto`` is the env's usual one. ConfigError for an unknown name."""
    name = str(preset or AUTO)
    if name == AUTO:
        name = default_preset(env)
    get_preset(name)
    return name


def loop_config(preset: Any, env: str, settings: Any = "") -> tuple[str, LoopConfig]:
    """(preset name, its config with the knob changes of ``settings`` applied, one ``knob = value`` a line)."""
    name = preset_name(preset, env)
    return name, apply_settings(get_preset(name), str(settings or ""))


@dataclass(frozen=True)
class LoopView:
    """What the loop-settings table shows for a form."""

    base: LoopConfig  # the preset's (or parent's) config
    label: str  # what the base is, in words
    effective: LoopConfig | None  # the base with the settings applied; None when they do not parse
    error: str | None = None
    preset: str | None = None


def describe_loop(preset: Any, env: Any, settings: Any) -> LoopView:
    """The loop-settings table's content for a Launch or Step form."""
    env_name = str(env or "") if str(env or "") in ENVS else "math"
    try:
        name = preset_name(preset, env_name)
    except ConfigError as e:
        return LoopView(LoopConfig(), "the defaults", None, str(e))
    base = get_preset(name)
    label = f"preset {name}" + (f" (the usual one for {env_name})" if str(preset or AUTO) == AUTO else "")
    try:
        return LoopView(base, label, apply_settings(base, str(settings or "")), None, name)
    except ConfigError as e:
        return LoopView(base, label, None, str(e), name)


@dataclass(frozen=True)
class LaunchPlan:
    """A checked batch: everything ``run_batch`` needs except the slow parts (tokenizer, backend)."""

    env: str
    make_env: Callable[[], Env]
    tasks: tuple[str, ...]
    samples: int
    preset: str
    config: LoopConfig
    backend: BackendSettings
    concurrency: int

    @property
    def total(self) -> int:
        return len(self.tasks) * self.samples

    def describe(self) -> str:
        return (f"{self.env} · {len(self.tasks)} task{'s' if len(self.tasks) != 1 else ''} × {self.samples} "
                f"sample{'s' if self.samples != 1 else ''} = {self.total} episodes · preset {self.preset} "
                f"(max {self.config.max_turns} turns) · {self.backend.describe()} · concurrency {self.concurrency}")


MAX_EPISODES = 100_000


def plan_launch(env: Any, tasks: Any, samples: Any, preset: Any, settings: Any, concurrency: Any,
                backend: BackendSettings) -> LaunchPlan:
    """Check a Launch form; ConfigError says what is wrong (env, task range, numbers, a knob setting, an
    unreachable URL). ``settings`` holds knob changes, one ``knob = value`` a line."""
    name, make_env = check_env(env)
    task_ids = tuple(parse_tasks(str(tasks or ""), make_env().tasks))
    if not task_ids:
        raise ConfigError("no tasks selected")
    n = int(_number(samples, "samples per task", lo=1, hi=10_000, whole=True, default=1))
    chosen, config = loop_config(preset, name, settings)
    conc = int(_number(concurrency, "concurrency", lo=1, hi=256, whole=True, default=4))
    if len(task_ids) * n > MAX_EPISODES:
        raise ConfigError(f"{len(task_ids) * n:,} episodes is more than one batch should be ({MAX_EPISODES:,}); "
                          "split it, or use `rollscope run`")
    backend.preflight()
    return LaunchPlan(name, make_env, task_ids, n, chosen, config, backend, conc)


PRESET_CHOICES = (AUTO, *PRESETS)
