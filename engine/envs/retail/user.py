"""The simulated users of the retail env: a deterministic scripted one, and one played by a model.

The scripted user reads the agent's message with keyword rules, in this order:
the agent wraps up ("anything else?") or transfers -> ``###STOP###``; the
agent asks for identity before it was given -> identity; the agent asks to
confirm -> "yes" (or "no" when the message names an order that is not the
user's); identity asked again -> identity; the agent asks for details -> the
matching facts of the task; anything else -> the user restates the request.
"""

from __future__ import annotations

import re

from ...backends.base import Backend, GenerationRequest, SamplingParams
from ...records.episode import Message
from ...tokens import chat
from ...tokens.tokenizer import Tokenizer
from .tasks import RetailTask

STOP = "###STOP###"

_CLOSING = re.compile(r"anything else|anything more i can|have a (?:great|nice|good) day|goodbye")
_TRANSFER = re.compile(r"\btransferr?(?:ing|ed)?\b.*\b(?:human|agent|representative|specialist)")
_CONFIRM = re.compile(
    r"\bconfirm\b|\(yes/no\)|\byes or no\b|\b(?:shall|should|may|can) i (?:proceed|go ahead)\b"
    r"|\bwould you like me to (?:proceed|go ahead)\b|\bdo you want me to (?:proceed|go ahead)\b"
)
_IDENTITY = re.compile(r"e-?mail|\bzip\b|\bpostal code\b|\byour (?:full )?name\b|verify|identity|authenticat|identif")
_ORDER_ID = re.compile(r"#w\d{7}")
# Detail keywords, in the order their answers are given.
_DETAILS = (
    ("order", re.compile(r"\border\b")),
    ("items", re.compile(r"\bitems?\b|\bproducts?\b|\bwhat (?:would|do) you like to (?:return|exchange)\b")),
    ("new_items", re.compile(r"\boptions?\b|\bvariants?\b|\binstead\b|\bcolou?r\b|\bsize\b|\bnew items?\b")),
    ("reason", re.compile(r"\breason\b|\bwhy\b")),
    ("address", re.compile(r"\baddress\b")),
    ("payment", re.compile(r"\bpayment\b|\bpay\b|\brefund\b|\bcard\b|\bpaypal\b|\bgift\b")),
)


def identity_reply(task: RetailTask, asked: str = "") -> str:
    """How the user identifies itself; asked for an email it lacks, it offers name and zip."""
    ident = task.identity
    if ident["by"] == "email":
        return f"Sure, my email is {ident['email']}."
    prefix = "I don't remember my email, but " if "mail" in asked else "Sure, "
    return f"{prefix}my name is {ident['first_name']} {ident['last_name']} and my zip code is {ident['zip']}."


class ScriptedUser:
    """A deterministic user that drives one task from its facts."""

    def __init__(self) -> None:
        self.task: RetailTask | None = None
        self.identified = False
        self.stopped = False

    def reset(self, task: RetailTask) -> str:
        """Start the conversation; returns the user's opening message."""
        self.task = task
        self.identified = False
        self.stopped = False
        return task.opening

    def step(self, agent_text: str) -> str:
        """The user's reply to one agent message."""
        task = self.task
        if task is None:
            raise RuntimeError("ScriptedUser.step() before reset()")
        text = agent_text.lower()
        if _CLOSING.search(text) or _TRANSFER.search(text):
            self.stopped = True
            return f"No, that's all. Thank you! {STOP}"
        if not self.identified and _IDENTITY.search(text):
            self.identified = True
            return identity_reply(task, text)
        if _CONFIRM.search(text):
            strangers = [o for o in _ORDER_ID.findall(text) if o.upper() not in task.order_ids]
            if strangers:
                facts = task.facts.get("order", "")
                return f"No, {strangers[0].upper()} is not the order I mean. {facts}".strip()
            return "yes"
        if _IDENTITY.search(text):
            return identity_reply(task, text)
        said = [task.facts[key] for key, rule in _DETAILS if key in task.facts and rule.search(text)]
        if said:
            return " ".join(said)
        return f"Sorry, let me say it again: {task.opening[0].lower()}{task.opening[1:]}"


CUSTOMER_SYSTEM = """You play a customer who writes to the support agent of {business}.

Your situation and what you want:
{instruction}

Rules:
- Write only the customer's next message: one or two short sentences, plain text.
- Give details (order id, items, address, payment method) only when the agent asks for them.
- Never make up ids or details that your situation does not mention.
- When your request is done, or the agent transfers you to a human agent, reply with ###STOP### only."""

USER_SYSTEM = CUSTOMER_SYSTEM.replace("{business}", "an online store")
"""The retail user's system prompt (``{instruction}`` is the task's)."""

AGENT_GREETING = "Hi! How can I help you today?"


class LLMUser:
    """A user played by any Rollscope backend from the task's instruction.

    The roles are mirrored: the agent's messages are the model's ``user``
    turns and the customer's lines its ``assistant`` turns. The opening line
    is the task's scripted one (or the one ``begin`` is given), so ``reset``
    stays synchronous as the Env protocol wants; every reply after it is
    generated. ``follow`` adds a turn someone else said (a recorded reply
    replayed before a fork), so that the model carries on that conversation.

    ``reset`` takes a retail task, or, as tau-bench's user interface does, an
    ``instruction`` (which is then also the opening line).
    """

    def __init__(self, backend: Backend, tokenizer: Tokenizer, sampling: SamplingParams | None = None,
                 system: str = USER_SYSTEM) -> None:
        self.backend = backend
        self.tok = tokenizer
        self.sampling = sampling or SamplingParams(temperature=0.7, max_new_tokens=200)
        self.system = system
        self.task_id: str | None = None
        self.messages: list[Message] = []

    def begin(self, instruction: str, opening: str, task_id: str = "") -> str:
        """Start a conversation whose first user line is ``opening``; returns it."""
        self.task_id = task_id
        self.messages = [
            Message("system", self.system.format(instruction=instruction)),
            Message("user", AGENT_GREETING),
            Message("assistant", opening),
        ]
        return opening

    def reset(self, task: RetailTask | None = None, instruction: str | None = None) -> str:
        """Start the conversation; returns the user's opening message."""
        if task is not None:
            return self.begin(task.instruction, task.opening, task.id)
        text = str(instruction or "")
        return self.begin(text, text)

    def reopen(self, opening: str) -> None:
        """Make ``opening`` the first user line (a recorded one the task's differs from)."""
        if self.task_id is None:
            raise RuntimeError("LLMUser.reopen() before reset()")
        self.messages[2] = Message("assistant", opening)

    def follow(self, agent_text: str, reply: str) -> None:
        """Add a turn of the conversation that was not generated here."""
        if self.task_id is None:
            raise RuntimeError("LLMUser.follow() before reset()")
        self.messages += [Message("user", agent_text), Message("assistant", reply)]

    async def step(self, agent_text: str) -> str:
        """Generate the user's reply to one agent message."""
        if self.task_id is None:
            raise RuntimeError("LLMUser.step() before reset()")
        self.messages.append(Message("user", agent_text))
        prompt = chat.render(self.tok, self.messages, add_generation_prompt=True)
        request = GenerationRequest(
            prompt_text=prompt,
            prompt_ids=tuple(chat.encode(self.tok, prompt)),
            sampling=self.sampling,
            messages=tuple(self.messages),
            task_id=self.task_id,
            turn=sum(m.role == "assistant" for m in self.messages),
            extra={"role": "env_user"},
        )
        generation = await self.backend.generate(request)
        reply = chat.strip_end_of_turn(self.tok, generation.text).strip() or "Sorry, could you say that again?"
        self.messages.append(Message("assistant", reply))
        return reply

    def get_total_cost(self) -> float:  # tau-bench's user interface
        return 0.0
