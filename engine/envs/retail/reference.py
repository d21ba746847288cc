"""The scripted retail agent: a task's reference conversation as real text, with seeded mistakes.

Tool calls are written as Hermes/Qwen blocks, the shape the ``hermes``
parser reads. Where the agent is in its script is worked out from the
history alone (the backend that asks holds no episode state): walk the
assistant messages and advance past each one that is the next step. A
mistaken message is not a step, so the next turn does that step again, the
way an agent recovers; a slipped argument the tool accepted counts as done,
since the agent cannot tell. What a mistake costs is therefore what it did:
a chatty reply or a rejected call costs a turn, an accepted wrong write
leaves the database wrong (reward 0), malformed JSON ends a slime-style
episode.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

from ...records.episode import Action, Message
from ...tokens.toolcalls import parse_hermes
from .data import base_db
from .kinds import ANYTHING_ELSE, Say, Step
from .tasks import RetailTask
from .tools import CANCEL_REASONS, WRITE_TOOLS

CHATTY = (
    "Sure! I'm happy to help with that. Let me take a moment to look into it for you.",
    "Thanks so much for reaching out! We really value our customers and always aim to make things right.",
    "Great question! There are a few ways we could go about this, so let me think about the best one.",
    "I understand how frustrating that can be. Rest assured we'll sort this out together.",
)


def tool_call_text(action: Action) -> str:
    """The Hermes/Qwen tool-call block for an action."""
    return "<tool_call>\n" + json.dumps({"name": action.name, "arguments": action.arguments}) + "\n</tool_call>"


def step_text(step: Step) -> str:
    return step.text if isinstance(step, Say) else tool_call_text(step)


def _matches(content: str, step: Step, answer: Message | None) -> bool:
    """Whether an assistant message did ``step``; ``answer`` is the message that followed it.

    A call to the step's tool with other arguments counts as done when the
    tool accepted it: the agent cannot tell its slip from the right call, so
    it moves on (and a wrong write stays in the database). A rejected call is
    tried again.
    """
    if isinstance(step, Say):
        return " ".join(content.split()) == " ".join(step.text.split())
    parsed = parse_hermes(content)
    if parsed.error is not None or len(parsed.calls) != 1 or parsed.calls[0].name != step.name:
        return False
    if parsed.calls[0].arguments == step.arguments:
        return True
    return answer is not None and answer.role == "tool" and not answer.content.startswith("Error")


def script_position(script: tuple[Step, ...], history: Sequence[Message]) -> int:
    """How many steps of the script the assistant messages in ``history`` have done."""
    pos = 0
    for i, m in enumerate(history):
        if m.role != "assistant" or pos >= len(script):
            continue
        step = script[pos]
        answer = history[i + 1] if i + 1 < len(history) else None
        if _matches(m.content, step, answer):
            pos += 1
        elif (isinstance(step, Say) and step.confirm and pos + 1 < len(script)
              and _matches(m.content, script[pos + 1], answer)):
            pos += 2  # the write went out without its confirmation question
    return pos


def reference_reply(task: RetailTask, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
    """The reference agent's next message; with probability ``mistake_rate`` a realistic mistake instead."""
    script = task.script
    pos = script_position(script, history)
    if pos >= len(script):
        return ANYTHING_ELSE
    step = script[pos]
    if rng.random() >= mistake_rate:
        return step_text(step)
    nxt = script[pos + 1] if pos + 1 < len(script) else None
    return _mistake(task, step, nxt, rng)


def _mistake(task: RetailTask, step: Step, nxt: Step | None, rng: random.Random) -> str:
    if isinstance(step, Say):
        if step.confirm and isinstance(nxt, Action) and rng.random() < 0.5:
            return tool_call_text(nxt)  # skips the confirmation
        return rng.choice(CHATTY)
    # Slips in a write's details are the costly, realistic kind; malformed
    # JSON is rarer there than in the many quick lookups.
    malformed, wrong = (0.1, 0.85) if step.name in WRITE_TOOLS else (0.25, 0.65)
    r = rng.random()
    if r < malformed:
        return _malformed(step, rng)
    if r < wrong:
        slip = _wrong_argument(task, step, rng)
        if slip is not None:
            return tool_call_text(slip)
    return rng.choice(CHATTY)


def _malformed(action: Action, rng: random.Random) -> str:
    body = json.dumps({"name": action.name, "arguments": action.arguments})
    broken = rng.choice((
        body[:-1],  # a brace short
        body.replace('"', "'"),  # Python-style quotes
        body[:-1] + ",}",  # trailing comma
    ))
    return "<tool_call>\n" + broken + "\n</tool_call>"


def _typo(value: str, rng: random.Random) -> str:
    """Change one digit (or, with no digits, one letter) of an id."""
    digits = [i for i, c in enumerate(value) if c.isdigit()]
    spots = digits or [i for i, c in enumerate(value) if c.isalpha()]
    if not spots:
        return value + "x"
    i = rng.choice(spots)
    pool = "0123456789" if value[i].isdigit() else "abcdefghijklmnopqrstuvwxyz"
    return value[:i] + rng.choice([c for c in pool if c != value[i]]) + value[i + 1:]


def _other(choices: list[str], current: str, rng: random.Random) -> str:
    rest = [c for c in choices if c != current]
    return rng.choice(rest) if rest else _typo(current, rng)


_WRITE_SLIPS = ("item_ids", "new_item_ids", "payment_method_id", "reason", "zip", "address1")
_READ_SLIPS = ("order_id", "user_id", "email", "zip", "product_id", "expression")


def _wrong_argument(task: RetailTask, action: Action, rng: random.Random) -> Action | None:
    """The same call with one argument wrong in a way an agent plausibly gets wrong.

    Where possible the wrong value is a real one (another order of the user,
    another item, the other reason), so a write can succeed on the wrong
    target; otherwise it is an id with a typo, which the tool rejects.
    """
    db = base_db()
    user = db["users"][task.user_id]
    args: dict[str, Any] = dict(action.arguments)
    # A write's slips are mostly in its details (which item, which card, the zip);
    # a read's in the id it looks up.
    keys = _WRITE_SLIPS if action.name in WRITE_TOOLS else _READ_SLIPS
    candidates = [k for k in keys if k in args] or [k for k in ("order_id", "user_id") if k in args]
    if not candidates:
        return None
    key = rng.choice(candidates)
    value = args[key]
    if key == "order_id":
        args[key] = _other(list(user["orders"]), value, rng) if action.name in WRITE_TOOLS else _typo(value, rng)
    elif key == "item_ids":
        order = db["orders"].get(args.get("order_id", ""))
        held = [i["item_id"] for i in order["items"]] if order else []
        i = rng.randrange(len(value))
        args[key] = [*value[:i], _other([h for h in held if h not in value] or held, value[i], rng), *value[i + 1:]]
    elif key == "new_item_ids":
        i = rng.randrange(len(value))
        product = next((p for p in db["products"].values() if value[i] in p["variants"]), None)
        others = sorted(k for k, v in product["variants"].items() if v["available"]) if product else []
        args[key] = [*value[:i], _other(others, value[i], rng), *value[i + 1:]]
    elif key == "payment_method_id":
        args[key] = _other(sorted(user["payment_methods"]), value, rng)
    elif key == "reason":
        args[key] = _other(list(CANCEL_REASONS), value, rng)
    elif key in ("expression", "address1"):
        args[key] = re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), value, count=1)
    else:
        args[key] = _typo(str(value), rng)
    return Action(action.name, args)
