"""Rollscope JSONL: exact round trips and precise errors."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.formats import jsonl
from engine.formats.jsonl import REQUIRED
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import SCHEMA_VERSION


@pytest.fixture(scope="module")
def eps(smol_tokenizer):
    env = MathEnv()
    be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.5, seed=4)
    return [asyncio.run(run_episode(MathEnv(), be, smol_tokenizer, PRESETS["areal-math"], t)) for t in env.tasks[:3]]


def test_round_trip_exact(tmp_path, eps):
    p = tmp_path / "e.jsonl"
    with p.open("w") as f:
        assert jsonl.write(eps, f) == 3
    first = json.loads(p.read_text().splitlines()[0])
    for key in REQUIRED:
        assert key in first
    assert first["logprobs"][0] is None  # NaN (prompt token) written as null
    back = list(jsonl.read(p))
    assert back == eps


def test_malformed_lines_are_reported_and_skipped(tmp_path, eps):
    good = [jsonl.dumps(e) for e in eps]
    bad_reward = json.loads(good[1])
    bad_reward["reward"] = "high"
    short_mask = json.loads(good[2])
    short_mask["loss_mask"] = short_mask["loss_mask"][:-1]
    no_tokens = json.loads(good[2])
    del no_tokens["tokens"]
    lines = [good[0], "{not json", json.dumps(bad_reward), json.dumps(short_mask), json.dumps(no_tokens), "[1,2]"]
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    report = jsonl.ReadReport()
    back = list(jsonl.read(p, report))
    assert [e.id for e in back] == [eps[0].id]
    msgs = [str(e) for e in report.errors]
    assert len(msgs) == 5
    assert msgs[0].startswith(f"{p}:2: not valid JSON")
    assert f"{p}:3: field 'reward'" in msgs[1]
    assert f"{p}:4: field 'loss_mask'" in msgs[2] and "entries for" in msgs[2]
    assert f"{p}:5: field 'tokens': missing" in msgs[3]
    assert f"{p}:6:" in msgs[4]


def test_write_to_stream(eps):
    buf = io.StringIO()
    jsonl.write(eps[:1], buf)
    assert buf.getvalue().count("\n") == 1


@pytest.mark.parametrize("field, value", [
    ("prompt_len", -3), ("prompt_len", 10**9), ("turns.1.prompt_len", -1), ("segments.2", (40, 10**6)),
    ("segments.0", (5, 2)),
])
def test_a_token_position_outside_the_episode_is_refused_with_its_field(tmp_path, eps, field, value):
    from engine import Store, formats
    from engine.records.episode import Episode
    from engine.records.schema import problems

    good = json.loads(jsonl.dumps(eps[0]))
    bad = json.loads(jsonl.dumps(eps[0]))
    n = len(bad["tokens"])
    if field == "prompt_len":
        bad["prompt_len"] = value
    elif field.startswith("turns"):
        bad["turns"][1]["prompt_len"] = value
    else:
        bad["segments"][int(field.split(".")[1])].update(start=value[0], end=value[1])
    bad["id"] = "bounds"
    src = tmp_path / "b.jsonl"
    src.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    store = Store(tmp_path / "j.db")
    report = formats.import_path(src, "jsonl", store)
    (e,) = report.errors
    assert report.new == 1 and str(e).startswith(f"{src}:2: field '{field}': ")
    assert ("must be 0 or more, got -1" if field.startswith("turns") else
            f"must be 0..{n:,} (the episode has {n:,} tokens)") in e.detail
    assert store.episode_ids() == [eps[0].id]
    # The same record in Parquet (a file this Rollscope would not write, made from the record read unchecked).
    formats.export([eps[0], Episode.from_dict(bad)], "parquet", tmp_path / "b.parquet")
    back = Store(tmp_path / "p.db")
    got = formats.import_path(tmp_path / "b.parquet", "parquet", back)
    assert got.new == 1 and [(e.where, e.field, e.detail) for e in got.errors] == [
        (f"{tmp_path / 'b.parquet'}: row 1", field, report.errors[0].detail)]
    assert problems(bad) == [f"{field}: {report.errors[0].detail}"]
    assert problems(good) == []
    # A turn's prompt_len past the end is read: a reply a final cut removed whole was once stored so.
    past = json.loads(jsonl.dumps(eps[0]))
    past["turns"][-1]["prompt_len"] = n + 40
    assert problems(past) == [] and jsonl.parse_dict(past, "x").turns[-1].prompt_len == n + 40


def test_a_later_record_without_its_version_is_told_to_name_it(tmp_path, eps):
    record = json.loads(jsonl.dumps(eps[0]))
    del record["schema_version"]
    src = tmp_path / "v.jsonl"
    src.write_text(json.dumps(record) + "\n")
    report = jsonl.ReadReport()
    assert list(jsonl.read(src, report)) == []
    (e,) = report.errors
    assert e.field == "schema_version" and e.detail.startswith(
        "missing: the record is of version 3 or later (its config has 'loop') and must name its version")
    assert f'"schema_version": {SCHEMA_VERSION}' in e.detail


def test_run_puts_in_its_run_the_episodes_that_name_none_and_says_which_kept_theirs(tmp_path, eps):
    from engine import Store, formats

    src = tmp_path / "r.jsonl"
    with src.open("w") as f:
        jsonl.write([eps[0].evolve(run_id="a"), eps[1].evolve(run_id="b"), eps[2].evolve(run_id=None)], f)
    store = Store(tmp_path / "r.db")
    report = formats.import_path(src, "jsonl", store, run_id="exp")
    assert report.new == 3
    assert {e.id: e.run_id for e in store.iter_episodes()} == {eps[0].id: "a", eps[1].id: "b", eps[2].id: "exp"}
    assert [n for n in report.notes if n.startswith("--run")] == [
        "--run exp: 2 episodes name a run of their own and kept it (a, b); --run puts in its run the episodes that "
        "name none, as a trainer's dump does"]
    again = formats.import_path(src, "jsonl", Store(tmp_path / "n.db"), run_id="a")  # only b keeps its own
    assert [n for n in again.notes if n.startswith("--run")][0].startswith("--run a: 1 episode names a run of its own")


def test_a_file_that_holds_an_id_twice_stores_its_first_record_and_names_the_other(tmp_path, eps):
    from engine.formats import import_path
    from engine.store import Store

    first, second = eps[0], eps[1]
    changed = first.evolve(reward=first.reward + 0.5)
    path = tmp_path / "dup.jsonl"
    buf = io.StringIO()
    jsonl.write([first, first, changed, second], buf)
    path.write_text(buf.getvalue(), encoding="utf-8")
    store = Store(tmp_path / "d.db")
    try:
        for n in (0, 1):  # imported again: the same
            report = import_path(path, "jsonl", store)
            assert (report.new, report.already_present, report.repeated, report.clashed) == \
                ((2, 0) if n == 0 else (0, 2)) + (1, 1)
            assert [e.where for e in report.errors] == [f"{path}:3"]
            assert f"episode {first.id} again, with other content" in str(report.errors[0])
            assert "1 repeating an earlier record of this import whole" in report.summary()
            assert "0 malformed" in report.summary()
            assert store.get_episode(first.id).reward == first.reward
    finally:
        store.close()


def test_an_import_counts_the_records_no_check_ran_on(tmp_path, eps):
    """A record says whether a check ran on it; read from JSONL (packed, as on workers) as from any format, the
    import counts the new ones that no check ran on."""
    from engine.formats import import_path
    from engine.store import Store

    path = tmp_path / "mixed.jsonl"
    buf = io.StringIO()
    jsonl.write([eps[0].evolve(checked=None), eps[1].evolve(checked="v1"), eps[2].evolve(checked=None)], buf)
    path.write_text(buf.getvalue(), encoding="utf-8")
    store = Store(tmp_path / "c.db")
    try:
        report = import_path(path, "jsonl", store)
        again = import_path(path, "jsonl", store)
    finally:
        store.close()
    assert report.new == 3 and [n.split(":")[0] for n in report.notes] == ["2 new episodes not checked"]
    assert again.new == 0 and again.notes == []  # none new


def test_a_record_of_an_empty_id_is_refused_from_a_file_but_read_where_stored(tmp_path, eps):
    """An empty (or blank) id names nothing ``ls``, ``show`` or a link can hold: a file's record with one is refused,
    naming the field, in the JSONL and Parquet readers and ``schema --validate``. A database that holds one (an
    earlier version stored it) still reads it."""
    from engine.formats import export, import_path
    from engine.records.schema import problems
    from engine.store import Store

    blank = eps[0].evolve(id=" ")
    path = tmp_path / "blank.jsonl"
    jsonl.write([blank, eps[1]], path.open("w", encoding="utf-8"))
    store = Store(tmp_path / "x.db")
    report = import_path(path, "jsonl", store)
    assert report.new == 1 and [(e.where, e.field) for e in report.errors] == [(f"{path}:1", "id")]
    assert "must not be empty: it names the episode" in str(report.errors[0])
    assert problems(json.loads(path.read_text().splitlines()[0]))[0].startswith("id: must not be empty")
    store.save_episodes([blank])  # stored as it is (the store reads what it holds)
    assert store.get_episode(" ").id == " "
    export(store.iter_episodes(), "parquet", tmp_path / "x.parquet")
    again = import_path(tmp_path / "x.parquet", "parquet", Store(tmp_path / "y.db"))
    assert again.new == 1 and [e.field for e in again.errors] == ["id"]
