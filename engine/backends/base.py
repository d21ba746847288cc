"""The backend seam: one async method, ``generate(request) -> Generation``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..records.episode import Generation, Message
from ..records.provenance import SamplingParams as SamplingParams  # where the request types are imported from

PROMPT_IDS = "prompt as token ids"
"""The key under ``describe()["refused"]`` of a backend whose server takes no token-id prompts."""
PROMPT_AS_TEXT = "prompt_as_text"
"""A key of ``describe()`` that says why a backend sends a prompt of token ids as its text."""


@dataclass(frozen=True)
class GenerationRequest:
    """What the loop asks a backend for.

    ``prompt_ids`` is set in token-in-token-out mode, ``prompt_text`` in
    retokenize mode; a backend uses whichever its protocol takes. The
    ``messages``, ``env``/``task_id`` and ``turn`` fields are context for
    backends that play a part rather than sample a model (scripted, manual).
    """

    prompt_text: str | None
    prompt_ids: tuple[int, ...] | None
    sampling: SamplingParams
    messages: tuple[Message, ...] = ()
    tools: tuple[dict[str, Any], ...] = ()
    task_id: str = ""
    turn: int = 0
    sample_index: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    on_progress: Callable[[int, str], None] | None = field(default=None, compare=False)
    """Told (tokens so far, text so far) as tokens arrive, by backends that see them arrive (the local one)."""
    on_prefill: Callable[[int, int, int], None] | None = field(default=None, compare=False)
    """Told (prompt tokens read so far, of how many, how many of them came from the prefix cache) as the
    prompt is read, before the first token, by backends that read it in parts (the local one)."""


@runtime_checkable
class Backend(Protocol):
    """Anything that turns a prompt into a generation."""

    name: str

    async def generate(self, request: GenerationRequest) -> Generation: ...

    def describe(self) -> dict[str, Any]:
        """Backend config recorded on each episode (model, url, ...)."""
        ...
