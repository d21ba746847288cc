"""The retail env: its store, tools, reward, scripted user and scripted agent, through the real loop."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections import Counter
from typing import Any

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.base import Env, StepResult
from engine.envs.retail import RetailEnv, data, tools
from engine.envs.retail.env import expected_fingerprint, score
from engine.envs.retail.kinds import ANYTHING_ELSE, ASK_IDENTITY, Say
from engine.envs.retail.reference import CHATTY, reference_reply, script_position, tool_call_text
from engine.envs.retail.tasks import all_tasks, get_task
from engine.envs.retail.user import STOP, LLMUser, ScriptedUser
from engine.errors import ConfigError, EnvError
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import RESPOND, Action, Generation, Message, Status
from engine.tokens import chat
from engine.tokens.toolcalls import parse_hermes

# -- helpers -------------------------------------------------------------------


def orders(db: dict[str, Any], status: str, pred=lambda o: True) -> list[dict[str, Any]]:
    return [o for _, o in sorted(db["orders"].items()) if o["status"] == status and pred(o)]


def methods(db: dict[str, Any], order: dict[str, Any]) -> dict[str, Any]:
    return db["users"][order["user_id"]]["payment_methods"]


def run(db: dict[str, Any], name: str, **arguments: Any) -> str:
    return tools.run_tool(db, name, arguments)


def respond(text: str) -> Action:
    return Action(RESPOND, {"content": text}, text)


def episode(tok, task_id: str, mistake_rate: float, seed: int = 0):
    backend = ScriptedBackend(RetailEnv().reference_reply, tok, mistake_rate=mistake_rate, seed=seed)
    return asyncio.run(run_episode(RetailEnv(), backend, tok, PRESETS["slime-tau"], task_id, preset="slime-tau"))


@pytest.fixture
def db() -> dict[str, Any]:
    return data.fresh_db()


# -- data ----------------------------------------------------------------------


@pytest.mark.solo
def test_store_is_deterministic_sized_and_fast():
    t0 = time.perf_counter()
    a = data.generate()
    assert time.perf_counter() - t0 < 1.0
    assert data.db_hash(a) == data.db_hash(data.generate()) == data.db_hash(data.base_db())
    assert data.db_hash(data.generate(seed=1)) != data.db_hash(a)
    assert len(a["users"]) == data.N_USERS >= 300
    assert 900 <= len(a["orders"]) <= 1100
    assert len(a["products"]) == len(data.CATALOGUE)
    variants = [v for p in a["products"].values() for v in p["variants"].values()]
    assert len(variants) >= 150 and any(not v["available"] for v in variants)
    assert {o["status"] for o in a["orders"].values()} == {"pending", "processed", "delivered", "cancelled"}
    for uid, user in a["users"].items():
        assert all(a["orders"][o]["user_id"] == uid for o in user["orders"])
    keys = {(u["name"]["first_name"], u["name"]["last_name"], u["address"]["zip"]) for u in a["users"].values()}
    assert len(keys) == len(a["users"])  # name + zip names one user


def test_each_episode_gets_its_own_copy():
    one, two = data.fresh_db(), data.fresh_db()
    oid = next(iter(one["orders"]))
    one["orders"][oid]["status"] = "lost"
    assert two["orders"][oid]["status"] != "lost" and data.base_db()["orders"][oid]["status"] != "lost"
    assert data.db_fingerprint(two) != data.db_fingerprint(one)
    assert data.db_fingerprint(two) == data.db_fingerprint(data.fresh_db())


# -- tools ---------------------------------------------------------------------


def test_schemas_match_functions():
    names = [s["function"]["name"] for s in tools.TOOL_SCHEMAS]
    assert len(names) == len(set(names)) == 16 and set(names) == set(tools.TOOL_FUNCTIONS)
    for s in tools.TOOL_SCHEMAS:
        assert s["type"] == "function" and s["function"]["description"]
        assert s["function"]["parameters"]["type"] == "object"
    assert tools.WRITE_TOOLS < set(names)
    assert RetailEnv.tools == tools.TOOL_SCHEMAS


def test_find_user(db):
    user = db["users"][sorted(db["users"])[3]]
    assert run(db, "find_user_id_by_email", email=user["email"].upper()) == user["user_id"]
    name = user["name"]
    assert run(db, "find_user_id_by_name_zip", first_name=name["first_name"].lower(), last_name=name["last_name"],
               zip=user["address"]["zip"]) == user["user_id"]
    assert run(db, "find_user_id_by_email", email="nobody@example.com") == "Error: user not found"
    assert run(db, "find_user_id_by_name_zip", first_name="No", last_name="Body", zip="00000") == "Error: user not found"


def test_reads_and_errors(db):
    oid = next(iter(db["orders"]))
    assert json.loads(run(db, "get_order_details", order_id=oid))["order_id"] == oid
    assert run(db, "get_order_details", order_id="#W0000000") == "Error: order not found"
    assert run(db, "get_user_details", user_id="ghost") == "Error: user not found"
    product_types = json.loads(run(db, "list_all_product_types"))
    assert len(product_types) == len(db["products"])
    assert json.loads(run(db, "get_product_details", product_id=product_types["Rain Boots"]))["name"] == "Rain Boots"
    assert run(db, "calculate", expression="(12.5 + 3) * 2") == "31.0"
    assert run(db, "calculate", expression="__import__('os')").startswith("Error")
    assert run(db, "calculate", expression="1 / 0") == "Error: division by zero"
    assert run(db, "think", thought="hmm") == ""
    assert run(db, "no_such_tool").startswith("Error: unknown tool")
    assert run(db, "get_order_details", id=oid).startswith("Error: TypeError")  # wrong argument name


def test_cancel(db):
    order = orders(db, "pending", lambda o: methods(db, o)[o["payment_history"][0]["payment_method_id"]]["source"]
                   == "gift_card")[0]
    card = methods(db, order)[order["payment_history"][0]["payment_method_id"]]
    before = card["balance"]
    assert run(db, "cancel_pending_order", order_id=order["order_id"], reason="changed my mind").startswith(
        "Error: invalid reason")
    out = json.loads(run(db, "cancel_pending_order", order_id=order["order_id"], reason="ordered by mistake"))
    assert out["status"] == "cancelled" and out["payment_history"][-1]["transaction_type"] == "refund"
    assert card["balance"] == pytest.approx(before + order["payment_history"][0]["amount"])  # gift cards refund at once
    again = run(db, "cancel_pending_order", order_id=order["order_id"], reason="ordered by mistake")
    assert again == "Error: non-pending order cannot be cancelled"
    delivered = orders(db, "delivered")[0]
    assert run(db, "cancel_pending_order", order_id=delivered["order_id"], reason="no longer needed").startswith("Error")


def test_modify_address_and_payment(db):
    new = data.random_address(random.Random(1))
    order = orders(db, "pending")[0]
    assert json.loads(run(db, "modify_pending_order_address", order_id=order["order_id"], **new))["address"] == new
    shipped = orders(db, "processed")[0]
    assert run(db, "modify_pending_order_address", order_id=shipped["order_id"], **new) == (
        "Error: non-pending order cannot be modified")
    assert run(db, "modify_pending_order_address", order_id=order["order_id"], **{**new, "city": ""}).startswith("Error")
    uid = order["user_id"]
    assert json.loads(run(db, "modify_user_address", user_id=uid, **new))["address"] == new

    def has_other_card(o):
        current = o["payment_history"][0]["payment_method_id"]
        return any(pid != current and p["source"] != "gift_card" for pid, p in methods(db, o).items())

    order = orders(db, "pending", has_other_card)[0]
    current = order["payment_history"][0]["payment_method_id"]
    other = next(pid for pid, p in sorted(methods(db, order).items()) if pid != current and p["source"] != "gift_card")
    stranger = next(pid for u in db["users"].values() if u["user_id"] != order["user_id"] for pid in u["payment_methods"])
    assert run(db, "modify_pending_order_payment", order_id=order["order_id"], payment_method_id=current).startswith(
        "Error: the new payment method should be different")
    assert run(db, "modify_pending_order_payment", order_id=order["order_id"], payment_method_id=stranger) == (
        "Error: payment method not found")
    out = json.loads(run(db, "modify_pending_order_payment", order_id=order["order_id"], payment_method_id=other))
    assert [p["transaction_type"] for p in out["payment_history"]] == ["payment", "payment", "refund"]
    assert out["payment_history"][1]["payment_method_id"] == other


def test_gift_card_must_cover_the_order(db):
    def poor_card(o):
        return any(pm["source"] == "gift_card" and pm["balance"] < o["payment_history"][0]["amount"]
                   and pm["id"] != o["payment_history"][0]["payment_method_id"] for pm in methods(db, o).values())

    order = orders(db, "pending", poor_card)[0]
    card = next(pm for pm in methods(db, order).values() if pm["source"] == "gift_card")
    result = run(db, "modify_pending_order_payment", order_id=order["order_id"], payment_method_id=card["id"])
    assert result == "Error: insufficient gift card balance to pay for the order"


def _swappable(db, o):
    return any(v["available"] and vid != i["item_id"]
               for i in o["items"] for vid, v in db["products"][i["product_id"]]["variants"].items())


def _swap_args(db, order):
    item = next(i for i in order["items"] if _swappable(db, {"items": [i]}))
    variants = db["products"][item["product_id"]]["variants"]
    new = next(vid for vid, v in sorted(variants.items()) if v["available"] and vid != item["item_id"])
    pm = next(pid for pid, p in sorted(methods(db, order).items()) if p["source"] != "gift_card") \
        if any(p["source"] != "gift_card" for p in methods(db, order).values()) else None
    return item, new, pm


def test_modify_items(db):
    order = orders(db, "pending", lambda o: _swappable(db, o) and any(
        p["source"] != "gift_card" for p in methods(db, o).values()))[0]
    item, new, pm = _swap_args(db, order)
    other_product = next(vid for p in db["products"].values() if p["product_id"] != item["product_id"]
                         for vid in p["variants"])
    oid = order["order_id"]
    assert "not of the same product" in run(db, "modify_pending_order_items", order_id=oid, item_ids=[item["item_id"]],
                                            new_item_ids=[other_product], payment_method_id=pm)
    assert "should match" in run(db, "modify_pending_order_items", order_id=oid, item_ids=[item["item_id"]],
                                 new_item_ids=[new, new], payment_method_id=pm)
    out = json.loads(run(db, "modify_pending_order_items", order_id=oid, item_ids=[item["item_id"]],
                         new_item_ids=[new], payment_method_id=pm))
    assert out["status"] == "pending (item modified)" and new in [i["item_id"] for i in out["items"]]
    again = run(db, "modify_pending_order_items", order_id=oid, item_ids=[new], new_item_ids=[item["item_id"]],
                payment_method_id=pm)
    assert again == "Error: non-pending order cannot be modified"  # items change once


def test_unavailable_variant_is_refused(db):
    for order in orders(db, "pending"):
        for item in order["items"]:
            gone = [vid for vid, v in db["products"][item["product_id"]]["variants"].items() if not v["available"]]
            if gone and gone[0] != item["item_id"]:
                pm = next(iter(methods(db, order)))
                out = run(db, "modify_pending_order_items", order_id=order["order_id"], item_ids=[item["item_id"]],
                          new_item_ids=[gone[0]], payment_method_id=pm)
                assert out == f"Error: new item {gone[0]} not available"
                return
    pytest.fail("no pending order with an unavailable alternative")


def test_return_and_exchange(db):
    order = orders(db, "delivered", lambda o: len(o["items"]) >= 2)[0]
    oid, original = order["order_id"], order["payment_history"][0]["payment_method_id"]
    first = order["items"][0]["item_id"]
    assert run(db, "return_delivered_order_items", order_id=oid, item_ids=["123"], payment_method_id=original) == (
        "Error: item 123 not found in the order")
    non_gift = [pid for pid, p in methods(db, order).items() if pid != original and p["source"] != "gift_card"]
    if non_gift:
        assert "original payment method or a gift card" in run(
            db, "return_delivered_order_items", order_id=oid, item_ids=[first], payment_method_id=non_gift[0])
    out = json.loads(run(db, "return_delivered_order_items", order_id=oid, item_ids=[first], payment_method_id=original))
    assert out["status"] == "return requested" and out["return_items"] == [first]
    pending = orders(db, "pending")[0]
    assert run(db, "return_delivered_order_items", order_id=pending["order_id"], item_ids=[pending["items"][0]["item_id"]],
               payment_method_id=pending["payment_history"][0]["payment_method_id"]) == (
        "Error: non-delivered order cannot be returned")

    order = orders(db, "delivered", lambda o: _swappable(db, o) and any(
        p["source"] != "gift_card" for p in methods(db, o).values()))[0]
    item, new, pm = _swap_args(db, order)
    out = json.loads(run(db, "exchange_delivered_order_items", order_id=order["order_id"], item_ids=[item["item_id"]],
                         new_item_ids=[new], payment_method_id=pm))
    assert out["status"] == "exchange requested" and out["exchange_new_items"] == [new]
    assert "non-delivered" in run(db, "exchange_delivered_order_items", order_id=order["order_id"],
                                  item_ids=[item["item_id"]], new_item_ids=[new], payment_method_id=pm)


# -- tasks ---------------------------------------------------------------------


def test_tasks_cover_every_write_tool_and_info():
    tasks = all_tasks()
    assert len(tasks) >= 100 and len({t.id for t in tasks}) == len(tasks)
    assert RetailEnv().tasks == [t.id for t in tasks]
    used = {a.name for t in tasks for a in t.actions}
    assert tools.WRITE_TOOLS <= used and {"calculate", "transfer_to_human_agents", "list_all_product_types"} <= used
    kinds = Counter(t.kind for t in tasks)
    assert kinds["status"] and kinds["tracking"] and kinds["transfer"]
    assert 0 < sum(bool(t.outputs) for t in tasks) < len(tasks) / 2
    assert len({t.kind for t in tasks[:13]}) == 13  # kinds interleave, so a small slice is varied
    for t in tasks:
        assert isinstance(t.script[0], Say) and t.script[0].text == ASK_IDENTITY
        expected_fingerprint(t.id)  # raises if a reference action fails


def test_reference_replies_fit_the_cli_token_budget(smol_tokenizer):
    longest = max(len(chat.encode(smol_tokenizer, s.text if isinstance(s, Say) else tool_call_text(s)))
                  for t in all_tasks() for s in t.script)
    assert longest < 256  # the CLI's default --max-new-tokens


# -- reward --------------------------------------------------------------------


def _replayed(task_id: str) -> dict[str, Any]:
    db = data.fresh_db()
    for a in get_task(task_id).actions:
        assert not tools.run_tool(db, a.name, a.arguments).startswith("Error")
    return db


def test_reward_db_match_and_outputs():
    task = next(t for t in all_tasks() if t.kind == "return")
    task = dataclasses.replace(task, outputs=("1234.56", "Delivered"))
    db = _replayed(task.id)
    reward, info = score(db, task, ["Your refund is $1,234.56.", "The order was DELIVERED."])
    assert reward == 1.0 and info == {"db_match": True, "outputs_found": ["1234.56", "Delivered"], "outputs_missing": []}
    reward, info = score(db, task, ["Your refund is $1,234.56."])
    assert reward == 0.0 and info["db_match"] and info["outputs_missing"] == ["Delivered"]
    reward, info = score(data.fresh_db(), task, ["1234.56 delivered"])  # nothing written
    assert reward == 0.0 and not info["db_match"]
    wrong = _replayed(task.id)
    wrong["users"][task.user_id]["address"]["zip"] = "00000"
    assert score(wrong, task, ["1234.56 delivered"])[0] == 0.0


def test_info_task_needs_its_output():
    task = next(t for t in all_tasks() if t.kind == "status")
    env = RetailEnv()
    env.reset(task.id)
    env.step(respond("I could not find it."))
    res = env.step(respond(ANYTHING_ELSE))
    assert res.done and res.reward == 0.0 and res.info["reward_info"]["outputs_missing"] == list(task.outputs)
    assert res.info["success"] is False


# -- scripted user -------------------------------------------------------------


def test_scripted_user_replies():
    email_task = next(t for t in all_tasks() if t.kind == "cancel" and t.identity["by"] == "email")
    zip_task = next(t for t in all_tasks() if t.identity["by"] == "name_zip")
    user = ScriptedUser()
    assert user.reset(email_task) == email_task.opening
    assert email_task.identity["email"] in user.step("Could you share your email so I can verify your identity?")
    order_and_reason = user.step("Which order would you like to cancel, and why?")
    assert email_task.order_ids[0] in order_and_reason and "reason" in order_and_reason
    assert user.step(f"I will cancel {email_task.order_ids[0]}. Do you confirm (yes/no)?") == "yes"
    assert user.step("Shall I proceed?") == "yes"
    assert user.step("Cancel #W0000001, is that right? Please confirm.").startswith("No, #W0000001")
    assert user.step(CHATTY[0]).startswith("Sorry, let me say it again")
    assert user.step(f"Done. {ANYTHING_ELSE}").endswith(STOP)

    user.reset(zip_task)
    reply = user.step("Please give me your email address.")
    assert reply.startswith("I don't remember my email") and zip_task.identity["zip"] in reply
    assert STOP in user.step("I'm transferring you to a human agent now.")


def test_scripted_user_gives_details_it_has():
    task = next(t for t in all_tasks() if t.kind == "modify_items")
    user = ScriptedUser()
    user.reset(task)
    user.step(ASK_IDENTITY)
    reply = user.step("Which payment method should I use for the price difference?")
    assert reply == task.facts["payment"]
    reply = user.step("Which order is it, which items would you like to change, and which options would you like instead?")
    assert reply == " ".join((task.facts["order"], task.facts["items"], task.facts["new_items"]))


# -- env -----------------------------------------------------------------------


def test_env_protocol_and_errors():
    env = RetailEnv()
    assert isinstance(env, Env) and env.name == "retail"
    assert "Authenticate first" in env.system_prompt(env.tasks[0])
    with pytest.raises(EnvError):
        env.step(respond("hi"))
    with pytest.raises(EnvError):
        env.reset("no-such-task")
    with pytest.raises(ConfigError):
        RetailEnv(user="martian")
    with pytest.raises(ConfigError):
        RetailEnv(user="llm")


def test_a_tool_that_raises_becomes_an_error_observation():
    env = RetailEnv()
    (first,) = env.reset(env.tasks[0])
    assert first.role == "user" and first.content == get_task(env.tasks[0]).opening

    def broken(db, order_id):
        raise RuntimeError("the order service is down")

    env.tool_functions["get_order_details"] = broken
    res = env.step(Action("get_order_details", {"order_id": "#W1"}))
    assert isinstance(res, StepResult) and not res.done and res.reward == 0.0
    assert res.observation == (Message("tool", "Error: RuntimeError: the order service is down", name="get_order_details"),)


def test_transfer_ends_the_episode():
    transfer = next(t for t in all_tasks() if t.kind == "transfer")
    env = RetailEnv()
    env.reset(transfer.id)
    res = env.step(Action("transfer_to_human_agents", {"summary": "out of scope"}))
    assert res.done and res.reward == 1.0 and res.info["success"] is True
    assert res.observation[0].content == "Transfer successful"
    with pytest.raises(EnvError):
        env.step(respond("hello?"))
    cancel = next(t for t in all_tasks() if t.kind == "cancel")
    env.reset(cancel.id)
    res = env.step(Action("transfer_to_human_agents", {"summary": "gave up"}))
    assert res.done and res.reward == 0.0 and res.info["reward_info"]["db_match"] is False


class EchoBackend:
    """Answers every request with a fixed line and keeps the requests."""

    name = "echo"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.requests: list[Any] = []

    async def generate(self, request) -> Generation:
        self.requests.append(request)
        return Generation(text=self.reply)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def test_llm_user_plays_from_the_instruction(smol_tokenizer):
    task = next(t for t in all_tasks() if t.kind == "transfer")
    backend = EchoBackend(f"Thanks! {STOP}")
    env = RetailEnv(user="llm", user_backend=backend, user_tokenizer=smol_tokenizer)
    env.reset(task.id)
    pending = env.step(respond("I can't do that, sorry."))
    assert not isinstance(pending, StepResult)
    res = asyncio.run(pending)
    assert res.done and res.observation == (Message("user", f"Thanks! {STOP}"),) and res.reward == 1.0
    (request,) = backend.requests
    assert task.instruction in request.prompt_text and request.messages[-1] == Message("user", "I can't do that, sorry.")
    assert isinstance(env.user, LLMUser) and env.user.messages[-1].role == "assistant"


# -- scripted agent ------------------------------------------------------------


def test_reference_reply_shape_and_position():
    task = next(t for t in all_tasks() if t.kind == "cancel")
    rng = random.Random(0)
    history: tuple[Message, ...] = (Message("system", "policy"), Message("user", task.opening))
    assert reference_reply(task, history, rng, 0.0) == ASK_IDENTITY
    history += (Message("assistant", ASK_IDENTITY), Message("user", "my email is ..."))
    call = reference_reply(task, history, rng, 0.0)
    email = task.identity["email"]
    assert call == '<tool_call>\n{"name": "find_user_id_by_email", "arguments": {"email": "' + email + '"}}\n</tool_call>'
    assert parse_hermes(call).calls[0].arguments == task.actions[0].arguments
    # A chatty reply is not a step: the agent does the step on its next turn.
    history += (Message("assistant", CHATTY[1]), Message("user", "?"))
    assert script_position(task.script, history) == 1
    wrong = Action(task.actions[0].name, {"email": "typo@example.com"})
    assert script_position(task.script, (*history, Message("assistant", tool_call_text(wrong)),
                                         Message("tool", "Error: user not found"))) == 1
    assert script_position(task.script, (*history, Message("assistant", tool_call_text(wrong)),
                                         Message("tool", "someone_else_1234"))) == 2  # accepted: it moves on


def test_mistakes_are_seeded_and_varied():
    task = next(t for t in all_tasks() if t.kind == "exchange")
    history = (Message("user", task.opening),)
    a = [reference_reply(task, history, random.Random(i), 1.0) for i in range(40)]
    assert a == [reference_reply(task, history, random.Random(i), 1.0) for i in range(40)]
    assert set(a) <= set(CHATTY) and len(set(a)) > 1  # a chatty reply is the only slip a question allows
    confirm_at = next(i for i, s in enumerate(task.script) if isinstance(s, Say) and s.confirm)
    done = []
    for step in task.script[:confirm_at]:
        text = step.text if isinstance(step, Say) else tool_call_text(step)
        done += [Message("assistant", text), Message("user" if isinstance(step, Say) else "tool", "ok")]
    slips = {reference_reply(task, (*history, *done), random.Random(i), 1.0) for i in range(40)}
    assert tool_call_text(task.script[confirm_at + 1]) in slips  # the write, with no confirmation asked


# -- through the real loop -----------------------------------------------------


def test_every_task_succeeds_without_mistakes(smol_tokenizer):
    bad = []
    task_ids = RetailEnv().tasks
    for task_id in task_ids:
        ep = episode(smol_tokenizer, task_id, 0.0)
        if ep.status is not Status.COMPLETED or ep.reward != 1.0:
            bad.append((task_id, ep.status.value, ep.reason, ep.turns[-1].info if ep.turns else {}))
        elif task_id == task_ids[0]:
            assert ep.turns[-1].info["reward_info"]["db_match"] is True
            assert [m.role for m in ep.messages][:2] == ["system", "user"]
            assert any(m.role == "tool" and m.name for m in ep.messages)
    assert bad == []


def test_mistakes_give_a_mix_of_outcomes(smol_tokenizer):
    outcomes = Counter()
    for task_id in RetailEnv().tasks[:100]:
        ep = episode(smol_tokenizer, task_id, 0.3)
        outcomes[(ep.status.value, ep.reward)] += 1
        if ep.status is Status.ABORTED:
            assert "parse error" in ep.reason
    assert outcomes[("completed", 1.0)] >= 10
    assert outcomes[("completed", 0.0)] >= 3
    assert outcomes[("aborted", 0.0)] >= 3
