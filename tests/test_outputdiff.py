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
    assert c.describe().startswith("text differs from character")
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
    # One phrase per path and kind of change, so an episode that shows only some of them shares those.
    assert shapes == {("`address.province` is now `address.state`", "`address.zip` changed",
                       "`payment_methods.credit_card_#.brand` changed", "`saved[*].dob` changed")}
    assert generalise("flights[12].legs[3].price") == "flights[*].legs[*].price"


def test_an_entry_round_trips_through_its_dict():
    c = OutputChange("address.province", "renamed", "TX", "TX", to="address.state")
    assert OutputChange.from_dict(c.to_dict()) == c


def test_a_rename_needs_a_telling_value_held_by_one_gone_key_and_one_new_key():
    # Values many keys hold alike say nothing about which key became which: a removal and an addition.
    for stored, now in [({"discount": 0}, {"points": 0}), ({"gift_card": None}, {"error": None}),
                        ({"ok": True}, {"done": True}), ({"a": []}, {"b": []}), ({"x": ""}, {"y": ""}),
                        ({"n": {}}, {"m": {}}), ({"tries": 3}, {"left": 3})]:
        (gone, new) = output_diff(json.dumps(stored), json.dumps(now))
        assert (gone.change, new.change) == ("removed", "added"), (stored, now)
    # Two gone keys, or two new keys, holding the one value: no telling which is which.
    assert [c.change for c in output_diff('{"a": "TX", "b": "TX"}', '{"c": "TX", "d": "TX"}')] == [
        "removed", "removed", "added", "added"]
    assert [c.change for c in output_diff('{"a": "TX"}', '{"c": "TX", "d": "TX"}')] == ["removed", "added", "added"]
    # A telling value moved once is a rename, a large number too.
    assert [(c.path, c.change, c.to) for c in output_diff('{"price": 1250, "x": 1}', '{"cost": 1250, "x": 1}')] == [
        ("price", "renamed", "cost")]


def test_records_in_a_list_are_paired_by_their_id_or_likeness_never_by_place():
    # A removed first, B's p changed: B is B, not A changed into B.
    a = {"orders": [{"id": "A", "p": 1}, {"id": "B", "p": 2}]}
    b = {"orders": [{"id": "B", "p": 3}]}
    got = [(c.path, c.change, c.stored, c.now) for c in output_diff(json.dumps(a), json.dumps(b))]
    assert got == [("orders[0]", "removed", {"id": "A", "p": 1}, None), ("orders[1].p", "changed", 2, 3)]
    # An id-like key by its name (order_id), a new record added at its index in the list now.
    a = {"orders": [{"order_id": "#W1", "total": 5}, {"order_id": "#W2", "total": 9}]}
    b = {"orders": [{"order_id": "#W3", "total": 1}, {"order_id": "#W2", "total": 10}]}
    got = [(c.path, c.change) for c in output_diff(json.dumps(a), json.dumps(b))]
    assert got == [("orders[0]", "removed"), ("orders[1].total", "changed"), ("orders[0]", "added")]
    # No id: the most alike record is the one that changed.
    a = [{"name": "HAT1", "seat": "1A", "price": 100}, {"name": "HAT2", "seat": "2B", "price": 80}]
    b = [{"name": "HAT2", "seat": "2B", "price": 95}]
    assert [(c.path, c.change) for c in output_diff(json.dumps(a), json.dumps(b))] == [
        ("[0]", "removed"), ("[1].price", "changed")]
    assert shape(output_diff(json.dumps(a), json.dumps(b))) == ("`[*]` removed", "`[*].price` changed")


def test_past_the_limit_one_entry_of_its_own_counts_the_rest_and_is_no_cause():
    from engine.loop.outputdiff import MAX_CHANGES

    a = {f"k{i}": i for i in range(MAX_CHANGES + 30)}
    b = {k: v + 1000 for k, v in a.items()}
    diff = output_diff(json.dumps(a), json.dumps(b))
    assert len(diff) == MAX_CHANGES + 1 and diff[-1].change == "more" and diff[-1].more == 30
    assert diff[-1].to_dict() == {"path": "", "change": "more", "more": 30}
    assert diff[-1].describe() == "… and 30 more differences"
    assert OutputChange.from_dict(diff[-1].to_dict()) == diff[-1]
    assert all(p.startswith("`k") and p.endswith("` changed") for p in shape(diff))


def test_a_text_difference_inside_json_names_its_path():
    long = "x" * 300
    (c,) = output_diff(json.dumps({"order": {"note": long + "a"}}), json.dumps({"order": {"note": long + "b"}}))
    assert c.describe().startswith("`order.note`: text differs from character 300:")
    assert shape((c,)) == ("`order.note`: text differs",)
