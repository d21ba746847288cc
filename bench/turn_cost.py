"""Per-turn cost of the loop early and late in a long tool episode, and slime-tau against slime's own code.

A 60-turn tool episode (every reply a tool call, every observation a tool
result) on the embedded SmolLM2 template, with the scripted policy. For each
turn the loop's own work is timed (the request's prompt, then committing the
reply: parse, env step, token deltas). The same conversation is then fed to
the transcription of slime's agent turn bookkeeping (render the prompt, then
``token_delta.py`` for the reply and for the tool result), timed the same way.
Prints medians over turns 2-6 and 56-60, and the ratios.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.backends.scripted import ScriptedBackend  # noqa: E402
from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from engine.envs.base import StepResult  # noqa: E402
from engine.loop.stepper import Stepper  # noqa: E402
from engine.presets import PRESETS  # noqa: E402
from engine.records.episode import Action, Message  # noqa: E402
from tests import reference_loops as ref  # noqa: E402

TURNS = 60
TOOLS = ({"type": "function", "function": {"name": "lookup", "description": "Look a record up by key.",
                                           "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                                                          "required": ["key"]}}},)


class LongToolEnv:
    """Answers every lookup with a record; never done."""

    name = "long"
    tools = TOOLS

    @property
    def tasks(self) -> list[str]:
        return ["t0"]

    def system_prompt(self, task_id: str) -> str:
        return "You are an agent with one tool. " * 20

    def reset(self, task_id: str) -> tuple[Message, ...]:
        return (Message("user", "Look up every record you can."),)

    def step(self, action: Action) -> StepResult:
        key = action.arguments.get("key", "")
        body = json.dumps({"key": key, "value": [key * 3, len(key)], "note": "record found"})
        return StepResult((Message("tool", body, name="lookup"),), 0.0, False, {})

    def reference_reply(self, task_id: str, history: Any, rng: random.Random, mistake_rate: float) -> str:
        n = sum(m.role == "tool" for m in history)
        return f'Next record.\n<tool_call>\n{{"name": "lookup", "arguments": {{"key": "k{n}"}}}}\n</tool_call>'

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


async def loop_costs(preset: str, tok: Any) -> tuple[list[float], Stepper]:
    env = LongToolEnv()
    config = PRESETS[preset].with_(max_turns=TURNS, stop_on_done=False)
    s = Stepper(env, ScriptedBackend(LongToolEnv().reference_reply, tok), tok, config, "t0", preset=preset)
    s.start()
    costs = []
    for _ in range(TURNS):
        t0 = time.perf_counter()
        g = await s.generate()
        gen_s = s.pending.generate_s if s.pending else 0.0
        await s.commit(g)
        # The backend's own time (the scripted policy writing and encoding its reply) is not the loop's.
        costs.append(time.perf_counter() - t0 - gen_s)
        if s.done:
            break
    return costs, s


def slime_costs(tok: Any, messages: list[Message]) -> list[float]:
    """slime's per-turn bookkeeping on the same conversation: render the prompt, two token deltas."""
    msgs = [m.to_template() for m in messages]
    first = next(i for i, m in enumerate(msgs) if m["role"] == "assistant")
    costs = []
    turn = 0
    for i in range(first, len(msgs) - 1, 2):
        t0 = time.perf_counter()
        text = tok.apply_chat_template(msgs[:i], tokenize=False, add_generation_prompt=True, tools=list(TOOLS))
        text.replace("You may call one or more functions to assist with the user query.", ref.TOOL_INSTRUCTION)
        ref.current_get_token_delta(tok, msgs[: i + 1], include_generation_prompt=turn > 0)
        ref.current_get_token_delta(tok, msgs[: i + 2])
        costs.append(time.perf_counter() - t0)
        turn += 1
    return costs


def window(xs: list[float], lo: int, hi: int) -> float:
    return statistics.median(xs[lo - 1 : hi])


def main() -> None:
    tok = load_tokenizer(None)
    rows = {}
    for preset in ("slime-tau", "tito"):
        best: list[float] | None = None
        for _ in range(3):
            costs, s = asyncio.run(loop_costs(preset, tok))
            best = costs if best is None else [min(a, b) for a, b in zip(best, costs)]
        assert best is not None and len(best) == TURNS, len(best or [])
        rows[preset] = best
        if preset == "slime-tau":
            messages = list(s.messages)
    ref_best: list[float] | None = None
    for _ in range(3):
        c = slime_costs(tok, messages)
        ref_best = c if ref_best is None else [min(a, b) for a, b in zip(ref_best, c)]
    assert ref_best is not None
    print(f"per-turn loop cost, {TURNS}-turn tool episode, SmolLM2 template (best of 3 runs, median of 5 turns)")
    print(f"{'':28s}{'turns 2-6':>12s}{'turns 56-60':>14s}{'late/early':>12s}")
    for name, xs in (("slime-tau", rows["slime-tau"]), ("tito", rows["tito"]), ("slime's token_delta.py", ref_best)):
        early, late = window(xs, 2, 6) * 1e3, window(xs, 56, 60) * 1e3
        print(f"{name:28s}{early:10.2f}ms{late:12.2f}ms{late / early:11.2f}x")
    print(f"slime-tau / slime at turns 56-60: {window(rows['slime-tau'], 56, 60) / window(ref_best, 56, 60):.2f}x")
    print(f"slime-tau / slime at turns 2-6:   {window(rows['slime-tau'], 2, 6) / window(ref_best, 2, 6):.2f}x")


if __name__ == "__main__":
    main()
