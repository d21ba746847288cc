"""A small tool-using env for tests: look up a price, then answer with it.

Its reference policy calls ``get_price`` for the item, then answers with
the number; it lets tests exercise tool messages without the retail env.
"""

from __future__ import annotations

import json
import random
from typing import Any

from engine.envs.base import StepResult
from engine.errors import EnvError
from engine.records.episode import Action, Message

PRICES = {"apple": 3, "pear": 5, "fig": 11, "kiwi": 7}

TOOLS = (
    {
        "type": "function",
        "function": {
            "name": "get_price",
            "description": "Price of an item in dollars",
            "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
        },
    },
)


class PriceEnv:
    name = "price"
    tools = TOOLS

    def __init__(self, fail_on: str | None = None) -> None:
        self._item = ""
        self.fail_on = fail_on

    @property
    def tasks(self) -> list[str]:
        return sorted(PRICES)

    def system_prompt(self, task_id: str) -> str | None:
        return "You are a shop assistant. Use tools to look up prices."

    def reset(self, task_id: str) -> tuple[Message, ...]:
        self._item = task_id
        return (Message("user", f"How much does one {task_id} cost?"),)

    def step(self, action: Action) -> StepResult:
        if action.name == "get_price":
            item = action.arguments.get("item", "")
            if item == self.fail_on:
                raise EnvError(f"price database is down for {item}")
            price = PRICES.get(item)
            body = json.dumps({"item": item, "price": price}) if price is not None else f"Error: no item {item}"
            return StepResult((Message("tool", body, name="get_price"),), 0.0, False, {})
        if action.is_respond:
            ok = str(PRICES[self._item]) in action.text
            return StepResult((Message("user", "Thanks!###STOP###"),), 1.0 if ok else 0.0, True, {"success": ok})
        return StepResult((Message("tool", f"Error: unknown tool {action.name}", name=action.name),), 0.0, False, {})

    def reference_reply(self, task_id: str, history: tuple[Message, ...], rng: random.Random, mistake_rate: float) -> str:
        looked_up = any(m.role == "tool" for m in history)
        if not looked_up:
            if rng.random() < mistake_rate:
                return '<tool_call>\n{"name": "get_price", "arguments": {"item": ' + task_id + "}}\n</tool_call>"
            return 'Let me check.\n<tool_call>\n{"name": "get_price", "arguments": {"item": "' + task_id + '"}}\n</tool_call>'
        return f"One {task_id} costs {PRICES[task_id]} dollars."

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}
