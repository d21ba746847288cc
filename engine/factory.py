"""Build envs, tokenizers and backends from the names the CLI and dashboard use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .backends.base import Backend
from .envs.base import Env
from .errors import ConfigError

ENVS = ("math", "retail", "taubench:retail", "taubench:airline")
POLICIES = ("scripted", "local", "sglang", "openai")
USERS = ("scripted", "llm")


def env_factory(
    name: str,
    problems: str | None = None,
    user: str = "scripted",
    user_backend: Backend | None = None,
    user_tokenizer: Any = None,
) -> Callable[[], Env]:
    """A zero-argument constructor of fresh env instances (one per episode).

    The first instance is built here, so a bad name, a bad problem file or a
    missing tau-bench fail before any episode starts.
    """
    if user not in USERS:
        raise ConfigError(f"unknown user {user!r}; choose one of: {', '.join(USERS)}")
    if name == "math":
        from .envs.math import MathEnv

        MathEnv(problems)
        return lambda: MathEnv(problems)
    if name == "retail":
        from .envs.retail import RetailEnv

        if user == "llm" and user_backend is None:
            raise ConfigError("--user llm needs a backend to play the user")

        def make() -> Env:
            return RetailEnv(user=user, user_backend=user_backend, user_tokenizer=user_tokenizer)

        make()
        return make
    if name.startswith("taubench:"):
        from .envs.taubench import TauBenchEnv

        domain = name.partition(":")[2]
        TauBenchEnv(domain, user)
        return lambda: TauBenchEnv(domain, user)
    raise ConfigError(f"unknown env {name!r}; choose one of: {', '.join(ENVS)}")


def load_tokenizer(spec: str | None) -> Any:
    """The tokenizer (with chat template) named by ``--tokenizer``; None = the embedded model's."""
    from . import tokenizers

    return tokenizers.load(spec)


def make_backend(
    policy: str,
    make_env: Callable[[], Env] | None,
    tokenizer: Any,
    *,
    model: str | None = None,
    url: str | None = None,
    api_mode: str = "completions",
    tokenizer_name: str = "",
    mistake_rate: float = 0.0,
    seed: int = 0,
    timeout: float = 60.0,
    retries: int = 3,
) -> Backend:
    """The policy backend named by ``--policy``."""
    if policy == "scripted":
        from .backends.scripted import ScriptedBackend

        if make_env is None:
            raise ConfigError("the scripted policy needs an env to play")
        return ScriptedBackend(make_env().reference_reply, tokenizer, mistake_rate=mistake_rate, seed=seed, tokenizer_name=tokenizer_name)
    if policy == "local":
        from .backends.local import LocalBackend

        backend = LocalBackend(model=model, tokenizer=tokenizer)
        backend.load()  # a missing model is a user error: report it before any episode starts
        return backend
    if policy in ("sglang", "openai"):
        if not url:
            raise ConfigError(f"--policy {policy} needs --url (e.g. http://127.0.0.1:30000)")
        if policy == "sglang":
            from .backends.sglang import SGLangBackend

            return SGLangBackend(url, tokenizer=tokenizer, model=model or "", timeout=timeout, retries=retries)
        from .backends.openai import OpenAIBackend

        if not model:
            raise ConfigError("--policy openai needs --model (the served model's name)")
        return OpenAIBackend(url, model, mode=api_mode, tokenizer=tokenizer, timeout=timeout, retries=retries)
    raise ConfigError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")


def parse_tasks(spec: str, tasks: list[str]) -> list[str]:
    """``0:8`` (a slice), ``3`` (one index), ``1,5,9`` or task ids, ``all``."""
    spec = spec.strip()
    if spec in ("all", ":", ""):
        return list(tasks)
    out: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if ":" in part:
            lo_s, _, hi_s = part.partition(":")
            try:
                lo = int(lo_s) if lo_s else 0
                hi = int(hi_s) if hi_s else len(tasks)
            except ValueError:
                raise ConfigError(f"bad task range {part!r}: expected START:END with whole numbers, e.g. 0:8") from None
            if lo < 0 or hi > len(tasks) or lo >= hi:
                raise ConfigError(f"task range {part!r} is outside the env's {len(tasks)} tasks (0:{len(tasks)})")
            out.extend(tasks[lo:hi])
        elif part.isdigit():
            i = int(part)
            if i >= len(tasks):
                raise ConfigError(f"task index {i} is outside the env's {len(tasks)} tasks")
            out.append(tasks[i])
        elif part in tasks:
            out.append(part)
        else:
            raise ConfigError(f"no task {part!r}: give indices (0:8, 3, 1,5) or task ids")
    return out
