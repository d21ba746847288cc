"""Policies by name: the backend ``--policy`` (or the Launch and Step forms) asks for."""

from __future__ import annotations

from collections.abc import Callable

from ..backends.base import Backend
from ..envs.base import Env
from ..errors import ConfigError
from ..tokens.tokenizer import Tokenizer

POLICIES = ("scripted", "local", "sglang", "openai")


def make_backend(
    policy: str,
    make_env: Callable[[], Env] | None,
    tokenizer: Tokenizer,
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
        from ..backends.scripted import ScriptedBackend

        if make_env is None:
            raise ConfigError("the scripted policy needs an env to play")
        return ScriptedBackend(make_env().reference_reply, tokenizer, mistake_rate=mistake_rate, seed=seed, tokenizer_name=tokenizer_name)
    if policy == "local":
        from ..backends.local import LocalBackend

        backend = LocalBackend(model=model, tokenizer=tokenizer)
        backend.load()  # a missing model is a user error: report it before any episode starts
        return backend
    if policy in ("sglang", "openai"):
        if not url:
            raise ConfigError(f"--policy {policy} needs --url (e.g. http://127.0.0.1:30000)")
        if policy == "sglang":
            from ..backends.sglang import SGLangBackend

            return SGLangBackend(url, tokenizer=tokenizer, model=model or "", timeout=timeout, retries=retries)
        from ..backends.openai import OpenAIBackend

        if not model:
            raise ConfigError("--policy openai needs --model (the served model's name)")
        return OpenAIBackend(url, model, mode=api_mode, tokenizer=tokenizer, timeout=timeout, retries=retries)
    raise ConfigError(f"unknown policy {policy!r}; choose one of: {', '.join(POLICIES)}")
