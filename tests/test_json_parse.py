"""JSON read by orjson where it reads what Python's ``json`` reads, and by ``json`` where it may not: the same
value (int stays int, float stays float, -0.0 stays -0.0) or the same error, on ordinary and hostile text; and
JSON stored by orjson reads back as the value written."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from engine.formats import jsonl
from engine.records import jsonbounds
from engine.store import codec

GOLDEN = Path(__file__).parent / "golden"


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (1 and 1.0, 0.0 and -0.0, nan and nan told apart as json does);
    walked without recursion, for values nested a thousand deep."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if type(x) is not type(y):
            return False
        if isinstance(x, dict):
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif isinstance(x, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif isinstance(x, float):
            if not ((math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))):
                return False
        elif x != y:
            return False
    return True


def _outcome(fn: Any, text: str | bytes) -> tuple[str, Any]:
    try:
        return "value", fn(text)
    except RecursionError:
        return "error", "RecursionError"
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        return "error", (type(e).__name__, str(e))


def _agree(text: str | bytes) -> None:
    got, want = _outcome(jsonbounds.parse, text), _outcome(json.loads, text)
    assert got[0] == want[0], (text, got, want)
    if got[0] == "value":
        assert _same(got[1], want[1]), (text, got, want)
    else:
        assert got[1] == want[1], (text, got, want)


HOSTILE = [
    '{"a": 1}', ' {"a": 1} \n', '{"a":1,"a":2}', '"x"', "1", "[]", "-0", "-0.0", "1E5", "1e-7",
    # past 64 bits, where orjson would read a float; and the largest and smallest it reads as ints
    '{"sample_index": 123456789012345678901234}', "[-9223372036854775809]", "[18446744073709551616]",
    "[18446744073709551615]", "[-9223372036854775808]", "12345678901234567890123",
    '{"k": "1234567890123456789012"}', '{"a":0.00012345678901234567}', '{"a":1234567890123456789.5}',
    # numbers strict JSON has not
    '{"a": NaN}', '{"a": Infinity}', '{"a": -Infinity}', '{"a": 1e400}', '{"a": -1E400}', '{"a": 2.4e-324}',
    # strings
    '{"a": "\\ud800"}', '{"a": "\\udc00\\ud800"}', '{"a": "\\ud83d\\ude00"}', '{"a": "x\ud800"}', '{"\\u00e9": 1}',
    '{"a": "\\u0000"}', '{"a": "x\x01y"}', '{"a": "\t"}',
    # not JSON
    "\ufeff{}", "{,}", '{"a":1,}', "{'a': 1}", '{"a": 1} // c', '{"a": 1}\x00', '{"a": .5}', '{"a": 01}',
    '{"a": tru}', '{"a": 1}{"b": 2}', "", "   ", "[" * 50_000 + "]" * 50_000, "[" * 1_500 + "]" * 1_500,
    # bytes: the encodings json detects, a BOM, bytes that are not UTF-8
    b'{"a": 1}', b'\xef\xbb\xbf{"a": 1}', b'{"a": "\xff"}', '{"a": 1}'.encode("utf-16"), b'{"a": "\xc3\xa9"}',
    bytearray(b'{"a": [1]}'),
    # nesting about where json's reader stops (the interpreter's recursion limit, less the frames above it) and
    # orjson's (1,024 levels)
    *("[" * n + "]" * n for n in (254, 255, 256, 300, 900, 980, 990, 995, 1000, 1020, 1024, 1025)),
    '{"a":' * 990 + "1" + "}" * 990, "[" * 100 + "{}," * 400 + "{}" + "]" * 100,
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_parse_is_json_loads_on_hostile_text(text: str | bytes) -> None:
    _agree(text)


@pytest.mark.parametrize("thing", [memoryview(b"[1]"), [49], (49,), None, 7, 3.5])
def test_parse_refuses_what_json_loads_refuses_with_its_words(thing: Any) -> None:
    with pytest.raises(TypeError) as got:
        jsonbounds.parse(thing)
    with pytest.raises(TypeError) as want:
        json.loads(thing)
    assert str(got.value) == str(want.value)


def _value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 4 or pick < 0.45:
        return rng.choice([
            rng.randint(-2**70, 2**70), rng.randint(-2**63 - 3, -2**63 + 3), rng.randint(2**64 - 3, 2**64 + 3),
            rng.randint(-1000, 1000), rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30), -rng.random() * 1e-3,
            float(rng.randint(-5, 5)), -0.0, True, False, None,
            "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0x80, 0xFFFF), rng.randint(0x10000, 0x10FFFF)]))
                    for _ in range(rng.randint(0, 12))),
        ])
    if pick < 0.75:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {f"k{rng.randint(0, 20)}": _value(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def test_parse_is_json_loads_on_random_values_in_every_spelling() -> None:
    rng = random.Random(7)
    for _ in range(1500):
        v = _value(rng)
        for text in (json.dumps(v), json.dumps(v, ensure_ascii=False, separators=(",", ":")), json.dumps(v, indent=1)):
            _agree(text)
            _agree(text.encode("utf-8", "surrogatepass"))


def test_ordinary_records_are_read_by_orjson(monkeypatch: pytest.MonkeyPatch) -> None:
    """The point of it: a record of ints, fractions, nulls and text goes through orjson, not ``json``."""
    record = {"id": "e1", "tokens": {"ids": list(range(500)), "logprobs": [-0.00012345678437408805, -1.5, None]},
              "reward": 1.0, "text": "héllo 😀",
              # more brackets than levels orjson's value is taken at, nested two deep: still orjson's
              "top_ids": [[i, i + 1] for i in range(400)], "messages": [{"role": "user"} for _ in range(300)]}

    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("read by json")

    monkeypatch.setattr(jsonbounds.json, "loads", refuse)
    assert _same(jsonbounds.parse(json.dumps(record)), record)
    assert _same(jsonbounds.parse(json.dumps(record).encode()), record)


@pytest.mark.parametrize("value", [
    {"text": "x" * 500, "ids": list(range(300)), "lp": [-0.1, None, -1e-7], "n": -0.0},  # compressed
    {"a": 1, "b": [1.5, "é"]},  # short: text
    {"args": {"id": 2**70, "neg": -2**64}, "pad": "y" * 300},  # past 64 bits: written by json
    {"text": "lone \ud800 surrogate"},  # UTF-8 cannot hold it: written by json (kept as text)
    {1: "an int key"},  # written by json, as json writes it
    {"timings": {"generate": math.nan, "env": math.inf}, "pad": "n" * 300},  # orjson would write null: json writes NaN
    {"timings": {"generate": -math.inf}},
    {"pair": (1, 2), "pad": "t" * 300},  # a tuple: a list, as json writes it
])
def test_stored_json_reads_back_as_written(value: Any) -> None:
    stored = codec.pack_json(value)
    back = codec.unpack_json(stored)
    assert _same(back, json.loads(json.dumps(value)))
    assert isinstance(stored, str) == (len(codec.json_bytes(stored)) < 200)


def test_what_json_cannot_write_is_refused_as_before() -> None:
    import datetime
    import uuid

    for value in ({"at": datetime.datetime(2026, 1, 1)}, {"id": uuid.UUID(int=1)}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            codec.pack_json(value)


def test_a_stored_turns_nan_timing_reads_back(tmp_path: Any) -> None:
    """A turn's timings are numbers the reader takes as they are, NaN included: stored, it reads back the same."""
    from engine.store import Store

    record = json.loads((GOLDEN / "schema8-episodes.jsonl").read_text().splitlines()[0])
    record["turns"][0]["timings"] = {"generate": math.nan, "env": 0.25}
    ep = jsonl.read_line(json.dumps(record).encode(), "line 1")
    assert ep is not None
    store = Store(tmp_path / "nan.db")
    store.save_episode(ep)
    back = store.get_episode(ep.id).turns[0].timings
    assert math.isnan(back["generate"]) and back["env"] == 0.25


def test_stored_json_is_orjsons_where_it_can_be() -> None:
    value = {"ids": list(range(300)), "t": "ünïcode"}
    assert codec.json_bytes(codec.pack_json(value)) == orjson.dumps(value)
