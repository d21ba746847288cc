"""The retail env's tools: functions over the database dict, and their schemas.

Each tool takes the database first and the model's arguments as keywords,
and returns a string: JSON for data, ``Error: ...`` when the request breaks a
rule (unknown id, wrong status, a payment method of someone else, ...). The
write tools enforce the order lifecycle the policy describes, so an agent that
ignores the policy mostly gets an error rather than a silently wrong database.
"""

from __future__ import annotations

import ast
import json
import operator
from collections.abc import Callable
from typing import Any

from .data import Db

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


class ToolError(Exception):
    """A rule the request breaks; the message becomes the ``Error: ...`` observation."""


# -- lookups -----------------------------------------------------------------


def _user(db: Db, user_id: Any) -> dict[str, Any]:
    user: dict[str, Any] | None = db["users"].get(user_id) if isinstance(user_id, str) else None
    if user is None:
        raise ToolError("user not found")
    return user


def _order(db: Db, order_id: Any) -> dict[str, Any]:
    order: dict[str, Any] | None = db["orders"].get(order_id) if isinstance(order_id, str) else None
    if order is None:
        raise ToolError("order not found")
    return order


def _product(db: Db, product_id: Any) -> dict[str, Any]:
    product: dict[str, Any] | None = db["products"].get(product_id) if isinstance(product_id, str) else None
    if product is None:
        raise ToolError("product not found")
    return product


def _payment_method(db: Db, order: dict[str, Any], payment_method_id: Any) -> dict[str, Any]:
    methods = db["users"][order["user_id"]]["payment_methods"]
    pm: dict[str, Any] | None = methods.get(payment_method_id) if isinstance(payment_method_id, str) else None
    if pm is None:
        raise ToolError("payment method not found")
    return pm


def _id_list(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(x, str) for x in value):
        raise ToolError(f"{what} must be a non-empty list of item id strings")
    return value


def _check_items_in_order(order: dict[str, Any], item_ids: list[str]) -> None:
    held = [i["item_id"] for i in order["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > held.count(item_id):
            raise ToolError(f"item {item_id} not found in the order")


def _variant_swaps(db: Db, order: dict[str, Any], item_ids: list[str], new_item_ids: list[str]) -> float:
    """Check each old -> new swap (same product, available, different); the price difference."""
    if len(item_ids) != len(new_item_ids):
        raise ToolError("the number of items to be exchanged should match")
    _check_items_in_order(order, item_ids)
    diff = 0.0
    for old_id, new_id in zip(item_ids, new_item_ids):
        old = next(i for i in order["items"] if i["item_id"] == old_id)
        variants = db["products"][old["product_id"]]["variants"]
        new = variants.get(new_id)
        if new is None:
            raise ToolError(f"new item {new_id} not found or not of the same product as {old_id}")
        if new_id == old_id:
            raise ToolError(f"new item {new_id} is the same as the old one")
        if not new["available"]:
            raise ToolError(f"new item {new_id} not available")
        diff += new["price"] - old["price"]
    return round(diff, 2)


def _charge(pm: dict[str, Any], amount: float) -> None:
    """Take ``amount`` (negative = give back) from a gift card; other sources have no balance."""
    if pm["source"] != "gift_card":
        return
    if amount > 0 and pm["balance"] < amount:
        raise ToolError("insufficient gift card balance to pay for the new item(s)")
    pm["balance"] = round(pm["balance"] - amount, 2)


def _address_fields(address1: Any, address2: Any, city: Any, state: Any, country: Any, zip: Any) -> dict[str, str]:
    fields = {"address1": address1, "address2": address2, "city": city, "state": state, "country": country, "zip": zip}
    for key, value in fields.items():
        if not isinstance(value, str):
            raise ToolError(f"{key} must be a string")
        if key != "address2" and not value.strip():
            raise ToolError(f"{key} must not be empty")
    return dict(fields)


def _dump(obj: Any) -> str:
    return json.dumps(obj)


# -- read tools ----------------------------------------------------------------


def find_user_id_by_email(db: Db, email: str) -> str:
    wanted = str(email).strip().lower()
    for uid, user in db["users"].items():
        if user["email"].lower() == wanted:
            return str(uid)
    raise ToolError("user not found")


def find_user_id_by_name_zip(db: Db, first_name: str, last_name: str, zip: str) -> str:
    first, last, code = str(first_name).strip().lower(), str(last_name).strip().lower(), str(zip).strip()
    for uid, user in db["users"].items():
        name = user["name"]
        if name["first_name"].lower() == first and name["last_name"].lower() == last and user["address"]["zip"] == code:
            return str(uid)
    raise ToolError("user not found")


def get_user_details(db: Db, user_id: str) -> str:
    return _dump(_user(db, user_id))


def get_order_details(db: Db, order_id: str) -> str:
    return _dump(_order(db, order_id))


def get_product_details(db: Db, product_id: str) -> str:
    return _dump(_product(db, product_id))


def list_all_product_types(db: Db) -> str:
    return _dump({p["name"]: pid for pid, p in sorted(db["products"].items(), key=lambda kv: kv[1]["name"])})


_OPS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.operand))
    raise ToolError("invalid characters in expression")


def calculate(db: Db, expression: str) -> str:
    # Walk the syntax tree rather than eval(): the expression is model output.
    try:
        tree = ast.parse(str(expression), mode="eval")
    except SyntaxError:
        raise ToolError("invalid expression") from None
    try:
        value = _evaluate(tree)
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    return str(round(value, 2))


def think(db: Db, thought: str) -> str:
    return ""


def transfer_to_human_agents(db: Db, summary: str) -> str:
    return "Transfer successful"


# -- write tools ---------------------------------------------------------------


def cancel_pending_order(db: Db, order_id: str, reason: str) -> str:
    order = _order(db, order_id)
    if order["status"] != "pending":
        raise ToolError("non-pending order cannot be cancelled")
    if reason not in CANCEL_REASONS:
        raise ToolError(f"invalid reason; it must be one of: {', '.join(CANCEL_REASONS)}")
    methods = db["users"][order["user_id"]]["payment_methods"]
    refunds = []
    for payment in order["payment_history"]:
        if payment["transaction_type"] != "payment":
            continue
        refunds.append({"transaction_type": "refund", "amount": payment["amount"],
                        "payment_method_id": payment["payment_method_id"]})
        pm = methods.get(payment["payment_method_id"])
        if pm is not None:
            _charge(pm, -payment["amount"])  # gift card refunds are immediate
    order["payment_history"].extend(refunds)
    order["status"] = "cancelled"
    order["cancel_reason"] = reason
    return _dump(order)


def modify_pending_order_address(
    db: Db, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
) -> str:
    order = _order(db, order_id)
    if not order["status"].startswith("pending"):
        raise ToolError("non-pending order cannot be modified")
    order["address"] = _address_fields(address1, address2, city, state, country, zip)
    return _dump(order)


def modify_pending_order_payment(db: Db, order_id: str, payment_method_id: str) -> str:
    order = _order(db, order_id)
    if not order["status"].startswith("pending"):
        raise ToolError("non-pending order cannot be modified")
    payments = [p for p in order["payment_history"] if p["transaction_type"] == "payment"]
    if len(order["payment_history"]) != 1 or len(payments) != 1:
        raise ToolError("there should be exactly one payment for a pending order")
    old = payments[0]
    if old["payment_method_id"] == payment_method_id:
        raise ToolError("the new payment method should be different from the current one")
    pm = _payment_method(db, order, payment_method_id)
    amount = old["amount"]
    if pm["source"] == "gift_card" and pm["balance"] < amount:
        raise ToolError("insufficient gift card balance to pay for the order")
    _charge(pm, amount)
    old_pm = db["users"][order["user_id"]]["payment_methods"].get(old["payment_method_id"])
    if old_pm is not None:
        _charge(old_pm, -amount)
    order["payment_history"].extend([
        {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
        {"transaction_type": "refund", "amount": amount, "payment_method_id": old["payment_method_id"]},
    ])
    return _dump(order)


def modify_pending_order_items(db: Db, order_id: str, item_ids: list[str], new_item_ids: list[str],
                               payment_method_id: str) -> str:
    order = _order(db, order_id)
    # Only a plain "pending" order: items may be modified once, in one call.
    if order["status"] != "pending":
        raise ToolError("non-pending order cannot be modified")
    item_ids = _id_list(item_ids, "item_ids")
    new_item_ids = _id_list(new_item_ids, "new_item_ids")
    diff = _variant_swaps(db, order, item_ids, new_item_ids)
    pm = _payment_method(db, order, payment_method_id)
    _charge(pm, diff)
    if diff:
        order["payment_history"].append({"transaction_type": "payment" if diff > 0 else "refund",
                                         "amount": abs(diff), "payment_method_id": payment_method_id})
    for old_id, new_id in zip(item_ids, new_item_ids):
        item = next(i for i in order["items"] if i["item_id"] == old_id)
        variant = db["products"][item["product_id"]]["variants"][new_id]
        item.update(item_id=new_id, price=variant["price"], options=dict(variant["options"]))
    order["status"] = "pending (item modified)"
    return _dump(order)


def modify_user_address(db: Db, user_id: str, address1: str, address2: str, city: str, state: str, country: str,
                        zip: str) -> str:
    user = _user(db, user_id)
    user["address"] = _address_fields(address1, address2, city, state, country, zip)
    return _dump(user)


def return_delivered_order_items(db: Db, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ToolError("non-delivered order cannot be returned")
    item_ids = _id_list(item_ids, "item_ids")
    pm = _payment_method(db, order, payment_method_id)
    original = order["payment_history"][0]["payment_method_id"]
    if pm["source"] != "gift_card" and payment_method_id != original:
        raise ToolError("payment method should be either the original payment method or a gift card")
    _check_items_in_order(order, item_ids)
    order["status"] = "return requested"
    order["return_items"] = sorted(item_ids)
    order["return_payment_method_id"] = payment_method_id
    return _dump(order)


def exchange_delivered_order_items(db: Db, order_id: str, item_ids: list[str], new_item_ids: list[str],
                                   payment_method_id: str) -> str:
    order = _order(db, order_id)
    if order["status"] != "delivered":
        raise ToolError("non-delivered order cannot be exchanged")
    item_ids = _id_list(item_ids, "item_ids")
    new_item_ids = _id_list(new_item_ids, "new_item_ids")
    diff = _variant_swaps(db, order, item_ids, new_item_ids)
    pm = _payment_method(db, order, payment_method_id)
    if pm["source"] == "gift_card" and diff > 0 and pm["balance"] < diff:
        raise ToolError("insufficient gift card balance to pay for the price difference")
    order["status"] = "exchange requested"
    order["exchange_items"] = sorted(item_ids)
    order["exchange_new_items"] = sorted(new_item_ids)
    order["exchange_payment_method_id"] = payment_method_id
    order["exchange_price_difference"] = diff
    return _dump(order)


TOOL_FUNCTIONS: dict[str, Callable[..., str]] = {
    f.__name__: f
    for f in (
        find_user_id_by_email, find_user_id_by_name_zip, get_user_details, get_order_details,
        get_product_details, list_all_product_types, calculate, think, transfer_to_human_agents,
        cancel_pending_order, modify_pending_order_address, modify_pending_order_payment,
        modify_pending_order_items, modify_user_address, return_delivered_order_items,
        exchange_delivered_order_items,
    )
}
WRITE_TOOLS = frozenset({
    "cancel_pending_order", "modify_pending_order_address", "modify_pending_order_payment",
    "modify_pending_order_items", "modify_user_address", "return_delivered_order_items",
    "exchange_delivered_order_items",
})
TRANSFER = "transfer_to_human_agents"


def run_tool(db: Db, name: str, arguments: dict[str, Any],
             functions: dict[str, Callable[..., str]] | None = None) -> str:
    """Run one tool call; every failure comes back as an ``Error: ...`` string.

    The arguments are model output, so wrong names or types (a ``TypeError``
    from the call itself) and exceptions inside a tool are the agent's
    observation, as in tau-bench, not a crash of the episode.
    """
    fn = (functions or TOOL_FUNCTIONS).get(name)
    if fn is None:
        return f"Error: unknown tool {name!r}"
    try:
        return fn(db, **arguments)
    except ToolError as e:
        return f"Error: {e}"
    except Exception as e:  # noqa: BLE001 - see the docstring: tool failures are observations
        return f"Error: {type(e).__name__}: {e}"


# -- schemas -------------------------------------------------------------------

_STR = {"type": "string"}
_IDS = {"type": "array", "items": {"type": "string"}}
_ADDRESS = {
    "address1": {"type": "string", "description": "The first line of the address, such as '123 Main Street'."},
    "address2": {"type": "string", "description": "The second line of the address, such as 'Apt 1' or ''."},
    "city": {"type": "string", "description": "The city."},
    "state": {"type": "string", "description": "The state, such as 'CA'."},
    "country": {"type": "string", "description": "The country, such as 'USA'."},
    "zip": {"type": "string", "description": "The zip code, such as '12345'."},
}
_ORDER_ID = {"type": "string", "description": "The order id, such as '#W0000000'; include the '#'."}
_PM_ID = {"type": "string", "description": "A payment method id from the user's details, such as 'credit_card_0000000'."}


def _schema(name: str, description: str, props: dict[str, Any], required: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props,
                           "required": list(props if required is None else required)},
        },
    }


TOOL_SCHEMAS: tuple[dict[str, Any], ...] = (
    _schema("find_user_id_by_email", "Find a user id by email. Returns the user id, or an error if not found.",
            {"email": {"type": "string", "description": "The email of the user, such as 'someone@example.com'."}}),
    _schema("find_user_id_by_name_zip",
            "Find a user id by first name, last name and zip code. Use this when the user does not remember their email.",
            {"first_name": _STR, "last_name": _STR, "zip": {"type": "string", "description": "The zip code, such as '12345'."}}),
    _schema("get_user_details", "Get a user's details: name, email, address, payment methods and order ids.",
            {"user_id": {"type": "string", "description": "The user id, such as 'ada_ashgrove_1234'."}}),
    _schema("get_order_details", "Get an order's status, items, address, fulfillments and payment history.",
            {"order_id": _ORDER_ID}),
    _schema("get_product_details", "Get a product's variants: item ids, options, availability and prices.",
            {"product_id": {"type": "string", "description": "The product id, such as '1000000000'."}}),
    _schema("list_all_product_types", "List every product type: its name and product id.", {}),
    _schema("calculate", "Calculate an arithmetic expression with numbers, + - * / and parentheses.",
            {"expression": {"type": "string", "description": "The expression, such as '(12.5 + 3) * 2'."}}),
    _schema("think", "Think about something without changing anything; returns nothing.",
            {"thought": {"type": "string", "description": "A thought to think about."}}),
    _schema("transfer_to_human_agents",
            "Transfer the user to a human agent with a summary of the issue. Only when the request is out of scope.",
            {"summary": {"type": "string", "description": "A summary of the user's issue."}}),
    _schema("cancel_pending_order",
            "Cancel a pending order and refund its payments. The user must confirm the order and the reason first.",
            {"order_id": _ORDER_ID,
             "reason": {"type": "string", "enum": list(CANCEL_REASONS), "description": "Why the order is cancelled."}}),
    _schema("modify_pending_order_address",
            "Change the shipping address of a pending order. The user must confirm the new address first.",
            {"order_id": _ORDER_ID, **_ADDRESS}),
    _schema("modify_pending_order_payment",
            "Pay a pending order with another of the user's payment methods. The user must confirm first.",
            {"order_id": _ORDER_ID, "payment_method_id": _PM_ID}),
    _schema("modify_pending_order_items",
            "Swap items of a pending order for other variants of the same products, all in one call; the order can "
            "be modified only once. The user must confirm first.",
            {"order_id": _ORDER_ID,
             "item_ids": {**_IDS, "description": "The item ids to be modified; may repeat."},
             "new_item_ids": {**_IDS, "description": "The new item ids, in the same positions as item_ids."},
             "payment_method_id": {**_PM_ID, "description": "Pays (or receives) the price difference."}}),
    _schema("modify_user_address", "Change a user's default address. The user must confirm first.",
            {"user_id": {"type": "string", "description": "The user id."}, **_ADDRESS}),
    _schema("return_delivered_order_items",
            "Request a return of items of a delivered order. The refund goes to the original payment method or a "
            "gift card. The user must confirm first.",
            {"order_id": _ORDER_ID, "item_ids": {**_IDS, "description": "The item ids to be returned."},
             "payment_method_id": {**_PM_ID, "description": "Receives the refund."}}),
    _schema("exchange_delivered_order_items",
            "Request an exchange of items of a delivered order for other variants of the same products, all in one "
            "call. The user must confirm first.",
            {"order_id": _ORDER_ID,
             "item_ids": {**_IDS, "description": "The item ids to be exchanged."},
             "new_item_ids": {**_IDS, "description": "The new item ids, in the same positions as item_ids."},
             "payment_method_id": {**_PM_ID, "description": "Pays (or receives) the price difference."}}),
)
