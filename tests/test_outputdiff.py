"""A differing tool output as paths: added, removed, renamed, changed; text that is not JSON as one span."""

from __future__ import annotations

import json

from engine.loop.outputdiff import OutputChange, generalise, output_diff, shape

USER = {"name": {"first_name": "Mia", "last_name": "Li"},
        "address": {"address1": "975 Sunset Drive", "city": "Austin", "country": "USA", "province": "TX",
                    "zip": "78750"},
        "payment_methods": {"credit_card_4421486": {"source": "credit_card", "last_four": "7447"}},
        "saved_passengers": [{"first_name": "Amelia", "dob": "1957-03-21"}],
        "reservations": ["NO6JO3", "AIXC49", "HKEG34"]}


def renamed(user: dict, old: str, new: str) -> dict:
    out = json.loads(json.dumps(user))
    out["address"] = {(new if k == old else k): v for k, v in user["address"].items()}
    return out


def test_a_key_renamed_at_the_same_parent_is_one_rename_not_a_removal_and_an_addition():
    now = renamed(USER, "province", "state")
    (c,) = output_diff(json.dumps(USER), json.dumps(now))
    assert c.to_dict() == {"path": "address.province", "change": "renamed", "stored": "TX", "now": "TX",
                           "to": "address.state"}
    assert c.describe() == "`address.province` is now `address.state`"
    assert shape((c,)) == ("`address.province` is now `address.state`",)
    # The same key with another value as well is no rename: it was removed and another added.
    now["address"]["state"] = "CA"
    assert [(c.path, c.change) for c in output_diff(json.dumps(USER), json.dumps(now))] == [
        ("address.province", "removed"), ("address.state", "added")]


def test_added_removed_and_changed_values_nested_in_dicts_and_lists():
    now = json.loads(json.dumps(USER))
    now["membership"] = "gold"
    del now["payment_methods"]["credit_card_4421486"]["last_four"]
    now["saved_passengers"][0]["dob"] = "1957-03-22"
    now["reservations"] = ["NEW001", "NO6JO3", "AIXC49", "HKEG34"]  # one inserted at the front
    got = [c.to_dict() for c in output_diff(json.dumps(USER), json.dumps(now))]
    assert got == [
        {"path": "payment_methods.credit_card_4421486.last_four", "change": "removed", "stored": "7447", "now": None},
        {"path": "saved_passengers[0].dob", "change": "changed", "stored": "1957-03-21", "now": "1957-03-22"},
        {"path": "reservations[0]", "change": "added", "stored": None, "now": "NEW001"},
        {"path": "membership", "change": "added", "stored": None, "now": "gold"},
    ]
    # Lists of records: the record whose field changed is one change inside it; a dropped one is removed.
    a = {"flights": [{"no": "HAT1", "price": 100}, {"no": "HAT2", "price": 80}, {"no": "HAT3", "price": 50}]}
    b = {"flights": [{"no": "HAT1", "price": 100}, {"no": "HAT2", "price": 95}]}
    assert [(c.path, c.change, c.stored, c.now) for c in output_diff(json.dumps(a), json.dumps(b))] == [
        ("flights[1].price", "changed", 80, 95), ("flights[2]", "removed", {"no": "HAT3", "price": 50}, None)]
    # Nested lists, and a type change at a path.
    assert [(c.path, c.change) for c in output_diff('{"m": [[1, 2], [3, 4]]}', '{"m": [[1, 2], [3, 5]]}')] == [
        ("m[1][1]", "changed")]
    assert [(c.path, c.stored, c.now) for c in output_diff('{"total": 30}', '{"total": "30"}')] == [("total", 30, "30")]
    # Keys that are not plain names are quoted.
    assert output_diff('{"a b": 1}', '{"a b": 2}')[0].path == '["a b"]'


def test_the_same_json_is_no_difference_and_a_spacing_change_is_said_as_text():
    assert output_diff(json.dumps(USER), json.dumps(USER)) == ()
    (c,) = output_diff('{"a": 1}', '{"a":1}')
    assert c.at == 5 and c.change == "changed"


def test_text_that_is_not_json_is_the_span_that_differs_never_two_dumps():
    long = "Order #A1 for Ana Ito: " + "x" * 2000 + " status pending, total 30.5. " + "y" * 2000
    now = long.replace("pending", "cancelled")
    (c,) = output_diff(long, now)
    assert c.path == "" and c.change == "changed" and c.at == long.index("pending")
    assert "pending" in c.stored and "cancelled" in c.now
    assert len(c.stored) < 120 and len(c.now) < 120 and c.stored.startswith("…") and c.stored.endswith("…")
    assert c.describe().startswith(f"text differs from character {c.at}:")
    assert shape((c,)) == ("text differs",)
    # One side JSON, the other an error message: text.
    (e,) = output_diff('{"user_id": "ana_1"}', "Error: user not found")
    assert e.at == 0 and e.now.startswith("Error: user not found")
    # A long string value inside JSON is cut the same way, at its path.
    (s,) = output_diff(json.dumps({"note": long}), json.dumps({"note": now}))
    assert s.path == "note" and s.at == long.index("pending") and len(s.stored) < 120


def test_the_shape_of_a_diff_is_the_same_for_every_user_it_hit():
    def user(i: int, key: str) -> str:
        return json.dumps({"address": {key: f"S{i}", "zip": f"{10000 + i}"},
                           "payment_methods": {f"credit_card_{1000 + i}": {"brand": "visa"}},
                           "saved": [{"dob": f"19{50 + i}-01-01"}] * (i + 1)})

    shapes = set()
    for i in range(5):
        stored = json.loads(user(i, "province"))
        now = json.loads(user(i, "state"))
        now["address"]["zip"] = "00000"
        now["payment_methods"][f"credit_card_{1000 + i}"]["brand"] = "amex"
        now["saved"][i]["dob"] = "2000-01-01"
        shapes.add(shape(output_diff(json.dumps(stored), json.dumps(now))))
    assert shapes == {("`address.province` is now `address.state`",
                       "changed values at `address.zip`, `payment_methods.credit_card_#.brand`, `saved[*].dob`")}
    assert generalise("flights[12].legs[3].price") == "flights[*].legs[*].price"


def test_an_entry_round_trips_through_its_dict():
    c = OutputChange("address.province", "renamed", "TX", "TX", to="address.state")
    assert OutputChange.from_dict(c.to_dict()) == c
