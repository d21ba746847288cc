"""Build envs, tokenizers and backends from the names the CLI and dashboard use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .backends.base import Backend
from .envs.base import Env
from .errors import ConfigError

ENVS = ("math",)
POLICIES = ("scripted", "local")


def env_factory(name: str, problems: str | None = None) -> Callable[[], Env]:
    """A zero-argument constructor of fresh env instances (one per episode)."""
    if name == "math":
        from .envs.math import MathEnv

        MathEnv(problems)  # fail now, with a clear error, on a bad problem file
        return lambda: MathEnv(problems)
    raise ConfigError(f"unknown env {name!r}; choose one of: {', '.join(ENVS)}")


def load_tokenizer(spec: str | None) -> Any:
    """The tokenizer (with chat template) named by ``--tokenizer``; None = the embedded model's."""
    from .backends.local import load_tokenizer as _load

    return _load(spec)


def make_backend(
    policy: str,
    make_env: Callable[[], Env],
    tokenizer: Any,
    *,
    model: str | None = None,
    tokenizer_name: str = "",
    mistake_rate: float = 0.0,
    seed: int = 0,
) -> Backend:
    if policy == "scripted":
        from .backends.scripted import ScriptedBackend

        return ScriptedBackend(make_env, tokenizer, mistake_rate=mistake_rate, seed=seed, tokenizer_name=tokenizer_name)
    if policy == "local":
        from .backends.local import LocalBackend

        backend = LocalBackend(model=model, tokenizer=tokenizer)
        backend.load()  # a missing model is a user error: report it before any episode starts
        return backend
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
