"""The kinds of retail task: for each, how to build one from a user of the store.

A builder gets a ``Ctx`` (the store, the seeded rng, a user no other task
uses) and returns the user's opening line, its goal, its facts, the reference
conversation after authentication, the required outputs and the order ids
involved; or None when the user has no order that fits. The reference
conversation is a list of steps: ``Say`` (the agent writes to the user) and
tool ``Action``s, phrased the way the scripted user's keyword rules expect.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...records.episode import Action
from .data import random_address


@dataclass(frozen=True)
class Say:
    """A reference agent message; ``confirm`` marks the yes/no question before a write."""

    text: str
    confirm: bool = False


Step = Say | Action


ASK_IDENTITY = (
    "I'd be glad to help. First I need to verify your identity: could you please give me your email "
    "address, or your first name, last name and zip code?"
)
ANYTHING_ELSE = "Is there anything else I can help you with?"


# -- phrasing ------------------------------------------------------------------


def money(x: float) -> str:
    """An amount as the agent says it and the grader looks for it: two decimals, no sign."""
    return f"{x:.2f}"


def options_text(options: dict[str, str]) -> str:
    """``size 9, color moss``."""
    return ", ".join(f"{k} {v}" for k, v in options.items())


def item_text(item: dict[str, Any]) -> str:
    """``Rain Boots (size 9, color moss)``."""
    return f"{item['name']} ({options_text(item['options'])})"


def items_text(items: list[dict[str, Any]]) -> str:
    """Item descriptions joined as a sentence list (``a, b and c``)."""
    names = [item_text(i) for i in items]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def address_text(a: dict[str, str]) -> str:
    """An address on one line."""
    line2 = f"{a['address2']}, " if a["address2"] else ""
    return f"{a['address1']}, {line2}{a['city']}, {a['state']} {a['zip']}, {a['country']}"


def payment_text(pm: dict[str, Any], whose: str = "your") -> str:
    """How a person names a payment method (``my PayPal account``)."""
    if pm["source"] == "credit_card":
        return f"{whose} {pm['brand']} credit card ending in {pm['last_four']}"
    if pm["source"] == "paypal":
        return f"{whose} PayPal account"
    return f"{whose} gift card"


def call(name: str, **arguments: Any) -> Action:
    """A tool action of the reference conversation."""
    return Action(name, arguments)


def _finish(text: str) -> Say:
    return Say(f"{text} {ANYTHING_ELSE}")


# -- building blocks -----------------------------------------------------------


@dataclass
class Ctx:
    """What a task builder gets: the store, the rng, a user not yet used by another task."""

    db: dict[str, Any]
    rng: random.Random
    user: dict[str, Any]

    @property
    def first(self) -> str:
        return str(self.user["name"]["first_name"])

    def orders(self, *statuses: str) -> list[dict[str, Any]]:
        return [self.db["orders"][o] for o in self.user["orders"] if self.db["orders"][o]["status"] in statuses]

    def pm(self, pm_id: str) -> dict[str, Any]:
        return dict(self.user["payment_methods"][pm_id])


def identity_of(ctx: Ctx) -> tuple[dict[str, str], str, Action]:
    """How the user identifies: email (most) or name + zip; its instruction text and the lookup call."""
    u = ctx.user
    name = f"{u['name']['first_name']} {u['name']['last_name']}"
    if ctx.rng.random() < 0.6:
        ident = {"by": "email", "email": u["email"], "name": name}
        text = f"You are {name} and your email is {u['email']}."
        return ident, text, call("find_user_id_by_email", email=u["email"])
    ident = {"by": "name_zip", "first_name": u["name"]["first_name"], "last_name": u["name"]["last_name"],
             "zip": u["address"]["zip"], "name": name}
    text = (f"You are {name}, zip code {u['address']['zip']}. You do not remember your email, "
            "so you identify yourself with your name and zip code.")
    return ident, text, call("find_user_id_by_name_zip", first_name=u["name"]["first_name"],
                              last_name=u["name"]["last_name"], zip=u["address"]["zip"])


def _alternatives(ctx: Ctx, item: dict[str, Any]) -> list[dict[str, Any]]:
    variants = ctx.db["products"][item["product_id"]]["variants"]
    return [v for vid, v in sorted(variants.items()) if vid != item["item_id"] and v["available"]]


# (opening, goal sentence, facts, steps after authentication, outputs, order ids)
Built = tuple[str, str, dict[str, str], list[Step], tuple[str, ...], tuple[str, ...]]

Builder = Callable[[Ctx], Built | None]


def _cancel(ctx: Ctx) -> Built | None:
    pending = [o for o in ctx.orders("pending") if len(o["payment_history"]) == 1]
    if not pending:
        return None
    o = ctx.rng.choice(pending)
    reason = ctx.rng.choice(("no longer needed", "ordered by mistake"))
    why = "no longer need it" if reason == "no longer needed" else "ordered it by mistake"
    total = money(o["payment_history"][0]["amount"])
    oid = o["order_id"]
    steps: list[Step] = [
        Say(f"Thank you, {ctx.first}. Which order would you like to cancel, and what is the reason for cancelling it?"),
        call("get_order_details", order_id=oid),
        Say(f"Order {oid} is pending and contains {items_text(o['items'])}. I will cancel it with the reason "
            f"'{reason}', and ${total} will be refunded to the original payment method. Do you confirm (yes/no)?",
            confirm=True),
        call("cancel_pending_order", order_id=oid, reason=reason),
        _finish(f"Order {oid} has been cancelled, and ${total} will be refunded to the original payment method."),
    ]
    opening = ctx.rng.choice(("Hi, I'd like to cancel an order.", "Hello! I need to cancel one of my orders, please.",
                              "Hey there, can you help me cancel an order?"))
    goal = f"You want to cancel your order {oid} ({items_text(o['items'])}) because you {why}."
    facts = {"order": f"It's order {oid}.", "reason": f"The reason is that I {why}."}
    return opening, goal, facts, steps, (), (oid,)


def _modify_order_address(ctx: Ctx) -> Built | None:
    pending = ctx.orders("pending")
    if not pending:
        return None
    o = ctx.rng.choice(pending)
    oid, new = o["order_id"], random_address(ctx.rng)
    addr = address_text(new)
    steps: list[Step] = [
        Say("Which order should I update, and what is the new shipping address?"),
        call("get_order_details", order_id=oid),
        Say(f"I will change the shipping address of pending order {oid} to {addr}. Do you confirm (yes/no)?",
            confirm=True),
        call("modify_pending_order_address", order_id=oid, **new),
        _finish(f"Order {oid} will now be shipped to {addr}."),
    ]
    opening = ctx.rng.choice(("Hi, I need to change the shipping address of an order.",
                              "Hello, one of my orders is going to the wrong address."))
    goal = f"You want your pending order {oid} shipped to {addr} instead; your account's address stays as it is."
    facts = {"order": f"It's order {oid}.", "address": f"The new address is {addr}."}
    return opening, goal, facts, steps, (), (oid,)


def _modify_payment(ctx: Ctx) -> Built | None:
    for o in ctx.rng.sample(ctx.orders("pending"), len(ctx.orders("pending"))):
        if len(o["payment_history"]) != 1:
            continue
        old_id, total = o["payment_history"][0]["payment_method_id"], o["payment_history"][0]["amount"]
        choices = [pm for pid, pm in sorted(ctx.user["payment_methods"].items())
                   if pid != old_id and (pm["source"] != "gift_card" or pm["balance"] >= total)]
        if not choices:
            continue
        pm = ctx.rng.choice(choices)
        oid = o["order_id"]
        steps: list[Step] = [
            Say("Which order is it, and which payment method would you like to use instead?"),
            call("get_order_details", order_id=oid),
            Say(f"Order {oid} (total ${money(total)}) is paid with {payment_text(ctx.pm(old_id))}. I will switch it to "
                f"{payment_text(pm)} and refund the original payment. Do you confirm (yes/no)?", confirm=True),
            call("modify_pending_order_payment", order_id=oid, payment_method_id=pm["id"]),
            _finish(f"Order {oid} is now paid with {payment_text(pm)}."),
        ]
        opening = "Hi, I'd like to change how I pay for one of my orders."
        goal = f"You want to pay your pending order {oid} with {payment_text(pm, 'your')} instead."
        facts = {"order": f"It's order {oid}.", "payment": f"I'd like to use {payment_text(pm, 'my')}."}
        return opening, goal, facts, steps, (), (oid,)
    return None


def _swap(ctx: Ctx, statuses: tuple[str, ...], verb: str) -> Built | None:
    """Modify (pending) or exchange (delivered) items for other variants; shared shape."""
    for o in ctx.rng.sample(ctx.orders(*statuses), len(ctx.orders(*statuses))):
        swappable = [i for i in o["items"] if _alternatives(ctx, i)]
        if not swappable:
            continue
        olds = ctx.rng.sample(swappable, min(len(swappable), ctx.rng.choice((1, 1, 2))))
        news = [ctx.rng.choice(_alternatives(ctx, i)) for i in olds]
        diff = round(sum(n["price"] - i["price"] for i, n in zip(olds, news)), 2)
        pms = [pm for _, pm in sorted(ctx.user["payment_methods"].items())
               if pm["source"] != "gift_card" or pm["balance"] >= max(diff, 0)]
        if not pms:
            continue
        pm = ctx.rng.choice(pms)
        oid = o["order_id"]
        changes = "; ".join(f"{item_text(i)} to {options_text(n['options'])}" for i, n in zip(olds, news))
        wants = "; ".join(f"the {item_text(i)} changed to {options_text(n['options'])}" for i, n in zip(olds, news))
        money_line = (f"You will pay a price difference of ${money(diff)} with {payment_text(pm)}." if diff > 0 else
                      f"The price difference of ${money(-diff)} will be refunded to {payment_text(pm)}." if diff < 0
                      else "There is no price difference.")
        products = sorted({i["product_id"] for i in olds})
        modify = verb == "modify"
        steps: list[Step] = [
            Say(f"Which order is it, which items would you like to {'change' if modify else 'exchange'}, "
                "and which options would you like instead?"),
            call("get_order_details", order_id=oid),
            *[call("get_product_details", product_id=p) for p in products],
            Say("Which payment method should I use for the price difference?"),
            Say(f"In {'pending' if modify else 'delivered'} order {oid} I will {'change' if modify else 'exchange'}: "
                f"{changes}. {money_line} "
                + ("Items of an order can be modified only once. " if modify else "")
                + "Do you confirm (yes/no)?", confirm=True),
            call("modify_pending_order_items" if modify else "exchange_delivered_order_items", order_id=oid,
                  item_ids=[i["item_id"] for i in olds], new_item_ids=[n["item_id"] for n in news],
                  payment_method_id=pm["id"]),
            _finish(f"Your order {oid} has been updated. {money_line}" if modify else
                    f"The exchange for order {oid} is requested; you will receive an email with instructions for "
                    f"sending the items back. {money_line}"),
        ]
        opening = (ctx.rng.choice(("Hi, I'd like to change some items in an order I just placed.",
                                   "Hello, can I switch the options of an item in my pending order?"))
                   if modify else ctx.rng.choice(("Hi, I want to exchange something I received.",
                                                  "Hello, I'd like to exchange an item from a delivered order.")))
        goal = (f"You want, in your {'pending' if modify else 'delivered'} order {oid}, {wants}. "
                f"Any price difference goes through {payment_text(pm, 'your')}.")
        facts = {"order": f"It's order {oid}.", "items": f"It's the {items_text(olds)}.",
                 "new_items": "I'd like " + "; and ".join(f"the {i['name']} with {options_text(n['options'])}"
                                                          for i, n in zip(olds, news)) + " instead.",
                 "payment": f"Please use {payment_text(pm, 'my')}."}
        return opening, goal, facts, steps, (), (oid,)
    return None


def _modify_items(ctx: Ctx) -> Built | None:
    return _swap(ctx, ("pending",), "modify")


def _exchange(ctx: Ctx) -> Built | None:
    return _swap(ctx, ("delivered",), "exchange")


def _user_address(ctx: Ctx) -> Built | None:
    new = random_address(ctx.rng)
    addr = address_text(new)
    steps: list[Step] = [
        Say("What is the new default address you would like on your account?"),
        Say(f"I will change the default address of your account to {addr}. Do you confirm (yes/no)?", confirm=True),
        call("modify_user_address", user_id=ctx.user["user_id"], **new),
        _finish(f"Your default address is now {addr}."),
    ]
    goal = f"You moved and want the default address of your account changed to {addr}. You have no other request."
    return "Hi, I moved recently and need to update my address.", goal, {"address": f"It's {addr}."}, steps, (), ()


def _moved(ctx: Ctx) -> Built | None:
    pending = ctx.orders("pending")
    if not pending:
        return None
    o = ctx.rng.choice(pending)
    oid, new = o["order_id"], random_address(ctx.rng)
    addr = address_text(new)
    steps: list[Step] = [
        Say("What is your new address, and which pending order should be shipped there?"),
        call("get_order_details", order_id=oid),
        Say(f"First, I will change the default address of your account to {addr}. Do you confirm (yes/no)?",
            confirm=True),
        call("modify_user_address", user_id=ctx.user["user_id"], **new),
        Say(f"Next, I will change the shipping address of pending order {oid} to the same address. "
            "Do you confirm (yes/no)?", confirm=True),
        call("modify_pending_order_address", order_id=oid, **new),
        _finish(f"Both your default address and the shipping address of order {oid} are now {addr}."),
    ]
    goal = f"You moved to {addr}; you want it as your account's default address and as the address of order {oid}."
    facts = {"address": f"My new address is {addr}.", "order": f"It's order {oid}."}
    return "Hi, I just moved and need to update my address, including for an order.", goal, facts, steps, (), (oid,)


def _return(ctx: Ctx) -> Built | None:
    delivered = ctx.orders("delivered")
    if not delivered:
        return None
    o = ctx.rng.choice(delivered)
    items = ctx.rng.sample(o["items"], ctx.rng.randint(1, len(o["items"])))
    refund = money(sum(i["price"] for i in items))
    original = o["payment_history"][0]["payment_method_id"]
    cards = [pid for pid, pm in sorted(ctx.user["payment_methods"].items()) if pm["source"] == "gift_card"]
    pm_id = ctx.rng.choice(cards) if cards and original not in cards and ctx.rng.random() < 0.3 else original
    pm, oid = ctx.pm(pm_id), o["order_id"]
    to = "the original payment method" if pm_id == original else "a gift card"
    ask_amount = ctx.rng.random() < 0.5
    steps: list[Step] = [
        Say("Which order and which items would you like to return, and should the refund go to the original "
            "payment method or to a gift card?"),
        call("get_order_details", order_id=oid),
        Say(f"I will request a return of {items_text(items)} from delivered order {oid}. The refund of ${refund} will "
            f"go to {payment_text(pm)}. Do you confirm (yes/no)?", confirm=True),
        call("return_delivered_order_items", order_id=oid, item_ids=[i["item_id"] for i in items],
              payment_method_id=pm_id),
        _finish(f"The return is requested: you will receive an email with instructions for sending the items back, "
                f"and ${refund} will be refunded to {payment_text(pm)}."),
    ]
    goal = (f"You want to return the {items_text(items)} from your delivered order {oid}, refunded to {to} "
            f"({payment_text(pm, 'your')}).")
    if ask_amount:
        goal += " You also want to know how much will be refunded."
    facts = {"order": f"It's order {oid}.", "items": f"I want to return the {items_text(items)}.",
             "payment": f"Please refund it to {payment_text(pm, 'my')}."}
    opening = "Hi, I'd like to return some items." + (" How much will I get back?" if ask_amount else "")
    return opening, goal, facts, steps, ((refund,) if ask_amount else ()), (oid,)


def _status(ctx: Ctx) -> Built | None:
    orders = ctx.orders("pending", "processed", "delivered", "cancelled")
    o = ctx.rng.choice(orders)
    oid, status = o["order_id"], o["status"]
    steps: list[Step] = [Say("Which order would you like me to look up?"), call("get_order_details", order_id=oid),
                         _finish(f"Order {oid} ({items_text(o['items'])}) is currently {status}.")]
    goal = f"You want to know the status of your order {oid}. You do not want to change anything."
    return ("Hi, could you tell me the status of one of my orders?", goal, {"order": f"It's order {oid}."}, steps,
            (status,), (oid,))


def _tracking(ctx: Ctx) -> Built | None:
    shipped = ctx.orders("processed", "delivered")
    if not shipped:
        return None
    o = ctx.rng.choice(shipped)
    oid, tracking = o["order_id"], o["fulfillments"][0]["tracking_id"][0]
    steps: list[Step] = [Say("Which order would you like me to look up?"), call("get_order_details", order_id=oid),
                         _finish(f"Order {oid} is {o['status']}; its tracking number is {tracking}.")]
    goal = f"You want the tracking number of your order {oid}. You do not want to change anything."
    return ("Hello, I need the tracking number for my package.", goal, {"order": f"It's order {oid}."}, steps,
            (tracking,), (oid,))


def _refund_estimate(ctx: Ctx) -> Built | None:
    delivered = [o for o in ctx.orders("delivered") if len(o["items"]) >= 2]
    if not delivered:
        return None
    o = ctx.rng.choice(delivered)
    items = ctx.rng.sample(o["items"], 2)
    total = money(sum(i["price"] for i in items))
    oid = o["order_id"]
    steps: list[Step] = [
        Say("Which order and which items are you thinking of returning?"),
        call("get_order_details", order_id=oid),
        call("calculate", expression=" + ".join(str(i["price"]) for i in items)),
        _finish(f"Returning the {items_text(items)} would refund ${total}. Nothing has been changed yet."),
    ]
    goal = (f"You are thinking of returning the {items_text(items)} from order {oid} and want to know how much you "
            "would get back. You do not want to return anything yet.")
    facts = {"order": f"It's order {oid}.", "items": f"The {items_text(items)}."}
    return ("Hi, how much would I get back if I returned two things from an order?", goal, facts, steps, (total,),
            (oid,))


def _product_price(ctx: Ctx) -> Built | None:
    products = ctx.db["products"]
    pid = ctx.rng.choice(sorted(products))
    product = products[pid]
    variant = products[pid]["variants"][ctx.rng.choice(sorted(product["variants"]))]
    what = f"{product['name']} with {options_text(variant['options'])}"
    stock = "in stock" if variant["available"] else "out of stock"
    steps: list[Step] = [
        call("list_all_product_types"),
        call("get_product_details", product_id=pid),
        _finish(f"The {what} costs ${money(variant['price'])} and is currently {stock}."),
    ]
    goal = f"You want to know the price of the {what}, and whether it is in stock. You do not want to buy it yet."
    return (f"Hi, how much is the {what}, and is it in stock?", goal, {"items": f"The {what}."}, steps,
            (money(variant["price"]),), ())


_OUT_OF_SCOPE = (
    ("Hi, I'd like to change the email address on my account.", "change the email address on your account",
     "The user wants to change the email address of their account, which agents cannot do."),
    ("Hello, a package arrived late and I want compensation for the delay.", "get compensation for a late delivery",
     "The user asks for compensation for a late delivery, which is outside the agent's tools."),
    ("Hi, I need to change the name on my account.", "change the name on your account",
     "The user wants to change the name on their account, which agents cannot do."),
)


def _transfer(ctx: Ctx) -> Built | None:
    opening, wish, summary = ctx.rng.choice(_OUT_OF_SCOPE)
    steps: list[Step] = [call("transfer_to_human_agents", summary=summary)]
    goal = f"You want to {wish}. If the agent cannot do it, you accept being transferred to a human agent."
    return opening, goal, {}, steps, (), ()


# kind -> (builder, number of tasks)
KINDS: dict[str, tuple[Builder, int]] = {
    "cancel": (_cancel, 14),
    "modify_order_address": (_modify_order_address, 10),
    "modify_payment": (_modify_payment, 10),
    "modify_items": (_modify_items, 12),
    "modify_user_address": (_user_address, 8),
    "moved": (_moved, 6),
    "return": (_return, 16),
    "exchange": (_exchange, 12),
    "status": (_status, 8),
    "tracking": (_tracking, 6),
    "refund_estimate": (_refund_estimate, 6),
    "product_price": (_product_price, 6),
    "transfer": (_transfer, 6),
}

NEEDS_USER_DETAILS = frozenset({"modify_payment", "modify_items", "exchange", "return"})
