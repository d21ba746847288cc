"""The airline domain of the stand-in: users and reservations shaped like tau-bench's airline data
(``users.json``: name, address, email, dob, payment_methods, saved_passengers, membership, reservations;
``reservations.json``: flights, passengers, payment_history, baggages, insurance), and the tools that read
and cancel them the way tau-bench's airline tools do (``get_user_details`` dumps the user's record,
``cancel_reservation`` refunds every payment and dumps the reservation).

The address's region is ``state`` here; the tests write results recorded when it was ``province``.
"""
from __future__ import annotations

import json
from typing import Any

from ...types import Action, Task
from .. import Env, _info

FIRST = ("Mia", "Mei", "Aarav", "Chen", "Lucas", "Sophia", "Liam", "Olivia")
LAST = ("Li", "Hernandez", "Nguyen", "Lopez", "Garcia", "Taylor", "Santos", "Smith")
CITIES = (("Austin", "TX", "78750"), ("Dallas", "TX", "75379"), ("Los Angeles", "CA", "91436"),
          ("Philadelphia", "PA", "19044"), ("San Francisco", "CA", "94153"), ("Washington", "DC", "20417"),
          ("Indianapolis", "IN", "46227"), ("Houston", "TX", "77096"))
AIRPORTS = ("JFK", "SEA", "LAX", "ORD", "DFW", "ATL", "BOS", "PHX")


def _user_id(i: int) -> str:
    return f"{FIRST[i].lower()}_{LAST[i].lower()}_{3668 + 1111 * i}"


def _data() -> dict[str, Any]:
    users: dict[str, Any] = {}
    reservations: dict[str, Any] = {}
    for i in range(len(FIRST)):
        uid = _user_id(i)
        city, state, zip_code = CITIES[i]
        card = f"credit_card_{4421486 + 7 * i}"
        res_ids = [f"R{i}A{i}X{j}" for j in range(2)]
        users[uid] = {
            "name": {"first_name": FIRST[i], "last_name": LAST[i]},
            "address": {"address1": f"{100 + 75 * i} Sunset Drive", "address2": f"Suite {200 + i}", "city": city,
                        "country": "USA", "state": state, "zip": zip_code},
            "email": f"{FIRST[i].lower()}.{LAST[i].lower()}{1000 + i}@example.com",
            "dob": f"19{60 + i}-0{1 + i % 9}-1{i}",
            "payment_methods": {card: {"source": "credit_card", "brand": "visa", "last_four": f"{7000 + i}",
                                       "id": card}},
            "saved_passengers": [{"first_name": FIRST[(i + 3) % 8], "last_name": LAST[(i + 5) % 8],
                                  "dob": f"19{70 + i}-05-2{i}"}],
            "membership": ("gold", "silver", "regular")[i % 3],
            "reservations": res_ids,
        }
        for j, rid in enumerate(res_ids):
            origin, destination = AIRPORTS[(i + j) % 8], AIRPORTS[(i + j + 3) % 8]
            reservations[rid] = {
                "reservation_id": rid, "user_id": uid, "origin": origin, "destination": destination,
                "flight_type": "one_way", "cabin": ("economy", "business")[j],
                "flights": [{"origin": origin, "destination": destination, "flight_number": f"HAT{100 + 10 * i + j:03d}",
                             "date": f"2024-05-{20 + j}", "price": 120 + 35 * i + 400 * j}],
                "passengers": [{"first_name": FIRST[i], "last_name": LAST[i], "dob": users[uid]["dob"]}],
                "payment_history": [{"payment_id": card, "amount": 120 + 35 * i + 400 * j}],
                "created_at": f"2024-05-0{1 + j}T10:00:00", "total_baggages": j, "nonfree_baggages": 0,
                "insurance": ("no", "yes")[j],
            }
    return {"users": users, "reservations": reservations}


DATA = _data()


def get_user_details(data: dict, user_id: str) -> str:
    users = data["users"]
    return json.dumps(users[user_id]) if user_id in users else "Error: user not found"


def get_reservation_details(data: dict, reservation_id: str) -> str:
    res = data["reservations"]
    return json.dumps(res[reservation_id]) if reservation_id in res else "Error: reservation not found"


def cancel_reservation(data: dict, reservation_id: str) -> str:
    res = data["reservations"].get(reservation_id)
    if res is None:
        return "Error: reservation not found"
    res["payment_history"].extend({"payment_id": p["payment_id"], "amount": -p["amount"]}
                                  for p in list(res["payment_history"]))
    res["status"] = "cancelled"
    return json.dumps(res)


def transfer_to_human_agents(data: dict, summary: str) -> str:
    return "Transfer successful"


TOOLS = {"get_user_details": get_user_details, "get_reservation_details": get_reservation_details,
         "cancel_reservation": cancel_reservation, "transfer_to_human_agents": transfer_to_human_agents}
TOOLS_INFO = [
    _info("get_user_details", {"user_id": "string"}),
    _info("get_reservation_details", {"reservation_id": "string"}),
    _info("cancel_reservation", {"reservation_id": "string"}),
    _info("transfer_to_human_agents", {"summary": "string"}),
]
WIKI = ("# Airline Agent Policy\nAs an airline agent, you can help users book, modify, or cancel flight "
        "reservations. Obtain the user id first. Confirm before cancelling.")
# One task a user: cancel the first of their reservations.
TASKS = [Task(_user_id(i), f"Your user id is {_user_id(i)}. Cancel reservation R{i}A{i}X0; you changed your plans.",
              [Action("cancel_reservation", {"reservation_id": f"R{i}A{i}X0"})]) for i in range(len(FIRST))]


class MockAirlineDomainEnv(Env):
    def __init__(self) -> None:
        super().__init__(DATA, TASKS, TOOLS, TOOLS_INFO, WIKI)
