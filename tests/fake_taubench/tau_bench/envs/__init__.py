from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

from ..types import RESPOND_ACTION_NAME, Action, EnvResetResponse, EnvResponse, Task

DATA = {
    "users": {"ana_1": {"name": "Ana Ito", "zip": "10001", "orders": ["#A1", "#A2"]},
              "bo_2": {"name": "Bo Lee", "zip": "94110", "orders": ["#B1"]}},
    "orders": {"#A1": {"status": "pending", "total": 30.5}, "#A2": {"status": "delivered", "total": 12.0},
               "#B1": {"status": "pending", "total": 99.0}},
}


def _find_user(data: dict, name: str, zip: str) -> str:
    for uid, u in data["users"].items():
        if u["name"] == name and u["zip"] == zip:
            return uid
    return "Error: user not found"


def _order_status(data: dict, order_id: str) -> str:
    if order_id not in data["orders"]:
        return "Error: order not found"
    return json.dumps(data["orders"][order_id])


def _cancel(data: dict, order_id: str, reason: str) -> str:
    order = data["orders"].get(order_id)
    if order is None:
        return "Error: order not found"
    if order["status"] != "pending":
        return "Error: non-pending order cannot be cancelled"
    order["status"] = "cancelled"
    order["reason"] = reason
    return json.dumps(order)


def _transfer(data: dict, summary: str) -> str:
    return "Transfer successful"


TOOLS = {"find_user_id_by_name_zip": _find_user, "get_order_details": _order_status,
         "cancel_pending_order": _cancel, "transfer_to_human_agents": _transfer}


def _info(name: str, params: dict[str, str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": name.replace("_", " "),
            "parameters": {"type": "object", "properties": {k: {"type": v} for k, v in params.items()},
                           "required": list(params)}}}


TOOLS_INFO = [
    _info("find_user_id_by_name_zip", {"name": "string", "zip": "string"}),
    _info("get_order_details", {"order_id": "string"}),
    _info("cancel_pending_order", {"order_id": "string", "reason": "string"}),
    _info("transfer_to_human_agents", {"summary": "string"}),
]

TASKS = [
    Task("ana_1", "You are Ana Ito, zip 10001. Cancel order #A1 because you no longer need it.",
         [Action("find_user_id_by_name_zip", {"name": "Ana Ito", "zip": "10001"}),
          Action("cancel_pending_order", {"order_id": "#A1", "reason": "no longer needed"})]),
    Task("bo_2", "You are Bo Lee, zip 94110. Ask for the total of order #B1.",
         [Action("find_user_id_by_name_zip", {"name": "Bo Lee", "zip": "94110"}),
          Action("get_order_details", {"order_id": "#B1"})], outputs=["99.0"]),
    Task("ana_1", "You are Ana Ito, zip 10001. Try to cancel delivered order #A2; accept that it cannot be.",
         [Action("find_user_id_by_name_zip", {"name": "Ana Ito", "zip": "10001"}),
          Action("get_order_details", {"order_id": "#A2"})]),
]


class _NoUser:
    """tau-bench's human user reads stdin; the adapter must replace it."""

    def reset(self, instruction: str | None = None) -> str:
        raise RuntimeError("the default user was not replaced")

    def step(self, content: str) -> str:
        raise RuntimeError("the default user was not replaced")

    def get_total_cost(self) -> float:
        return 0.0


WIKI = "# Fake retail policy\nAuthenticate the user before acting. Confirm before cancelling."


class Env:
    def __init__(self, data: dict, tasks: list[Task], tools: dict[str, Any] | None = None,
                 tools_info: list[dict[str, Any]] | None = None, wiki: str = WIKI) -> None:
        self._initial = data
        self.data = copy.deepcopy(data)
        self.tasks = tasks
        self.task = tasks[0]
        self.tools_map = TOOLS if tools is None else tools
        self.tools_info = TOOLS_INFO if tools_info is None else tools_info
        self.wiki = wiki
        self.user: Any = _NoUser()
        self.actions: list[Action] = []
        self.terminate_tools = ["transfer_to_human_agents"]

    def _hash(self) -> str:
        return hashlib.sha256(json.dumps(self.data, sort_keys=True).encode()).hexdigest()

    def reset(self, task_index: int | None = None) -> EnvResetResponse:
        self.task = self.tasks[task_index or 0]
        self.data = copy.deepcopy(self._initial)
        self.actions = []
        return EnvResetResponse(self.user.reset(instruction=self.task.instruction), {"task": self.task.user_id})

    def step(self, action: Action) -> EnvResponse:
        self.actions.append(action)
        done = False
        if action.name == RESPOND_ACTION_NAME:
            obs = self.user.step(action.kwargs["content"])
            done = "###STOP###" in obs
        elif action.name in self.tools_map:
            try:
                obs = self.tools_map[action.name](self.data, **action.kwargs)
            except Exception as e:
                obs = f"Error: {e}"
            done = action.name in self.terminate_tools
        else:
            obs = f"Unknown action {action.name}"
        reward = 0.0
        info: dict[str, Any] = {"source": action.name}
        if done:
            reward, info["reward_info"] = self._reward()
        return EnvResponse(obs, reward, done, info)

    def _reward(self) -> tuple[float, dict[str, Any]]:
        got = self._hash()
        replay = copy.deepcopy(self._initial)
        for a in self.task.actions:
            if a.name in self.tools_map and a.name not in self.terminate_tools:
                self.tools_map[a.name](replay, **a.kwargs)
        outputs = {o: any(a.name == RESPOND_ACTION_NAME and o.lower() in a.kwargs["content"].lower().replace(",", "")
                          for a in self.actions) for o in self.task.outputs}
        want = hashlib.sha256(json.dumps(replay, sort_keys=True).encode()).hexdigest()
        ok = got == want and all(outputs.values())
        return (1.0 if ok else 0.0), {"db_match": got == want, "outputs": outputs}


def get_env(env_name: str, user_strategy: str, user_model: str, task_split: str, user_provider: str | None = None,
            task_index: int | None = None) -> Env:
    if env_name == "retail":
        return Env(DATA, TASKS)
    if env_name == "airline":
        from .airline import MockAirlineDomainEnv

        return MockAirlineDomainEnv()
    raise ValueError(f"Unknown environment: {env_name}")
