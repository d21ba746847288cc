"""GRPO groups with known shapes, for the group view's tests: retail episodes under ``tito`` with the
scripted policy, one group whose samples part ways at a known turn and one with zero reward spread."""

from __future__ import annotations

import asyncio
from typing import Any

from engine.backends.base import GenerationRequest
from engine.backends.scripted import ScriptedBackend
from engine.envs import env_factory
from engine.envs.retail.reference import tool_call_text
from engine.loop.stepper import Stepper, drive
from engine.presets import PRESETS
from engine.records.episode import Action, Episode, Generation

RUN = "grouprun"
DIVERGE_AT = 2
ASIDE = "Let me think about that for a moment before I do anything."
WRONG_LOOKUP = tool_call_text(Action("get_order_details", {"order_id": "#W0000000"}))
"""A call of an order that does not exist: a sample that makes it parts from the others there."""


class Deviating:
    """The reference policy, but at one turn another reply (by default one that calls no tool)."""

    name = "scripted"

    def __init__(self, inner: ScriptedBackend, tok: Any, at: int, reply: str = ASIDE) -> None:
        self.inner, self.tok, self.at, self.reply = inner, tok, at, reply

    async def generate(self, request: GenerationRequest) -> Generation:
        if request.turn == self.at:
            ids = self.tok.encode(self.reply + "<|im_end|>", add_special_tokens=False)
            return Generation(text=self.reply + "<|im_end|>", token_ids=tuple(ids), model="scripted")
        return await self.inner.generate(request)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def group(tok: Any, group_id: str, task: int, samples: int, deviate: tuple[int, ...] = (),
          reply: str = ASIDE) -> list[Episode]:
    """``samples`` retail episodes of one task in one group; the samples in ``deviate`` leave the reference
    policy at turn ``DIVERGE_AT`` with ``reply`` (an aside to the user, or ``WRONG_LOOKUP``), then follow it
    again."""
    make = env_factory("retail")
    out = []
    for s in range(samples):
        env = make()
        backend: Any = ScriptedBackend(env.reference_reply, tok, tokenizer_name="smollm2")
        if s in deviate:
            backend = Deviating(backend, tok, DIVERGE_AT, reply)
        stepper = Stepper(env, backend, tok, PRESETS["tito"], env.tasks[task], preset="tito", run_id=RUN,
                          group_id=group_id, sample_index=s, tokenizer_name="smollm2")
        out.append(asyncio.run(drive(stepper)))
    return out
