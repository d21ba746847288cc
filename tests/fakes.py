"""Small backends for tests that need a model-shaped answer without a model, and records in foreign shapes."""

from __future__ import annotations

import copy
import json
from typing import Any

from engine.backends.base import GenerationRequest
from engine.records.episode import Generation
from engine.tokens.chat import encode, end_of_turn_ids


class Recording:
    """A backend wrapper that keeps every request, so a test knows what the model received."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = getattr(inner, "name", "recording")
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest) -> Generation:
        self.requests.append(request)
        return await self.inner.generate(request)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


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


TAU_WIKI = "# Fake retail policy\nAuthenticate the user before acting. Confirm before cancelling."


def tau_cancel_result(reward: float = 1.0, trial: int = 0) -> dict:
    """A tau-bench ``run.py`` result: task 0 of the fake ``tau_bench`` (cancel #A1) as GPT-4o might have run
    it, with a user that speaks its own words."""
    traj = [
        {"role": "system", "content": TAU_WIKI},
        {"role": "user", "content": "Hi, I'm Ana Ito (zip 10001) and I want to cancel an order."},
        {"role": "assistant", "content": None, "tool_calls": [
            openai_tool_call("c1", "find_user_id_by_name_zip", {"name": "Ana Ito", "zip": "10001"})]},
        {"role": "tool", "tool_call_id": "c1", "name": "find_user_id_by_name_zip", "content": "ana_1"},
        {"role": "assistant", "content": "Which order, and shall I proceed with cancelling it? (yes/no)"},
        {"role": "user", "content": "Order #A1, I no longer need it. Yes."},
        {"role": "assistant", "content": None, "tool_calls": [
            openai_tool_call("c2", "cancel_pending_order", {"order_id": "#A1", "reason": "no longer needed"})]},
        {"role": "tool", "tool_call_id": "c2", "name": "cancel_pending_order",
         "content": json.dumps({"status": "cancelled", "total": 30.5, "reason": "no longer needed"})},
        {"role": "assistant", "content": "Done: #A1 is cancelled. Anything else?"},
        {"role": "user", "content": "No, thanks! ###STOP###"},
    ]
    return {"task_id": 0, "reward": reward, "info": {"reward_info": {"db_match": reward == 1.0}}, "traj": traj,
            "trial": trial}


def older_airline(data: dict) -> dict:
    """The airline database as it was: each address's ``state`` under ``province``, in the same place."""
    old = copy.deepcopy(data)
    for u in old["users"].values():
        u["address"] = {("province" if k == "state" else k): v for k, v in u["address"].items()}
    return old


def airline_result(i: int, trial: int, *, older: bool, reads_user: bool, cancels: int = 0,
                   reward: float = 1.0, text_cancel: bool = False) -> dict:
    """Task ``i`` of the stand-in's airline domain (cancel the user's first reservation) as an agent ran it;
    ``cancels`` names which of the user's reservations it cancelled, ``older`` runs its tools on the older
    database, ``text_cancel`` records the cancellation's output as the plain text an older tool said."""
    from tau_bench.envs.airline import DATA, TOOLS, WIKI, _user_id

    db = older_airline(DATA) if older else copy.deepcopy(DATA)
    uid, rid = _user_id(i), f"R{i}A{i}X{cancels}"
    traj: list[dict] = [{"role": "system", "content": WIKI},
                        {"role": "user", "content": f"Hi, I need to cancel a flight. My user id is {uid}."}]

    def call(n: int, name: str, args: dict, output: str | None = None) -> None:
        traj.append({"role": "assistant", "content": None, "tool_calls": [openai_tool_call(f"c{n}", name, args)]})
        traj.append({"role": "tool", "tool_call_id": f"c{n}", "name": name,
                     "content": TOOLS[name](db, **args) if output is None else output})

    if reads_user:
        call(1, "get_user_details", {"user_id": uid})
    call(2, "get_reservation_details", {"reservation_id": rid})
    traj += [{"role": "assistant", "content": f"Reservation {rid}: shall I proceed with cancelling it? (yes/no)"},
             {"role": "user", "content": "Yes, please."}]
    call(3, "cancel_reservation", {"reservation_id": rid}, "Reservation cancelled." if text_cancel else None)
    traj += [{"role": "assistant", "content": f"Done: {rid} is cancelled. Anything else?"},
             {"role": "user", "content": "No, thanks. ###STOP###"}]
    return {"task_id": i, "reward": reward, "info": {}, "traj": traj, "trial": trial}


class Replay:
    """The generations of a recorded episode, in order, as a backend (the last one again if a loop asks more)."""

    name = "replay"

    def __init__(self, gens: list[Generation]) -> None:
        self.gens, self.i = gens, 0

    async def generate(self, request: Any) -> Generation:
        g = self.gens[min(self.i, len(self.gens) - 1)]
        self.i += 1
        return g

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}
