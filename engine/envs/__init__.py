"""Environments: the ``Env`` seam (``base``) and the built-in envs (``math``, ``retail``, ``taubench``), by name.

An env imports the records, the errors and, to have a model play its user, ``engine.backends.base`` alone: no
other backend, nothing above this layer (``tests/test_layers.py``). This face is the registry the front ends
build envs from; importing it loads no env.
"""

from __future__ import annotations

from collections.abc import Callable

from ..backends.base import Backend
from ..errors import ConfigError
from ..tokens.tokenizer import Tokenizer
from .base import Env

ENVS = ("math", "retail", "taubench:retail", "taubench:airline")
USERS = ("scripted", "llm")


def env_factory(
    name: str,
    problems: str | None = None,
    user: str = "scripted",
    user_backend: Backend | None = None,
    user_tokenizer: Tokenizer | None = None,
) -> Callable[[], Env]:
    """A zero-argument constructor of fresh env instances (one per episode).

    The first instance is built here, so a bad name, a bad problem file or a
    missing tau-bench fail before any episode starts.
    """
    if user not in USERS:
        raise ConfigError(f"unknown user {user!r}; choose one of: {', '.join(USERS)}")
    if name == "math":
        from .math import MathEnv

        MathEnv(problems)
        return lambda: MathEnv(problems)
    if name == "retail":
        from .retail import RetailEnv

        if user == "llm" and user_backend is None:
            raise ConfigError("--user llm needs a backend to play the user")

        def make() -> Env:
            return RetailEnv(user=user, user_backend=user_backend, user_tokenizer=user_tokenizer)

        make()
        return make
    if name.startswith("taubench:"):
        from .taubench import TauBenchEnv

        domain = name.partition(":")[2]
        TauBenchEnv(domain, user)
        return lambda: TauBenchEnv(domain, user)
    raise ConfigError(f"unknown env {name!r}; choose one of: {', '.join(ENVS)}")


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
            if lo >= hi:
                raise ConfigError(f"task range {part!r} holds no task: its end must come after its start, e.g. "
                                  f"{min(hi, lo)}:{max(hi, lo) + (lo == hi)}")
            if lo < 0 or hi > len(tasks):
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
