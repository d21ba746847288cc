"""A policy that plays an env's reference answers, with seeded mistakes.

It takes the reference policy as a callable (an env's ``reference_reply``),
not the env, so backends and envs do not import each other. Its text goes
through the same tokenizer as a model's would, so episodes have real token
ids and masks. A deterministic policy gives its output probability 1, so
every generated token carries logprob 0.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ConfigError
from ..records.episode import FinishReason, Generation, Message
from ..tokens.chat import encode, end_of_turn_texts
from ..tokens.tokenizer import Tokenizer
from .base import GenerationRequest

# (task id, the conversation so far, a seeded random stream, mistake rate) -> the reply text
ReferencePolicy = Callable[[str, Sequence[Message], random.Random, float], str]


class ScriptedBackend:
    name = "scripted"

    def __init__(
        self,
        reference: ReferencePolicy,
        tokenizer: Tokenizer,
        mistake_rate: float = 0.0,
        seed: int = 0,
        tokenizer_name: str = "",
    ) -> None:
        if not 0.0 <= mistake_rate <= 1.0:
            raise ConfigError(f"--mistake-rate must be between 0 and 1, not {mistake_rate}")
        self._reference = reference
        self._tok = tokenizer
        self.mistake_rate = mistake_rate
        self.seed = seed
        self.tokenizer_name = tokenizer_name
        eot = end_of_turn_texts(tokenizer)
        self._eot_text = eot[0] if eot else ""
        self._eot_id = tokenizer.convert_tokens_to_ids(self._eot_text) if eot else None

    def _rng(self, request: GenerationRequest) -> random.Random:
        # One stream per (seed, task, sample, turn): the batch's concurrency and
        # order cannot change what any episode sees.
        return random.Random(f"{self.seed}|{request.task_id}|{request.sample_index}|{request.turn}")

    async def generate(self, request: GenerationRequest) -> Generation:
        t0 = time.perf_counter()
        reply = self._reference(request.task_id, request.messages, self._rng(request), self.mistake_rate)
        ids = encode(self._tok, reply)
        finish: FinishReason = "stop"
        if len(ids) >= request.sampling.max_new_tokens:
            ids = ids[: request.sampling.max_new_tokens]
            finish = "length"
        elif self._eot_id is not None:
            ids = [*ids, self._eot_id]
        text = self._tok.decode(ids, skip_special_tokens=False)
        # Text prompts are not re-encoded just to count them: that dominated long tool episodes.
        n_prompt = len(request.prompt_ids) if request.prompt_ids is not None else 0
        return Generation(
            text=text,
            token_ids=tuple(ids),
            logprobs=tuple(0.0 for _ in ids),
            finish_reason=finish,
            latency_s=time.perf_counter() - t0,
            prompt_tokens=n_prompt,
            model=f"scripted(mistake_rate={self.mistake_rate})",
        )

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "mistake_rate": self.mistake_rate, "seed": self.seed, "tokenizer": self.tokenizer_name}
