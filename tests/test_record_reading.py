"""Strict reading of records (``records.reading.Fields``) on the values that take its short ways and the ones that
must not: every value JSON can hold in a typed field reads as it is meant to, or is refused naming the field."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from engine.errors import FormatError
from engine.records.episode import Episode
from engine.records.reading import Fields
from engine.store import Store
from tests.synthetic import synthetic_episode


def read(value: Any, how: str) -> Any:
    return getattr(Fields({"x": value}), how)("x")


@pytest.mark.parametrize(("how", "value", "expected"), [
    ("text", "a", "a"),
    ("text_or_none", None, None),
    ("text_or_none", "", ""),
    ("integer", 3, 3),
    ("int_or_none", None, None),
    ("int_or_none", -2, -2),
    ("number", 1, 1.0),  # an int where a float goes reads as that float
    ("number", -0.25, -0.25),
    ("number_or_none", None, None),
    ("number_or_none", 2, 2.0),
    ("number", 1e308, 1e308),
    ("boolean", False, False),
    ("items", [1, "a"], [1, "a"]),
    ("ints", [1, 2, 3], (1, 2, 3)),
    ("numbers", [1, 2.5], (1.0, 2.5)),
    ("numbers", [1e308, 1e308], (1e308, 1e308)),  # finite numbers whose sum overflows
])
def test_a_value_of_the_right_type_reads_as_it_is(how: str, value: Any, expected: Any) -> None:
    got = read(value, how)
    assert got == expected
    assert [type(x) for x in (got if isinstance(got, (list, tuple)) else [got])] == \
        [type(x) for x in (expected if isinstance(expected, (list, tuple)) else [expected])]


@pytest.mark.parametrize(("how", "value", "message"), [
    ("text", 3, "must be a string, got an integer 3"),
    ("text", None, "must be a string, got null"),
    ("text_or_none", ["a"], "must be a string or null, got a list"),
    ("integer", True, "must be an integer, got a boolean"),
    ("integer", 3.0, "must be an integer, got a decimal number 3.0"),
    ("int_or_none", False, "must be an integer or null, got a boolean"),
    ("number", True, "must be a number, got a boolean"),
    ("number", "1", "must be a number, got a string"),
    ("number", math.nan, "must be a finite number, got NaN"),
    ("number", -math.inf, "must be a finite number, got -Infinity"),
    ("number_or_none", math.inf, "must be a finite number, got Infinity"),
    ("boolean", 1, "must be true or false, got an integer 1"),
    ("items", {"a": 1}, "must be a list, got an object"),
    ("ints", [1, True], "must be an integer, got a boolean"),
    ("ints", [1, 2.0], "must be an integer, got a decimal number"),
    ("numbers", [1.0, False], "must be a number, got a boolean"),
    ("numbers", [1.0, math.inf], "must be a finite number, got Infinity"),
    ("numbers", [1e308, 1e308, math.nan], "must be a finite number, got NaN"),
    ("obj", [1], "must be an object, got a list"),
])
def test_a_value_of_another_type_is_refused_naming_the_field(how: str, value: Any, message: str) -> None:
    with pytest.raises(FormatError) as e:
        read(value, how)
    assert message in str(e.value)
    assert "x" in str(e.value)
    assert not {"None", "int", "float", "str", "dict", "NoneType"} & set(str(e.value).replace(",", " ").split())


def test_a_missing_field_is_refused_by_every_reader() -> None:
    for how in ("text", "text_or_none", "integer", "int_or_none", "number", "number_or_none", "boolean", "items",
                "obj", "ints", "numbers", "logprobs_or_none"):
        with pytest.raises(FormatError, match="missing"):
            getattr(Fields({"y": 1}, "turns.2"), how)("x")


def test_logprobs_read_nulls_as_unknown_and_keep_what_is_not_finite_apart() -> None:
    f = Fields({"a": [-0.5, None, -1.5], "b": [-1, -0.5], "c": [1e308, 1e308], "d": [-0.5, math.inf, None],
                "e": [], "f": None})
    a = f.logprobs_or_none("a")
    assert a is not None and a[0] == -0.5 and math.isnan(a[1]) and a[2] == -1.5
    assert f.logprobs_or_none("b") == (-1.0, -0.5) and all(type(x) is float for x in f.logprobs_or_none("b") or ())
    assert f.logprobs_or_none("c") == (1e308, 1e308)
    d = f.logprobs_or_none("d")
    assert d is not None and d[0] == -0.5 and math.isnan(d[1]) and math.isnan(d[2])
    assert f.logprobs_or_none("e") == () and f.logprobs_or_none("f") is None
    # Only the infinity is listed (a null is the ordinary unknown): the record marks that token.
    assert f.nonfinite == [("d", 1, math.inf)]
    for bad, what in (([-0.5, True], "a boolean"), ([-0.5, "x"], "a string"), ([[-0.5]], "a list")):
        with pytest.raises(FormatError, match=f"must be a number or null, got {what}") as e:
            Fields({"lp": bad}, "turns.0.generation").logprobs_or_none("lp")
        assert e.value.field == "turns.0.generation.lp.1" if len(bad) > 1 else "turns.0.generation.lp.0"


def test_an_object_read_is_a_copy_and_nested_spellings_read_back() -> None:
    flat = {"a": 1, "b": "x", "c": None, "d": 2.5, "e": True}
    got = Fields({"o": flat}).obj("o")
    assert got == flat and got is not flat
    got["a"] = 2
    assert flat["a"] == 1
    nested = Fields({"o": {"a": {"$nonfinite": "Infinity"}, "b": [{"$nonfinite": "NaN"}]}}).obj("o")
    assert nested["a"] == math.inf and math.isnan(nested["b"][0])
    with pytest.raises(FormatError, match="must be an object, got the number NaN") as e:
        Fields({"o": {"$nonfinite": "NaN"}}, "turns.1").obj("o")
    assert e.value.field == "turns.1.o"
    deep: Any = 0
    for _ in range(150):
        deep = [deep]
    with pytest.raises(FormatError, match="nested more than 100 levels deep"):
        Fields({"o": {"a": deep}}).obj("o")


def test_the_loop_knobs_of_one_record_never_stand_for_anothers_with_equal_values_of_other_types() -> None:
    """1, 1.0 and True are one key to a Python dict, and three different knob values to a record."""
    d = synthetic_episode(1).to_dict()
    loop = d["config"]["loop"] = dict(d["config"]["loop"] or _a_loop())
    int_knob = next(k for k, v in loop.items() if type(v) is int)
    bool_knob = next(k for k, v in loop.items() if type(v) is bool)
    float_knob = next(k for k, v in loop.items() if type(v) is float)
    for _ in range(2):  # the second read of each is the remembered one
        loop[int_knob], loop[bool_knob], loop[float_knob] = 1, True, 1
        ep = Episode.from_dict(json.loads(json.dumps(d)))
        assert ep.config.loop is not None
        got = ep.config.loop.to_dict()
        assert type(got[int_knob]) is int and got[int_knob] == 1
        assert got[bool_knob] is True
        assert type(got[float_knob]) is float and got[float_knob] == 1.0
        for knob, value in ((int_knob, True), (bool_knob, 1), (int_knob, 1.0)):
            bad = json.loads(json.dumps(d))
            bad["config"]["loop"][knob] = value
            with pytest.raises(FormatError, match=f"config.loop.{knob}"):
                Episode.from_dict(bad)


def _a_loop() -> dict[str, Any]:
    from engine.presets import PRESETS

    return PRESETS["slime-tau"].to_dict()


def test_the_search_index_stores_each_text_once_and_gives_every_text_its_id(tmp_path) -> None:
    """An episode's texts are looked up together: a text met twice, blank ones, and a text with a lone surrogate
    beside the text it cleans to (one stored row, found by a search) each get what a lookup one by one gave."""
    s = Store(tmp_path / "s.db")
    broken, cleaned = f"broken {chr(0xD800)} char", "broken \ufffd char"
    texts = ["seen twice", "seen twice", "  ", "", broken, cleaned, "other"]
    with s.db.conn:
        ids = s._text_ids(texts)
        again = s._text_ids(reversed(texts))
    assert set(ids) == {"seen twice", broken, cleaned, "other"}
    assert ids[broken] == ids[cleaned] and len(set(ids.values())) == 3
    assert again == ids
    conn = s.db.conn
    assert conn.execute("SELECT COUNT(*) FROM search_texts").fetchone()[0] == 3
    assert [r[0] for r in conn.execute("SELECT rowid FROM search_fts WHERE search_fts MATCH '\"broken\"'")] == \
        [ids[cleaned]]
    many = [f"text number {i}" for i in range(1_200)]  # more than one lookup's worth
    with s.db.conn:
        first = s._text_ids(many)
        assert s._text_ids(many) == first and len(set(first.values())) == 1_200
    s.close()


def test_an_episode_saved_whole_and_turn_by_turn_has_the_same_search_refs(tmp_path) -> None:
    ep = synthetic_episode(4)
    whole, live = Store(tmp_path / "whole.db"), Store(tmp_path / "live.db")
    whole.save_episode(ep)
    for k in range(len(ep.turns)):
        part = ep.evolve(turns=ep.turns[: k + 1])
        live.save_turn(part, part.turns[k])
    live.finish_episode(ep)

    def refs(st: Store) -> list[tuple[int, str]]:
        return sorted(st.db.conn.execute(
            "SELECT r.part, t.body FROM search_refs r JOIN search_texts t ON t.id = r.text_id WHERE r.episode_id = ?",
            [ep.id]).fetchall())

    assert refs(whole) == refs(live) and len(refs(whole)) >= 3
    whole.close()
    live.close()


class _Float(float):
    pass


class _Int(int):
    pass


def _one_by_one(values: list[Any], how: str) -> Any:
    """What reading ``values`` value by value gives: the list's reader read as the rules say, slowly."""
    out: list[Any] = []
    for i, v in enumerate(values):
        where = f"xs.{i}"
        if how == "ints":
            if not isinstance(v, int) or isinstance(v, bool):
                return ("error", where)
            out.append(v)
        elif v is None and how == "logprobs_or_none":
            out.append(math.nan)
        elif not isinstance(v, int | float) or isinstance(v, bool):
            return ("error", where)
        elif not math.isfinite(v):
            if how == "numbers":
                return ("error", where)
            out.append(math.nan)
        else:
            out.append(float(v))
    return tuple(out)


def test_the_list_readers_fast_paths_read_what_value_by_value_reading_does() -> None:
    """Each list reader takes its common case (every value of one exact type) in one pass at C speed; any other list
    is read value by value. Lists that mix in the values that path must not take (ints among floats, booleans, nulls,
    subclasses, infinities, text) read as the value-by-value rules say, value for value and type for type."""
    rng = random.Random(7)
    pool: list[Any] = [-0.5, -1.25, 0.0, 3, True, False, None, math.inf, -math.inf, math.nan, _Float(-0.75), _Int(4),
                       "1.0", 1e308]
    for n in range(600):
        size = rng.choice((0, 1, 2, 5, 40))
        common = [-rng.random() for _ in range(size)] if n % 3 else [rng.randrange(150_000) for _ in range(size)]
        xs = list(common)
        for _ in range(rng.choice((0, 0, 1, 2))):
            if xs:
                xs[rng.randrange(len(xs))] = rng.choice(pool)
        for how in ("numbers", "ints", "logprobs_or_none"):
            want = _one_by_one(xs, how)
            try:
                got = getattr(Fields({"xs": xs}), how)("xs")
            except FormatError as e:
                assert want == ("error", e.field), (how, xs)
                continue
            assert isinstance(want, tuple), (how, xs, got)
            assert len(got) == len(want) and all(
                (math.isnan(a) and math.isnan(b)) if isinstance(b, float) and math.isnan(b) else a == b and type(a) is
                type(b) for a, b in zip(got, want, strict=True)), (how, xs, got, want)


@pytest.mark.parametrize(("key", "values", "field", "message"), [
    ("tokens", [5, 6, -1], "tokens.2", "must be a token id (an integer from 0 to 2^31 - 1), got an integer -1"),
    ("tokens", [5, 2**40], "tokens.1", "must be a token id (an integer from 0 to 2^31 - 1), got an integer 1099511627776"),
    ("tokens", [5, 2**70], "tokens.1", "got an integer 1180591620717411303424"),
    ("tokens", [5, 6.0], "tokens.1", "got a decimal number 6.0"),
    ("tokens", [[5, 6], [7, 8]], "tokens.0", "got a list [5, 6]"),  # not flattened into four tokens
    ("tokens", [5, None], "tokens.1", "got null"),
    ("tokens", [5, True], "tokens.1", "got a boolean true"),  # not read as token 1
    ("loss_mask", [0, 1, False], "loss_mask.2", "must be 0 or 1, got a boolean false"),
    ("versions", [-1, 3, True], "versions.2", "got a boolean true"),
    ("loss_mask", [0, 1, 2], "loss_mask.2", "must be 0 or 1, got an integer 2"),
    ("versions", [-1, -2], "versions.1", "must be a policy version (an integer, -1 where none), got an integer -2"),
])
def test_a_token_list_names_its_first_bad_entry(key: str, values: list[Any], field: str, message: str) -> None:
    from engine.records.token_arrays import TokenArrays

    d = {"tokens": [5, 6, 7], "loss_mask": [0, 1, 1], "logprobs": [None, -0.1, -0.2], "versions": [-1, 3, 3]}
    with pytest.raises(FormatError) as e:
        TokenArrays.from_fields(Fields({**d, key: values}))
    assert e.value.field == field and message in e.value.detail
    good = TokenArrays.from_fields(Fields(d))
    assert good.ids.tolist() == [5, 6, 7] and good.versions.tolist() == [-1, 3, 3]
