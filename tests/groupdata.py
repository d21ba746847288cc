"""GRPO groups with known shapes, for the group view's tests: retail episodes under ``tito`` with the
scripted policy, one group whose samples part ways at a known turn and one with zero reward spread."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.backends.base import GenerationRequest
from engine.backends.scripted import ScriptedBackend
from engine.envs import env_factory
from engine.loop.stepper import Stepper, drive
from engine.presets import PRESETS
from engine.records.episode import Episode, Generation

RUN = "grouprun"
DIVERGE_AT = 2
ASIDE = "Let me think about that for a moment before I do anything."


class Deviating:
    """The reference policy, but at one turn a reply that calls no tool."""

    name = "scripted"

    def __init__(self, inner: ScriptedBackend, tok: Any, at: int) -> None:
        self.inner, self.tok, self.at = inner, tok, at

    async def generate(self, request: GenerationRequest) -> Generation:
        if request.turn == self.at:
            ids = self.tok.encode(ASIDE + "<|im_end|>", add_special_tokens=False)
            return Generation(text=ASIDE + "<|im_end|>", token_ids=tuple(ids), model="scripted")
        return await self.inner.generate(request)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def group(tok: Any, group_id: str, task: int, samples: int, deviate: tuple[int, ...] = ()) -> list[Episode]:
    """``samples`` retail episodes of one task in one group; the samples in ``deviate`` leave the reference
    policy at turn ``DIVERGE_AT``."""
    make = env_factory("retail")
    out = []
    for s in range(samples):
        env = make()
        backend: Any = ScriptedBackend(env.reference_reply, tok, tokenizer_name="smollm2")
        if s in deviate:
            backend = Deviating(backend, tok, DIVERGE_AT)
        stepper = Stepper(env, backend, tok, PRESETS["tito"], env.tasks[task], preset="tito", run_id=RUN,
                          group_id=group_id, sample_index=s, tokenizer_name="smollm2")
        out.append(asyncio.run(drive(stepper)))
    return out
