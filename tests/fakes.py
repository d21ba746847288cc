"""Small backends for tests that need a model-shaped answer without a model."""

from __future__ import annotations

import json
from typing import Any

from engine.backends.base import GenerationRequest
from engine.chat import encode, end_of_turn_ids
from engine.records import Generation


class FixedReplyBackend:
    """A backend that always says the same text, tokenized like a model's output."""

    name = "fixed"

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.tok = tokenizer
        self.text = text

    async def generate(self, request: GenerationRequest) -> Generation:
        ids = encode(self.tok, self.text) + sorted(end_of_turn_ids(self.tok))[:1]
        return Generation(
            text=self.tok.decode(ids, skip_special_tokens=False),
            token_ids=tuple(ids),
            logprobs=tuple(-0.25 for _ in ids),
            model="fixed",
        )

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def openai_tool_call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One entry of an OpenAI assistant message's ``tool_calls``."""
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
